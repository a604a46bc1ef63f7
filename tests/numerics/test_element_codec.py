"""Element codec: every code round-trips, RNE + saturation against ml_dtypes and a float64 grid search.

Round-trip exceptions, by design of a saturating RNE encoder:
- NaN codes decode to NaN and re-encode to the canonical NaN code (E4M3 0x7F, E5M2 0x7E): every E4M3
  0xFF and E5M2 0x7D/0x7F/0xFD/0xFE/0xFF land on their format's single canonical code.
- E5M2 +-Inf (0x7C / 0xFC) decode to +-Inf and re-encode saturated to +-max (0x7B / 0xFB).
"""

import ml_dtypes
import numpy as np
import pytest
from numerics_reference import ref_encode, ref_format

from mc2emu.numerics import ElemFormat, MxTypeError, MxValueError, decode_elements, encode_elements

ML_ORACLE = {
    ElemFormat.E4M3: ml_dtypes.float8_e4m3fn,
    ElemFormat.E5M2: ml_dtypes.float8_e5m2,
    ElemFormat.E2M1: ml_dtypes.float4_e2m1fn,
}


def _expected_round_trip(fmt: ElemFormat, code: int) -> int:
    v = fmt.lut[code]
    if np.isnan(v):
        return fmt.nan_code
    if np.isinf(v):
        return fmt.max_code | (fmt.sign_bit if v < 0 else 0)
    return code


@pytest.mark.parametrize("fmt", list(ElemFormat))
def test_every_code_round_trips(fmt):
    codes = np.arange(fmt.lut.size, dtype=np.uint8)
    back = encode_elements(decode_elements(codes, fmt), fmt)
    want = [_expected_round_trip(fmt, int(c)) for c in codes]
    assert back.tolist() == want
    changed = [int(c) for c in codes if want[c] != c]
    assert (
        changed
        == {
            ElemFormat.E4M3: [0xFF],
            ElemFormat.E5M2: [0x7C, 0x7D, 0x7F, 0xFC, 0xFD, 0xFE, 0xFF],
            ElemFormat.E2M1: [],
            ElemFormat.E1M2: [],
        }[fmt]
    )


def _float32_sweep(stride: int) -> np.ndarray:
    """Every `stride`-th float32 bit pattern, both signs, plus all finite ml_dtypes values."""
    bits = np.arange(0, 1 << 32, stride, dtype=np.uint64).astype(np.uint32)
    return bits.view(np.float32)


def _ties_and_neighbours(fmt: ElemFormat) -> np.ndarray:
    """Midpoints between adjacent finite grid values (exact in float32) and their float32 neighbours."""
    vals = np.unique(fmt.lut[np.isfinite(fmt.lut)].astype(np.float64))
    mids = ((vals[1:] + vals[:-1]) / 2).astype(np.float32)
    above_max = np.float32(fmt.max) * np.float32(1.0625)
    pts = np.concatenate([mids, vals.astype(np.float32), [above_max, np.float32(fmt.max) * 4]])
    pts = np.concatenate([pts, np.nextafter(pts, np.float32(np.inf)), np.nextafter(pts, np.float32(-np.inf))])
    return np.concatenate([pts, -pts]).astype(np.float32)


@pytest.mark.parametrize("fmt", list(ML_ORACLE))
def test_encode_matches_ml_dtypes_saturating_cast(fmt):
    x = np.concatenate([_float32_sweep(4099), _ties_and_neighbours(fmt)])
    x = x[~np.isnan(x)]
    oracle = np.clip(x, -fmt.max, fmt.max).astype(ML_ORACLE[fmt]).view(np.uint8)
    np.testing.assert_array_equal(encode_elements(x, fmt), oracle)


@pytest.mark.parametrize("fmt", list(ElemFormat))
def test_encode_matches_float64_grid_search(fmt):
    ref = ref_format(fmt.value)
    rng = np.random.default_rng(7)
    scale = np.float32(fmt.max)
    rand = (rng.standard_normal(400) * scale).astype(np.float32)
    tiny = (rng.standard_normal(100) * fmt.lut[1] * 4).astype(np.float32)  # around the subnormals
    x = np.concatenate([_ties_and_neighbours(fmt), rand, tiny, [0.0, -0.0, np.inf, -np.inf]]).astype(
        np.float32
    )
    want = [ref_encode(float(v), ref) for v in x]
    assert encode_elements(x, fmt).tolist() == want


def test_e1m2_ties_to_even():
    x = np.array([0.125, 0.375, 0.625, 0.875, 1.125, 1.375, 1.625, 1.875, -0.125], dtype=np.float32)
    assert encode_elements(x, "e1m2").tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 8]


def test_e2m1_ties_to_even():
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, -0.25], dtype=np.float32)
    assert encode_elements(x, "e2m1").tolist() == [0, 2, 2, 4, 4, 6, 6, 7, 8]


def test_nan_and_inf_encoding():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf], dtype=np.float32)
    assert encode_elements(x, "e4m3").tolist() == [0x7F, 0x7F, 0x7E, 0xFE]
    assert encode_elements(x, "e5m2").tolist() == [0x7E, 0x7E, 0x7B, 0xFB]
    assert encode_elements(x, "e2m1").tolist() == [0, 0, 7, 15]
    assert encode_elements(x, "e1m2").tolist() == [0, 0, 7, 15]


def test_sign_of_zero_and_underflow_kept():
    x = np.array([0.0, -0.0, -1e-30, 1e-30, -np.finfo(np.float32).smallest_subnormal], dtype=np.float32)
    for fmt in ElemFormat:
        s = fmt.sign_bit
        assert encode_elements(x, fmt).tolist() == [0, s, s, 0, s]


def test_half_precision_inputs_are_exact_upcasts():
    x = np.array([0.3, -2.7, 100.0, 1e-3], dtype=np.float32)
    for dt in (np.float16, ml_dtypes.bfloat16):
        xd = x.astype(dt)
        np.testing.assert_array_equal(
            encode_elements(xd, "e4m3"), encode_elements(xd.astype(np.float32), "e4m3")
        )


def test_rejects_float64_naming_rule():
    with pytest.raises(MxTypeError, match=r"x must have dtype float32, bfloat16 or float16.*double-round"):
        encode_elements(np.zeros(3), "e4m3")


def test_decode_rejects_out_of_range_fp4_codes():
    with pytest.raises(MxValueError, match="codes must be < 16 for e2m1"):
        decode_elements(np.array([3, 16], dtype=np.uint8), "e2m1")


def test_decode_accepts_ml_dtypes_arrays():
    x = np.array([1.5, -448.0, 0.0], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(decode_elements(x, "e4m3"), x.astype(np.float32))
