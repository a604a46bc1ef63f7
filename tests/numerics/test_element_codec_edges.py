"""Element codec edges: which arrays `as_codes` / `as_float32` take (and that they do not copy), the
refusals naming their parameter, and NaN inputs encoded without a RuntimeWarning."""

import warnings

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import ElemFormat, MxTypeError, MxValueError, decode_elements, encode_elements
from mc2emu.numerics.element_codec import as_codes, as_float32, codes_to_storage


def test_as_codes_passes_uint8_and_views_one_byte_ml_dtypes():
    u8 = np.array([0, 0x7E, 0xFF], np.uint8)
    assert as_codes(u8) is u8
    f8 = u8.view(ml_dtypes.float8_e4m3fn)
    got = as_codes(f8)
    assert got.dtype == np.uint8 and np.shares_memory(got, f8)
    assert got.tolist() == [0, 0x7E, 0xFF]


@pytest.mark.parametrize("arr", [np.zeros(2, np.int8), np.zeros(2, ml_dtypes.bfloat16), np.zeros(2, np.float32)])
def test_as_codes_refuses_other_dtypes_naming_the_parameter(arr):
    with pytest.raises(MxTypeError, match=rf"^codes must be uint8 element codes or a 1-byte ml_dtypes array, "
                                          rf"got {arr.dtype}$"):
        as_codes(arr)
    with pytest.raises(MxTypeError, match=r"^w_scale must be uint8"):
        as_codes(arr, "w_scale")


def test_as_float32_keeps_float32_and_upcasts_exactly():
    x = np.array([1.5, -0.0, 3e38], np.float32)
    assert as_float32(x) is x
    for dt in (ml_dtypes.bfloat16, np.float16):
        src = np.array([1.5, -2.25, 0.125], dt)
        got = as_float32(src)
        assert got.dtype == np.float32
        assert got.tolist() == [1.5, -2.25, 0.125]


def test_as_float32_names_its_parameter():
    with pytest.raises(MxTypeError, match=r"^x must have dtype float32, bfloat16 or float16 \(exact in float32, "
                                          r"so quantization cannot double-round\), got float64$"):
        as_float32(np.ones(2))
    with pytest.raises(MxTypeError, match=r"^w must have dtype"):
        as_float32(np.ones(2, np.int32), "w")


@pytest.mark.parametrize("fmt", list(ElemFormat))
def test_nan_inputs_encode_without_a_warning(fmt):
    x = np.array([np.nan, 1.0, -np.nan, -0.0], np.float32)
    one = int(encode_elements(np.array([1.0], np.float32), fmt)[0])
    nan = fmt.nan_code if fmt.nan_code is not None else 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = encode_elements(x, fmt)
    assert got.tolist() == [nan, one, nan, fmt.sign_bit]


def test_decode_refusal_names_the_largest_code():
    with pytest.raises(MxValueError, match=r"^codes must be < 16 for e1m2 \(unpacked codes, one per element\), "
                                           r"got max 200$"):
        decode_elements(np.array([3, 200], np.uint8), "e1m2")


def test_codes_to_storage():
    c = np.array([0x38, 0x0F], np.uint8)
    assert codes_to_storage(c, "e4m3").dtype == ml_dtypes.float8_e4m3fn
    assert codes_to_storage(c, "e4m3").view(np.uint8).tolist() == [0x38, 0x0F]
    assert codes_to_storage(c, ElemFormat.E1M2) is c
