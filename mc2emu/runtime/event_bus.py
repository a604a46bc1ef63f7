"""The per-device event bus: observers subscribe to every event class or to the classes they read (a base
class stands for its subclasses; GM accesses can be filtered by buffer-name prefix), publishers `emit` a class
with its fields and the bus builds the event only when some observer takes it. With no observer a publish costs
one attribute test (`bus.active`); the hottest publishers test `bus.wants(cls)` first. `EventRecorder` keeps
every event it is given (tests, the trace writer).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Concatenate, ParamSpec, TypeVar, cast

from mc2emu.runtime.events import Event, GmAccess

P = ParamSpec("P")
E = TypeVar("E", bound=Event)


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
