"""Typed event records of everything observable on the emulated device, and the bus that delivers them.

One frozen dataclass per event kind: a common header (`rank`, `core`, `t_ns`, `seq`) and the kind's own
fields, named and typed. `core` is a label such as "AIC3", "AIV7", "server" or "host"; `seq` orders the
events of one rank. Observers dispatch on the class (`isinstance`, `match`) and read fields; `kind` (a
class attribute) and `subject` (what the event concerns, e.g. "AIC0.flag3") are display names only.

Trace writers and checkers subscribe, to every class or to the classes they read (a base class such as
`GmAccess` stands for its subclasses); the kernels and runtime publish with `bus.emit(Class, core, field=...)`,
which builds the event only when some observer takes it. With no observer the cost of a publish is one
attribute test (`bus.active`), so publishers write `if bus.active: bus.emit(...)` on hot paths; the hottest
(one `Mmad` per baseK step) test `bus.wants(Mmad)`, false when only observers of other classes (the
checkers) are subscribed. GM accesses can be filtered by buffer-name prefix (windows: "win:"); their
publishers test `bus.wants(GmRead, buffer)` first.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, Protocol, TypeVar, cast

from mc2emu.runtime.faults import Fault
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:
    import enum

    import numpy as np

P = ParamSpec("P")
E = TypeVar("E", bound="Event")


class GmAllocation(Protocol):
    """What observers read of a GM access's live allocation (a `runtime.gm.Allocation`; also its identity)."""

    @property
    def nbytes(self) -> int: ...

    @property
    def poisoned(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Event:
    """The header every event carries."""

    kind: ClassVar[str] = "event"
    rank: int
    core: str
    t_ns: int
    seq: int

    @property
    def subject(self) -> str:
        """What the event concerns, for display (trace span names)."""
        return ""

    def portable(self) -> Event:
        """This event without references to live device state (safe to pickle to another rank)."""
        return self


# -- launches and cores ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchBegin(Event):
    kind: ClassVar[str] = "launch_begin"
    launch: str
    block_dim: int
    kernel_type: str

    @property
    def subject(self) -> str:
        return self.launch


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchEnd(Event):
    kind: ClassVar[str] = "launch_end"
    launch: str
    block_dim: int

    @property
    def subject(self) -> str:
        return self.launch


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreBegin(Event):
    kind: ClassVar[str] = "core_begin"
    launch: str

    @property
    def subject(self) -> str:
        return self.launch


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreEnd(Event):
    kind: ClassVar[str] = "core_end"
    launch: str

    @property
    def subject(self) -> str:
        return self.launch


# -- cross-core flags, waits, SyncAll ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class FlagSet(Event):
    """CrossCoreSetFlag issued (`set_id` numbers the Sets of one rank)."""

    kind: ClassVar[str] = "flag_set"
    fid: int
    mode: int
    pipe: str
    set_id: int

    @property
    def subject(self) -> str:
        return f"flag{self.fid}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FlagRaise(Event):
    """A counter of core `target` went up to `count` (a round completed). `token` numbers the round; its
    consuming Wait's `FlagConsume` carries the same token; `sources` are the (core, set_id) Sets that made it."""

    kind: ClassVar[str] = "flag_raise"
    target: str
    fid: int
    count: int
    mode: int
    mode4: bool
    token: int
    sources: tuple[tuple[str, int], ...]

    @property
    def subject(self) -> str:
        return f"{self.target}.flag{self.fid}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FlagConsume(Event):
    """CrossCoreWaitFlag returned: it took one round (`token`; None if the round carried none) of the own
    counter `fid`, which now holds `count`."""

    kind: ClassVar[str] = "flag_consume"
    fid: int
    count: int
    mode: int
    token: int | None

    @property
    def subject(self) -> str:
        return f"{self.core}.flag{self.fid}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitBegin(Event):
    """A core blocks in the wait primitive on `what` (display), until `expected`; `setter` releases it."""

    kind: ClassVar[str] = "wait_begin"
    what: str
    expected: str
    setter: str

    @property
    def subject(self) -> str:
        return self.what


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitEnd(Event):
    kind: ClassVar[str] = "wait_end"
    what: str
    expected: str
    setter: str

    @property
    def subject(self) -> str:
        return self.what


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncAllBegin(Event):
    """`SyncAll`: hard (flag based, `is_aiv_only`) or soft (GM epoch slots of `participants` cores)."""

    kind: ClassVar[str] = "sync_all_begin"
    soft: bool
    is_aiv_only: bool = False
    participants: int = 0

    @property
    def subject(self) -> str:
        return "SyncAll(soft)" if self.soft else "SyncAll"


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncAllEnd(Event):
    kind: ClassVar[str] = "sync_all_end"
    soft: bool
    is_aiv_only: bool = False
    participants: int = 0

    @property
    def subject(self) -> str:
        return "SyncAll(soft)" if self.soft else "SyncAll"


@dataclass(frozen=True, slots=True, kw_only=True)
class AtomicMode(Event):
    """SetAtomicAdd<dtype> (`dtype` by name) or SetAtomicNone (None)."""

    kind: ClassVar[str] = "atomic_mode"
    dtype: str | None

    @property
    def subject(self) -> str:
        return "atomic"


# -- GM accesses -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GmAccess(Event):
    """One DataCopy of GM buffer `buffer` (its allocation name; windows "win:<name>"): bytes [lo, hi) of the
    allocation, the access geometry (`offset`, storage `shape`, byte `strides`, `item` bytes per element).
    `alloc` is the live allocation (dropped by `portable`). `buffer` is the one positional field: the bus
    filters GM accesses by its prefix before building the event."""

    buffer: str
    _: KW_ONLY
    lo: int
    hi: int
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    item: int
    alloc: GmAllocation | None = None

    @property
    def subject(self) -> str:
        return self.buffer

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.item


@dataclass(frozen=True, slots=True, kw_only=True)
class GmRead(GmAccess):
    """`data`: the array the read returned (the happens-before content check; dropped by `portable`)."""

    kind: ClassVar[str] = "gm_read"
    data: np.ndarray | None = None

    def portable(self) -> GmRead:
        return dataclasses.replace(self, alloc=None, data=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class GmWrite(GmAccess):
    kind: ClassVar[str] = "gm_write"
    atomic: bool = False

    def portable(self) -> GmWrite:
        return dataclasses.replace(self, alloc=None)


# -- compute -----------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Span(Event):
    """A point event that covers [t0_ns, t_ns] (0: no start recorded, a zero-length span)."""

    t0_ns: int = 0

    @property
    def duration_ns(self) -> int:
        return self.t_ns - self.t0_ns if 0 < self.t0_ns <= self.t_ns else 0


@dataclass(frozen=True, slots=True)
class TileTask:
    """Which group's tile a core computes, in which round (the grouped matmul's instrumentation)."""

    group: int
    round: int
    mTileIdx: int
    nTileIdx: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Mmad(Span):
    """One MMAD step of an m x n x k product into L0C tile `tile` (GM origin of C)."""

    kind: ClassVar[str] = "mmad"
    m: int
    n: int
    k: int
    tile: tuple[int, ...]
    l0: int
    aType: str
    unitFlag: int
    cmatrixInitVal: bool
    bias: bool

    @property
    def subject(self) -> str:
        return "mmad"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fixpipe(Span):
    """L0C -> GM tensor `tensor`: the m x n tile at `origin`, cast to `dtype`."""

    kind: ClassVar[str] = "fixpipe"
    tensor: str
    origin: tuple[int, ...]
    m: int
    n: int
    l0cOffset: int
    dtype: str
    atomic: bool
    unitFlag: int
    task: TileTask | None = None

    @property
    def subject(self) -> str:
        return self.tensor


@dataclass(frozen=True, slots=True, kw_only=True)
class Vector(Span):
    """An AIV vector stage (`stage`: a VF call "dequant", a UB -> L1 copy "ub2l1") over k x n elements."""

    kind: ClassVar[str] = "vector"
    stage: str
    k: int
    n: int
    ubBufId: int

    @property
    def subject(self) -> str:
        return self.stage


@dataclass(frozen=True, slots=True, kw_only=True)
class L2Hint(Event):
    """SetL2CacheHint of GM tensor `tensor` (`mode` by name) at byte `offset`, logical `shape`."""

    kind: ClassVar[str] = "l2_hint"
    tensor: str
    mode: str
    offset: int
    shape: tuple[Any, ...]

    @property
    def subject(self) -> str:
        return self.tensor


# -- checks and injected faults ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class HazardReported(Event):
    kind: ClassVar[str] = "hazard"
    hazard: Hazard
    severity: Severity
    message: str

    @property
    def subject(self) -> str:
        return str(self.hazard.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class PerturbDelay(Event):
    """The seeded perturbation policy delayed a core at `point` by `delay_s`."""

    kind: ClassVar[str] = "perturb"
    point: str
    delay_s: float

    @property
    def subject(self) -> str:
        return self.point


@dataclass(frozen=True, slots=True, kw_only=True)
class SetOvertaken(Event):
    """A held CrossCoreSetFlag of id `fid` was overtaken: by a later Set of id `by_fid`, or by the core's
    `by_point` (a put or signal issued while the Set was held)."""

    kind: ClassVar[str] = "perturb"
    fid: int
    by_fid: int | None = None
    by_point: str | None = None

    @property
    def subject(self) -> str:
        return "Set overtaken" if self.by_point is None else f"Set overtaken by {self.by_point}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultFired(Event):
    """An injected fault fired at its hook; `at` is the hook's subject (flag id, tile, bytes)."""

    kind: ClassVar[str] = "perturb"
    fault: Fault
    at: int

    @property
    def subject(self) -> str:
        return f"fault {self.fault.value}"


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


Observer = Callable[[Event], None]
# Per class: ((observer, buffer prefix it reads or None for every event) in subscription order, whether one
# reads every event, the prefixes).
_Entry = tuple[tuple[tuple[Observer, str | None], ...], bool, tuple[str, ...]]
_NOBODY: _Entry = ((), False, ())


class EventBus:
    """Per-device publisher. Observers run on the publishing thread and must be thread-safe."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._observers: list[tuple[Observer, tuple[type[Event], ...] | None, dict[type[GmAccess], str]]] = []
        # Per published class (filled on its first publish; a class is hashed by identity, in C).
        self._by_kind: dict[type[Event], _Entry] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count(1)   # next() is atomic under the GIL: seq follows the publishing order
        self.active = False

    def subscribe(self, observer: Observer, kinds: Iterable[type[Event]] | None = None, *,
                  prefixes: Mapping[type[GmAccess], str] | None = None) -> Callable[[], None]:
        """Deliver events to `observer`: of every class, or only of `kinds` (and their subclasses); of a GM
        access class in `prefixes`, only the accesses whose `buffer` starts with that prefix (e.g. windows:
        "win:"). Returns the unsubscribe function."""
        entry = (observer, None if kinds is None else tuple(kinds), dict(prefixes or {}))
        with self._lock:
            self._observers = [*self._observers, entry]
            self._by_kind = {}
            self.active = True

        def unsubscribe() -> None:
            with self._lock:
                self._observers = [o for o in self._observers if o is not entry]
                self._by_kind = {}
                self.active = bool(self._observers)

        return unsubscribe

    def _entry(self, cls: type[Event]) -> _Entry:
        """The observers of `cls`, in subscription order (cached until the subscriptions change)."""
        table = self._by_kind
        obs = tuple((o, next((p for c, p in prefixes.items() if issubclass(cls, c)), None))
                    for o, kinds, prefixes in self._observers
                    if kinds is None or issubclass(cls, kinds))
        entry = (obs, any(p is None for _, p in obs), tuple(p for _, p in obs if p is not None)) if obs else _NOBODY
        table[cls] = entry
        return entry

    def wants(self, cls: type[Event], buffer: str | None = None) -> bool:
        """Whether an event of `cls` (a GM access of `buffer`, when given) would reach any observer."""
        entry = self._by_kind.get(cls) or self._entry(cls)
        if not entry[0]:
            return False
        return entry[1] or buffer is None or buffer.startswith(entry[2])

    def emit(self, cls: Callable[Concatenate[int, str, int, int, P], Event], core: str, /,
             *args: P.args, **fields: P.kwargs) -> None:
        """Publish `cls(rank, core, now, seq, *args, **fields)` to its observers (built only if one takes it).
        Fields go by keyword, except a GM access's `buffer` (positional: the prefix filter reads it)."""
        kind = cast("type[Event]", cls)
        entry = self._by_kind.get(kind) or self._entry(kind)
        obs = entry[0]
        if not obs:
            return
        if entry[2]:   # some observer reads only the GM accesses of some buffers (`args[0]`: the buffer)
            buffer = cast(str, args[0])
            obs = tuple((o, p) for o, p in obs if p is None or buffer.startswith(p))
            if not obs:
                return
        event = cls(self.rank, core, time.perf_counter_ns(), next(self._seq), *args, **fields)
        for observer, _ in obs:
            observer(event)


class EventRecorder:
    """An observer that keeps every event in memory (tests and the trace writer use it)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, cls: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, cls)]
