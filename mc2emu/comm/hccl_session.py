"""One HCCL session: what the server and the clients of one launch share on one rank.

Emulates the HCCL context in GM that the AscendC `Hccl` clients of one kernel and the server use
together: the prepared tasks (from the working block), the finish counters, the CCU's count of Waits the
working core completed, the Finalize state. A session begins with the first `Hccl.Init()` of a launch and
ends when the host calls `HcclServer.end_session()`, when the next launch's first `Init()` arrives, or at
`close()`. Sessions are numbered 1, 2, ... on each rank; every rank runs the same launches (SPMD), so
the n-th session is the same on every rank.

Completion signals. Each rank's server, after its puts of repeat r of handle h to rank j are complete,
REPLACEs the uint64 slot (h, me) of rank j's HCCL window with `tag(session, r + 1)` = session << 32 |
(r + 1). Rank j's repeat r of h is finished when every slot (h, src) holds at least `tag(session, r + 1)`:
all ranks' blocks landed. Tagging with the session number makes stale slots from an earlier session read
as "nothing delivered" without any cross-rank reset. Reduce ops are finished when the local server has
also reduced the staged blocks (`reduced[h]`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

import numpy as np
from mpi4py import MPI

from mc2emu.comm.hccl_task import HcclServerType, HcclTask
from mc2emu.runtime.hazards import KernelError
from mc2emu.runtime.waiting import Doorbell

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from mc2emu.arch.platform import CoreType
    from mc2emu.comm.window import Window
    from mc2emu.runtime.hazards import HazardLog

# Completion tags: session number in the high half, repeats delivered in the low half.
TAG_SHIFT = 32
TAG_LOW_MASK = (1 << TAG_SHIFT) - 1
# "Delivered everything": a slot tagged with a later session than the one asking.
ALL_DELIVERED = 1 << TAG_SHIFT


def tag(session: int, delivered: int) -> int:
    return (session << TAG_SHIFT) | delivered


def delivered(slot: int, session: int) -> int:
    """Repeats a slot says were delivered in `session`."""
    s = slot >> TAG_SHIFT
    if s == session:
        return slot & TAG_LOW_MASK
    return ALL_DELIVERED if s > session else 0


class HcclSessionFailed(KernelError):
    """The HCCL server failed while executing this session's tasks (its error is chained)."""


class ClientHandle(Protocol):
    """One handle as a client counts it."""

    @property
    def commits(self) -> int: ...


class HcclClient(Protocol):
    """A session's client (`mc2emu.comm.hccl.Hccl`, one per core) as the session's other users read it: the
    other clients at a Finalize, the server when the session ends."""

    @property
    def label(self) -> str: ...

    @property
    def core_type(self) -> CoreType: ...

    @property
    def working(self) -> bool: ...

    @property
    def finalized(self) -> bool: ...

    @property
    def prepares(self) -> int: ...

    @property
    def total_waits(self) -> int: ...

    @property
    def handles(self) -> Sequence[ClientHandle]: ...

    def report_unwaited(self, hazards: HazardLog) -> None: ...


class HcclSession:
    """Shared state of one launch's HCCL session on one rank. `lock` guards every field below it."""

    def __init__(self, number: int, launch: object, model: HcclServerType, ranks: int, rank: int,
                 window: Window, staging_base: int, staging_bytes: int,
                 poke: Callable[[], None] = lambda: None) -> None:
        self.number = number
        # One call into MPI progress before polling the window by load: peers' completion signals land
        # only while this rank makes MPI progress (MPI-4.1 §12.7.3, mc2emu.comm.progress_engine).
        self.poke = poke
        self.launch = launch
        self.model = model
        self.ranks = ranks
        self.rank = rank
        self.window = window
        self.staging_base = staging_base
        self.staging_end = staging_base + staging_bytes
        self.lock = threading.Lock()
        self.core_type: CoreType | None = None
        self.tasks: dict[int, HcclTask] = {}
        self.sent: dict[int, int] = {}
        self.reduced: dict[int, int] = {}
        self.finalize_acked = False
        self.finalized = False
        self.reset = False
        self.working_waits = 0
        self.waiting: dict[str, Callable[[], bool]] = {}      # core -> the predicate its Wait blocks on
        self.finalize_reported: set[str] = set()
        self.clients: dict[str, HcclClient] = {}
        self.failure: BaseException | None = None
        self.staging_top = staging_base
        self.ended = False
        self._bells: list[Doorbell] = []

    # -- doorbells ---------------------------------------------------------------------------------------
    def new_bell(self) -> Doorbell:
        bell = Doorbell()
        with self.lock:
            self._bells.append(bell)
        return bell

    def ring_all(self) -> None:
        """Wake every client wait of the session; call after changing shared state."""
        with self.lock:
            bells = list(self._bells)
        for bell in bells:
            with bell.guard:
                bell.ring()

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.failure is None:
                self.failure = exc
        self.ring_all()

    def check_failure(self) -> bool:
        """Raise when the server failed; else False (so it can lead a wait predicate: `check_failure() or ...`)."""
        if self.failure is not None:
            raise HcclSessionFailed(f"rank {self.rank}: the HCCL server failed in session {self.number}: "
                                    f"{type(self.failure).__name__}: {self.failure}") from self.failure
        return False

    # -- completion ------------------------------------------------------------------------------------
    def slot_offset(self, handle: int, src: int) -> int:
        return (handle * self.ranks + src) * 8

    def _slots_exact(self, handle: int) -> np.ndarray:
        win = self.window.win
        out = np.zeros(self.ranks, dtype=np.uint64)
        win.Get_accumulate([np.zeros(1, dtype=np.uint64), 1, MPI.UINT64_T], [out, MPI.UINT64_T], self.rank,
                           (self.slot_offset(handle, 0), self.ranks, MPI.UINT64_T), MPI.NO_OP)
        win.Flush_local(self.rank)
        return out

    def finished(self, handle: int, at_least: int | None = None) -> int:
        """Repeats of `handle` finished on this rank (0 after an AICPU Finalize reset). With `at_least`,
        a cheap local load first answers "fewer" without an MPI call."""
        self.check_failure()
        if self.reset:
            return 0
        task = self.tasks.get(handle)
        if task is None:
            return 0
        if task.op.reduces:
            return self.reduced.get(handle, 0)
        if at_least is not None:
            self.poke()
            self.window.win.Sync()
            first = handle * self.ranks
            words = self.window.u64[first: first + self.ranks]
            if min(delivered(int(v), self.number) for v in words) < at_least:
                return 0
        return min(delivered(int(v), self.number) for v in self._slots_exact(handle))

    def contributions_landed(self, handle: int, repeats: int) -> bool:
        """Every rank's signal for `repeats` repeats of `handle` arrived (reduce ops, server side)."""
        self.poke()
        self.window.win.Sync()
        first = handle * self.ranks
        words = self.window.u64[first: first + self.ranks]
        if min(delivered(int(v), self.number) for v in words) < repeats:
            return False
        return min(delivered(int(v), self.number) for v in self._slots_exact(handle)) >= repeats
