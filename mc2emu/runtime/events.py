"""Event records of everything observable on the emulated device, and the bus that delivers them.

Trace writers and checkers subscribe; the kernels and runtime publish. With no observer the cost of a
publish is one attribute test (`bus.active`), so publishers write `if bus.active: bus.emit(...)` on hot
paths.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
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
        self._observers: list[Observer] = []
        self._lock = threading.Lock()
        self._seq = 0
        self.active = False

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        with self._lock:
            self._observers = [*self._observers, observer]
            self.active = True

        def unsubscribe() -> None:
            with self._lock:
                self._observers = [o for o in self._observers if o is not observer]
                self.active = bool(self._observers)

        return unsubscribe

    def emit(self, kind: EventKind, core: str, obj: str = "", value: Any = None, **extra: Any) -> None:
        observers = self._observers
        if not observers:
            return
        with self._lock:
            self._seq += 1
            seq = self._seq
        event = Event(kind, self.rank, core, time.perf_counter_ns(), seq, obj, value, extra)
        for observer in observers:
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
