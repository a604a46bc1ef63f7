"""Third, independent model of the weight dequant, used only by the tests: float64 with explicit rounding.

Neither the emulator's integer rounding of float32 bits (`mc2emu.numerics.weight_dequant`) nor the golden's
ml_dtypes / numpy 16-bit arithmetic (`mc2emu.ops.weight_quant_matmul_golden`): every value is decoded from
its bit fields into float64 (exact), each operation is done in float64 (exact for the products of two
16-bit values; a sum of two 16-bit values is exact or rounded with 53 >= 2p + 2 bits) and then rounded
explicitly to the p-bit format with np.frexp / np.ldexp / np.rint (ties to even), IEEE overflow to +-Inf.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fmt16:
    name: str
    ebits: int
    mbits: int

    @property
    def bias(self) -> int:
        return (1 << (self.ebits - 1)) - 1

    @property
    def emin(self) -> int:
        return 1 - self.bias

    @property
    def max(self) -> float:
        return float(np.ldexp(2.0 - 2.0 ** -self.mbits, (1 << self.ebits) - 2 - self.bias))


BF16 = Fmt16("bfloat16", 8, 7)
FP16 = Fmt16("float16", 5, 10)
FORMATS = {"bfloat16": BF16, "float16": FP16}


def decode_bits(bits: np.ndarray, ebits: int, mbits: int, *, ieee_specials: bool = True,
                fn_nan_code: int | None = None) -> np.ndarray:
    """float64 values of sign / exponent / mantissa codes (subnormals; IEEE Inf/NaN or an 'fn' NaN code)."""
    b = np.asarray(bits).astype(np.int64)
    total = 1 + ebits + mbits
    bias = (1 << (ebits - 1)) - 1
    sign = np.where((b >> (total - 1)) & 1, -1.0, 1.0)
    e = (b >> mbits) & ((1 << ebits) - 1)
    m = b & ((1 << mbits) - 1)
    mag = np.where(e == 0, np.ldexp(m.astype(np.float64), 1 - bias - mbits),
                   np.ldexp((m + (1 << mbits)).astype(np.float64), e - bias - mbits))
    val = sign * mag
    if ieee_specials:
        top = e == (1 << ebits) - 1
        val = np.where(top & (m == 0), sign * np.inf, val)
        val = np.where(top & (m != 0), np.nan, val)
    if fn_nan_code is not None:
        val = np.where((b & ((1 << (total - 1)) - 1)) == fn_nan_code, np.nan, val)
    return val


def decode16(x: np.ndarray, fmt: Fmt16) -> np.ndarray:
    return decode_bits(np.asarray(x).view(np.uint16), fmt.ebits, fmt.mbits)


def decode_fp8(codes: np.ndarray, name: str) -> np.ndarray:
    if name == "float8_e4m3fn":  # no Inf; S.1111.111 is NaN
        return decode_bits(codes, 4, 3, ieee_specials=False, fn_nan_code=0x7F)
    if name == "float8_e5m2":
        return decode_bits(codes, 5, 2)
    raise KeyError(name)


def round_to(x: np.ndarray, fmt: Fmt16) -> np.ndarray:
    """float64 x rounded to the format, nearest even, subnormals, overflow to +-Inf; NaN / Inf pass."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return _round_to(x, fmt)


def _round_to(x: np.ndarray, fmt: Fmt16) -> np.ndarray:
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    _, e = np.frexp(xf)  # |x| in [2^(e-1), 2^e)
    quantum = np.maximum(e - 1, fmt.emin) - fmt.mbits
    r = np.ldexp(np.rint(np.ldexp(xf, -quantum)), quantum)
    r = np.where(np.abs(r) > fmt.max, np.copysign(np.inf, xf), r)
    return np.where(finite, r, x)


def weight_values(weight: np.ndarray) -> np.ndarray:
    w = np.asarray(weight)
    if w.dtype.name == "int8":
        return w.astype(np.float64)
    return decode_fp8(w.view(np.uint8), w.dtype.name)


def ref_dequant(weight: np.ndarray, scale_f64: np.ndarray, offset_f64: np.ndarray | None, fmt: Fmt16) -> np.ndarray:
    """(round(round(B) + offset)) * scale rounded, all in float64; scale / offset already broadcastable."""
    with np.errstate(invalid="ignore", over="ignore"):
        return _ref_dequant(weight, scale_f64, offset_f64, fmt)


def _ref_dequant(weight, scale_f64, offset_f64, fmt):
    b = weight_values(weight)
    if np.asarray(weight).dtype.name == "int8":
        b = round_to(b, FP16)  # Cast<half, int8_t>
    b = round_to(b, fmt)  # -> bf16 (RINT) / the fp8 -> float -> 16-bit cast
    if offset_f64 is not None:
        b = round_to(b + offset_f64, fmt)
    return round_to(b * scale_f64, fmt)


def same_values(got: np.ndarray, want_f64: np.ndarray, fmt: Fmt16) -> np.ndarray:
    """Per element: equal value and sign (zeros included), or both NaN."""
    g = decode16(got, fmt)
    w = np.asarray(want_f64)
    both_nan = np.isnan(g) & np.isnan(w)
    return both_nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
