"""MX element codec: float32 <-> element codes of E4M3, E5M2, E2M1 and E1M2.

Emulates the FP32 -> fp8/fp4 conversion an Ascend MX quantizer performs after dividing by the block
scale (round to nearest even, saturate to +-max, keep the sign of zero; the OCP MX conversion with
saturation) and the element decode the cube unit does before its FP32 MMAD.

One vectorized integer algorithm serves all four formats, E1M2 included (ml_dtypes lacks it), and it
reads float32 bits directly, so no float64 intermediate can double-round. For finite inputs:

    a   = min(|x|, max)                      (saturate first; max is on the grid)
    E   = max(floor(log2 a), emin)           (from the float32 exponent field; float32 subnormals are
                                              far below emin, so they take E = emin)
    n   = rint(a * 2^(mbits - E))            (exact power-of-two scaling; np.rint ties to even)
    code = (E - emin) * 2^mbits + n          (n = 2^(mbits+1) carries into the next binade correctly)

The parity of n is the parity of the mantissa LSB, so np.rint's ties-to-even is the format's RNE.
ml_dtypes stays the test oracle for the three formats it has.
"""

from __future__ import annotations

import numpy as np

from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import ElemFormat

FLOAT32_MANTISSA_BITS = 23  # position of the float32 exponent field.
FLOAT32_EXP_BIAS = 127  # float32 exponent bias.
FLOAT32_ABS_MASK = 0x7FFFFFFF  # clears the float32 sign bit.
FP4_NAN_SUBSTITUTE = 0  # FP4 has no NaN: a NaN input encodes as +0 (code 0); the E8M0 scale carries NaN.
ACCEPTED_FLOAT_DTYPES = ("float32", "bfloat16", "float16")  # exact upcasts to float32.


def as_codes(codes: np.ndarray, param: str = "codes") -> np.ndarray:
    """View an element array as uint8 codes: uint8 passes, 1-byte ml_dtypes arrays are viewed."""
    arr = np.asarray(codes)
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.itemsize == 1 and arr.dtype.type.__module__ == "ml_dtypes":
        return arr.view(np.uint8)
    raise MxTypeError(f"{param} must be uint8 element codes or a 1-byte ml_dtypes array, got {arr.dtype}")


def as_float32(x: np.ndarray, param: str = "x") -> np.ndarray:
    """float32 view/upcast of x; only float32, bfloat16 and float16 are accepted (exact upcasts)."""
    arr = np.asarray(x)
    if arr.dtype.name not in ACCEPTED_FLOAT_DTYPES:
        raise MxTypeError(
            f"{param} must have dtype float32, bfloat16 or float16 (exact in float32, so quantization "
            f"cannot double-round), got {arr.dtype}"
        )
    return arr if arr.dtype == np.float32 else arr.astype(np.float32)


def encode_finite(x: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    """Codes of NaN-free float32 x (+-Inf saturates); see the module docstring for the algorithm.

    The caller guarantees no NaN (a NaN would produce an arbitrary code); encode_elements checks.
    """
    a = np.abs(x)
    np.minimum(a, np.float32(fmt.max), out=a)
    biased_emin = fmt.emin + FLOAT32_EXP_BIAS
    e = np.maximum(a.view(np.uint32) >> FLOAT32_MANTISSA_BITS, np.uint32(biased_emin))
    # 2^(mbits - E) built from its float32 bits: biased exponent 127 + mbits - (e - 127).
    mul = ((np.uint32(2 * FLOAT32_EXP_BIAS + fmt.mbits) - e) << FLOAT32_MANTISSA_BITS).view(np.float32)
    np.multiply(a, mul, out=a)
    np.rint(a, out=a)
    e -= np.uint32(biased_emin)
    code = e.astype(np.uint8)
    code <<= np.uint8(fmt.mbits)
    code += a.astype(np.uint8)
    code |= np.signbit(x).view(np.uint8) << np.uint8(fmt.bits - 1)
    return code


def encode_elements(x: np.ndarray, elem: ElemFormat | str) -> np.ndarray:
    """Round float32 (or bf16/fp16) values to element codes: RNE, saturating, sign of zero kept.

    Returns uint8 codes of x's shape (one code per element; FP4 codes are not packed). NaN becomes the
    format's canonical NaN code (E4M3 0x7F, E5M2 0x7E) or +0 for FP4; +-Inf saturates to +-max.
    """
    fmt = ElemFormat.parse(elem)
    xf = as_float32(x)
    nan = np.isnan(xf)
    if not nan.any():
        return encode_finite(xf, fmt)
    code = encode_finite(np.where(nan, np.float32(0), xf), fmt)
    code[nan] = fmt.nan_code if fmt.nan_code is not None else FP4_NAN_SUBSTITUTE
    return code


def decode_elements(codes: np.ndarray, elem: ElemFormat | str) -> np.ndarray:
    """float32 values of unpacked element codes (uint8, any shape) by LUT gather."""
    fmt = ElemFormat.parse(elem)
    c = as_codes(codes)
    try:
        return np.take(fmt.lut, c)
    except IndexError:
        raise MxValueError(
            f"codes must be < {fmt.lut.size} for {fmt.value} (unpacked codes, one per element), "
            f"got max {int(c.max())}"
        ) from None


def codes_to_storage(codes: np.ndarray, elem: ElemFormat | str) -> np.ndarray:
    """Wrap uint8 codes in the format's storage dtype (ml_dtypes view; E1M2 stays uint8)."""
    fmt = ElemFormat.parse(elem)
    c = as_codes(codes)
    return c.view(fmt.ml_dtype) if fmt.ml_dtype is not None else c
