"""quantize_mx / dequantize_mx against the independent float64 reference (numerics_reference.py)."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numerics_reference import ref_format, ref_quantize

from mc2emu.numerics import (
    ElemFormat,
    MxTensor,
    MxTypeError,
    MxValueError,
    dequantize_mx,
    quantize_mx,
)

FORMATS = [f.value for f in ElemFormat]
F32 = np.float32


def assert_matches_reference(x: np.ndarray, elem: str, block: int = 32) -> MxTensor:
    q = quantize_mx(x, elem, block=block)
    codes, scales = ref_quantize(x, elem, block)
    np.testing.assert_array_equal(q.scale_codes, scales)
    np.testing.assert_array_equal(q.codes, codes)
    return q


# --- hypothesis: arbitrary float32 (subnormals, NaN, Inf, +-0), hand-built ties and saturation -------
any_f32 = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)
finite_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=True)
SETTINGS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("elem", FORMATS)
@SETTINGS
@given(x=hnp.arrays(F32, st.tuples(st.integers(1, 3), st.integers(1, 70)), elements=any_f32))
def test_random_float32_matches_reference(elem, x):
    assert_matches_reference(x, elem)


@pytest.mark.parametrize("elem", FORMATS)
@SETTINGS
@given(
    x=hnp.arrays(F32, st.tuples(st.integers(1, 2), st.integers(1, 40)), elements=finite_f32),
    shift=st.integers(-160, 120),
)
def test_scaled_float32_matches_reference(elem, x, shift):
    """Rescaled so blocks span every scale exponent, including the clamped ends and float32 subnormals."""
    with np.errstate(over="ignore", under="ignore"):
        y = np.ldexp(x, shift).astype(F32)
    y[~np.isfinite(y)] = 0
    assert_matches_reference(y, elem)


@st.composite
def tie_blocks(draw, elem):
    """A block whose anchor 2^(emax+s) fixes scale 2^s and whose other elements are grid midpoints,
    grid points, values past max (saturation) or their float32 neighbours, all times 2^s."""
    ref = ref_format(elem)
    s = draw(st.integers(-127, 127 - ref.emax))
    vals = ref.values
    mids = (vals[1:] + vals[:-1]) / 2
    pool = np.concatenate([mids, vals, [ref.max * 1.0625, 2.0 ** (ref.emax + 1) * 0.99]])
    picks = draw(st.lists(st.integers(0, pool.size - 1), min_size=1, max_size=31))
    signs = draw(st.lists(st.booleans(), min_size=len(picks), max_size=len(picks)))
    nudge = draw(st.sampled_from([0, 1, -1]))
    base = np.array([pool[i] * (-1 if n else 1) for i, n in zip(picks, signs, strict=True)])
    x = np.ldexp(np.concatenate([[2.0**ref.emax], base]), s).astype(F32)
    if nudge:
        x[1:] = np.nextafter(x[1:], F32(np.inf * nudge))
    return x[None, :]


@pytest.mark.parametrize("elem", FORMATS)
@SETTINGS
@given(data=st.data())
def test_ties_and_saturation_match_reference(elem, data):
    x = data.draw(tie_blocks(elem))
    q = assert_matches_reference(x, elem)
    assert q.codes[0, 0] & 0x7F == ElemFormat(elem).lut.tolist().index(2.0 ** ElemFormat(elem).emax)


@pytest.mark.parametrize("elem", FORMATS)
def test_just_below_powers_of_two(elem):
    """float32 log2 rounds nextafter(2^k, 0) up to k; the scale must come from floor(log2) = k - 1."""
    k = np.arange(-140, 128)
    amax = np.nextafter(np.ldexp(F32(1), k).astype(F32), F32(0))
    assert (np.floor(np.log2(amax[k > -126])) == k[k > -126]).any()  # the trap is real
    x = np.zeros((k.size, 32), dtype=F32)
    x[:, 5] = amax
    x[:, 6] = -amax / 3
    q = assert_matches_reference(x, elem)
    emax = ElemFormat(elem).emax
    want = np.clip(k - 1 - emax, -127, 127) + 127
    np.testing.assert_array_equal(q.scale_codes[:, 0], want)


@pytest.mark.parametrize("elem", FORMATS)
def test_zero_negative_zero_and_subnormal_blocks(elem):
    x = np.zeros((3, 64), dtype=F32)
    x[1, :] = -0.0
    x[2, :32] = np.finfo(F32).smallest_subnormal * np.arange(32)
    x[2, 32:] = -np.finfo(F32).smallest_normal
    q = assert_matches_reference(x, elem)
    assert q.scale_codes[0].tolist() == [0, 0] and q.scale_codes[1].tolist() == [0, 0]
    assert (q.codes[1] == ElemFormat(elem).sign_bit).all()
    emax = ElemFormat(elem).emax
    assert q.scale_codes[2].tolist() == [0, max(-126 - emax, -127) + 127]  # clamped at 2^-127


@pytest.mark.parametrize("elem", FORMATS)
def test_nan_and_inf_blocks(elem):
    fmt = ElemFormat(elem)
    x = np.ones((1, 96), dtype=F32)
    x[0, 3] = np.nan
    x[0, 40] = -np.inf
    q = assert_matches_reference(x, elem)
    assert q.scale_codes[0].tolist() == [0xFF, 0xFF, 127 - fmt.emax]
    want_nan = fmt.nan_code if fmt.has_nan else 0
    assert (q.codes[0, :64] == want_nan).all()
    d = dequantize_mx(q)
    assert np.isnan(d[0, :64]).all() and (d[0, 64:] == 1).all()


def test_scale_clamped_at_top_for_e1m2():
    x = np.full((1, 32), np.finfo(F32).max, dtype=F32)
    q = assert_matches_reference(x, "e1m2")
    assert q.scale_codes.tolist() == [[254]]


@pytest.mark.parametrize("elem", FORMATS)
@pytest.mark.parametrize("block", [32, 16, 7])
def test_axis_and_block_variants(elem, block):
    rng = np.random.default_rng(block)
    x = (rng.standard_normal((5, 3, 45)) * 10).astype(F32)
    q_last = assert_matches_reference(x, elem, block)
    assert q_last.scale.shape == (5, 3, -(-45 // block))
    q0 = quantize_mx(np.moveaxis(x, -1, 0), elem, axis=0, block=block)
    assert q0.axis == 0 and q0.scale.shape == (-(-45 // block), 5, 3)
    np.testing.assert_array_equal(q0.codes, np.moveaxis(q_last.codes, -1, 0))
    np.testing.assert_array_equal(q0.scale_codes, np.moveaxis(q_last.scale_codes, -1, 0))
    np.testing.assert_array_equal(dequantize_mx(q0), np.moveaxis(dequantize_mx(q_last), -1, 0))


@pytest.mark.parametrize("elem", FORMATS)
def test_dequantize_is_decode_times_scale(elem):
    fmt = ElemFormat(elem)
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((4, 100)) * 3).astype(F32)
    q = quantize_mx(x, elem)
    scale = np.repeat(q.scale.astype(np.float64), 32, axis=-1)[:, :100]
    want = fmt.lut[q.codes].astype(np.float64) * scale
    got = dequantize_mx(q)
    assert got.dtype == F32
    np.testing.assert_array_equal(got, want)
    # grid values re-quantize to themselves
    np.testing.assert_array_equal(quantize_mx(got, elem).codes, q.codes)


def test_storage_dtypes_and_fields():
    x = np.linspace(-3, 3, 64, dtype=F32).reshape(2, 32)
    for elem, dt in [
        ("e4m3", ml_dtypes.float8_e4m3fn),
        ("e5m2", ml_dtypes.float8_e5m2),
        ("e2m1", ml_dtypes.float4_e2m1fn),
        ("e1m2", np.uint8),
    ]:
        q = quantize_mx(x, ElemFormat(elem))
        assert q.data.dtype == dt and q.data.shape == x.shape
        assert q.scale.dtype == ml_dtypes.float8_e8m0fnu and q.scale.shape == (2, 1)
        assert q.elem is ElemFormat(elem) and q.axis == 1 and q.block == 32
        with pytest.raises(AttributeError):
            q.axis = 0  # frozen


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16])
def test_half_inputs_equal_float32_path(dt):
    x = (np.random.default_rng(1).standard_normal((3, 64)) * 50).astype(dt)
    a = quantize_mx(x, "e4m3")
    b = quantize_mx(x.astype(F32), "e4m3")
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.scale_codes, b.scale_codes)


def test_errors_name_parameter_and_rule():
    with pytest.raises(MxTypeError, match="x must have dtype float32, bfloat16 or float16"):
        quantize_mx(np.zeros((2, 32)), "e4m3")
    with pytest.raises(MxTypeError, match="x must have dtype"):
        quantize_mx(np.zeros((2, 32), dtype=np.int32), "e4m3")
    with pytest.raises(MxValueError, match="elem="):
        quantize_mx(np.zeros((2, 32), F32), "e3m3")
    with pytest.raises(MxValueError, match="axis=2 is out of range"):
        quantize_mx(np.zeros((2, 32), F32), "e4m3", axis=2)
    with pytest.raises(MxValueError, match="block must be a positive int"):
        quantize_mx(np.zeros((2, 32), F32), "e4m3", block=0)
    q = quantize_mx(np.zeros((2, 64), F32), "e4m3")
    with pytest.raises(MxValueError, match="axis=0 does not match the scale"):
        dequantize_mx(q, axis=0)


def test_dequantize_overflow_is_inf_without_warning():
    data = np.array([[0x7B, 0xFB] + [0] * 30], dtype=np.uint8).view(ml_dtypes.float8_e5m2)  # +-57344
    scale = np.array([[254]], dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)  # 2^127
    with np.errstate(all="raise"):
        d = dequantize_mx(MxTensor(data, scale, ElemFormat.E5M2, axis=-1))
    assert d[0, 0] == np.inf and d[0, 1] == -np.inf and (d[0, 2:] == 0).all()


def test_mx_tensor_validates_fields():
    data = np.zeros((2, 64), dtype=ml_dtypes.float8_e4m3fn)
    scale = np.zeros((2, 2), dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    assert MxTensor(data, scale, ElemFormat.E4M3, axis=-1).axis == 1
    with pytest.raises(MxTypeError, match="data dtype must be float8_e5m2 for e5m2"):
        MxTensor(data, scale, ElemFormat.E5M2, axis=1)
    with pytest.raises(MxTypeError, match="scale dtype must be float8_e8m0fnu"):
        MxTensor(data, scale.view(np.uint8), ElemFormat.E4M3, axis=1)
    with pytest.raises(MxValueError, match=r"scale shape must be \(1, 64\)"):
        MxTensor(data, scale, ElemFormat.E4M3, axis=0)
