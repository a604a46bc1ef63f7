"""Chrome Trace Event JSON of the emulated device: an `EventBus` observer plus a multi-rank merge.

The output opens in Perfetto (ui.perfetto.dev) and chrome://tracing:
- one process per rank (pid = rank); one track per core label ("AIC3", "AIV7", "server", "hccl", "host",
  and a "run" track with one span per scenario);
- complete spans ("X") for kernels, waits, SyncAll, mmads, fixpipes, puts, gets, signals, quiets, barriers
  and HCCL calls; BEGIN/END pairs are paired here (a begin without its end becomes a span to the rank's last
  event, marked `unfinished`); `Span` events with `t0_ns` become spans of that length; args are the typed fields;
- flow arrows ("s" -> "f"), matched on event classes and typed fields, never on display names: `FlagRaise` ->
  the `FlagConsume` with its `token`; signal post -> the wait it released; HCCL repeat r -> each core's
  (r+1)-th Wait on that handle; HCCL put -> the peer's first core returning from that Wait; other puts -> the
  peer's next TeamBarrier `CrossDevice`;
- instants ("i") for hazards, perturbation delays, atomic-mode switches, L2 hints and flag Sets.
Overlapping spans on one track are moved to extra lanes ("AIC0 · 2"): Perfetto requires nested slices.

Usage: `rec = ChromeTraceRecorder()`, `device.events.subscribe(rec)`, launches, then
`write_trace("trace.json", merge_traces({device.rank: rec.records()}))`. Across ranks, gather `rec.records()`
and `clock_offset_ns()` of every rank to one rank and merge there: stamps are each rank's
`time.perf_counter_ns()`, mapped to the wall clock (ranks on different hosts line up to their clock sync).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from mc2emu.runtime.comm_events import (
    Barrier,
    CrossDevice,
    Get,
    HcclEvent,
    HcclExecuted,
    HcclWait,
    Put,
    Quiet,
    SignalPost,
    SignalWait,
)
from mc2emu.runtime.events import (
    AtomicMode,
    CoreBegin,
    CoreEnd,
    Event,
    FaultFired,
    Fixpipe,
    FlagConsume,
    FlagRaise,
    FlagSet,
    HazardReported,
    L2Hint,
    LaunchBegin,
    LaunchEnd,
    Mmad,
    PerturbDelay,
    SetOvertaken,
    Span,
    SyncAllBegin,
    SyncAllEnd,
    Vector,
    WaitBegin,
    WaitEnd,
)

# BEGIN/END pairs: begin class -> (end class, category).
PAIRED_KINDS: dict[type[Event], tuple[type[Event], str]] = {
    WaitBegin: (WaitEnd, "wait"),
    SyncAllBegin: (SyncAllEnd, "sync"),
    CoreBegin: (CoreEnd, "kernel"),
    LaunchBegin: (LaunchEnd, "launch"),
}
# Point events that become spans (of their `t0_ns` .. `t_ns`, else zero-length), by category.
SPAN_KINDS: tuple[tuple[type[Event], str], ...] = (
    (Mmad, "mmad"),
    (Vector, "vector"),
    (Fixpipe, "fixpipe"),
    (Put, "comm"),
    (Get, "comm"),
    (SignalPost, "comm"),
    (SignalWait, "comm"),
    (Quiet, "comm"),
    (Barrier, "sync"),
    (HcclEvent, "hccl"),
)
INSTANT_KINDS = (HazardReported, PerturbDelay, SetOvertaken, FaultFired, AtomicMode, L2Hint, FlagSet)
# GM reads and writes are one event per DataCopy: too many for a trace and not needed for its spans.
DEFAULT_KINDS: tuple[type[Event], ...] = (*PAIRED_KINDS, *(end for end, _ in PAIRED_KINDS.values()),
                                          *(k for k, _ in SPAN_KINDS), *INSTANT_KINDS, FlagRaise, FlagConsume)
# A flag raise / consume is a point in time; the flow arrow needs a slice to attach to, so each gets a
# slice this long (short enough not to hide the spans around it).
FLOW_SLICE_NS = 200
# Extra lanes of one track get tids this far apart from the track's own.
LANE_TID_STRIDE = 100_000
# Fixed tids, so tracks sort the same way in every trace: run, host, AICs, AIVs, then the others.
RUN_TRACK = "run"
HOST_TRACK = "host"
_TID_BASE = {"AIC": 1_000, "AIV": 2_000}
_OTHER_TID_BASE = 5_000
# Values nested deeper or longer than this are summarized in args.
_MAX_ARG_ITEMS = 16
_MAX_ARG_STR = 200
# Event fields never shown in args (live device state, the header).
_HIDDEN_FIELDS = frozenset({"rank", "core", "t_ns", "seq", "alloc", "data"})


# -- recording ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ScenarioSpan(Span):
    """A span of the caller's own (e.g. one per scenario) on `track` (`core`): never published on a bus."""

    kind: ClassVar[str] = "span"
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        return self.name


class ChromeTraceRecorder:
    """EventBus observer keeping the events of `kinds` (thread-safe: list appends under the GIL).

    `events` holds the raw `Event`s (for in-process consumers such as statistics); `records()` returns
    them without references to live device state (picklable, to send to the merging rank). `span()` adds a
    span of the caller's own (e.g. one per scenario)."""

    def __init__(self, kinds: Iterable[type[Event]] = DEFAULT_KINDS) -> None:
        self.kinds = tuple(kinds)
        self.events: list[Event] = []
        self._extra: list[ScenarioSpan] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if isinstance(event, self.kinds):
            self.events.append(event)

    def span(self, rank: int, name: str, t0_ns: int, t1_ns: int, *, track: str = RUN_TRACK,
             **args: Any) -> None:
        """Record a span [t0_ns, t1_ns] (perf_counter_ns) named `name` on `track` of `rank`."""
        rec = ScenarioSpan(rank, track, t1_ns, 0, t0_ns=min(t0_ns, t1_ns), name=name,
                           args={k: jsonable(v) for k, v in args.items()})
        with self._lock:
            self._extra.append(rec)

    def clear(self) -> None:
        with self._lock:
            self.events = []
            self._extra = []

    def records(self) -> list[Event]:
        with self._lock:
            extra = list(self._extra)
        return [e.portable() for e in list(self.events)] + extra


# Clock reads per offset: the narrowest bracketed sample is kept.
CLOCK_OFFSET_SAMPLES = 9


def clock_offset_ns() -> int:
    """Add to this process's `perf_counter_ns()` to get wall-clock ns (aligns ranks in a merge). Each sample
    brackets one wall-clock read between two counter reads and the narrowest bracket is kept: a thread
    preempted between two bare reads (an oversubscribed host) shifts every stamp of its rank by the pause, and
    the predictor pairs a signal wait with a post across ranks by these stamps."""
    return min(_bracketed_offset() for _ in range(CLOCK_OFFSET_SAMPLES))[1]


def _bracketed_offset() -> tuple[int, int]:
    """(bracket width, offset) of one wall-clock read between two counter reads."""
    a = time.perf_counter_ns()
    wall = time.time_ns()
    b = time.perf_counter_ns()
    return b - a, wall - (a + b) // 2


def jsonable(v: Any, depth: int = 0) -> Any:
    """A JSON-safe rendering of an event value (enums by name, numpy scalars as numbers, others as str)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v if not isinstance(v, str) or len(v) <= _MAX_ARG_STR else v[:_MAX_ARG_STR] + "..."
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, enum.Enum):
        return v.name
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and depth < 2:
        return {f.name: jsonable(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)}
    item = getattr(v, "item", None)
    if callable(item) and getattr(v, "ndim", None) == 0:
        return jsonable(item(), depth + 1)
    if depth < 2 and isinstance(v, (list, tuple)):
        out = [jsonable(x, depth + 1) for x in v[:_MAX_ARG_ITEMS]]
        return out if len(v) <= _MAX_ARG_ITEMS else [*out, f"... {len(v) - _MAX_ARG_ITEMS} more"]
    if depth < 2 and isinstance(v, Mapping):
        return {str(k): jsonable(x, depth + 1) for k, x in list(v.items())[:_MAX_ARG_ITEMS]}
    text = str(v)
    return text if len(text) <= _MAX_ARG_STR else text[:_MAX_ARG_STR] + "..."


def duration_ns(e: Event) -> int:
    """Duration of a point event: a span event's `t_ns - t0_ns` (when recorded), else 0."""
    return e.duration_ns if isinstance(e, Span) else 0


# -- merging --------------------------------------------------------------------------------------------------
@dataclass
class _Span:
    """One slice. `name` is for display only; flows match on the typed `event`."""

    rank: int
    track: str
    name: str
    cat: str
    t0: int
    t1: int
    args: dict[str, Any]
    flows_out: list[str] = field(default_factory=list)
    flows_in: list[str] = field(default_factory=list)
    tid: int = 0
    event: Event | None = None


def _args(e: Event) -> dict[str, Any]:
    """The event's fields as JSON-safe trace args (and its `seq`)."""
    out: dict[str, Any] = {"seq": e.seq}
    for f in dataclasses.fields(e):
        if f.name not in _HIDDEN_FIELDS:
            out[f.name] = jsonable(getattr(e, f.name))
    return out


def _span_cat(e: Event) -> str | None:
    return next((cat for cls, cat in SPAN_KINDS if isinstance(e, cls)), None)


def _span_name(e: Event) -> str:
    if isinstance(e, SignalPost):
        return f"signal post {e.subject}"
    if isinstance(e, SignalWait):
        return f"signal wait {e.subject}"
    if isinstance(e, HcclEvent):
        return f"hccl {e.call} {e.subject}"
    return f"{e.kind} {e.subject}".strip()


def _rank_spans(rank: int, recs: Sequence[Event]) -> tuple[list[_Span], list[dict[str, Any]]]:
    """Spans and instants of one rank; times in this rank's perf_counter ns."""
    spans: list[_Span] = []
    instants: list[dict[str, Any]] = []
    open_: dict[tuple[type[Event], str, str], list[Event]] = defaultdict(list)
    ends = {end: begin for begin, (end, _) in PAIRED_KINDS.items()}
    last_t = max((r.t_ns for r in recs), default=0)
    for e in sorted(recs, key=lambda r: (r.t_ns, r.seq)):
        cls = type(e)
        span: _Span | None = None
        if isinstance(e, ScenarioSpan):
            span = _Span(rank, e.core, e.name, "scenario", e.t_ns - e.duration_ns, e.t_ns, dict(e.args))
        elif cls in PAIRED_KINDS:
            open_[(cls, e.core, e.subject)].append(e)
        elif cls in ends:
            stack = open_.get((ends[cls], e.core, e.subject))
            if stack:
                begin = stack.pop()
                _, cat = PAIRED_KINDS[ends[cls]]
                span = _Span(rank, e.core, _paired_name(begin), cat, begin.t_ns, e.t_ns, _args(begin), event=begin)
        elif isinstance(e, FlagRaise | FlagConsume):
            consumed = isinstance(e, FlagConsume)
            span = _Span(rank, e.core, f"{'consume' if consumed else 'raise'} {e.subject}", "flag", e.t_ns,
                         e.t_ns + FLOW_SLICE_NS, _args(e))
            if e.token is not None:
                (span.flows_in if consumed else span.flows_out).append(f"flag:{rank}:{e.token}")
        elif (span_cat := _span_cat(e)) is not None:
            dur = duration_ns(e)
            span = _Span(rank, e.core, _span_name(e), span_cat, e.t_ns - dur, e.t_ns, _args(e), event=e)
        elif isinstance(e, INSTANT_KINDS):
            instants.append({"name": f"{e.kind} {e.subject}".strip(), "cat": e.kind, "ph": "i",
                             "s": "t", "rank": rank, "track": e.core, "t": e.t_ns, "args": _args(e)})
        if span is not None:
            spans.append(span)
    for (cls, core, _subject), stack in open_.items():
        _, cat = PAIRED_KINDS[cls]
        for begin in stack:
            args = {**_args(begin), "unfinished": True}
            spans.append(_Span(rank, core, _paired_name(begin), cat, begin.t_ns, max(last_t, begin.t_ns), args))
    return spans, instants


def _paired_name(begin: Event) -> str:
    if isinstance(begin, WaitBegin):
        return f"wait {begin.subject}"
    if isinstance(begin, CoreBegin):
        return f"kernel {begin.subject}"
    if isinstance(begin, LaunchBegin):
        return f"launch {begin.subject}"
    return begin.subject or begin.kind


def _signal_flows(spans: list[_Span], offsets: Mapping[int, int]) -> None:
    """Link each signal wait to the latest post to the same (rank, window, offset) before it returned."""
    posts: dict[tuple[int, str, int], list[tuple[int, _Span]]] = defaultdict(list)
    waits: list[tuple[int, _Span, SignalWait]] = []
    for s in spans:
        e = s.event
        if isinstance(e, SignalPost):
            posts[(e.pe, e.window, e.offset)].append((s.t1 + offsets.get(s.rank, 0), s))
        elif isinstance(e, SignalWait):
            waits.append((s.t1 + offsets.get(s.rank, 0), s, e))
    for lst in posts.values():
        lst.sort(key=lambda p: p[0])
    for n, (t, w, we) in enumerate(waits):
        cands = posts.get((w.rank, we.window, we.offset), [])
        best = None
        for tp, p in cands:
            if tp > t:
                break
            best = p
        if best is not None:
            fid = f"sig:{n}"
            best.flows_out.append(fid)
            w.flows_in.append(fid)


def _hccl_flows(spans: list[_Span]) -> None:
    """Per rank and handle, link the server's execution of repeat r to each core's (r+1)-th Wait on it."""
    executed: dict[tuple[int, int], dict[int, _Span]] = defaultdict(dict)
    waits: dict[tuple[int, str, int], list[_Span]] = defaultdict(list)
    for s in spans:
        e = s.event
        if isinstance(e, HcclExecuted):
            executed[(s.rank, e.handle)][e.repeat] = s
        elif isinstance(e, HcclWait):
            waits[(s.rank, s.track, e.handle)].append(s)
    for (rank, _track, handle), lst in waits.items():
        done = executed.get((rank, handle), {})
        for r, w in enumerate(sorted(lst, key=lambda w: w.t1)):
            src = done.get(r)
            if src is not None:
                fid = f"hccl:{rank}:{handle}:{r}:{w.track}"
                src.flows_out.append(fid)
                w.flows_in.append(fid)


def _put_flows(spans: list[_Span], offsets: Mapping[int, int]) -> None:
    """Cross-rank arrows for puts into a peer: an HCCL server put (carrying `handle` and `repeat`) to the
    target rank's first core to return from its (repeat+1)-th Wait on that handle; any other put to the
    first TeamBarrier CrossDevice on the target rank that ends after it (what orders it before the
    consumer there)."""
    waits: dict[tuple[int, int], dict[str, list[_Span]]] = defaultdict(lambda: defaultdict(list))
    barriers: dict[int, list[tuple[int, _Span]]] = defaultdict(list)
    for s in spans:
        e = s.event
        if isinstance(e, HcclWait):
            waits[(s.rank, e.handle)][s.track].append(s)
        elif isinstance(e, CrossDevice):
            barriers[s.rank].append((s.t1 + offsets.get(s.rank, 0), s))
    for lst in barriers.values():
        lst.sort(key=lambda b: b[0])
    n = 0
    for s in spans:
        e = s.event
        if not isinstance(e, Put) or e.pe == s.rank:
            continue
        t = s.t1 + offsets.get(s.rank, 0)
        target: _Span | None = None
        if e.handle is not None and e.repeat is not None:
            r = e.repeat
            per_core = waits.get((e.pe, e.handle), {})
            cands = [sorted(lst, key=lambda w: w.t1)[r] for lst in per_core.values() if len(lst) > r]
            target = min(cands, key=lambda w: w.t1, default=None)
        else:
            target = next((b for tb, b in barriers.get(e.pe, []) if tb >= t), None)
        if target is not None:
            n += 1
            fid = f"put:{n}"
            s.flows_out.append(fid)
            target.flows_in.append(fid)


def _assign_lanes(spans: list[_Span], base_tid: int) -> int:
    """Give each span a tid so that every tid holds properly nested spans; returns the lane count."""
    lanes: list[list[_Span]] = []  # a stack of open spans per lane
    for s in sorted(spans, key=lambda s: (s.t0, -(s.t1 - s.t0))):
        for i, stack in enumerate(lanes):
            while stack and stack[-1].t1 <= s.t0:
                stack.pop()
            if not stack or s.t1 <= stack[-1].t1:
                stack.append(s)
                s.tid = base_tid + i * LANE_TID_STRIDE
                break
        else:
            lanes.append([s])
            s.tid = base_tid + (len(lanes) - 1) * LANE_TID_STRIDE
    return max(1, len(lanes))


def track_tid(track: str, others: Sequence[str] = ()) -> int:
    """The tid of a core label: run 0, host 1, AIC i 1000+i, AIV i 2000+i, other labels by sorted order."""
    if track == RUN_TRACK:
        return 0
    if track == HOST_TRACK:
        return 1
    for prefix, base in _TID_BASE.items():
        if track.startswith(prefix) and track[len(prefix):].isdigit():
            return base + int(track[len(prefix):])
    ordered = sorted(set(others))
    return _OTHER_TID_BASE + (ordered.index(track) if track in ordered else len(ordered))


def _us(t_ns: int, origin: int) -> float:
    return round((t_ns - origin) / 1000.0, 3)


def merge_traces(per_rank: Mapping[int, Sequence[Event]], clock_offsets_ns: Mapping[int, int] | None = None,
                 metadata: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One Chrome Trace (a JSON-ready dict) from the records of every rank.

    `clock_offsets_ns[r]` is added to rank r's time stamps (see `clock_offset_ns`); missing ranks get 0."""
    offsets = dict(clock_offsets_ns or {})
    spans: list[_Span] = []
    instants: list[dict[str, Any]] = []
    for rank in sorted(per_rank):
        rank_spans, rank_instants = _rank_spans(rank, per_rank[rank])
        spans += rank_spans
        instants += rank_instants
    _signal_flows(spans, offsets)
    _hccl_flows(spans)
    _put_flows(spans, offsets)
    origin_candidates = [s.t0 + offsets.get(s.rank, 0) for s in spans] + \
        [i["t"] + offsets.get(i["rank"], 0) for i in instants]
    origin = min(origin_candidates, default=0)

    events: list[dict[str, Any]] = []
    by_track: dict[tuple[int, str], list[_Span]] = defaultdict(list)
    for s in spans:
        by_track[(s.rank, s.track)].append(s)
    tracks_of_rank: dict[int, set[str]] = defaultdict(set)
    for rank, track in by_track:
        tracks_of_rank[rank].add(track)
    for i in instants:
        tracks_of_rank[i["rank"]].add(i["track"])
    others = {r: sorted(t for t in ts if track_tid(t) >= _OTHER_TID_BASE) for r, ts in tracks_of_rank.items()}

    for rank in sorted(set(per_rank) | set(tracks_of_rank)):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0,
                       "args": {"sort_index": rank}})
    for (rank, track), lst in sorted(by_track.items()):
        base = track_tid(track, others[rank])
        n = _assign_lanes(lst, base)
        for lane in range(n):
            tid = base + lane * LANE_TID_STRIDE
            label = track if lane == 0 else f"{track} · {lane + 1}"
            events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": label}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid,
                           "args": {"sort_index": tid}})
    for rank, ts in tracks_of_rank.items():
        for track in ts:
            if (rank, track) not in by_track:
                tid = track_tid(track, others[rank])
                events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": track}})

    flow_src: dict[str, _Span] = {}
    flow_dst: dict[str, list[_Span]] = defaultdict(list)
    for s in spans:
        off = offsets.get(s.rank, 0)
        events.append({"name": s.name, "cat": s.cat, "ph": "X", "pid": s.rank, "tid": s.tid,
                       "ts": _us(s.t0 + off, origin), "dur": round((s.t1 - s.t0) / 1000.0, 3), "args": s.args})
        for fid in s.flows_out:
            flow_src[fid] = s
        for fid in s.flows_in:
            flow_dst[fid].append(s)
    flow_id = 0
    for fid, src in flow_src.items():
        for dst in flow_dst.get(fid, ()):
            flow_id += 1
            events.append({"name": "release", "cat": "flow", "ph": "s", "id": flow_id, "pid": src.rank,
                           "tid": src.tid, "ts": _mid_us(src, offsets, origin)})
            events.append({"name": "release", "cat": "flow", "ph": "f", "bp": "e", "id": flow_id,
                           "pid": dst.rank, "tid": dst.tid, "ts": _mid_us(dst, offsets, origin)})
    for i in instants:
        tid = track_tid(i["track"], others[i["rank"]])
        events.append({"name": i["name"], "cat": i["cat"], "ph": "i", "s": "t", "pid": i["rank"], "tid": tid,
                       "ts": _us(i["t"] + offsets.get(i["rank"], 0), origin), "args": i["args"]})
    other: dict[str, Any] = {"generator": "mc2emu.trace.chrome_trace", "origin_wall_ns": origin,
                             "flows": flow_id}
    if metadata:
        other.update({str(k): jsonable(v) for k, v in metadata.items()})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _mid_us(s: _Span, offsets: Mapping[int, int], origin: int) -> float:
    return _us((s.t0 + s.t1) // 2 + offsets.get(s.rank, 0), origin)


def write_trace(path: str | Path, trace: Mapping[str, Any]) -> Path:
    """Write a merged trace as JSON (compact: traces reach tens of MB)."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", encoding="utf-8") as f:
        json.dump(trace, f, separators=(",", ":"), allow_nan=False)
    return p
