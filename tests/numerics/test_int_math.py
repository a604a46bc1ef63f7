"""Integer helpers against exact rational arithmetic over every (a, b) in -40..40 x -9..9: ceil for a >= 0,
C++ truncation for a < 0, the dividend back for b == 0 (so Align gives 0), C++ `%` keeping the dividend's sign."""

import math
from fractions import Fraction

import pytest

from mc2emu.numerics.int_math import Align, Align16, Align32, Align64, CeilDiv, FloorAlign, cdiv, cmod

A = range(-40, 41)
B = range(-9, 10)


def _trunc(a: int, b: int) -> int:
    return math.trunc(Fraction(a, b))


def _ceil_div(a: int, b: int) -> int:
    if b == 0:
        return a
    return math.ceil(Fraction(a, b)) if a >= 0 else _trunc(a, b)


def test_cdiv_and_cmod_are_cpp_division():
    for a in A:
        for b in B:
            if b == 0:
                continue
            assert cdiv(a, b) == _trunc(a, b), (a, b)
            assert cmod(a, b) == a - b * _trunc(a, b), (a, b)
            assert cmod(a, b) == 0 or (cmod(a, b) < 0) == (a < 0), (a, b)


def test_ceil_div_and_align():
    for a in A:
        for b in B:
            want = _ceil_div(a, b)
            assert CeilDiv(a, b) == want, (a, b)
            assert Align(a, b) == want * b, (a, b)   # 0 for b == 0, as the source's CeilDiv(a, b) * b
            assert FloorAlign(a, b) == (a if b == 0 else math.floor(Fraction(a, b)) * b), (a, b)


@pytest.mark.parametrize("fn, m", [(Align16, 16), (Align32, 32), (Align64, 64)])
def test_fixed_alignments(fn, m):
    assert [fn(a) for a in (0, 1, m - 1, m, m + 1, 3 * m)] == [0, m, m, m, 2 * m, 3 * m]
