"""MX element and scale formats as the Ascend cube unit sees them.

Emulates the CANN data types `fp8_e4m3fn_t`, `fp8_e5m2_t`, `fp4x2_e2m1_t`, `fp4x2_e1m2_t` (elements) and
`fp8_e8m0_t` (the shared block scale), plus the MX layout constants of apace `utils/constant.h` and
Blaze `common_utils.h` (seed 000 §6, SPEC §4).

Every decode table is built here from the bit-field definition (sign, exponent, mantissa, bias), not from
ml_dtypes, so the tests can use ml_dtypes as an independent oracle. E1M2 has no ml_dtypes type: its
elements are stored as uint8 codes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType

import ml_dtypes
import numpy as np

from mc2emu.numerics.constants import E8M0_BIAS, E8M0_NAN_CODE, FP4_C0_SIZE, FP8_C0_SIZE
from mc2emu.numerics.errors import MxValueError

E8M0_DTYPE = np.dtype(ml_dtypes.float8_e8m0fnu)  # storage dtype of every MX scale array.
FP4_STORAGE_DTYPE = np.dtype(ml_dtypes.float4_e2m1fn)  # packed 4-bit GM storage of every FP4 element format


def _build_e8m0_lut() -> np.ndarray:
    finite = np.arange(E8M0_NAN_CODE, dtype=np.int32) - E8M0_BIAS
    lut = np.append(np.ldexp(np.float32(1.0), finite), np.float32(np.nan)).astype(np.float32)
    lut.flags.writeable = False
    return lut


E8M0_LUT = _build_e8m0_lut()  # float32[256]: code -> 2^(code-127) exactly, 0xFF -> NaN.


@dataclass(frozen=True)
class _FormatInfo:
    """Bit-field definition of one element format."""

    bits: int
    ebits: int
    mbits: int
    bias: int
    max: float
    nan_code: int | None  # canonical positive NaN code written by the encoder, None: no NaN.
    has_inf: bool
    ml_dtype: np.dtype | None
    c0_size: int


class ElemFormat(enum.Enum):
    """An MX element format; the value is the short name used in configs and on the CLI."""

    E4M3 = "e4m3"
    E5M2 = "e5m2"
    E2M1 = "e2m1"
    E1M2 = "e1m2"

    @classmethod
    def _missing_(cls, value: object) -> ElemFormat | None:
        """An ml_dtypes dtype, or its name, names the format of that dtype."""
        try:
            return cls.parse(value)
        except MxValueError:
            return None

    @classmethod
    def parse(cls, x: object, param: str = "elem") -> ElemFormat:
        """Accept an ElemFormat, its string value (or ml_dtypes name), or a numpy/ml_dtypes dtype."""
        if isinstance(x, cls):
            return x
        if isinstance(x, str):
            key = x.strip().lower()
            for fmt in cls:
                if key == fmt.value or (fmt.ml_dtype is not None and key == fmt.ml_dtype.name):
                    return fmt
        else:
            try:
                dt = np.dtype(x)  # type: ignore[call-overload]
            except TypeError:
                dt = None
            if x is not None and dt is not None:
                for fmt in cls:
                    if fmt.ml_dtype is not None and dt == fmt.ml_dtype:
                        return fmt
        allowed = ", ".join(repr(f.value) for f in cls)
        raise MxValueError(
            f"{param}={x!r} is not an MX element format; allowed: {allowed}, an ElemFormat member, "
            "or the dtypes float8_e4m3fn, float8_e5m2, float4_e2m1fn"
        )

    @property
    def _info(self) -> _FormatInfo:
        return _FORMAT_INFO[self]

    @property
    def bits(self) -> int:
        """Storage bits per element (8 for FP8, 4 for FP4)."""
        return self._info.bits

    @property
    def is_fp4(self) -> bool:
        return self._info.bits == 4

    @property
    def ebits(self) -> int:
        return self._info.ebits

    @property
    def mbits(self) -> int:
        return self._info.mbits

    @property
    def bias(self) -> int:
        return self._info.bias

    @property
    def max(self) -> float:
        """Largest finite magnitude; the encoder saturates to it."""
        return self._info.max

    @property
    def emax(self) -> int:
        """floor(log2(max)): the exponent the OCP scale rule subtracts."""
        return int(np.floor(np.log2(self._info.max)))

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value (1 - bias); below it values are subnormal."""
        return 1 - self._info.bias

    @property
    def has_nan(self) -> bool:
        return self._info.nan_code is not None

    @property
    def has_inf(self) -> bool:
        return self._info.has_inf

    @property
    def nan_code(self) -> int | None:
        """Canonical NaN code the encoder writes (E4M3 0x7F, E5M2 0x7E as ml_dtypes), None if no NaN."""
        return self._info.nan_code

    @property
    def sign_bit(self) -> int:
        return 1 << (self._info.bits - 1)

    @property
    def max_code(self) -> int:
        """Code of +max."""
        return int(np.flatnonzero(self.lut == self._info.max)[0])

    @property
    def ml_dtype(self) -> np.dtype | None:
        """The ml_dtypes dtype of this format, None for E1M2 (ml_dtypes lacks it)."""
        return self._info.ml_dtype

    @property
    def storage_dtype(self) -> np.dtype:
        """dtype of unpacked element arrays: the ml_dtypes dtype, or uint8 codes for E1M2."""
        return self._info.ml_dtype if self._info.ml_dtype is not None else np.dtype(np.uint8)

    @property
    def c0_size(self) -> int:
        """Fractal C0 in elements (FP8_C0_SIZE or FP4_C0_SIZE)."""
        return self._info.c0_size

    @property
    def lut(self) -> np.ndarray:
        """Read-only float32 decode table indexed by code (256 entries for FP8, 16 for FP4)."""
        return _LUTS[self]


def _decode_bitfield(codes: np.ndarray, info: _FormatInfo) -> np.ndarray:
    """float64 values of `codes` from the sign / exponent / mantissa definition (no special values)."""
    codes = codes.astype(np.int64)
    sign = np.where(codes >> (info.bits - 1) & 1, -1.0, 1.0)
    exp = (codes >> info.mbits) & ((1 << info.ebits) - 1)
    man = codes & ((1 << info.mbits) - 1)
    frac = man / float(1 << info.mbits)
    mag = np.where(exp == 0, np.ldexp(frac, 1 - info.bias), np.ldexp(1.0 + frac, exp - info.bias))
    return sign * mag


def _build_lut(fmt: ElemFormat, info: _FormatInfo) -> np.ndarray:
    codes = np.arange(1 << info.bits)
    vals = _decode_bitfield(codes, info)
    exp = (codes >> info.mbits) & ((1 << info.ebits) - 1)
    man = codes & ((1 << info.mbits) - 1)
    top = exp == (1 << info.ebits) - 1
    inf = np.zeros(codes.shape, dtype=bool)
    nan = np.zeros(codes.shape, dtype=bool)
    if fmt is ElemFormat.E4M3:  # fn: only S.1111.111 is NaN, no Inf
        nan = top & (man == (1 << info.mbits) - 1)
    elif fmt is ElemFormat.E5M2:  # IEEE: all-ones exponent is Inf (mantissa 0) or NaN
        nan = top & (man != 0)
        inf = top & (man == 0)
    vals[inf] = np.copysign(np.inf, vals[inf])
    vals[nan] = np.copysign(np.nan, vals[nan])  # NaN keeps its sign bit, as ml_dtypes decodes it
    lut = vals.astype(np.float32)
    lut.flags.writeable = False
    return lut


_FORMAT_INFO = MappingProxyType(
    {
        ElemFormat.E4M3: _FormatInfo(
            8, 4, 3, 7, 448.0, 0x7F, False, np.dtype(ml_dtypes.float8_e4m3fn), FP8_C0_SIZE
        ),
        ElemFormat.E5M2: _FormatInfo(
            8, 5, 2, 15, 57344.0, 0x7E, True, np.dtype(ml_dtypes.float8_e5m2), FP8_C0_SIZE
        ),
        ElemFormat.E2M1: _FormatInfo(
            4, 2, 1, 1, 6.0, None, False, np.dtype(ml_dtypes.float4_e2m1fn), FP4_C0_SIZE
        ),
        ElemFormat.E1M2: _FormatInfo(4, 1, 2, 1, 1.75, None, False, None, FP4_C0_SIZE),
    }
)

_LUTS = MappingProxyType({fmt: _build_lut(fmt, info) for fmt, info in _FORMAT_INFO.items()})


def gm_storage_dtype(elem: ElemFormat) -> np.dtype:
    """GM dtype of an MX operand: the ml_dtypes FP8 type, or packed FP4 storage (`FP4_STORAGE_DTYPE`, two
    codes per byte) for both FP4 formats. (`ElemFormat.storage_dtype` is the dtype of unpacked arrays.)"""
    return FP4_STORAGE_DTYPE if elem.is_fp4 else np.dtype(elem.ml_dtype)
