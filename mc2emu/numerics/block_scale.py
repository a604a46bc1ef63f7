"""E8M0 block scales: the OCP shared-exponent rule (quantize side) and the per-block multiply (decode side).

Emulates what an Ascend MX quantizer writes to `scaleA` / `scaleB` (`fp8_e8m0_t`, one scale per
MX_GROUP_SIZE = 32 elements along K) and how the cube applies them: every scale is an exact power of
two, so dequantization is one exact float32 multiply per element (SPEC §4).

Shared exponent (OCP MX v1.0 floor rule, as in microxcaling and the CANN golden):
    scale_exp = clamp(floor(log2(amax)) - emax_elem, -127, 127)
floor(log2(amax)) comes from the float32 exponent (np.frexp is exact, subnormals included); float32
np.log2 rounds to k just below 2^k and would be off by one. An all-zero block gets code 0x00; a block
holding NaN or Inf gets 0xFF (NaN). Block amax is an integer max over the float32 bit patterns with the
sign cleared: for non-negative floats the bit order is the value order, and any NaN or Inf lands at or
above 0x7F800000 whatever its position, so no NaN-propagation subtleties arise.
"""

from __future__ import annotations

import numpy as np

from mc2emu.numerics.constants import E8M0_BIAS, E8M0_MAX_EXP, E8M0_MIN_EXP, E8M0_NAN_CODE
from mc2emu.numerics.element_codec import FLOAT32_ABS_MASK, as_codes
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE, E8M0_LUT, ElemFormat
from mc2emu.numerics.int_math import CeilDiv

FLOAT32_INF_BITS = 0x7F800000  # float32 bit pattern of +Inf; |x| bits >= this means Inf or NaN.
E8M0_MAX_FINITE_CODE = E8M0_MAX_EXP + E8M0_BIAS  # 254, 2^127.


def block_amax_bits(x_blocks: np.ndarray) -> np.ndarray:
    """uint32 bit pattern of max|x| over the last axis of a float32 array [..., nb, block]."""
    if x_blocks.dtype != np.float32:
        raise MxTypeError(f"x_blocks must be float32, got {x_blocks.dtype}")
    bits = x_blocks.view(np.uint32) & np.uint32(FLOAT32_ABS_MASK)
    return bits.max(axis=-1)


def shared_scale_codes(amax_bits: np.ndarray, elem: ElemFormat | str) -> np.ndarray:
    """E8M0 codes (uint8) of blocks whose |x| maximum has the float32 bit pattern `amax_bits`."""
    fmt = ElemFormat.parse(elem)
    bits = np.asarray(amax_bits, dtype=np.uint32)
    nonfinite = bits >= np.uint32(FLOAT32_INF_BITS)
    zero = bits == 0
    amax = np.where(nonfinite, np.uint32(0), bits).view(np.float32)
    _, e = np.frexp(amax)  # amax = m * 2^e with m in [0.5, 1): floor(log2 amax) = e - 1, exactly
    scale_exp = np.clip(e - 1 - fmt.emax, E8M0_MIN_EXP, E8M0_MAX_EXP)
    codes = (scale_exp + E8M0_BIAS).astype(np.uint8)
    codes[zero] = E8M0_MIN_EXP + E8M0_BIAS
    codes[nonfinite] = E8M0_NAN_CODE
    return codes


def inverse_scales(scale_codes: np.ndarray) -> np.ndarray:
    """float32 2^-(code-127) for finite codes (exact: 2^-127 .. 2^127 are all float32), 1.0 for 0xFF."""
    c = as_codes(scale_codes, "scale_codes")
    # 2^(127 - c) = E8M0_LUT[254 - c] for c in 0..254; the NaN code maps to 1 (its block is replaced).
    inv = np.take(E8M0_LUT, E8M0_MAX_FINITE_CODE - np.minimum(c, E8M0_MAX_FINITE_CODE))
    inv[c == E8M0_NAN_CODE] = 1.0
    return inv


def decode_scales(scale_codes: np.ndarray) -> np.ndarray:
    """float32 values of E8M0 codes (uint8 or float8_e8m0fnu): 2^(code-127), 0xFF -> NaN."""
    return np.take(E8M0_LUT, as_codes(scale_codes, "scale_codes"))


def scale_codes_to_e8m0(codes: np.ndarray) -> np.ndarray:
    """View uint8 scale codes as ml_dtypes.float8_e8m0fnu (the storage dtype of MX scales)."""
    return as_codes(codes, "codes").view(E8M0_DTYPE)


def num_blocks(k: int, block: int) -> int:
    """ceil(k / block): scale blocks along an axis of length k."""
    return CeilDiv(k, block)


def apply_block_scale(
    vals: np.ndarray, scale: np.ndarray, block: int, out: np.ndarray | None = None
) -> np.ndarray:
    """out[p, i, q] = vals[p, i, q] * scale[p, i // block, q] for float32 vals [P, K, Q].

    Reshape-based broadcast (no np.repeat): the whole blocks go through one multiply over a
    [P, K // block, block, Q] view, the partial last block through a second one. `out` may be `vals`.
    """
    if vals.ndim != 3 or scale.ndim != 3:
        raise MxValueError(f"vals and scale must be 3-D [P, K, Q], got {vals.shape} and {scale.shape}")
    p, k, q = vals.shape
    nb = num_blocks(k, block)
    if scale.shape != (p, nb, q):
        raise MxValueError(
            f"scale shape must be (P, ceil(K/{block}), Q) = {(p, nb, q)} for vals {vals.shape}, "
            f"got {scale.shape}"
        )
    if out is None:
        out = np.empty(vals.shape, dtype=np.float32)
    nfull = k // block
    kmain = nfull * block
    squeeze = q == 1  # per-row scales: drop the unit axis so the inner loop runs along the block
    if nfull:
        src = vals[:, :kmain, :]
        dst = out[:, :kmain, :]
        if squeeze:
            view_shape: tuple[int, ...] = (p, nfull, block)
            s = scale[:, :nfull, 0, None]
        else:
            view_shape = (p, nfull, block, q)
            s = scale[:, :nfull, None, :]
        with np.errstate(over="ignore"):  # e.g. E5M2 max * 2^127 -> Inf is the defined result
            np.multiply(src.reshape(view_shape), s, out=dst.reshape(view_shape, copy=False))
    if kmain < k:
        with np.errstate(over="ignore"):
            np.multiply(vals[:, kmain:, :], scale[:, nfull : nfull + 1, :], out=out[:, kmain:, :])
    return out
