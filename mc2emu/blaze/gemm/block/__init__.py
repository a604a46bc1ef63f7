"""Blaze block components (`include/blaze/gemm/block`): the MX BlockMmad and the QBMM scheduler."""
