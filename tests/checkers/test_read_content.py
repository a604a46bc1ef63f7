"""The happens-before checker's record of what a window read returned (`ReadContent`, `_ReadContents`): reads of
one place that returned the same bytes share one record, different bytes never do; the content check compares
a read inside a put through a strided view, and a read that a put covers only in part byte by byte, with the
same verdict as the plain per-byte model (serial: no MPI)."""

import numpy as np
import pytest

from mc2emu.check.read_content import ReadContent, _ReadContents
from mc2emu.runtime.events import GmRead

ROW, COLS, ROWS = 64, 16, 4   # a (4, 16) uint8 read out of rows of 64 bytes


def read_event(offset, data, strides=(ROW, 1)):
    return GmRead(0, "AIC0", 0, 0, "win:w", lo=offset, hi=offset + 1, offset=offset, shape=data.shape,
                  strides=strides, item=1, data=data)


def model(buf, offset, data, plo, phi):
    """The per-byte model: absolute offsets of the strided read, the bytes inside [plo, phi) vs buf."""
    offs = np.array([offset + r * ROW + c for r in range(data.shape[0]) for c in range(data.shape[1])])
    sel = (offs >= plo) & (offs < phi)
    if not sel.any():
        return 0, 0, 0, 0
    return (int(np.count_nonzero(buf[offs[sel]] != data.reshape(-1)[sel])), int(sel.sum()), int(offs[sel].min()),
            int(offs[sel].max()) + 1)


def test_reads_of_one_place_share_a_record_only_for_the_same_bytes():
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, (ROWS, COLS), dtype=np.uint8)
    contents = _ReadContents()
    first = contents.of("w", read_event(128, data.copy()))
    assert contents.of("w", read_event(128, data.copy())) is first            # same place, same bytes
    other = data.copy()
    other[2, 5] ^= 1
    changed = contents.of("w", read_event(128, other))
    assert changed is not first and np.array_equal(changed.data[..., 0], other)   # one byte differs: its own
    assert contents.of("w", read_event(192, data.copy())) is not first          # other place
    assert np.array_equal(first.data[..., 0], data)                             # the first record is untouched


@pytest.mark.parametrize("plo, phi", [(0, 4096), (128, 128 + 3 * ROW + COLS), (200, 300), (0, 130), (1000, 2000)])
def test_content_compare_matches_the_per_byte_model(plo, phi):
    rng = np.random.default_rng(2)
    buf = rng.integers(0, 256, 4096, dtype=np.uint8)
    offset = 128
    view = np.ndarray((ROWS, COLS), np.uint8, buf, offset, (ROW, 1))
    got = view.copy()
    got[0, 0] ^= 0xFF      # a stale byte at the start of the read
    got[3, 15] ^= 0x01     # and one at its end
    rc = ReadContent(offset, (ROWS, COLS), (ROW, 1), 1, got.reshape(ROWS, COLS, 1))
    assert rc.compare(buf, plo, phi) == model(buf, offset, got, plo, phi)
    same = ReadContent(offset, (ROWS, COLS), (ROW, 1), 1, view.copy().reshape(ROWS, COLS, 1))
    assert same.compare(buf, plo, phi)[0] == 0


@pytest.mark.parametrize("shape, strides, item", [((4096,), (1,), 1), ((2048,), (2,), 2), ((4, 16), (16, 1), 1),
                                                  ((3, 8), (16, 2), 2), ((1, 40), (999, 1), 1)])
def test_dense_reads_compare_as_one_run_with_the_per_byte_verdict(shape, strides, item):
    """Reads whose bytes are one run in element order (1-D, whole rows, a unit axis of any stride) compare the
    run inside the put directly; the verdict equals the per-byte model's for puts covering none, part, all."""
    rng = np.random.default_rng(5)
    buf = rng.integers(0, 256, 16384, dtype=np.uint8)
    offset = 1000
    n = int(np.prod(shape)) * item
    got = buf[offset:offset + n].copy()
    got[[0, n // 3, n - 1]] ^= 0x5A            # stale bytes at the start, inside and at the end of the read
    rc = ReadContent(offset, shape, strides, item, got.reshape(*shape, item))
    assert rc.dense
    offs = offset + np.arange(n)              # the model: the k-th returned byte lies at offset + k
    for plo, phi in [(0, 20000), (offset, offset + 1), (offset + 5, offset + n // 2), (offset + n // 3, 20000),
                     (0, offset), (offset + n, 20000), (offset - 10, offset + n + 10), (offset + n - 1, offset + n)]:
        sel = (offs >= plo) & (offs < phi)
        want = ((int(np.count_nonzero(buf[offs[sel]] != got[sel])), int(sel.sum()), int(offs[sel].min()),
                 int(offs[sel].max()) + 1) if sel.any() else (0, 0, 0, 0))
        assert rc.compare(buf, plo, phi) == want, (plo, phi)


def test_strided_reads_are_not_dense():
    assert not ReadContent(0, (ROWS, COLS), (ROW, 1), 1, np.zeros((ROWS, COLS, 1), np.uint8)).dense
    assert not ReadContent(0, (8,), (4,), 2, np.zeros((8, 2), np.uint8)).dense
