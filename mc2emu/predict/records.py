"""What the predictor reads: a compact, picklable record of every event that costs time or orders others.

`PredictRecorder` is an `EventBus` observer (pass it in `observers=` of any operator call, like the trace
recorder). It keeps, per event, only the fields the replay needs, as `Event`s (the trace writer's
JSON-safe record type, so records from a trace recorder and from this one read alike). GM reads and
writes are kept (the trace drops them: they are the MTE2 / MTE3 loads and stores), without their data.
Waits' BEGIN / END and instants (hazards, perturbations, L2 hints, atomic mode) cost nothing in the model
and are not kept: every dependency is carried by the releasing and consuming events themselves (a flag
raise's token, a barrier slot's value, an HCCL repeat).

Across ranks, gather `(rank, clock_offset_ns(), recorder.records())` (one collective at the end) and pass
them to `mc2emu.predict.replay.replay`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from typing import Any

from mc2emu.runtime.comm_events import Barrier, Get, HcclEvent, Put, Quiet, SignalPost, SignalWait
from mc2emu.runtime.events import (
    CoreBegin,
    CoreEnd,
    Event,
    Fixpipe,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmAccess,
    LaunchBegin,
    LaunchEnd,
    Mmad,
    SyncAllBegin,
    SyncAllEnd,
)
from mc2emu.trace.chrome_trace import clock_offset_ns

# Event classes the model reads.
PREDICT_KINDS: tuple[type[Event], ...] = (
    LaunchBegin, LaunchEnd, CoreBegin, CoreEnd, FlagSet, FlagRaise, FlagConsume, SyncAllBegin, SyncAllEnd,
    GmAccess, Put, Get, SignalPost, SignalWait, Quiet, Barrier, HcclEvent, Mmad, Fixpipe,
)


class PredictRecorder:
    """EventBus observer keeping the predictor's records (thread-safe: one list append per event). Events
    are made portable as they arrive, so no GM read's data is kept alive."""

    def __init__(self, kinds: Iterable[type[Event]] = PREDICT_KINDS) -> None:
        self.kinds = tuple(kinds)
        self._records: list[Event] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if isinstance(event, self.kinds):
            self._records.append(event.portable())

    def clear(self) -> None:
        with self._lock:
            self._records = []

    def records(self) -> list[Event]:
        """The records seen so far."""
        return list(self._records)


Packed = tuple[list[type[Event]], list[tuple[Any, ...]]]
# Per event class, its fields' names and their slot setters (built once per process).
_LAYOUT: dict[type[Event], tuple[tuple[str, ...], tuple[Callable[[Any, Any], None], ...]]] = {}


def _layout(cls: type[Event]) -> tuple[tuple[str, ...], tuple[Callable[[Any, Any], None], ...]]:
    layout = _LAYOUT.get(cls)
    if layout is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        layout = _LAYOUT[cls] = (names, tuple(getattr(cls, n).__set__ for n in names))
    return layout


def pack_records(records: Iterable[Event]) -> Packed:
    """Records as plain tuples (class number, field values...) for the gather: a frozen slotted dataclass
    unpickles field by field through `dataclasses.fields` (~7 us an event; 9.5 M records took rank 0 ~89 CPU-s
    at 16 ranks), tuples unpickle in C and `unpack_records` rebuilds the events through their slots (1.8x less
    on the receiving rank, 2.9x less on the sending ones)."""
    classes: dict[type[Event], int] = {}
    rows: list[tuple[Any, ...]] = []
    for e in records:
        cls = type(e)
        k = classes.get(cls)
        if k is None:
            k = classes[cls] = len(classes)
        rows.append((k, *[getattr(e, n) for n in _layout(cls)[0]]))
    return list(classes), rows


def unpack_records(packed: Packed) -> list[Event]:
    """The events `pack_records` packed, equal to them and in their order."""
    classes, rows = packed
    setters = [_layout(cls)[1] for cls in classes]
    new = object.__new__
    out: list[Event] = []
    for row in rows:
        k = row[0]
        obj = new(classes[k])
        for put, value in zip(setters[k], row[1:], strict=True):
            put(obj, value)
        out.append(obj)
    return out


def gather_records(comm: Any, recorder: PredictRecorder, root: int | None = 0
                   ) -> dict[int, tuple[int, list[Event]]] | None:
    """One collective over `comm`: every rank's (clock offset, records), to `root` (None: to every rank).
    Returns {rank: (offset_ns, records)} on the receiving rank(s), None elsewhere."""
    mine = (comm.Get_rank(), clock_offset_ns(), pack_records(recorder.records()))
    got = comm.allgather(mine) if root is None else comm.gather(mine, root=root)
    if got is None:
        return None
    out: dict[int, tuple[int, list[Event]]] = {}
    for i in range(len(got)):   # each rank's tuples freed once its events are rebuilt
        r, off, packed = got[i]
        got[i] = None
        out[r] = (off, unpack_records(packed))
    return out
