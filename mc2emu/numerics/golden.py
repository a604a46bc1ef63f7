"""CANN golden for the MX matmuls and the ST input generators (SPEC §4).

Emulates the reference the CANN MC2 system tests compare against: dequantize both operands to FP32 with
the scales repeated x32 along K (`np.repeat(scale, 32)`), ONE float32 matmul, cast to the output type.
It is deliberately not K-ordered like the hardware (mx_matmul.mmad_k_ordered); the difference is what the
compare rules (compare.py, re-exported here) absorb.

Generators (each takes its random source explicitly; nothing reads global random state):
- A2A ST: elements uniform(1, 8) float32 -> E4M3; scales uniform(1, 8) -> E8M0. The CANN generator's
  `en_dtypes.float8_e8m0` truncates to the exponent ({1, 2, 4}); ml_dtypes' float8_e8m0fnu rounds
  ({1, 2, 4, 8}). Seed A2A_ST_SEED.
- AG ST: per-rank seed ag_st_seed(rank) = 42 + rank, elements as A2A, scales 2^0 or 2^1.
  Assumption (generator source not read): the scale exponent is a uniform integer in {0, 1}.

Independence: every golden decodes elements and scales on its own, never through the kernel's numerics path:
E4M3 / E5M2 / E2M1 through the ml_dtypes casts, E1M2 and E8M0 through `np.ldexp`, the output cast through
numpy's `astype`. A bug planted in the kernel's decode then shows as a golden mismatch
(tests/numerics/test_golden_independence.py).
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from mc2emu.numerics.compare import a2a_allclose, ag_compare, bf16_ulp_distance
from mc2emu.numerics.constants import E8M0_BIAS, E8M0_NAN_CODE, MX_GROUP_SIZE
from mc2emu.numerics.element_codec import FLOAT32_MANTISSA_BITS
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE, ElemFormat
from mc2emu.numerics.mx_matmul import OutDtype
from mc2emu.numerics.scale_layout import from_ascend_scale_a, from_ascend_scale_b, scale_blocks

__all__ = [
    "A2A_ST_SEED",
    "ST_UNIFORM_HIGH",
    "ST_UNIFORM_LOW",
    "E8m0Cast",
    "a2a_allclose",
    "ag_compare",
    "ag_st_seed",
    "bf16_ulp_distance",
    "gen_ag_scales",
    "gen_st_elements",
    "gen_st_scales",
    "golden_cast",
    "golden_decode_elements",
    "golden_decode_scales",
    "golden_mx_matmul",
]

A2A_ST_SEED = 42  # seed of the CANN A2A ST data generator.
AG_ST_SEED_BASE = 42  # CANN AG ST generator seeds rank r with 42 + r.
ST_UNIFORM_LOW = 1.0  # ST elements and A2A scales are drawn from uniform(1, 8).
ST_UNIFORM_HIGH = 8.0
AG_SCALE_EXPONENTS = 2  # AG ST scales are 2^0 or 2^1: exponents drawn from range(2).

RandomSource = np.random.Generator | np.random.RandomState


class E8m0Cast(enum.Enum):
    """How a float becomes E8M0 in a generator: truncate the exponent (en_dtypes) or round (ml_dtypes)."""

    TRUNC = "trunc"
    ROUND = "round"


def ag_st_seed(rank: int) -> int:
    """Seed of the AG ST generator on `rank`."""
    return AG_ST_SEED_BASE + rank


def _uniform_f32(rng: RandomSource, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(ST_UNIFORM_LOW, ST_UNIFORM_HIGH, size=shape).astype(np.float32)


def gen_st_elements(shape: tuple[int, ...], rng: RandomSource) -> np.ndarray:
    """ST elements: uniform(1, 8) as float32, cast (RNE) to float8_e4m3fn (values in [1, 8])."""
    return _uniform_f32(rng, tuple(shape)).astype(ml_dtypes.float8_e4m3fn)


def gen_st_scales(
    shape: tuple[int, ...], rng: RandomSource, e8m0_cast: E8m0Cast | str = E8m0Cast.TRUNC
) -> np.ndarray:
    """ST scales: uniform(1, 8) cast to float8_e8m0fnu by truncation ({1,2,4}) or rounding ({1,2,4,8})."""
    try:
        cast = E8m0Cast(e8m0_cast)
    except ValueError:
        raise MxValueError(f"e8m0_cast={e8m0_cast!r} must be one of 'trunc', 'round'") from None
    x = _uniform_f32(rng, tuple(shape))
    if cast is E8m0Cast.ROUND:
        return x.astype(E8M0_DTYPE)
    # positive normal float32: the E8M0 code is the float32 biased exponent (both biases are 127)
    return (x.view(np.uint32) >> FLOAT32_MANTISSA_BITS).astype(np.uint8).view(E8M0_DTYPE)


def gen_ag_scales(shape: tuple[int, ...], rng: RandomSource) -> np.ndarray:
    """AG ST scales: 2^0 or 2^1 with equal probability, as float8_e8m0fnu."""
    if isinstance(rng, np.random.Generator):
        exps = rng.integers(0, AG_SCALE_EXPONENTS, size=tuple(shape))
    else:
        exps = rng.randint(0, AG_SCALE_EXPONENTS, size=tuple(shape))
    return (exps + E8M0_BIAS).astype(np.uint8).view(E8M0_DTYPE)


# --- the goldens' own decode (independent of the kernel's numerics path) -----------------------------------
E1M2_SIGN_BIT = 0x8  # Ascend fp4x2_e1m2_t: sign, 1 exponent bit, 2 mantissa bits, bias 1: |v| = code * 2^-2
E1M2_MAG_MASK = 0x7
E1M2_ULP_EXP = -2


def _codes_u8(codes: np.ndarray, param: str) -> np.ndarray:
    arr = np.asarray(codes)
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype.itemsize == 1 and arr.dtype.type.__module__ == "ml_dtypes":
        return arr.view(np.uint8)
    raise MxTypeError(f"{param} must be uint8 codes or a 1-byte ml_dtypes array, got {arr.dtype}")


def golden_decode_elements(codes: np.ndarray, elem: ElemFormat | str) -> np.ndarray:
    """float32 values of unpacked element codes: the ml_dtypes cast (E4M3, E5M2, E2M1), np.ldexp (E1M2)."""
    fmt = ElemFormat.parse(elem)
    u8 = _codes_u8(codes, "codes")
    if fmt is ElemFormat.E4M3:
        return u8.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    if fmt is ElemFormat.E5M2:
        return u8.view(ml_dtypes.float8_e5m2).astype(np.float32)
    if fmt is ElemFormat.E2M1:
        if u8.size and int(u8.max()) > 0xF:
            raise MxValueError(f"E2M1 codes must be < 16 (unpacked), got max {int(u8.max())}")
        return u8.view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    if u8.size and int(u8.max()) > 0xF:
        raise MxValueError(f"E1M2 codes must be < 16 (unpacked), got max {int(u8.max())}")
    mag = np.ldexp((u8 & E1M2_MAG_MASK).astype(np.float64), E1M2_ULP_EXP)
    return np.where(u8 & E1M2_SIGN_BIT, -mag, mag).astype(np.float32)


def golden_decode_scales(codes: np.ndarray) -> np.ndarray:
    """float32 values of E8M0 codes by np.ldexp: 2^(code - 127) (exact in float32), 0xFF -> NaN."""
    u8 = _codes_u8(codes, "scale codes")
    vals = np.ldexp(1.0, u8.astype(np.int32) - E8M0_BIAS)
    return np.where(u8 == E8M0_NAN_CODE, np.nan, vals).astype(np.float32)


def golden_cast(c: np.ndarray, out_dtype: OutDtype | str | np.dtype) -> np.ndarray:
    """The CANN golden's output cast: numpy astype (round to nearest even; overflow to +-Inf)."""
    out = OutDtype.parse(out_dtype)
    with np.errstate(over="ignore"):
        return np.asarray(c, dtype=np.float32).astype(out.dtype)


def _repeat_scale(scale: np.ndarray, k: int, axis: int) -> np.ndarray:
    """The CANN golden step: decode, np.repeat x32 along K, cut to k."""
    rep = np.repeat(golden_decode_scales(scale), MX_GROUP_SIZE, axis=axis)
    return rep[:, :k] if axis == 1 else rep[:k, :]


def golden_mx_matmul(
    a_codes: np.ndarray,
    a_scale: np.ndarray,
    b_codes: np.ndarray,
    b_scale: np.ndarray,
    elem: ElemFormat | str,
    out_dtype: OutDtype | str | np.dtype,
    trans_b: bool = False,
    trans_a: bool = False,
    b_elem: ElemFormat | str | None = None,
) -> np.ndarray:
    """CANN golden C = cast(dequant(A) @ dequant(B)) with one float32 matmul.

    a_codes: (m, k), or (k, m) with trans_a; b_codes: (k, n), or (n, k) with trans_b. Codes are unpacked
    (uint8 or the ml_dtypes element arrays). Scales are either per-32-block arrays in the operand's
    stored layout ((m, nb) / (nb, m) for A, (nb, n) / (n, nb) for B) or the 3-D Ascend layouts
    (scale_layout.py). `b_elem` defaults to `elem` (MXFP8 may mix E4M3 and E5M2 operands).
    """
    a_deq, b_deq = golden_mx_operands(a_codes, a_scale, b_codes, b_scale, elem, trans_b, trans_a, b_elem)
    return golden_cast(np.matmul(a_deq, b_deq), out_dtype)


def golden_mx_operands(
    a_codes: np.ndarray,
    a_scale: np.ndarray,
    b_codes: np.ndarray,
    b_scale: np.ndarray,
    elem: ElemFormat | str,
    trans_b: bool = False,
    trans_a: bool = False,
    b_elem: ElemFormat | str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The golden's dequantized float32 operands: logical A (m, k) and B (k, n); arguments as `golden_mx_matmul`."""
    fa = ElemFormat.parse(elem)
    fb = fa if b_elem is None else ElemFormat.parse(b_elem, "b_elem")
    a = golden_decode_elements(a_codes, fa)
    b = golden_decode_elements(b_codes, fb)
    if a.ndim != 2 or b.ndim != 2:
        raise MxValueError(f"a_codes and b_codes must be 2-D, got {a.shape} and {b.shape}")
    a_km = a.T if trans_a else a  # logical (m, k)
    b_kn = b.T if trans_b else b  # logical (k, n)
    k = a_km.shape[1]
    if b_kn.shape[0] != k:
        raise MxValueError(
            f"K mismatch: A has K={k}, B has K={b_kn.shape[0]} (trans_a={trans_a}, trans_b={trans_b})"
        )
    sa = np.asarray(a_scale)
    sb = np.asarray(b_scale)
    if sa.ndim == 3:
        sa = from_ascend_scale_a(sa, k, trans=trans_a)
    if sb.ndim == 3:
        sb = from_ascend_scale_b(sb, k, trans=trans_b)
    sa_mk = sa.T if trans_a else sa  # (m, nb)
    sb_kn = sb.T if trans_b else sb  # (nb, n)
    nb = scale_blocks(k)
    if sa_mk.shape != (a_km.shape[0], nb) or sb_kn.shape != (nb, b_kn.shape[1]):
        raise MxValueError(
            f"a_scale / b_scale must hold ceil(k/32) = {nb} blocks per row / column of the "
            f"logical A (m, k) and B (k, n); got logical scale shapes {sa_mk.shape}, "
            f"{sb_kn.shape}"
        )
    a_deq = a_km * _repeat_scale(sa_mk, k, axis=1)
    b_deq = b_kn * _repeat_scale(sb_kn, k, axis=0)
    return a_deq, b_deq
