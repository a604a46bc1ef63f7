"""apace `TeamBarrier`: the AIV-side barrier of the UDMA MC2 kernels, across ranks and across cores.

Emulates SPEC §3.1. The barrier owns a small symmetric window of its own: R peer slots (slot i written by
this rank for rank i, read remotely by rank i), then `jobs` epochs and `jobs` cross-core flags (each a
32-byte slot, the device's GM write granule, holding one uint64 counter). State tables of `CrossDevice(job)`
and `CrossCore(job)`: docs/protocols.md "TeamBarrier".

Epochs and flags live in the window and persist for the barrier's lifetime: keep one `TeamBarrier` alive
across the launches that use it. `BarrierMode` is the Init-time choice of the apace all-to-all
components: the scale all-to-all runs CrossDevice then CrossCore once at Init (`BARRIER_BOTH`), the data
all-to-all runs neither (`BARRIER_NONE`).

Remote slots are read with `Fetch_and_op(NO_OP)` + `Flush(i)` (exact for `>=`, MPI-NOTES), polled
through the wait primitive (`poll=True`); cross-core flags are local and wait on a doorbell the bumping
job rings.
"""

from __future__ import annotations

import enum
import functools
import threading
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from mc2emu.runtime.comm_events import BarrierObserve, BarrierStore, CrossCore, CrossDevice
from mc2emu.runtime.gm import MemRole
from mc2emu.runtime.hazards import ConstraintError, KernelError
from mc2emu.runtime.waiting import Doorbell

if TYPE_CHECKING:
    from mc2emu.comm.world import CommWorld
    from mc2emu.runtime.core import CoreContext

# One counter per 32-byte slot: the GM access granule of the AIV (DataCopy moves 32-byte blocks), which
# is why apace pads each barrier word to 32 B.
TEAM_SLOT_BYTES = 32
WORDS_PER_SLOT = TEAM_SLOT_BYTES // 8


class BarrierMode(enum.Enum):
    """What an apace all-to-all component's Init runs on its TeamBarrier (SPEC §3.1)."""

    BARRIER_NONE = "none"    # data all-to-all: no barrier at Init
    BARRIER_BOTH = "both"    # scale all-to-all: CrossDevice, then CrossCore, once


class TeamBarrier:
    """One rank's TeamBarrier for `jobs` AIV jobs. Creating it is collective (it allocates a window)."""

    def __init__(self, world: CommWorld, jobs: int, name: str = "team_barrier") -> None:
        if jobs < 1:
            raise ConstraintError("TeamBarrier jobs", f"jobs must be >= 1, got {jobs}")
        self.world = world
        self.device = world.device
        self.rank = world.rank
        self.ranks = world.size
        self.jobs = int(jobs)
        self.step = min(self.jobs, self.ranks)
        self.window = world.window(TEAM_SLOT_BYTES * (self.ranks + 2 * self.jobs), name,
                                   MemRole.CONTROL)
        words = self.window.u64
        self._peer = words[0: self.ranks * WORDS_PER_SLOT: WORDS_PER_SLOT]
        ep0 = self.ranks * WORDS_PER_SLOT
        self._epoch = words[ep0: ep0 + self.jobs * WORDS_PER_SLOT: WORDS_PER_SLOT]
        fl0 = ep0 + self.jobs * WORDS_PER_SLOT
        self._flag = words[fl0: fl0 + self.jobs * WORDS_PER_SLOT: WORDS_PER_SLOT]
        self._flag_lock = threading.Lock()
        self._flag_bells = [Doorbell(self._flag_lock) for _ in range(self.jobs)]
        self._remote_bells = [Doorbell() for _ in range(self.jobs)]

    def _check_job(self, ctx: CoreContext, job: int) -> None:
        if not 0 <= job < self.jobs:
            raise KernelError(f"rank {self.rank} {ctx.label}: TeamBarrier job {job} outside [0, {self.jobs})")

    def _remote_slot(self, pe: int) -> int:
        """Remote read of slot `me` of rank pe's window."""
        win = self.window.win
        result = np.zeros(1, dtype=np.uint64)
        origin = np.zeros(1, dtype=np.uint64)      # alive until the Flush (MPI-4.1 §12.3)
        win.Fetch_and_op(origin, result, pe, self.rank * TEAM_SLOT_BYTES, MPI.NO_OP)
        win.Flush(pe)
        return int(result[0])

    def _publish(self, slot: int, cnt: int) -> None:
        """Store `cnt` into peer slot `slot` of the own window as an MPI atomic (`Accumulate` REPLACE on the
        own rank + `Flush`). Rank `slot` reads it with `Fetch_and_op`; MPI makes accumulates atomic only
        against other accumulates (MPI-4.1 §12.7.1), and a plain store racing a remote access to the same
        location is a conflicting access whose outcome MPI leaves undefined (§12.7), even if MPICH's
        shared-memory path happens to show the store."""
        win = self.window.win
        origin = np.array([cnt], dtype=np.uint64)
        win.Accumulate([origin, 1, MPI.UINT64_T], self.rank, (slot * TEAM_SLOT_BYTES, 1, MPI.UINT64_T), MPI.REPLACE)
        win.Flush(self.rank)

    # -- the apace API -----------------------------------------------------------------------------------
    def Init(self, ctx: CoreContext, job: int, mode: BarrierMode) -> None:
        """The Init-time barrier of an apace all-to-all component."""
        if not isinstance(mode, BarrierMode):
            raise KernelError(f"mode must be a BarrierMode, got {mode!r}")
        if mode is BarrierMode.BARRIER_BOTH:
            self.CrossDevice(ctx, job)
            self.CrossCore(ctx, job)

    def CrossDevice(self, ctx: CoreContext, job: int) -> None:
        """Barrier across ranks, split over `jobs` cores (each job serves ranks job, job + step, ...)."""
        self._check_job(ctx, job)
        if job >= self.ranks:
            return
        ctx.checkpoint("sync_all")
        cnt = int(self._epoch[job]) + 1
        me = self.rank
        waiter = self.device.waiter
        events = self.device.events
        for i in range(job, self.ranks, self.step):
            self._publish(i, cnt)             # an atomic, so remote Fetch_and_op readers see it
            if events.active:                 # happens-before edges: this store -> rank i's observation
                events.emit(BarrierStore, ctx.label, barrier=self.window.name, slot=i, value=cnt)
            if i != me:
                seen = [0]

                def arrived(i: int = i, seen: list[int] = seen) -> bool:
                    seen[0] = self._remote_slot(i)
                    return seen[0] >= cnt

                waiter.wait_until(
                    self._remote_bells[job], arrived, core=ctx.label,
                    obj=f"TeamBarrier {self.window.name} slot {me} on rank {i}", expected=f">= {cnt}",
                    # Slot `me` of rank i is stored by the job of rank i that serves ranks me, me + step, ...
                    setter=f"rank {i} TeamBarrier CrossDevice(job {me % self.step})",
                    current=functools.partial(self._remote_slot, i), poll=True,
                    waits_for=((i, f"AIV{me % self.step}"),))
                if events.active:
                    events.emit(BarrierObserve, ctx.label, barrier=self.window.name, peer=i, slot=me,
                                value=seen[0])
        self._epoch[job] = cnt
        self.world.sync_windows()             # what peers put before their barrier is visible to loads
        ctx.emit(CrossDevice, job=job, count=cnt)

    def CrossCore(self, ctx: CoreContext, job: int) -> None:
        """Barrier across the `jobs` cores of this rank."""
        self._check_job(ctx, job)
        ctx.checkpoint("sync_all")
        flags = self._flag
        with self._flag_lock:
            cnt = int(flags[job]) + 1
            flags[job] = cnt
            for bell in self._flag_bells:
                bell.ring()
        self.device.waiter.wait_until(
            self._flag_bells[job], lambda: all(int(flags[j]) >= cnt for j in range(self.jobs)),
            core=ctx.label, obj=f"TeamBarrier {self.window.name} cross-core flags", expected=f"all >= {cnt}",
            setter=f"CrossCore of all {self.jobs} jobs",
            current=lambda: [int(v) for v in flags])
        ctx.emit(CrossCore, job=job, count=cnt)

    # -- inspection ----------------------------------------------------------------------------------------
    def epoch(self, job: int) -> int:
        return int(self._epoch[job])
