"""Ascend scale layouts: explicit element mapping, 0x00 padding of odd block counts, round trips."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mc2emu.numerics import (
    MxTypeError,
    MxValueError,
    from_ascend_scale_a,
    from_ascend_scale_b,
    quantize_mx,
    scale_blocks,
    scale_k_len,
    to_ascend_scale_a,
    to_ascend_scale_b,
)


def _codes(shape, seed=0):
    return np.random.default_rng(seed).integers(1, 255, size=shape, dtype=np.uint8)


@pytest.mark.parametrize(
    ("k", "nb", "klen"),
    [(1, 1, 2), (32, 1, 2), (33, 2, 2), (64, 2, 2), (65, 3, 4), (96, 3, 4), (128, 4, 4), (7168, 224, 224)],
)
def test_block_counts(k, nb, klen):
    assert scale_blocks(k) == nb
    assert scale_k_len(k) == klen


def test_a_mapping_and_padding():
    m, k = 3, 96  # 3 blocks: odd, padded to 4
    s = _codes((m, 3))
    asc = to_ascend_scale_a(s)
    assert asc.shape == (m, 2, 2)
    for i in range(m):
        for j in range(3):
            assert asc[i, j // 2, j % 2] == s[i, j]
        assert asc[i, 1, 1] == 0
    st_ = _codes((3, m))  # A transposed (k, m): scales (nb, m)
    asc_t = to_ascend_scale_a(st_, trans=True)
    assert asc_t.shape == (2, m, 2)
    for i in range(m):
        for j in range(3):
            assert asc_t[j // 2, i, j % 2] == st_[j, i]
        assert asc_t[1, i, 1] == 0
    np.testing.assert_array_equal(from_ascend_scale_a(asc, k), s)
    np.testing.assert_array_equal(from_ascend_scale_a(asc_t, k, trans=True), st_)


def test_b_mapping_and_padding():
    n, k = 4, 160  # 5 blocks
    s = _codes((5, n))  # B (k, n): scales (nb, n)
    asc = to_ascend_scale_b(s)
    assert asc.shape == (3, n, 2)
    for c in range(n):
        for j in range(5):
            assert asc[j // 2, c, j % 2] == s[j, c]
        assert asc[2, c, 1] == 0
    s_t = _codes((n, 5))  # B transposed (n, k): scales (n, nb)
    asc_t = to_ascend_scale_b(s_t, trans=True)
    assert asc_t.shape == (n, 3, 2)
    for c in range(n):
        for j in range(5):
            assert asc_t[c, j // 2, j % 2] == s_t[c, j]
    np.testing.assert_array_equal(from_ascend_scale_b(asc, k), s)
    np.testing.assert_array_equal(from_ascend_scale_b(asc_t, k, trans=True), s_t)


@settings(database=None, deadline=None)
@given(
    k=st.integers(1, 300),
    rows=st.integers(1, 5),
    trans=st.booleans(),
    use_b=st.booleans(),
    e8m0=st.booleans(),
)
def test_round_trip(k, rows, trans, use_b, e8m0):
    nb = scale_blocks(k)
    block_first = trans != use_b  # A^T and B keep K blocks first
    s = _codes((nb, rows) if block_first else (rows, nb), seed=k)
    if e8m0:
        s = s.view(ml_dtypes.float8_e8m0fnu)
    to_fn, from_fn = (
        (to_ascend_scale_b, from_ascend_scale_b) if use_b else (to_ascend_scale_a, from_ascend_scale_a)
    )
    asc = to_fn(s, trans=trans)
    assert asc.dtype == s.dtype
    pairs = scale_k_len(k) // 2
    assert asc.shape == ((pairs, rows, 2) if block_first else (rows, pairs, 2))
    assert asc.flags.c_contiguous
    back = from_fn(asc, k, trans=trans)
    assert back.dtype == s.dtype
    np.testing.assert_array_equal(back.view(np.uint8), s.view(np.uint8))
    if nb % 2:  # the second half of the last pair of every row / column is the 0x00 pad
        last_pair = asc.view(np.uint8)[-1] if block_first else asc.view(np.uint8)[:, -1]
        assert (last_pair[..., 1] == 0).all()


def test_quantized_operands_feed_the_layouts():
    x = np.random.default_rng(0).standard_normal((8, 96)).astype(np.float32)
    qa = quantize_mx(x, "e4m3")  # A (m, k)
    assert to_ascend_scale_a(qa.scale).shape == (8, 2, 2)
    qb = quantize_mx(x.T.copy(), "e4m3", axis=0)  # B (k, n) with n = 8
    assert to_ascend_scale_b(qb.scale).shape == (2, 8, 2)
    np.testing.assert_array_equal(to_ascend_scale_b(qb.scale).transpose(1, 0, 2), to_ascend_scale_a(qa.scale))


def test_errors():
    with pytest.raises(MxTypeError, match="scale must be uint8 E8M0 codes or float8_e8m0fnu"):
        to_ascend_scale_a(np.zeros((2, 2), np.float32))
    with pytest.raises(MxValueError, match="scale must be 2-D"):
        to_ascend_scale_b(np.zeros(4, np.uint8))
    with pytest.raises(MxValueError, match=r"ceil\(k/64\) = 2 for k=65"):
        from_ascend_scale_a(np.zeros((3, 1, 2), np.uint8), 65)
    with pytest.raises(MxValueError, match="SCALE_C0=2"):
        from_ascend_scale_b(np.zeros((1, 3, 3), np.uint8), 64)
