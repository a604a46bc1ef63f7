"""Typed event records of everything observable on the emulated device (the device side: launches, cores,
flags, waits, SyncAll, atomics, GM accesses, MMAD / fixpipe / vector spans, L2 hints, hazards, perturbation and
faults); the rank-to-rank events (puts, signals, barriers, HCCL) are in `comm_events`, the bus that delivers
them in `event_bus`.

One frozen dataclass per event kind: a common header (`rank`, `core`, `t_ns`, `seq`) and the kind's own
fields, named and typed. `core` is a label such as "AIC3", "AIV7", "server" or "host"; `seq` orders the
events of one rank. Observers dispatch on the class (`isinstance`, `match`) and read fields; `kind` (a
class attribute) and `subject` (what the event concerns, e.g. "AIC0.flag3") are display names only.
Publishers write `bus.emit(Class, core, field=...)`; GM accesses carry their `buffer` first (positional), so
the bus can filter them by buffer-name prefix (windows: "win:") before building the event.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from mc2emu.runtime.faults import Fault
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:

    import numpy as np

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
    index: int = 0   # the device's launch number (`Launch.index`)

    @property
    def subject(self) -> str:
        return self.launch


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchEnd(Event):
    kind: ClassVar[str] = "launch_end"
    launch: str
    block_dim: int
    index: int = 0

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
