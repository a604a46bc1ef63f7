"""Output write count: every element of an output written exactly as often as the schedule promises.

A kernel whose tiles cover the output must write each element once: a tile written twice (two cores, or one
core at a stale offset) or never is wrong even when the final values happen to match. `WriteCountChecker`
observes the GM_WRITE events of one allocation (any core, any write path: fixpipe, DataCopy, atomic) and
counts writes per element; `finish()` compares the counts with the expected ones (0 or 1 per element) and
files one `Hazard.OUTPUT_WRITE_COUNT` naming the allocation, how many elements were written twice or more
and never, the first such element's coordinate, its count, and the cores that wrote it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.runtime.events import Event, GmWrite
from mc2emu.runtime.hazards import Hazard

if TYPE_CHECKING:
    from mc2emu.runtime.device import Device
    from mc2emu.runtime.gm import GmAddr

MAX_WRITERS_NAMED = 8  # cores listed for the first miscounted element


class WriteCountChecker:
    """Counts writes to `shape` elements of `dtype` at `addr` (see the module docstring)."""

    def __init__(self, device: Device, addr: GmAddr, dtype: Any, shape: tuple[int, ...], expected: np.ndarray,
                 name: str = "") -> None:
        self.device = device
        self.addr = addr
        self.item = np.dtype(dtype).itemsize
        self.shape = tuple(int(s) for s in shape)
        # uint8 as the per-byte counts (expected counts are 0 or 1): an int64 copy of a production output (GMM M
        # 8192, N 4096) was 256 MB, the largest allocation of a protocol-only run.
        self.expected = np.asarray(expected, dtype=np.uint8).reshape(self.shape)
        self.name = name or addr.alloc.name
        self.nbytes = int(np.prod(self.shape)) * self.item
        self._counts = np.zeros(self.nbytes, dtype=np.uint8)  # per byte; an element's count is its first byte's
        self._writes: list[tuple[str, int, int]] = []
        self._lock = threading.Lock()
        self._unsubscribe = device.events.subscribe(self, (GmWrite,))

    def __call__(self, ev: Event) -> None:
        if not isinstance(ev, GmWrite) or ev.alloc is not self.addr.alloc:
            return
        off = ev.offset - self.addr.offset
        lo, hi = ev.lo, ev.hi
        if hi <= self.addr.offset or lo >= self.addr.offset + self.nbytes:
            return
        shape, strides, item = ev.shape, ev.strides, ev.item
        with self._lock:
            view = np.ndarray((*shape, item), dtype=np.uint8, buffer=self._counts, offset=off, strides=(*strides, 1))
            np.add(view, 1, out=view, casting="unsafe")
            self._writes.append((ev.core, lo - self.addr.offset, hi - self.addr.offset))

    def close(self) -> None:
        self._unsubscribe()

    def finish(self) -> None:
        """File OUTPUT_WRITE_COUNT when any element's write count differs from the expected one."""
        self.close()
        counts = self._counts.reshape(-1, self.item)[:, 0].reshape(self.shape)
        bad = counts != self.expected
        if not bad.any():
            return
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        flat = int(np.ravel_multi_index(first, self.shape)) * self.item
        writers = sorted({c for c, lo, hi in self._writes if lo <= flat < hi})
        twice = int(np.count_nonzero(bad & (counts > self.expected)))
        never = int(np.count_nonzero(bad & (counts < self.expected)))
        self.device.hazards.report(
            Hazard.OUTPUT_WRITE_COUNT, "host",
            f"'{self.name}': {twice} element(s) written more often than expected and {never} written less (never); "
            f"first at {first}: written {int(counts[first])} time(s), expected {int(self.expected[first])}, by "
            f"{', '.join(writers[:MAX_WRITERS_NAMED]) or 'no core'}",
            alloc=self.name, element=first, count=int(counts[first]), expected=int(self.expected[first]),
            writers=writers, twice=twice, never=never)
