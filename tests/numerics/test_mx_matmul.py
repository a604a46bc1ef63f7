"""MX matmul core: decode, per-32 dequant, K-ordered FP32 MMAD, fixpipe RNE."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import (
    E8M0_LUT,
    MxTypeError,
    MxValueError,
    OutDtype,
    decode_scales,
    dequant_cols,
    dequant_rows,
    fixpipe_cast,
    mmad_k_ordered,
    quantize_mx,
)

F32 = np.float32
U = 2.0**-24  # float32 unit roundoff


def test_decode_scales_all_codes():
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(decode_scales(codes), E8M0_LUT)
    np.testing.assert_array_equal(decode_scales(codes.view(ml_dtypes.float8_e8m0fnu)), E8M0_LUT)
    with pytest.raises(MxTypeError, match="scale_codes must be uint8"):
        decode_scales(np.zeros(3, np.int16))


@pytest.mark.parametrize("k", [1, 31, 32, 33, 64, 70, 256])
def test_dequant_rows_and_cols_match_repeat(k):
    rng = np.random.default_rng(k)
    nb = -(-k // 32)
    elem = rng.standard_normal((5, k)).astype(F32)
    scale = np.ldexp(F32(1), rng.integers(-130, 128, size=(5, nb))).astype(F32)
    scale[0, 0] = np.nan  # a 0xFF scale poisons its block only
    want = elem * np.repeat(scale, 32, axis=1)[:, :k]
    np.testing.assert_array_equal(dequant_rows(elem, scale), want)
    np.testing.assert_array_equal(dequant_cols(elem.T.copy(), scale.T.copy()), want.T)
    assert np.isnan(dequant_rows(elem, scale)[0, : min(k, 32)]).all()


def test_dequant_does_not_modify_inputs():
    elem = np.ones((2, 64), F32)
    scale = np.full((2, 2), 2, F32)
    out = dequant_rows(elem, scale)
    assert (elem == 1).all() and (out == 2).all()
    assert not np.shares_memory(out, elem)


def test_dequant_shape_errors():
    with pytest.raises(MxValueError, match=r"scale_f32 shape must be \(r, ceil\(k/32\)\) = \(2, 3\)"):
        dequant_rows(np.zeros((2, 70), F32), np.zeros((2, 2), F32))
    with pytest.raises(MxValueError, match=r"scale_f32 shape must be \(ceil\(k/32\), c\)"):
        dequant_cols(np.zeros((70, 2), F32), np.zeros((2, 2), F32))
    with pytest.raises(MxTypeError, match="elem_f32 must be float32"):
        dequant_rows(np.zeros((2, 32)), np.zeros((2, 1), F32))


def _mx_operands(m, k, n, seed):
    """Dequantized MX E4M3 operands, as the cube sees them."""
    rng = np.random.default_rng(seed)
    qa = quantize_mx((rng.standard_normal((m, k)) * 4).astype(F32), "e4m3")
    qb = quantize_mx((rng.standard_normal((k, n)) * 4).astype(F32), "e4m3", axis=0)
    a = dequant_rows(qa.data.astype(F32), decode_scales(qa.scale))
    b = dequant_cols(qb.data.astype(F32), decode_scales(qb.scale))
    return a, b


@pytest.mark.parametrize(
    ("k", "k_l1", "base_k"), [(300, 256, 128), (1024, 512, 64), (64, 64, 64), (100, 96, 64)]
)
def test_mmad_within_float32_summation_bound(k, k_l1, base_k):
    """Any float32 evaluation of sum_i a_i b_i (each product rounded at most once, any summation tree with
    k leaves) is within gamma_k * sum_i |a_i b_i| of the exact sum, gamma_k = k u / (1 - k u) (Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1). The K-ordered walk is one such
    tree: BLAS sums inside a baseK step, then the step sums are added to the accumulator in K order."""
    a, b = _mx_operands(24, k, 40, seed=k)
    got = mmad_k_ordered(a, b, k_l1, base_k)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    gamma = k * U / (1 - k * U)
    bound = gamma * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert got.dtype == F32 and got.shape == (24, 40)
    assert (np.abs(got - exact) <= bound).all()


def test_mmad_k_order_is_observable():
    """ones @ b with b = [2^24, 1, 1] placed in different steps: float32 2^24 + 1 rounds to 2^24 (even),
    so the result tells which ones were summed inside one step and which were added to L0C one by one."""
    k = 192
    a = np.ones((1, k), F32)
    b = np.zeros((k, 1), F32)
    b[0, 0] = 2.0**24
    b[70, 0] = 1.0
    b[100, 0] = 1.0
    # kL1 = 96: steps [0,64) [64,96) [96,160) [160,192): each 1 is added to 2^24 alone and lost
    assert mmad_k_ordered(a, b, 96, 64)[0, 0] == 2.0**24
    # kL1 = 192: steps [0,64) [64,128) [128,192): 1 + 1 = 2 inside one step survives
    assert mmad_k_ordered(a, b, 192, 64)[0, 0] == 2.0**24 + 2


def test_mmad_accumulates_in_place():
    a, b = _mx_operands(8, 128, 16, seed=1)
    acc = mmad_k_ordered(a[:, :64], b[:64], 64, 64)
    same = mmad_k_ordered(a[:, 64:], b[64:], 64, 64, acc=acc)
    assert same is acc
    np.testing.assert_array_equal(acc, mmad_k_ordered(a, b, 128, 64))


def test_mmad_errors():
    a = np.zeros((2, 64), F32)
    b = np.zeros((64, 3), F32)
    with pytest.raises(MxValueError, match="k_l1 must be a positive int"):
        mmad_k_ordered(a, b, 0, 64)
    with pytest.raises(MxValueError, match="b_f32 rows must equal a_f32 columns"):
        mmad_k_ordered(a, b[:32], 64, 64)
    with pytest.raises(MxValueError, match=r"acc must be a float32 ndarray of shape \(2, 3\)"):
        mmad_k_ordered(a, b, 64, 64, acc=np.zeros((2, 3)))
    with pytest.raises(MxTypeError, match="a_f32 must be float32"):
        mmad_k_ordered(a.astype(np.float64), b, 64, 64)


def test_fixpipe_bf16_round_to_nearest_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20, 1 + 2**-9], dtype=F32)
    want = [1.0, 1 + 2**-6, -1.0, 1 + 2**-7, 1.0]
    out = fixpipe_cast(x, "bfloat16")
    assert out.dtype == ml_dtypes.bfloat16
    assert out.astype(F32).tolist() == want
    # past max + half an ULP rounds to Inf (IEEE RNE, as the golden's numpy cast)
    big = np.array([np.finfo(F32).max, -np.finfo(F32).max, np.nan], dtype=F32)
    res = fixpipe_cast(big, OutDtype.BF16).astype(F32)
    assert res[0] == np.inf and res[1] == -np.inf and np.isnan(res[2])


def test_fixpipe_fp16_round_to_nearest_even():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 2048 + 1, 2048 + 3, 65519, 65520], dtype=F32)
    out = fixpipe_cast(x, np.float16)
    assert out.dtype == np.float16
    assert out.astype(F32).tolist() == [1.0, 1 + 2**-9, 2048, 2052, 65504, np.inf]


def test_fixpipe_fp32_and_dtype_parsing():
    x = np.array([1.1, -2.2], dtype=F32)
    out = fixpipe_cast(x, ml_dtypes.bfloat16)
    assert out.dtype == ml_dtypes.bfloat16
    f = fixpipe_cast(x, "float32")
    assert f.dtype == F32 and not np.shares_memory(f, x)
    np.testing.assert_array_equal(f, x)
    with pytest.raises(MxValueError, match="out_dtype='int8' is not a fixpipe output type"):
        fixpipe_cast(x, "int8")
    with pytest.raises(MxTypeError, match="acc_f32 must be float32"):
        fixpipe_cast(x.astype(np.float64), "bfloat16")
