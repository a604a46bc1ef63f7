"""Event records of everything observable on the emulated device, and the bus that delivers them.

Trace writers and checkers subscribe, to every kind or to the kinds they read; the kernels and runtime
publish. With no observer the cost of a publish is one attribute test (`bus.active`), so publishers write
`if bus.active: bus.emit(...)` on hot paths; the hottest (one MMAD event per baseK step) test
`bus.wants(kind)`, which is false when only observers of other kinds (the checkers) are subscribed.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Typed field values that observers (the trace's flow arrows) match on, never on display names:
HCCL_EXECUTED = "executed"  # `value` of the HCCL server's HCCL event for one executed repeat (`handle`, `repeat`)
CROSS_DEVICE_STEP = "CrossDevice"  # `step` of apace TeamBarrier's BARRIER event of one CrossDevice (`job`)


class EventKind(enum.Enum):
    LAUNCH_BEGIN = "launch_begin"
    LAUNCH_END = "launch_end"
    CORE_BEGIN = "core_begin"
    CORE_END = "core_end"
    FLAG_SET = "flag_set"              # CrossCoreSetFlag issued
    FLAG_RAISE = "flag_raise"          # a counter went up (a round completed)
    WAIT_BEGIN = "wait_begin"
    WAIT_END = "wait_end"
    SYNC_ALL_BEGIN = "sync_all_begin"
    SYNC_ALL_END = "sync_all_end"
    ATOMIC_MODE = "atomic_mode"
    GM_READ = "gm_read"
    GM_WRITE = "gm_write"
    PUT = "put"
    GET = "get"
    SIGNAL = "signal"
    QUIET = "quiet"
    BARRIER = "barrier"
    HCCL = "hccl"
    MMAD = "mmad"
    VECTOR = "vector"                  # an AIV vector stage (a VF call, a UB -> L1 copy): a span
    FIXPIPE = "fixpipe"
    L2_HINT = "l2_hint"
    HAZARD = "hazard"
    PERTURB = "perturb"


@dataclass(frozen=True)
class Event:
    """One record. `core` is a label such as "AIC3", "AIV7", "server" or "host"; `obj` names the flag,
    signal, buffer or handle concerned; `seq` orders events of one rank."""

    kind: EventKind
    rank: int
    core: str
    t_ns: int
    seq: int
    obj: str = ""
    value: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


Observer = Callable[[Event], None]


class EventBus:
    """Per-device publisher. Observers run on the publishing thread and must be thread-safe."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._observers: list[tuple[Observer, frozenset[EventKind] | None, dict[EventKind, str]]] = []
        # Per kind, keyed by the kind's `_value_` (a str: an Enum member hashes through a Python-level
        # `__hash__`): ((observer, obj prefix it reads or None for every obj) in subscription order, whether
        # one reads every obj, the prefixes).
        self._by_kind: dict[str, tuple[tuple[tuple[Observer, str | None], ...], bool, tuple[str, ...]]] = {}
        self._lock = threading.Lock()
        self._seq = itertools.count(1)   # next() is atomic under the GIL: seq follows the publishing order
        self.active = False

    def subscribe(self, observer: Observer, kinds: Iterable[EventKind] | None = None, *,
                  prefixes: Mapping[EventKind, str] | None = None) -> Callable[[], None]:
        """Deliver events to `observer`: every kind, or only `kinds`; of a kind in `prefixes`, only the events
        whose `obj` starts with that prefix (e.g. GM accesses of windows: "win:"). Returns the unsubscribe
        function."""
        entry = (observer, None if kinds is None else frozenset(kinds), dict(prefixes or {}))
        with self._lock:
            self._observers = [*self._observers, entry]
            self._rebuild()

        def unsubscribe() -> None:
            with self._lock:
                self._observers = [o for o in self._observers if o is not entry]
                self._rebuild()

        return unsubscribe

    def _rebuild(self) -> None:
        """The observers of each kind, in subscription order (under the lock; readers take the dict whole)."""
        by_kind = {}
        for k in EventKind:
            obs = tuple((o, prefixes.get(k)) for o, kinds, prefixes in self._observers
                        if kinds is None or k in kinds)
            if obs:
                by_kind[k._value_] = (obs, any(p is None for _, p in obs),
                                      tuple(p for _, p in obs if p is not None))
        self._by_kind = by_kind
        self.active = bool(self._observers)

    def wants(self, kind: EventKind, obj: str | None = None) -> bool:
        """Whether an event of `kind` (about `obj`, when given) would reach any observer."""
        entry = self._by_kind.get(kind._value_)
        if entry is None:
            return False
        return entry[1] or obj is None or obj.startswith(entry[2])

    def emit(self, kind: EventKind, core: str, obj: str = "", value: Any = None, **extra: Any) -> None:
        entry = self._by_kind.get(kind._value_)
        if entry is None:
            return
        event = None
        for observer, prefix in entry[0]:
            if prefix is None or obj.startswith(prefix):
                if event is None:
                    event = Event(kind, self.rank, core, time.perf_counter_ns(), next(self._seq), obj, value, extra)
                observer(event)


class EventRecorder:
    """An observer that keeps every event in memory (tests and the trace writer use it)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def of(self, kind: EventKind) -> list[Event]:
        return [e for e in self.events if e.kind is kind]
