"""FP4 packing (element 2i in the low nibble) and the packed 256 x 2 decode LUT."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mc2emu.numerics import ElemFormat, MxValueError, decode_elements, decode_packed_fp4, pack_fp4, unpack_fp4
from mc2emu.numerics.element_codec import MxTypeError


def test_nibble_order():
    packed = pack_fp4(np.array([1, 2, 3], dtype=np.uint8))
    assert packed.tolist() == [0x21, 0x03]  # element 0 low, element 1 high, odd tail high nibble 0
    assert unpack_fp4(packed, 3).tolist() == [1, 2, 3]


@settings(database=None, deadline=None)
@given(
    hnp.arrays(
        np.uint8,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9),
        elements=st.integers(0, 15),
    )
)
def test_pack_unpack_round_trip(codes):
    packed = pack_fp4(codes)
    n = codes.shape[-1]
    assert packed.shape == (*codes.shape[:-1], (n + 1) // 2)
    np.testing.assert_array_equal(unpack_fp4(packed, n), codes)


def test_pack_accepts_ml_dtypes_fp4_array():
    codes = np.arange(16, dtype=np.uint8)
    arr = codes.view(ElemFormat.E2M1.ml_dtype)
    np.testing.assert_array_equal(pack_fp4(arr), pack_fp4(codes))


def test_pack_rejects_wide_codes():
    with pytest.raises(MxValueError, match="codes must be 4-bit"):
        pack_fp4(np.array([16], dtype=np.uint8))
    with pytest.raises(MxTypeError, match="codes must be uint8"):
        pack_fp4(np.array([1], dtype=np.int32))


def test_unpack_rejects_wrong_length():
    with pytest.raises(MxValueError, match=r"ceil\(n/2\) = 2 for n=3"):
        unpack_fp4(np.zeros(3, dtype=np.uint8), 3)


@pytest.mark.parametrize("fmt", [ElemFormat.E2M1, ElemFormat.E1M2])
@pytest.mark.parametrize("n", [512, 511, 1])
def test_decode_packed_matches_unpacked_decode(fmt, n):
    rng = np.random.default_rng(n)
    codes = rng.integers(0, 16, size=(3, n), dtype=np.uint8)
    got = decode_packed_fp4(pack_fp4(codes), fmt, n)
    want = decode_elements(codes, fmt)
    assert got.shape == (3, n) and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_decode_packed_all_bytes():
    every = np.arange(256, dtype=np.uint8)
    got = decode_packed_fp4(every, ElemFormat.E1M2, 512)
    np.testing.assert_array_equal(got[0::2], 0.25 * (every & 7) * np.where(every & 8, -1, 1))
    np.testing.assert_array_equal(got[1::2], 0.25 * ((every >> 4) & 7) * np.where(every & 0x80, -1, 1))


def test_decode_packed_rejects_fp8():
    with pytest.raises(MxValueError, match="FP4"):
        decode_packed_fp4(np.zeros(4, np.uint8), "e4m3", 8)
