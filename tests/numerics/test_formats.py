"""Element / scale formats: definitions, decode tables, parsing, constants."""

import math

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import (
    E8M0_LUT,
    FP4_C0_SIZE,
    FP8_C0_SIZE,
    MX_GROUP_SIZE,
    MXFP_DIVISOR_SIZE,
    MXFP_MULTI_BASE_SIZE,
    SCALE_C0,
    ElemFormat,
    MxValueError,
)

ML_FORMATS = [
    (ElemFormat.E4M3, ml_dtypes.float8_e4m3fn),
    (ElemFormat.E5M2, ml_dtypes.float8_e5m2),
    (ElemFormat.E2M1, ml_dtypes.float4_e2m1fn),
]


@pytest.mark.parametrize(
    ("fmt", "bits", "vmax", "emax", "lut_size"),
    [
        (ElemFormat.E4M3, 8, 448.0, 8, 256),
        (ElemFormat.E5M2, 8, 57344.0, 15, 256),
        (ElemFormat.E2M1, 4, 6.0, 2, 16),
        (ElemFormat.E1M2, 4, 1.75, 0, 16),
    ],
)
def test_format_properties(fmt, bits, vmax, emax, lut_size):
    assert fmt.bits == bits
    assert fmt.is_fp4 == (bits == 4)
    assert fmt.max == vmax
    assert fmt.emax == emax
    assert fmt.lut.dtype == np.float32
    assert fmt.lut.shape == (lut_size,)
    assert fmt.lut[fmt.max_code] == vmax
    assert np.nanmax(fmt.lut[np.isfinite(fmt.lut)]) == vmax
    assert fmt.c0_size == (FP4_C0_SIZE if fmt.is_fp4 else FP8_C0_SIZE)


def test_ml_dtype_and_storage():
    assert ElemFormat.E4M3.ml_dtype == ml_dtypes.float8_e4m3fn
    assert ElemFormat.E5M2.ml_dtype == ml_dtypes.float8_e5m2
    assert ElemFormat.E2M1.ml_dtype == ml_dtypes.float4_e2m1fn
    assert ElemFormat.E1M2.ml_dtype is None
    assert ElemFormat.E1M2.storage_dtype == np.uint8


@pytest.mark.parametrize(("fmt", "dtype"), ML_FORMATS)
def test_lut_matches_ml_dtypes(fmt, dtype):
    codes = np.arange(fmt.lut.size, dtype=np.uint8)
    oracle = codes.view(dtype).astype(np.float32)
    np.testing.assert_array_equal(fmt.lut, oracle)  # NaN positions compare equal
    np.testing.assert_array_equal(np.signbit(fmt.lut), np.signbit(oracle))


def test_special_values():
    e4 = ElemFormat.E4M3.lut
    assert np.flatnonzero(np.isnan(e4)).tolist() == [0x7F, 0xFF]
    assert not np.isinf(e4).any()
    e5 = ElemFormat.E5M2.lut
    assert np.flatnonzero(np.isinf(e5)).tolist() == [0x7C, 0xFC]
    assert np.flatnonzero(np.isnan(e5)).tolist() == [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]
    for fmt in (ElemFormat.E2M1, ElemFormat.E1M2):
        assert np.isfinite(fmt.lut).all()
        assert not fmt.has_nan and not fmt.has_inf


def test_e1m2_all_codes_match_definition():
    """Ascend fp4x2_e1m2_t: sign bit 3, exponent bit 2, mantissa bits 1..0, bias 1, no Inf / NaN."""
    for code in range(16):
        s, e, m = code >> 3, (code >> 2) & 1, code & 3
        mag = (m / 4) * 2.0 ** (1 - 1) if e == 0 else (1 + m / 4) * 2.0 ** (e - 1)
        want = -mag if s else mag
        got = ElemFormat.E1M2.lut[code]
        assert got == want and math.copysign(1, got) == (-1 if s else 1), code
        assert abs(got) == 0.25 * (code & 7)
    assert ElemFormat.E1M2.lut.max() == 1.75
    assert ElemFormat.E1M2.emin == 0


def test_e2m1_values():
    assert ElemFormat.E2M1.lut[:8].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_luts_are_read_only():
    for fmt in ElemFormat:
        with pytest.raises(ValueError, match="read-only"):
            fmt.lut[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        E8M0_LUT[0] = 1.0


@pytest.mark.parametrize(
    ("x", "want"),
    [
        (ElemFormat.E4M3, ElemFormat.E4M3),
        ("e5m2", ElemFormat.E5M2),
        ("E2M1", ElemFormat.E2M1),
        ("e1m2", ElemFormat.E1M2),
        (ml_dtypes.float8_e4m3fn, ElemFormat.E4M3),
        (np.dtype(ml_dtypes.float8_e5m2), ElemFormat.E5M2),
        (ml_dtypes.float4_e2m1fn, ElemFormat.E2M1),
        ("float8_e4m3fn", ElemFormat.E4M3),
    ],
)
def test_parse_accepts(x, want):
    assert ElemFormat.parse(x) is want


@pytest.mark.parametrize("bad", ["e3m4", "fp8", np.float32, ml_dtypes.float8_e4m3fnuz, None, 5, ""])
def test_parse_rejects_naming_parameter_and_allowed(bad):
    with pytest.raises(MxValueError, match=r"elem=.*allowed: 'e4m3', 'e5m2', 'e2m1', 'e1m2'"):
        ElemFormat.parse(bad)
    with pytest.raises(ValueError, match="b_elem="):
        ElemFormat.parse(bad, "b_elem")


def test_e8m0_lut_exact():
    assert E8M0_LUT.dtype == np.float32 and E8M0_LUT.shape == (256,)
    for code in range(255):
        assert float(E8M0_LUT[code]) == math.ldexp(1.0, code - 127), code
    assert np.isnan(E8M0_LUT[255])
    assert 0 < E8M0_LUT[0] < np.finfo(np.float32).smallest_normal  # 2^-127 is a float32 subnormal
    oracle = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float32)
    np.testing.assert_array_equal(E8M0_LUT, oracle)


def test_layout_constants_are_consistent():
    assert MX_GROUP_SIZE == 32
    assert MXFP_DIVISOR_SIZE == MX_GROUP_SIZE * SCALE_C0 == 64
    assert MXFP_MULTI_BASE_SIZE == SCALE_C0 == 2
    assert FP8_C0_SIZE * 8 == FP4_C0_SIZE * 4 == 256  # one 32-byte C0 row either way
