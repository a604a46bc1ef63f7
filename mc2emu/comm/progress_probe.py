"""Global progress probe: lets a wait's deadline count from the last progress on ANY rank.

Each rank exposes a tiny window holding one uint64, its progress counter. `Progress.bump` of the runtime
mirrors the count into it with a plain store (the unified memory model makes local stores visible to
remote Gets). `GlobalProgressProbe.read` returns the tuple of every rank's counter, read with MPI
(`Get` from each rank, then `Flush_all`): the wait primitive compares two readings and treats a change as
progress, so a slow but live peer never trips a deadline while a real hang is reported.

Cost and staleness. The wait primitive reads the probe at the start of every wait that blocks (its
baseline) and again when the deadline passes; one reading is R Gets (~16 us at 8 ranks on 2 cores),
which would add a third to a put/signal round trip. A reading younger than `PROBE_REUSE_S` is
therefore served from a cache.

Deadline bound. The wait primitive only learns that some counter changed between its baseline and the
deadline check, not when, and then restarts the full deadline. Ranks that hang together leave their
last barrier or launch a few milliseconds apart, so a rank's baseline usually predates a peer's last
progress and a real hang is reported after about 2 x timeout (2.0-2.2 s for a 1 s deadline at 2-8
ranks). Checking the probe every timeout / 4 inside `wait_until` would bound it by 1.25 x.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

if TYPE_CHECKING:
    from mc2emu.comm.window import Window
    from mc2emu.runtime.device import Device

# A reading is reused for this long (see the module docstring): ten put/signal round trips (~40 us),
# nothing against a deadline (seconds).
PROBE_REUSE_S = 0.5e-3
# One uint64 counter per rank.
PROGRESS_WINDOW_BYTES = 8


class GlobalProgressProbe:
    """Installs itself as `device.waiter.global_progress` and the progress mirror; `uninstall()` before
    the window is freed."""

    def __init__(self, device: Device, window: Window, reuse_s: float = PROBE_REUSE_S) -> None:
        self.device = device
        self.window = window
        self.reuse_s = reuse_s
        self._buf = np.zeros(window.size, dtype=np.uint64)
        self._cached: tuple[int, ...] = ()
        self._cached_at = -float("inf")
        self._lock = threading.Lock()
        self.installed = False

    def install(self) -> None:
        progress = self.device.waiter.progress
        mirror = self.window.u64[0:1]
        mirror[0] = progress.count
        self.window.win.Sync()
        progress.mirror = mirror
        self.device.waiter.global_progress = self.read
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        waiter = self.device.waiter
        if waiter.global_progress == self.read:
            waiter.global_progress = None
        waiter.progress.mirror = None
        self.installed = False

    def read(self) -> tuple[int, ...]:
        """Every rank's progress counter (a cached reading if younger than `reuse_s`)."""
        now = time.monotonic()
        if now - self._cached_at < self.reuse_s:
            return self._cached
        with self._lock:
            if not self.installed:
                return self._cached
            win = self.window.win
            buf = self._buf
            for pe in range(self.window.size):
                win.Get([buf[pe:pe + 1], MPI.UINT64_T], pe, (0, 1, MPI.UINT64_T))
            win.Flush_all()
            self._cached = tuple(int(v) for v in buf)
            self._cached_at = time.monotonic()
            return self._cached
