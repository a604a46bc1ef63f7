"""Typed events of rank-to-rank communication: one-sided window accesses (puts, gets, signals), quiet and
barriers (MPI barrier_all, apace TeamBarrier stores / observations, CrossDevice, CrossCore), and the HCCL
client / server calls. Each is an `events.Event` with the header (`rank`, `core`, `t_ns`, `seq`) and its own
typed fields; the comm layer publishes them, the checkers, the trace and the predictor read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from mc2emu.runtime.events import Event, Span

if TYPE_CHECKING:
    import enum


# -- rank to rank (comm) -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteAccess(Span):
    """A one-sided access of window `window` at byte `offset` of rank `pe`, by `src_rank`; `op_seq` orders
    the one-sided operations of one core."""

    window: str
    offset: int
    nbytes: int
    src_rank: int
    pe: int
    op_seq: int

    @property
    def subject(self) -> str:
        return self.window


@dataclass(frozen=True, slots=True, kw_only=True)
class Put(RemoteAccess):
    """A put into rank `pe`; the HCCL server's puts carry the task's `session`, `handle` and `repeat`."""

    kind: ClassVar[str] = "put"
    handle: int | None = None
    repeat: int | None = None
    session: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Get(RemoteAccess):
    kind: ClassVar[str] = "get"


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalPost(RemoteAccess):
    """A signal update (`op`: a comm.shmem.SignalOp, by `signal`) of the word at `offset` of rank `pe`."""

    kind: ClassVar[str] = "signal"
    op: enum.Enum
    signal: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalWait(RemoteAccess):
    """signal_wait_until returned: the own word held `observed`, satisfying `cmp` (a comm.shmem.Cmp)
    `expected`."""

    kind: ClassVar[str] = "signal"
    cmp: enum.Enum
    expected: int
    observed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Quiet(Event):
    kind: ClassVar[str] = "quiet"
    src_rank: int
    op_seq: int

    @property
    def subject(self) -> str:
        return "quiet"


@dataclass(frozen=True, slots=True, kw_only=True)
class Barrier(Event):
    """A barrier step (the trace's "sync" spans)."""

    kind: ClassVar[str] = "barrier"


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierAll(Barrier):
    """shmem barrier_all returned."""

    src_rank: int
    op_seq: int

    @property
    def subject(self) -> str:
        return "barrier_all"


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierStore(Barrier):
    """TeamBarrier stored `value` into slot `slot` of its window `barrier` (an edge to the observer)."""

    barrier: str
    slot: int
    value: int

    @property
    def subject(self) -> str:
        return f"TeamBarrier.store({self.slot})"


@dataclass(frozen=True, slots=True, kw_only=True)
class BarrierObserve(Barrier):
    """TeamBarrier read `value` from slot `slot` of rank `peer`'s window `barrier`."""

    barrier: str
    peer: int
    slot: int
    value: int

    @property
    def subject(self) -> str:
        return f"TeamBarrier.observe({self.peer})"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossDevice(Barrier):
    """TeamBarrier CrossDevice of job `job` returned (epoch `count`): what orders a peer's puts before here."""

    job: int
    count: int

    @property
    def subject(self) -> str:
        return f"TeamBarrier.CrossDevice({self.job})"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossCore(Barrier):
    job: int
    count: int

    @property
    def subject(self) -> str:
        return f"TeamBarrier.CrossCore({self.job})"


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclEvent(Event):
    """An HCCL client call on `handle` (INVALID_HANDLE_ID for Init / Finalize), or the server's execution."""

    kind: ClassVar[str] = "hccl"
    call: ClassVar[str] = ""
    handle: int

    @property
    def subject(self) -> str:
        return f"handle {self.handle}"


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclInit(HcclEvent):
    call: ClassVar[str] = "INIT"
    session: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclPrepare(HcclEvent):
    """`op`: a comm.hccl_task.HcclCMDType."""

    call: ClassVar[str] = "PREPARE"
    op: enum.Enum
    count: int
    repeat: int
    session: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclCommit(HcclEvent):
    call: ClassVar[str] = "COMMIT"
    commits: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclWait(HcclEvent):
    """A Wait returned `rc`. On success, what it proves (the happens-before checker): `waits` Waits on this
    handle and `total` Waits on this core so far; `follows_working`: a CCU non-working core, whose Waits
    prove what the working block's first `total` Waits proved."""

    call: ClassVar[str] = "WAIT"
    rc: int
    waits: int | None = None
    total: int | None = None
    follows_working: bool = False
    session: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclQuery(HcclEvent):
    call: ClassVar[str] = "QUERY"
    done: int


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclFinalize(HcclEvent):
    call: ClassVar[str] = "FINALIZE"
    reset: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class HcclExecuted(HcclEvent):
    """The HCCL server executed repeat `repeat` of the task (`op`: a comm.hccl_task.HcclCMDType)."""

    call: ClassVar[str] = "executed"
    repeat: int
    op: enum.Enum
    session: int
