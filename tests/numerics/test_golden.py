"""CANN golden recipe, ST input generators and the A2A / AG compare rules."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import (
    ElemFormat,
    MxTypeError,
    MxValueError,
    a2a_allclose,
    ag_compare,
    ag_st_seed,
    bf16_ulp_distance,
    decode_elements,
    decode_scales,
    dequant_cols,
    dequant_rows,
    fixpipe_cast,
    gen_ag_scales,
    gen_st_elements,
    gen_st_scales,
    golden_mx_matmul,
    mmad_k_ordered,
    to_ascend_scale_a,
    to_ascend_scale_b,
    ulp_distance,
)
from mc2emu.numerics.compare import NAN_MISMATCH_ULP
from mc2emu.numerics.golden import A2A_ST_SEED, E8m0Cast

F32 = np.float32
BF16 = ml_dtypes.bfloat16


# --- generators ---------------------------------------------------------------------------------------
def test_st_elements_are_e4m3_in_1_to_8():
    x = gen_st_elements((64, 256), np.random.RandomState(A2A_ST_SEED))
    assert x.dtype == ml_dtypes.float8_e4m3fn
    v = x.astype(F32)
    assert v.min() >= 1 and v.max() <= 8
    grid = ElemFormat.E4M3.lut
    assert np.isin(v, grid[(grid >= 1) & (grid <= 8)]).all()
    np.testing.assert_array_equal(
        x.view(np.uint8), gen_st_elements((64, 256), np.random.RandomState(A2A_ST_SEED)).view(np.uint8)
    )


@pytest.mark.parametrize(
    ("cast", "values"), [("trunc", {1.0, 2.0, 4.0}), (E8m0Cast.ROUND, {1.0, 2.0, 4.0, 8.0})]
)
@pytest.mark.parametrize("rng", [np.random.RandomState(42), np.random.default_rng(42)])
def test_st_scales_value_sets(cast, values, rng):
    s = gen_st_scales((4096,), rng, e8m0_cast=cast)
    assert s.dtype == ml_dtypes.float8_e8m0fnu
    assert set(s.astype(F32).tolist()) == values


def test_st_scales_trunc_vs_round_differ_on_mantissa_ge_half():
    a = gen_st_scales((4096,), np.random.RandomState(1), "trunc").astype(F32)
    b = gen_st_scales((4096,), np.random.RandomState(1), "round").astype(F32)
    assert ((b == a) | (b == 2 * a)).all() and (b == 2 * a).any()
    with pytest.raises(MxValueError, match="e8m0_cast='floor' must be one of 'trunc', 'round'"):
        gen_st_scales((4,), np.random.default_rng(0), "floor")


@pytest.mark.parametrize("rank", range(4))
def test_ag_scales_are_one_or_two(rank):
    assert ag_st_seed(rank) == 42 + rank
    for rng in (np.random.RandomState(ag_st_seed(rank)), np.random.default_rng(ag_st_seed(rank))):
        s = gen_ag_scales((2048,), rng)
        assert s.dtype == ml_dtypes.float8_e8m0fnu
        assert set(s.astype(F32).tolist()) == {1.0, 2.0}


# --- golden recipe ------------------------------------------------------------------------------------
def _st_case(m, k, n, seed=A2A_ST_SEED):
    rng = np.random.RandomState(seed)
    a = gen_st_elements((m, k), rng)
    b = gen_st_elements((n, k), rng)  # B stored transposed (n, k), as the A2A kernel
    nb = -(-k // 32)
    sa = gen_st_scales((m, nb), rng)
    sb = gen_st_scales((n, nb), rng)
    return a, sa, b, sb


def test_golden_equals_k_ordered_mmad_on_st_data():
    """ST data: elements in [1, 8] are multiples of 1/8, scales in {1, 2, 4}, so every product is a
    multiple of 2^-6 below 2^10 and k = 256 partial sums stay below 2^18: all exact in float32 (24 bits).
    Summation order cannot matter, so the golden and the K-ordered emulation agree bit for bit."""
    m, k, n = 16, 256, 24
    a, sa, b, sb = _st_case(m, k, n)
    ref = golden_mx_matmul(a, sa, b, sb, "e4m3", "float32", trans_b=True)
    a_deq = dequant_rows(decode_elements(a, "e4m3"), decode_scales(sa))
    b_deq = dequant_cols(decode_elements(b, "e4m3").T.copy(), decode_scales(sb).T.copy())
    emu = mmad_k_ordered(a_deq, b_deq, 128, 64)
    np.testing.assert_array_equal(emu, ref)
    out_bf16 = fixpipe_cast(emu, "bfloat16")
    np.testing.assert_array_equal(
        out_bf16.view(np.uint16),
        golden_mx_matmul(a, sa, b, sb, "e4m3", "bfloat16", trans_b=True).view(np.uint16),
    )


def test_golden_matches_float64_within_bound():
    m, k, n = 8, 200, 12
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, size=(m, k), dtype=np.uint8)
    a[(a & 0x7F) == 0x7F] = 0  # no NaN codes
    b = rng.integers(0, 256, size=(k, n), dtype=np.uint8)
    b[(b & 0x7F) == 0x7F] = 0
    sa = rng.integers(120, 135, size=(m, 7), dtype=np.uint8)
    sb = rng.integers(120, 135, size=(7, n), dtype=np.uint8)
    got = golden_mx_matmul(a, sa, b, sb, ElemFormat.E4M3, "float32")
    a64 = decode_elements(a, "e4m3").astype(np.float64) * np.repeat(decode_scales(sa), 32, 1)[:, :k]
    b64 = decode_elements(b, "e4m3").astype(np.float64) * np.repeat(decode_scales(sb), 32, 0)[:k]
    u = 2.0**-24
    bound = k * u / (1 - k * u) * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(got - a64 @ b64) <= bound).all()


@pytest.mark.parametrize("elem", ["e4m3", "e5m2", "e2m1", "e1m2"])
def test_golden_layout_and_transpose_variants_agree(elem):
    m, k, n = 6, 96, 10  # 3 scale blocks: odd, padded in the Ascend layouts
    rng = np.random.default_rng(11)
    hi = 16 if ElemFormat(elem).is_fp4 else 0x7B
    a = rng.integers(0, hi, size=(m, k), dtype=np.uint8)
    b = rng.integers(0, hi, size=(k, n), dtype=np.uint8)
    sa = rng.integers(110, 140, size=(m, 3), dtype=np.uint8)
    sb = rng.integers(110, 140, size=(3, n), dtype=np.uint8)
    base = golden_mx_matmul(a, sa, b, sb, elem, "bfloat16")
    variants = [
        golden_mx_matmul(a, to_ascend_scale_a(sa), b, to_ascend_scale_b(sb), elem, "bfloat16"),
        golden_mx_matmul(a, sa, b.T.copy(), sb.T.copy(), elem, "bfloat16", trans_b=True),
        golden_mx_matmul(
            a.T.copy(),
            to_ascend_scale_a(sa.T.copy(), trans=True),
            b.T.copy(),
            to_ascend_scale_b(sb.T.copy(), trans=True),
            elem,
            "bfloat16",
            trans_a=True,
            trans_b=True,
        ),
    ]
    for v in variants:
        np.testing.assert_array_equal(v.view(np.uint16), base.view(np.uint16))


def test_golden_mixed_fp8_operands():
    a = np.full((2, 32), 0x38, np.uint8)  # E4M3 1.0
    b = np.full((32, 3), 0x3C, np.uint8)  # E5M2 1.0
    s1 = np.full((2, 1), 127, np.uint8)
    s2 = np.full((1, 3), 128, np.uint8)
    out = golden_mx_matmul(a, s1, b, s2, "e4m3", "float32", b_elem="e5m2")
    assert (out == 64).all()


def test_golden_shape_errors():
    a = np.zeros((2, 64), np.uint8)
    with pytest.raises(MxValueError, match="K mismatch"):
        golden_mx_matmul(
            a,
            np.zeros((2, 2), np.uint8),
            np.zeros((32, 3), np.uint8),
            np.zeros((1, 3), np.uint8),
            "e4m3",
            "float32",
        )
    with pytest.raises(MxValueError, match="ceil\\(k/32\\) = 2 blocks"):
        golden_mx_matmul(
            a,
            np.zeros((2, 1), np.uint8),
            np.zeros((64, 3), np.uint8),
            np.zeros((2, 3), np.uint8),
            "e4m3",
            "float32",
        )


# --- compare rules ------------------------------------------------------------------------------------
def _bf16(bits):
    return np.array(bits, dtype=np.uint16).view(BF16)


def test_bf16_ulp_distance_cases():
    assert bf16_ulp_distance(_bf16([0x0000]), _bf16([0x8000])) == 0  # +0 vs -0
    assert bf16_ulp_distance(_bf16([0x3F80]), _bf16([0x3F81])) == 1  # adjacent
    assert bf16_ulp_distance(_bf16([0x0001]), _bf16([0x8001])) == 2  # smallest subnormals across zero
    assert bf16_ulp_distance(_bf16([0x7F7F]), _bf16([0x7F80])) == 1  # max finite vs +Inf
    assert bf16_ulp_distance(_bf16([0xBF80]), _bf16([0xBF82])) == 2  # negatives
    assert bf16_ulp_distance(_bf16([0x7FC0, 0x3F80]), _bf16([0xFFC1, 0x3F80])) == 0  # NaN vs NaN
    assert bf16_ulp_distance(_bf16([0x7FC0]), _bf16([0x3F80])) == NAN_MISMATCH_ULP
    assert bf16_ulp_distance(_bf16([]), _bf16([])) == 0
    with pytest.raises(MxTypeError, match="b must be bfloat16"):
        bf16_ulp_distance(_bf16([0]), np.zeros(1, F32))
    with pytest.raises(MxValueError, match="shape"):
        bf16_ulp_distance(_bf16([0, 0]), _bf16([0]))


def test_ulp_distance_other_dtypes():
    x = np.array([1.0], F32)
    assert ulp_distance(x, np.nextafter(x, F32(2))) == 1
    h = np.array([1.0], np.float16)
    assert ulp_distance(h, np.nextafter(h, np.float16(0))) == 1


def test_ag_compare():
    ref = _bf16([0x3F80, 0x4000, 0xC000])
    assert ag_compare(ref, ref)
    assert ag_compare(_bf16([0x3F81, 0x3FFF, 0xC001]), ref)
    assert not ag_compare(_bf16([0x3F82, 0x4000, 0xC000]), ref)


def test_a2a_allclose():
    ref = np.array([1.0, 100.0, 0.0], F32).astype(BF16)
    assert a2a_allclose(np.array([1.005, 100.9, 0.009], F32).astype(BF16), ref)
    assert not a2a_allclose(np.array([1.05, 100.0, 0.0], F32).astype(BF16), ref)
    nan = np.array([np.nan], F32)
    assert not a2a_allclose(nan, nan)
    assert a2a_allclose(nan, nan, equal_nan=True)
