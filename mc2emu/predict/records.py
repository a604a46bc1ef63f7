"""What the predictor reads: a compact, picklable record of every event that costs time or orders others.

`PredictRecorder` is an `EventBus` observer (pass it in `observers=` of any operator call, like the trace
recorder). It keeps, per event, only the fields the replay needs, as `TraceRecord`s (the trace writer's
JSON-safe record type, so records from a trace recorder and from this one read alike). GM reads and
writes are kept (the trace drops them: they are the MTE2 / MTE3 loads and stores), without their data.
Waits' BEGIN / END and instants (hazards, perturbations, L2 hints, atomic mode) cost nothing in the model
and are not kept: every dependency is carried by the releasing and consuming events themselves (a flag
raise's token, a barrier slot's value, an HCCL repeat).

Across ranks, gather `(rank, clock_offset_ns(), recorder.records())` (one collective at the end) and pass
them to `mc2emu.predict.replay.replay`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from mc2emu.runtime.events import Event, EventKind
from mc2emu.trace.chrome_trace import TraceRecord, clock_offset_ns

# Event kinds the model reads.
PREDICT_KINDS = frozenset({
    EventKind.LAUNCH_BEGIN, EventKind.LAUNCH_END, EventKind.CORE_BEGIN, EventKind.CORE_END,
    EventKind.FLAG_SET, EventKind.FLAG_RAISE, EventKind.SYNC_ALL_BEGIN, EventKind.SYNC_ALL_END,
    EventKind.GM_READ, EventKind.GM_WRITE, EventKind.PUT, EventKind.GET, EventKind.SIGNAL, EventKind.QUIET,
    EventKind.BARRIER, EventKind.HCCL, EventKind.MMAD, EventKind.FIXPIPE,
})
# `extra` fields kept per kind (everything else, e.g. GM read data, is dropped).
_KEEP: dict[EventKind, tuple[str, ...]] = {
    EventKind.LAUNCH_BEGIN: ("kernel_type",),
    EventKind.FLAG_SET: ("pipe", "set_id"),
    EventKind.FLAG_RAISE: ("token", "consumed", "sources", "target", "mode"),
    EventKind.GM_WRITE: ("atomic",),
    EventKind.PUT: ("pe", "src_rank", "nbytes", "handle", "repeat", "session", "window", "offset"),
    EventKind.GET: ("pe", "src_rank", "nbytes", "window", "offset"),
    EventKind.SIGNAL: ("pe", "role", "window", "offset", "signal", "op", "observed", "expected"),
    EventKind.BARRIER: ("barrier", "slot", "store", "peer", "observed", "step", "job"),
    EventKind.HCCL: ("handle", "repeat", "waits", "total", "follows_working", "rc", "commits", "session", "op",
                     "count"),
    EventKind.MMAD: ("aType", "cmatrixInitVal"),
    EventKind.FIXPIPE: ("dtype", "atomic"),
}


def _plain(v: Any) -> Any:
    """Enums by value name, tuples as lists, numpy scalars as numbers (picklable and JSON-safe)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    name = getattr(v, "name", None)
    if name is not None and hasattr(v, "value") and not hasattr(v, "shape"):
        return name
    item = getattr(v, "item", None)
    if callable(item) and getattr(v, "ndim", None) == 0:
        return item()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)


def _nbytes(e: Event) -> int:
    shape = e.extra.get("shape")
    item = e.extra.get("item")
    if shape is not None and item is not None:
        n = int(item)
        for d in shape:
            n *= int(d)
        return n
    span = e.value
    if isinstance(span, tuple) and len(span) == 2:
        return int(span[1]) - int(span[0])
    return 0


def compact(e: Event) -> TraceRecord:
    """The predictor's record of one event."""
    kind = e.kind
    if kind is EventKind.GM_READ or kind is EventKind.GM_WRITE:
        extra: dict[str, Any] = {"nbytes": _nbytes(e)}
        if kind is EventKind.GM_WRITE and e.extra.get("atomic"):
            extra["atomic"] = True
        return TraceRecord(kind.value, e.rank, e.core, e.t_ns, e.seq, str(e.obj), None, extra)
    keep = _KEEP.get(kind, ())
    extra = {k: _plain(e.extra[k]) for k in keep if k in e.extra}
    return TraceRecord(kind.value, e.rank, e.core, e.t_ns, e.seq, str(e.obj), _plain(e.value), extra)


class PredictRecorder:
    """EventBus observer keeping the predictor's records (thread-safe: one list append per event). Events
    are compacted as they arrive, so no GM read's data is kept alive."""

    def __init__(self, kinds: Iterable[EventKind] = PREDICT_KINDS) -> None:
        self.kinds = frozenset(kinds)
        self._records: list[TraceRecord] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if event.kind in self.kinds:
            self._records.append(compact(event))

    def clear(self) -> None:
        with self._lock:
            self._records = []

    def records(self) -> list[TraceRecord]:
        """The records seen so far."""
        return list(self._records)


def gather_records(comm: Any, recorder: PredictRecorder, root: int | None = 0
                   ) -> dict[int, tuple[int, list[TraceRecord]]] | None:
    """One collective over `comm`: every rank's (clock offset, records), to `root` (None: to every rank).
    Returns {rank: (offset_ns, records)} on the receiving rank(s), None elsewhere."""
    mine = (comm.Get_rank(), clock_offset_ns(), recorder.records())
    got = comm.allgather(mine) if root is None else comm.gather(mine, root=root)
    if got is None:
        return None
    return {r: (off, recs) for r, off, recs in got}
