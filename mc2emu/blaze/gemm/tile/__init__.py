"""Blaze tile primitives (`include/blaze/gemm/tile`): the MX dequantization on the L1 -> L0 path."""
