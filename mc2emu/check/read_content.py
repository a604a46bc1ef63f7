"""Window reads and the puts they overlap, for HappensBeforeChecker (mc2emu/check/happens_before.py).

`_PutIndex`: the puts into a rank per window, sorted for overlap queries. `ReadContent`: what one GmRead of a
window returned (geometry and bytes), compared against the window's bytes for the content check;
`_ReadContents` shares equal reads of one launch. The byte-range helpers `_dense`, `_span`, `_byte_mask` and
`_extent` describe a strided access's bytes.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mc2emu.runtime.events import GmRead


class _PutIndex:
    """The puts into this rank, per window sorted by first byte: `overlapping` gives the puts that overlap a read's
    [lo, hi), in their order in the list (the reports name the last earlier put, and the others in order),
    without visiting the window's other puts (a launch has thousands of reads and tens of puts per window)."""

    def __init__(self, puts: list[tuple]) -> None:
        groups: dict[str, list[tuple[int, int, tuple]]] = defaultdict(list)
        for i, put in enumerate(puts):
            groups[put[0]].append((put[1], i, put))
        self._by: dict[str, tuple[list[int], list[tuple[int, tuple]], int]] = {}
        for window, group in groups.items():
            group.sort(key=lambda g: (g[0], g[1]))
            self._by[window] = ([g[0] for g in group], [(g[1], g[2]) for g in group],
                                max(g[2][2] - g[2][1] for g in group))

    def overlapping(self, window: str, lo: int, hi: int) -> list[tuple]:
        entry = self._by.get(window)
        if entry is None:
            return []
        starts, items, longest = entry
        first = bisect.bisect_right(starts, lo - longest)   # an earlier start ends at or before lo
        last = bisect.bisect_left(starts, hi)                # a later start begins at or after hi
        hits = [item for item in items[first:last] if item[1][2] > lo]
        hits.sort(key=lambda item: item[0])
        return [put for _, put in hits]


class ReadContent:
    """What one `GmRead` of a window returned: its geometry (byte offset, element shape and byte strides, item
    size) and its bytes, shape (*shape, item). Offsets are computed only where a put covers part of the read."""

    __slots__ = ("data", "dense", "item", "offset", "shape", "strides")

    def __init__(self, offset: int, shape: tuple, strides: tuple, item: int, data: np.ndarray) -> None:
        self.offset, self.shape, self.strides, self.item, self.data = offset, shape, strides, item, data
        self.dense = _dense(shape, strides, item)   # the bytes are [offset, offset + size), in order

    def span(self) -> tuple[int, int]:
        return _span(self.offset, self.shape, self.strides, self.item)

    def same_bytes(self, raw: np.ndarray) -> bool:
        a, b = self.data.reshape(-1), raw.reshape(-1)
        if a.size != b.size:
            return False
        if a.size % _WORD.itemsize == 0:
            a, b = a.view(_WORD), b.view(_WORD)
        return bool((a == b).all())

    def offsets(self) -> np.ndarray:
        """Absolute byte offset of every returned byte, in the order of `data`."""
        offs = np.full(self.shape, self.offset, dtype=np.int64)
        for axis, st in enumerate(self.strides):
            idx = np.arange(self.shape[axis], dtype=np.int64) * int(st)
            offs += idx.reshape([-1 if a == axis else 1 for a in range(len(self.shape))])
        return (offs[..., None] + np.arange(self.item, dtype=np.int64)).reshape(-1)

    def compare(self, buf: np.ndarray, plo: int, phi: int) -> tuple[int, int, int, int]:
        """(differing bytes, bytes compared, lowest and one past the highest offset compared) of the returned
        bytes inside [plo, phi) against `buf` (the window's bytes); (0, 0, 0, 0) when none lies inside."""
        lo, hi = self.span()
        if hi > buf.shape[0] or hi <= lo:
            return 0, 0, 0, 0
        if plo <= lo and hi <= phi:
            # The whole read lies inside the put: compare through a strided view of the window, no offsets.
            now = np.ndarray((*self.shape, self.item), dtype=np.uint8, buffer=buf, offset=self.offset,
                             strides=(*self.strides, 1))
            return int(np.count_nonzero(now != self.data)), int(self.data.size), lo, hi
        if self.dense:
            # Dense bytes: those inside the put are one run, [a, b) of the window and of `data`, no offsets.
            a, b = max(lo, plo), min(hi, phi)
            if a >= b:
                return 0, 0, 0, 0
            return int(np.count_nonzero(buf[a:b] != self.data.reshape(-1)[a - lo:b - lo])), b - a, a, b
        offs = self.offsets()
        sel = (offs >= plo) & (offs < phi)
        if not sel.any():
            return 0, 0, 0, 0
        inside = offs[sel]
        diff = int(np.count_nonzero(buf[inside] != self.data.reshape(-1)[sel]))
        return diff, int(sel.sum()), int(inside.min()), int(inside.max()) + 1


# Byte compares run over 8-byte words (as the decode memo's).
_WORD = np.dtype(np.uint64)


class _ReadContents:
    """The `ReadContent`s of one launch, shared between reads of the same place that returned the same bytes
    (cores reading one window chunk for several tiles): the bytes are kept once, the verdict computed once.
    Sharing needs equal geometry and equal bytes, so the check sees exactly what every read returned."""

    def __init__(self) -> None:
        self._last: dict[tuple, ReadContent] = {}

    def of(self, window: str, e: GmRead) -> ReadContent | None:
        data = e.data
        if data is None:
            return None
        shape, strides, item = e.shape, e.strides, e.item
        raw = np.ascontiguousarray(data).view(np.uint8)
        if raw.size != math.prod(shape) * item:
            return None
        key = (window, e.offset, shape, strides, item)
        last = self._last.get(key)   # dict get / set are atomic under the GIL; a lost race only costs a copy
        if last is not None and last.same_bytes(raw):
            return last
        content = ReadContent(e.offset, shape, strides, item, raw.reshape(*shape, item).copy())
        self._last[key] = content
        return content


def _dense(shape: tuple, strides: tuple, item: int) -> bool:
    """Whether an access of `shape` elements of `item` bytes with byte `strides` covers one run of bytes in
    element order (C order, no gaps): then its k-th byte lies at offset + k."""
    step = item
    for n, st in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and st != step:
            return False
        step *= n
    return True


def _span(offset: int, shape: tuple, strides: tuple, item: int) -> tuple[int, int]:
    """[lo, hi) of a strided access (non-negative strides, as GM reads here have)."""
    if any(n == 0 for n in shape):
        return offset, offset
    return offset, offset + sum((n - 1) * st for n, st in zip(shape, strides, strict=True)) + item


def _byte_mask(buf: np.ndarray, offset: int, shape: tuple, strides: tuple, item: int) -> np.ndarray:
    """The bytes of a strided access as a view into the bool array `buf` (one entry per window byte)."""
    return np.ndarray((*shape, item), dtype=bool, buffer=buf, offset=offset, strides=(*strides, 1))


def _extent(mask: np.ndarray, offset: int, strides: tuple) -> tuple[int, int, int]:
    """[lo, hi) byte offsets and count of the True entries of an access mask."""
    idx = np.nonzero(mask)
    pos = offset + sum(i * st for i, st in zip(idx, (*strides, 1), strict=True))
    return int(pos.min()), int(pos.max()) + 1, int(pos.size)
