"""numerics.compare: ULP distance over the ordered-integer mapping (+-0, sign crossings, subnormals, NaN, inf) and
max-abs error, and every operator's CLI compare reporting the same ULP figure for a crafted pair."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.cli.operators import OPERATOR_MODULES, load_spec
from mc2emu.numerics.compare import (
    NAN_MISMATCH_ULP,
    bit_exact,
    max_abs_error,
    ulp_distance,
    ulp_distances,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = (BF16, np.dtype(np.float16), np.dtype(np.float32))
# The bits of 1.0: every value in [0, 1.0) is one ULP step below the next, so 1.0 lies ONE_BITS steps above 0.
ONE_BITS = {BF16: 0x3F80, np.dtype(np.float16): 0x3C00, np.dtype(np.float32): 0x3F800000}
UINT = {2: np.uint16, 4: np.uint32}


def _arr(values, dtype):
    return np.asarray(values, dtype=np.float32).astype(dtype)


def _bits(bits, dtype):
    return np.asarray(bits, dtype=UINT[dtype.itemsize]).view(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_signed_zeros_are_zero_ulp_apart(dtype):
    assert ulp_distance(_arr([0.0], dtype), _arr([-0.0], dtype)) == 0
    assert not bit_exact(_arr([0.0], dtype), _arr([-0.0], dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_and_minus_one_count_every_value_between(dtype):
    """bf16: 2 * 0x3F80 = 32512; fp16: 2 * 0x3C00 = 30720; fp32: 2 * 0x3F800000 = 2130706432."""
    expect = {BF16: 32512, np.dtype(np.float16): 30720, np.dtype(np.float32): 2130706432}[dtype]
    assert expect == 2 * ONE_BITS[dtype]
    assert ulp_distance(_arr([1.0], dtype), _arr([-1.0], dtype)) == expect
    assert ulp_distance(_arr([1.0], dtype), _arr([0.0], dtype)) == ONE_BITS[dtype]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_smallest_subnormals_either_side_of_zero(dtype):
    tiny, minus_tiny = _bits([1], dtype), _bits([1 | (1 << (8 * dtype.itemsize - 1))], dtype)
    assert float(tiny[0]) > 0 > float(minus_tiny[0])
    assert ulp_distance(tiny, minus_tiny) == 2
    assert ulp_distance(tiny, _arr([0.0], dtype)) == ulp_distance(minus_tiny, _arr([-0.0], dtype)) == 1
    assert ulp_distance(minus_tiny, _arr([0.0], dtype)) == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_rule(dtype):
    nan, other_nan = _arr([np.nan], dtype), _bits([_arr([np.nan], dtype).view(UINT[dtype.itemsize])[0] | 1], dtype)
    assert np.isnan(other_nan[0])
    assert ulp_distance(nan, other_nan) == 0                       # NaN facing NaN: any payloads
    assert ulp_distance(nan, _arr([1.0], dtype)) == NAN_MISMATCH_ULP
    assert ulp_distance(_arr([0.0], dtype), nan) == NAN_MISMATCH_ULP
    assert ulp_distances(_arr([np.nan, 1.0, np.nan], dtype), _arr([np.nan, 1.0, 2.0], dtype)).tolist() == \
        [0, 0, NAN_MISMATCH_ULP]
    assert ulp_distance(_arr([np.inf], dtype), _arr([-np.inf], dtype)) < NAN_MISMATCH_ULP


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_inf_is_one_step_above_max_finite(dtype):
    top = _arr([ml_dtypes.finfo(dtype).max], dtype)   # ml_dtypes.finfo: np.finfo knows its types only from 0.7
    assert np.isfinite(top[0])
    assert ulp_distance(_arr([np.inf], dtype), top) == 1
    assert ulp_distance(_arr([-np.inf], dtype), -top) == 1
    assert ulp_distance(_arr([np.inf], dtype), _arr([-np.inf], dtype)) == 2 * int(_arr([np.inf], dtype).view(
        UINT[dtype.itemsize])[0])


def test_ulp_distance_casts_when_asked_and_refuses_mixed_dtypes():
    a, b = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0 + 2.0 ** -6], np.float32)
    assert ulp_distance(a, b, dtype=BF16) == 1 and ulp_distance(a, b) == 1 << 16
    assert ulp_distance(a[:0], b[:0]) == 0
    with pytest.raises(TypeError):
        ulp_distance(a, b.astype(BF16))


def test_max_abs_error():
    assert max_abs_error(np.array([1.0, -1.0], np.float32), np.array([1.0, 1.0], np.float32)) == 2.0
    assert np.isnan(max_abs_error(np.array([np.nan], np.float32), np.array([1.0], np.float32)))
    assert max_abs_error(np.array([np.nan], np.float32), np.array([np.nan], np.float32)) == 0.0


# A crafted bf16 pair: +0 / -0, a sign crossing near zero, a 3-ULP step at 64 and a subnormal pair.
OUT = _bits([0x0000, 0x0005, 0x4280 + 3, 0x0001, 0x3F80], BF16)
REF = _bits([0x8000, 0x8003, 0x4280, 0x8001, 0x3F80], BF16)
CRAFTED_ULP = 8


def test_each_operators_cli_compare_reports_the_ulp_of_numerics_compare():
    assert ulp_distance(OUT, REF) == CRAFTED_ULP
    seen = set()
    for module in OPERATOR_MODULES:
        spec = load_spec(module)
        got = spec.compare(OUT.copy(), REF.copy())
        if spec.name == "selfcheck":
            assert got.max_ulp is None   # counts of flag rounds, no floats
            continue
        assert got.max_ulp == CRAFTED_ULP, (spec.name, got)
        assert got.max_abs == max_abs_error(OUT, REF), spec.name
        seen.add(spec.name)
    assert len(seen) == len(OPERATOR_MODULES) - 1


def test_ag_st_verify_measures_on_the_ordered_line():
    """The AG ST rule: +0 against -0 is bit-different but 0 ULP (passes); 1.0 against -1.0 fails with the
    true count of bf16 values between them."""
    from mc2emu.ops.all_gather_quant_matmul_golden import ag_st_verify

    bf16 = ml_dtypes.bfloat16
    zeros = np.array([0.0, 1.0], dtype=bf16)
    signed = np.array([-0.0, 1.0], dtype=bf16)
    assert ag_st_verify(signed, zeros) == (True, 0, 0)
    ok, ulp, count = ag_st_verify(np.array([1.0], dtype=bf16), np.array([-1.0], dtype=bf16))
    assert (ok, ulp, count) == (False, 2 * 0x3F80, 1)
    nxt = np.array([1.0], dtype=bf16).view(np.uint16) + 1
    assert ag_st_verify(nxt.view(bf16), np.array([1.0], dtype=bf16)) == (True, 1, 1)


def test_chunked_reductions_equal_whole_array_figures(monkeypatch):
    """The reductions walk flat chunks (bounded memory): with a chunk of 7 elements over 1000, the max ULP,
    the count of differing elements, the max-abs error and allclose are the whole arrays' (NaN in one chunk
    only still gives NaN; a far element in the last chunk still fails allclose)."""
    import mc2emu.numerics.compare as compare

    rng = np.random.default_rng(5)
    ref = rng.normal(size=(40, 25)).astype(ml_dtypes.bfloat16)
    out = ref.copy()
    bits = out.view(np.uint16)
    bits[3, 4] += 1
    bits[39, 24] += 3
    whole = compare.ulp_distances(out, ref)
    monkeypatch.setattr(compare, "COMPARE_CHUNK", 7)
    assert compare.ulp_stats(out, ref) == (int(whole.max()), int(np.count_nonzero(whole))) == (3, 2)
    assert compare.max_abs_error(out, ref) == float(np.abs(out.astype(np.float32) - ref.astype(np.float32)).max())
    assert compare.a2a_allclose(out, ref)
    far = ref.copy()
    far[39, 24] = ref[39, 24] + ml_dtypes.bfloat16(1.0)
    assert not compare.a2a_allclose(far, ref)
    nan = out.copy()
    nan[20, 0] = np.nan
    assert np.isnan(compare.max_abs_error(nan, ref))
    with pytest.raises(compare.MxValueError):
        compare.max_abs_error(out[:, :3], ref)
