"""Weight dequant of the V+C weight-quant matmul: the AIV vector-op chain of one UB tile.

    B_dequant[k, n] = (B[k, n] + offset[n]) * scale[n]

Emulates the `__simd_vf__` function `WeightDequantVf` of the Blaze skill asset
`kernel/weight_quant_matmul_kernel.h` (hicann cannbot-skills, `ascendc-blaze-best-practice`, seed 001) and
the per-tile antiquant of ops-nn `matmul/common/cmct/prologue/tile/antiquant_nd_{kn,nk}.h` (commit
e5c3fa93): int8 Cast<half> [-> Cast<bf16, CAST_RINT>], fp8 Cast<float> -> Cast<bf16|half, CAST_RINT>, then
[Add(offset)] (compiled out without an offset) and Mul(scale), each rounded to the target. Every function
below is one register op and pure; `dequant_ub_tile` chains them for one UB tile as the VF does.

Facts (tested exhaustively in tests/numerics/test_weight_dequant.py): every cast of the chains is exact, so
CAST_RINT versus CAST_ROUND never shows and the rounding is that of the Add and the Mul; those are emulated
as a float32 operation then one round to nearest even into the target (float32 carries 24 >= 2p + 2
significand bits for bf16 and half, so the two roundings equal one correctly rounded operation).
Assumption (no public source settles it): the vector unit keeps bf16 / half subnormals and overflows to
+-Inf (IEEE round-to-nearest-even). The golden (`mc2emu/ops/weight_quant_matmul_golden.py`) computes the
same formula in ml_dtypes / numpy arithmetic and shares none of these functions.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from mc2emu.numerics.element_codec import decode_elements
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import ElemFormat

__all__ = [
    "DequantDtype",
    "WeightDtype",
    "cast_float_to_dequant",
    "cast_fp8_to_float",
    "cast_half_to_bf16",
    "cast_int8_to_half",
    "cast_weight_to_dequant",
    "channel_dequant_table",
    "dequant_by_table",
    "dequant_ub_tile",
    "dequant_weight",
    "round_float32_to",
    "vector_add",
    "vector_mul",
]

FLOAT32_EXP_BITS = 8
FLOAT32_MANTISSA_BITS = 23
FLOAT32_EXP_BIAS = 127
FLOAT32_EXP_MASK = 0xFF
FLOAT32_ABS_MASK = 0x7FFFFFFF
FLOAT32_INF_BITS = 0x7F800000
BF16_QUIET_BIT = 0x40


class DequantDtype(enum.Enum):
    """`DequantBType`: the type B is dequantized to (= A's type = scale's and offset's type)."""

    BF16 = "bfloat16"
    FP16 = "float16"

    @classmethod
    def parse(cls, x: object, param: str = "dequant dtype") -> DequantDtype:
        for member in cls:
            if x is member or (isinstance(x, str) and x.strip().lower() == member.value):
                return member
        try:
            dt = np.dtype(x)  # type: ignore[call-overload]
        except TypeError:
            dt = None
        for member in cls:
            if dt is not None and dt == member.dtype:
                return member
        raise MxTypeError(f"{param} must be bfloat16 or float16 (A's type, which B is dequantized to), got {x!r}")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(ml_dtypes.bfloat16) if self is DequantDtype.BF16 else np.dtype(np.float16)

    @property
    def ebits(self) -> int:
        return 8 if self is DequantDtype.BF16 else 5

    @property
    def mbits(self) -> int:
        return 7 if self is DequantDtype.BF16 else 10

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal."""
        return 2 - (1 << (self.ebits - 1))

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite binade."""
        return (1 << (self.ebits - 1)) - 1


class WeightDtype(enum.Enum):
    """`BType`: the stored weight type."""

    INT8 = "int8"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E5M2 = "float8_e5m2"

    @classmethod
    def of(cls, weight: np.ndarray, param: str = "weight") -> WeightDtype:
        name = (weight.dtype if hasattr(weight, "dtype") else np.asarray(weight).dtype).name
        for member in cls:
            if name == member.value:
                return member
        allowed = ", ".join(m.value for m in cls)
        raise MxTypeError(f"{param} must have dtype {allowed}, got {name}")

    @property
    def elem_format(self) -> ElemFormat:
        if self is WeightDtype.INT8:
            raise MxValueError("int8 weights have no float element format")
        return ElemFormat.E4M3 if self is WeightDtype.FLOAT8_E4M3FN else ElemFormat.E5M2


# --- the rounding of the vector unit's output stage -------------------------------------------------------------


def round_float32_to(x: np.ndarray, out: DequantDtype) -> np.ndarray:
    """Round float32 values to bf16 / half, nearest even (CAST_RINT), as 16-bit codes in `out`'s dtype.

    NaN keeps its sign and becomes quiet; +-Inf stays +-Inf; past max + half an ULP gives +-Inf.
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bits = _rint_bf16_bits(u) if out is DequantDtype.BF16 else _rint_narrow_bits(u, out)
    return bits.view(out.dtype).reshape(np.shape(x))


def _rint_bf16_bits(u: np.ndarray) -> np.ndarray:
    """bf16 shares float32's exponent field, subnormals included: dropping the low 16 bits with ties to
    even is the whole rounding (a carry out of the mantissa moves to the next binade, out of the largest
    finite value to the Inf code)."""
    r = u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))
    r >>= 16
    nan = (u & np.uint32(FLOAT32_ABS_MASK)) > np.uint32(FLOAT32_INF_BITS)
    if nan.any():
        r[nan] = (u[nan] >> 16) | np.uint32(BF16_QUIET_BIT)
    return r.astype(np.uint16)


def _rint_narrow_bits(u: np.ndarray, out: DequantDtype) -> np.ndarray:
    """A format with fewer exponent bits (half), rounded by the float32 unit itself: with E the exponent of
    x clamped to [emin, emax], m = 1.5 * 2^(E + 23 - mbits) has an ULP equal to the target's quantum
    2^(E - mbits) and is an even multiple of it; x + m stays in m's binade (|x| < 2^(E + 1)), so float32's
    round to nearest even rounds x to that quantum with ties to even, and (x + m) - m is exact (Sterbenz).
    The result is a value of the target (or, past max, at least 2^(emax + 1)), so converting it is exact
    (or +-Inf); the sign of a zero result is x's."""
    x = u.view(np.float32)
    e = ((u >> FLOAT32_MANTISSA_BITS) & np.uint32(FLOAT32_EXP_MASK)).view(np.int32) - FLOAT32_EXP_BIAS
    big_e = np.clip(e, out.emin, out.emax)
    m = (((big_e + (FLOAT32_MANTISSA_BITS - out.mbits + FLOAT32_EXP_BIAS)) << FLOAT32_MANTISSA_BITS)
         | (1 << (FLOAT32_MANTISSA_BITS - 1))).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # past max + half an ULP: +-Inf; NaN stays NaN
        r = x + m
        r -= m
        np.copysign(r, x, out=r)
        return r.astype(out.dtype).view(np.uint16)


def _widen(x: np.ndarray) -> np.ndarray:
    """Exact float32 value of a bf16 / half register (bf16: its bits are the float32's upper half)."""
    arr = np.asarray(x)
    if arr.dtype == DequantDtype.BF16.dtype:
        return (arr.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    raise MxTypeError(f"vector operands must be bfloat16 or float16 registers, got {arr.dtype}")


_INT8_TO_HALF = round_float32_to(np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32), DequantDtype.FP16)
_INT8_TO_HALF.flags.writeable = False

# --- the register ops ---------------------------------------------------------------------------------------------


def cast_int8_to_half(b: np.ndarray) -> np.ndarray:
    """`Cast<half, int8_t>` (castTraitInt8ToFP16, RoundMode UNKNOWN): exact, |b| <= 128 < 2^11; a gather
    from the 256 results, as the other byte decodes do."""
    arr = np.asarray(b)
    if arr.dtype != np.int8:
        raise MxTypeError(f"Cast<half, int8_t> takes int8, got {arr.dtype}")
    return np.take(_INT8_TO_HALF, arr.view(np.uint8))


def cast_half_to_bf16(h: np.ndarray) -> np.ndarray:
    """`Cast<bfloat16_t, half, CAST_RINT>` (castTraitFP16ToBF16): half -> bf16, nearest even."""
    arr = np.asarray(h)
    if arr.dtype != np.float16:
        raise MxTypeError(f"Cast<bf16, half> takes half, got {arr.dtype}")
    return round_float32_to(_widen(arr), DequantDtype.BF16)


def cast_fp8_to_float(codes: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    """`Cast<float, fp8_e4m3fn_t | fp8_e5m2_t>` (RegLayout ZERO / TWO halves): exact decode to float32."""
    if fmt not in (ElemFormat.E4M3, ElemFormat.E5M2):
        raise MxValueError(f"Cast<float, fp8> takes an FP8 format (e4m3 / e5m2), got {fmt}")
    return decode_elements(codes, fmt)


def cast_float_to_dequant(f: np.ndarray, out: DequantDtype) -> np.ndarray:
    """`Cast<bf16 | half, float, CAST_RINT>` (castTraitFP32ToBF16_ZERO/ONE): nearest even."""
    arr = np.asarray(f)
    if arr.dtype != np.float32:
        raise MxTypeError(f"Cast<{out.value}, float> takes float32, got {arr.dtype}")
    return round_float32_to(arr, out)


def vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`Add(dst, a, b, mask)` on bf16 / half registers: a + b rounded to the operands' type (`b` may be a
    per-channel register that broadcasts against `a`, as the DIST_BRC_B16 / DIST_NORM loads make it)."""
    out = DequantDtype.parse(np.asarray(a).dtype, "Add operand")
    if np.asarray(b).dtype != out.dtype:
        raise MxTypeError(f"Add operands must share one type, got {np.asarray(a).dtype} and {np.asarray(b).dtype}")
    with np.errstate(invalid="ignore"):  # Inf + -Inf is NaN, as IEEE
        return round_float32_to(_widen(a) + _widen(b), out)


def vector_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`Mul(dst, a, b, mask)` on bf16 / half registers: a * b rounded to the operands' type (`b` may
    broadcast against `a`)."""
    out = DequantDtype.parse(np.asarray(a).dtype, "Mul operand")
    if np.asarray(b).dtype != out.dtype:
        raise MxTypeError(f"Mul operands must share one type, got {np.asarray(a).dtype} and {np.asarray(b).dtype}")
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # IEEE: +-Inf, subnormals, Inf * 0 NaN
        return round_float32_to(_widen(a) * _widen(b), out)


# --- the VF of one UB tile ----------------------------------------------------------------------------------------


def cast_weight_to_dequant(b_in: np.ndarray, out: DequantDtype) -> np.ndarray:
    """The cast chain of `WeightDequantVf` for B's type: int8 -> half [-> bf16]; fp8 -> float -> out."""
    wt = WeightDtype.of(b_in, "b_in")
    if wt is WeightDtype.INT8:
        h = cast_int8_to_half(b_in)
        return cast_half_to_bf16(h) if out is DequantDtype.BF16 else h
    return cast_float_to_dequant(cast_fp8_to_float(np.asarray(b_in).view(np.uint8), wt.elem_format), out)


def _check_channel_vector(v: np.ndarray, n: int, out: DequantDtype, param: str) -> np.ndarray:
    arr = np.asarray(v)
    if arr.dtype != out.dtype:
        raise MxTypeError(f"{param} must have B_dequant's dtype {out.value} (the scale's), got {arr.dtype}")
    if arr.shape != (n,):
        raise MxValueError(f"{param} must be per channel, shape ({n},), got {arr.shape}")
    return arr


def dequant_ub_tile(
    b_in: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None, *, trans_b: bool = False
) -> np.ndarray:
    """`WeightDequantVf` on one UB tile: cast chain, [Add offset], Mul scale, per channel n.

    `b_in` is (kUbLen, nUbLen), or (nUbLen, kUbLen) when `trans_b`; `scale` and `offset` are the tile's
    (nUbLen,) channels in the dequant type, which `scale`'s dtype names. Returns B_dequant in `b_in`'s
    layout (the NZ / ZN store to UB and the copy to L1 belong to the kernel).
    """
    out = DequantDtype.parse(np.asarray(scale).dtype, "scale")
    b = np.asarray(b_in)
    if b.ndim != 2:
        raise MxValueError(f"b_in must be a 2-D UB tile, got shape {b.shape}")
    n = b.shape[0] if trans_b else b.shape[1]
    reg_scale = _check_channel_vector(scale, n, out, "scale")
    reg_offset = None if offset is None else _check_channel_vector(offset, n, out, "offset")
    # scale / offset load: DIST_BRC_B16 (one channel per row) when transB, DIST_NORM (a row of channels) else
    if trans_b:
        reg_scale = reg_scale[:, None]
        reg_offset = None if reg_offset is None else reg_offset[:, None]
    else:
        reg_scale = reg_scale[None, :]
        reg_offset = None if reg_offset is None else reg_offset[None, :]
    reg_b = cast_weight_to_dequant(b, out)
    if reg_offset is not None:  # if constexpr (HasOffset)
        reg_b = vector_add(reg_b, reg_offset)
    return vector_mul(reg_b, reg_scale)


def dequant_weight(
    weight: np.ndarray, scale: np.ndarray, offset: np.ndarray | None = None, *, trans_b: bool = False
) -> np.ndarray:
    """B_dequant of a whole weight, (K, N) or (N, K) when `trans_b`, through `dequant_ub_tile`.

    The dequant is elementwise per channel, so one tile covering the whole weight gives the bits any UB
    tiling gives; the kernel calls `dequant_ub_tile` per (kUbLen, nUbLen) tile.
    """
    return dequant_ub_tile(weight, scale, offset, trans_b=trans_b)


# --- the emulator's fast path: the VF chain applied once to every byte code of each channel --------------------

WEIGHT_CODES = 256  # a weight element is one byte: the VF chain of one channel has at most 256 results


def channel_dequant_table(weight_dtype: WeightDtype, scale: np.ndarray, offset: np.ndarray | None = None, *,
                          trans_b: bool = False) -> np.ndarray:
    """The results of `dequant_ub_tile` for every byte code of every channel, as 16-bit codes.

    The VF chain (cast, [Add offset], Mul scale) is elementwise with per-channel operands, so B_dequant[k, n]
    depends only on (code, n): running the same register ops on the 256 codes once per channel gives a
    table the tile is then gathered from (`dequant_by_table`), bit for bit `dequant_ub_tile`'s result.
    Shape (256, n) (code-major) or (n, 256) when `trans_b`; uint16 codes of the dequant type."""
    codes = np.arange(WEIGHT_CODES, dtype=np.uint8).view(np.dtype(weight_dtype.value))
    n = np.asarray(scale).shape[0]
    b_in = np.broadcast_to(codes[:, None], (WEIGHT_CODES, n))
    table = dequant_ub_tile(np.ascontiguousarray(b_in), scale, offset, trans_b=False)
    table = table.view(np.uint16)
    return np.ascontiguousarray(table.T) if trans_b else table


def dequant_by_table(b_in: np.ndarray, table: np.ndarray, dequant: DequantDtype, *, trans_b: bool = False
                     ) -> np.ndarray:
    """B_dequant of one UB tile (`b_in` (kUbLen, n), or (n, kUbLen) when `trans_b`) gathered from its
    channels' `channel_dequant_table`; returns the tile in `dequant`'s dtype, `b_in`'s layout."""
    codes = np.ascontiguousarray(b_in).view(np.uint8)
    if trans_b:
        n = codes.shape[0]
        idx = codes.astype(np.intp)
        idx += (np.arange(n, dtype=np.intp) * WEIGHT_CODES)[:, None]
    else:
        n = codes.shape[1]
        idx = codes.astype(np.intp)
        idx *= n
        idx += np.arange(n, dtype=np.intp)[None, :]
    if table.size != WEIGHT_CODES * n:
        raise MxValueError(f"a table of {table.size} entries does not cover {n} channels x {WEIGHT_CODES} codes")
    return np.take(table.reshape(-1), idx, mode="clip").view(dequant.dtype)
