"""NZViewLayoutPtn (`nz_layout_ptn`, the QMRS ST launcher's B): the GM view of a FRACTAL_NZ (k, n) operand maps every
logical element to the byte `nd_to_nz` put it at, its slices cover whole C0 groups and drop the pad columns
(ragged N tails, slices of slices, offsets inside a group), and a GM read through it gives the ND tile."""

import numpy as np
import pytest

from mc2emu.blaze.tensor_api.layout import IsTrans, IsWeightNz, LayoutError, MakeFrameLayout, NZViewLayoutPtn
from mc2emu.numerics.nz_format import nd_to_nz

C0 = 32


def _nd_nz(k, n):
    rng = np.random.default_rng(k * 1000 + n)
    nd = rng.integers(1, 255, (k, n), dtype=np.uint8)
    return nd, nd_to_nz(nd.view(np.int8), "int8").view(np.uint8).reshape(-1)


@pytest.mark.parametrize(("k", "n"), [(64, 64), (40, 70), (17, 33), (128, 300)])
def test_every_element_sits_where_nd_to_nz_put_it(k, n):
    nd, flat = _nd_nz(k, n)
    lay = MakeFrameLayout(NZViewLayoutPtn, k, n, C0)
    offs = np.array([[lay.offset((r, c)) for c in range(n)] for r in range(k)])
    assert np.array_equal(flat[offs], nd)
    assert not IsTrans(NZViewLayoutPtn) and IsWeightNz(NZViewLayoutPtn)


@pytest.mark.parametrize(("coord", "shape"), [((0, 0), (40, 70)), ((8, 32), (16, 38)), ((0, 64), (40, 6)),
                                              ((5, 10), (7, 50)), ((0, 31), (40, 2))])
def test_slices_cover_whole_groups_and_drop_the_pad(coord, shape):
    k, n = 40, 70
    nd, flat = _nd_nz(k, n)
    lay = MakeFrameLayout(NZViewLayoutPtn, k, n, C0)
    sub, off = lay.slice(coord, shape)
    assert sub.shape == shape and sub.span % C0 == 0 and sub.skip == coord[1] % C0
    got = np.array([[flat[off + sub.offset((r, c))] for c in range(shape[1])] for r in range(shape[0])])
    assert np.array_equal(got, nd[coord[0]:coord[0] + shape[0], coord[1]:coord[1] + shape[1]])
    c1 = min(3, shape[1] - 1)
    sub2, off2 = sub.slice((1, c1), (shape[0] - 1, shape[1] - c1))   # a slice of the slice
    got2 = np.array([[flat[off + off2 + sub2.offset((r, c))] for c in range(shape[1] - c1)]
                     for r in range(shape[0] - 1)])
    assert np.array_equal(got2, nd[coord[0] + 1:coord[0] + shape[0], coord[1] + c1:coord[1] + shape[1]])


def test_slice_past_the_tensor_and_missing_c0_are_refused():
    lay = MakeFrameLayout(NZViewLayoutPtn, 40, 70, C0)
    with pytest.raises(LayoutError):
        lay.slice((0, 64), (40, 7))
    with pytest.raises(LayoutError):
        MakeFrameLayout(NZViewLayoutPtn, 40, 70)
