"""E8M0 block scales, function by function: every scale code, every float32 exponent of a block maximum,
the partial last block, in-place output, overflow to Inf without a warning, and the refusals' messages."""

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import ElemFormat, MxTypeError, MxValueError
from mc2emu.numerics.block_scale import (
    apply_block_scale,
    block_amax_bits,
    decode_scales,
    inverse_scales,
    num_blocks,
    scale_codes_to_e8m0,
    shared_scale_codes,
)

# floor(log2(max)) of each format: 448, 57344, 6, 1.75
EMAX = {ElemFormat.E4M3: 8, ElemFormat.E5M2: 15, ElemFormat.E2M1: 2, ElemFormat.E1M2: 0}


def test_block_amax_bits_takes_the_last_axis_and_clears_the_sign():
    x = np.array([[[-3.0, 2.0, 0.5, -0.0], [0.25, -0.5, 0.125, 0.0]],
                  [[-0.0, 0.0, -0.0, 0.0], [1.0, -7.0, 6.0, 2.0]],
                  [[np.inf, 1.0, 2.0, 3.0], [-np.nan, 1.0, 2.0, 3.0]]], dtype=np.float32)
    got = block_amax_bits(x)
    assert got.dtype == np.uint32
    assert got.tolist() == [[0x40400000, 0x3F000000], [0, 0x40E00000], [0x7F800000, 0x7FC00000]]


def test_block_amax_bits_refuses_non_float32():
    with pytest.raises(MxTypeError, match=r"^x_blocks must be float32, got float64$"):
        block_amax_bits(np.ones((1, 4)))


def _ref_code(amax: float, emax: int) -> int:
    """OCP floor rule from math.frexp (an independent implementation): 0 for 0, 0xFF for Inf / NaN."""
    if amax == 0:
        return 0
    if not math.isfinite(amax):
        return 0xFF
    _, e = math.frexp(amax)
    return min(max(e - 1 - emax, -127), 127) + 127


@pytest.mark.parametrize("fmt", list(ElemFormat))
def test_shared_scale_codes_every_float32_exponent(fmt):
    # every biased exponent 0..255 with the smallest, a middle and the largest mantissa
    bits = np.array([(b << 23) | m for b in range(256) for m in (0, 1, 0x400000, 0x7FFFFF)], dtype=np.uint32)
    want = [_ref_code(float(v), EMAX[fmt]) for v in bits.view(np.float32)]
    got = shared_scale_codes(bits, fmt)
    assert got.dtype == np.uint8
    assert got.tolist() == want
    assert shared_scale_codes(bits, fmt.value).tolist() == want


def test_shared_scale_codes_hand_figures():
    # amax 1.0: scale 2^-emax; the smallest subnormal clamps to 2^-127 (code 0); the largest float to 2^(127-emax)
    one, tiny, big = 0x3F800000, 1, 0x7F7FFFFF
    for fmt, emax in EMAX.items():
        assert shared_scale_codes(np.array([one, tiny, big, 0, 0x7F800000]), fmt).tolist() == [
            127 - emax, 0, 254 - emax, 0, 0xFF]
    # an int64 / list input is read as the bit patterns it holds
    assert shared_scale_codes([0x40C00000], "e2m1").tolist() == [127]   # 6.0 = E2M1 max: scale 1


def test_inverse_and_decoded_scales_of_every_code():
    codes = np.arange(256, dtype=np.uint8)
    inv = inverse_scales(codes)
    dec = decode_scales(codes)
    assert inv.dtype == dec.dtype == np.float32
    for c in range(255):
        assert inv[c] == np.float32(2.0 ** (127 - c)), c
        assert dec[c] == np.float32(2.0 ** (c - 127)), c
    assert inv[255] == 1.0
    assert np.isnan(dec[255])
    e8 = codes.view(ml_dtypes.float8_e8m0fnu)
    assert inverse_scales(e8).tolist() == inv.tolist()
    np.testing.assert_array_equal(decode_scales(e8), dec)


@pytest.mark.parametrize("fn", [inverse_scales, decode_scales])
def test_scale_functions_name_their_parameter(fn):
    with pytest.raises(MxTypeError, match=r"^scale_codes must be uint8 element codes"):
        fn(np.ones(2, np.float32))


def test_scale_codes_to_e8m0():
    codes = np.array([0, 127, 254, 255], np.uint8)
    e8 = scale_codes_to_e8m0(codes)
    assert e8.dtype == ml_dtypes.float8_e8m0fnu
    assert e8.view(np.uint8).tolist() == [0, 127, 254, 255]
    with pytest.raises(MxTypeError, match=r"^codes must be uint8 element codes"):
        scale_codes_to_e8m0(np.ones(2, np.int16))


def test_num_blocks():
    assert [num_blocks(k, 32) for k in (0, 1, 32, 33, 64, 65)] == [0, 1, 1, 2, 2, 3]


def _ref_apply(vals, scale, block):
    k = vals.shape[1]
    return vals * np.repeat(scale, block, axis=1)[:, :k, :]


@pytest.mark.parametrize("k", [5, 32, 64, 70])
@pytest.mark.parametrize("q", [1, 2, 3])
def test_apply_block_scale_matches_a_repeat(k, q):
    rng = np.random.default_rng(k * 10 + q)
    p, block = 2, 32
    vals = rng.integers(-64, 64, size=(p, k, q)).astype(np.float32)
    scale = (2.0 ** rng.integers(-6, 7, size=(p, num_blocks(k, block), q))).astype(np.float32)
    want = _ref_apply(vals, scale, block)
    got = apply_block_scale(vals, scale, block)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    out = np.full_like(vals, np.nan)
    assert apply_block_scale(vals, scale, block, out=out) is out
    np.testing.assert_array_equal(out, want)
    assert apply_block_scale(vals, scale, block, out=vals) is vals   # in place
    np.testing.assert_array_equal(vals, want)


@pytest.mark.parametrize("k", [32, 40])
def test_apply_block_scale_overflows_to_inf_silently(k):
    vals = np.full((1, k, 1), 57344.0, np.float32)      # E5M2 max
    scale = np.full((1, num_blocks(k, 32), 1), 2.0 ** 127, np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = apply_block_scale(vals, scale, 32)
    assert np.isposinf(got).all()


def test_apply_block_scale_refusals_name_the_shapes():
    with pytest.raises(MxValueError, match=r"^vals and scale must be 3-D \[P, K, Q\], got \(2, 3\) and \(1, 1, 1\)"):
        apply_block_scale(np.ones((2, 3), np.float32), np.ones((1, 1, 1), np.float32), 32)
    with pytest.raises(MxValueError, match=r"got \(1, 3, 1\) and \(1, 1\)$"):
        apply_block_scale(np.ones((1, 3, 1), np.float32), np.ones((1, 1), np.float32), 32)
    with pytest.raises(MxValueError, match=r"^scale shape must be \(P, ceil\(K/32\), Q\) = \(1, 2, 2\) for vals "
                                           r"\(1, 33, 2\), got \(1, 1, 2\)$"):
        apply_block_scale(np.ones((1, 33, 2), np.float32), np.ones((1, 1, 2), np.float32), 32)
