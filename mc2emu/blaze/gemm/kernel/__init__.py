"""Blaze kernels (`include/blaze/gemm/kernel`): GemmUniversal for the QBMM MX schedule."""
