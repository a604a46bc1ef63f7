"""FP4 packing edges: output dtypes and shapes, the packed-pair table of every byte, the refusals' text."""

import numpy as np
import pytest

from mc2emu.numerics import ElemFormat, MxTypeError, MxValueError
from mc2emu.numerics.fp4 import pack_fp4, packed_pair_lut, unpack_fp4


def test_unpack_gives_uint8_codes():
    got = unpack_fp4(np.array([[0x21, 0x0F]], np.uint8), 3)
    assert got.dtype == np.uint8
    assert got.tolist() == [[1, 2, 15]]
    full = unpack_fp4(np.array([0xA5], np.uint8), 2)
    assert full.dtype == np.uint8 and full.tolist() == [5, 10]


@pytest.mark.parametrize("fmt", [ElemFormat.E2M1, ElemFormat.E1M2])
def test_packed_pair_lut_of_every_byte(fmt):
    lut = packed_pair_lut(fmt)
    assert lut.shape == (256, 2) and lut.dtype == np.float32
    for byte in range(256):
        assert lut[byte].tolist() == [fmt.lut[byte & 0xF], fmt.lut[byte >> 4]], byte


def test_refusals_name_the_rule():
    with pytest.raises(MxValueError, match=r"^codes must have at least one dimension \(the packed axis is the last "
                                           r"one\)$"):
        pack_fp4(np.uint8(3))
    with pytest.raises(MxTypeError, match=r"^packed must be uint8, got int8$"):
        unpack_fp4(np.zeros(2, np.int8), 4)
