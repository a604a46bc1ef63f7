"""Chrome Trace Event JSON of the emulated device: an `EventBus` observer plus a multi-rank merge.

The output opens in Perfetto (ui.perfetto.dev) and chrome://tracing:
- one process per rank (pid = rank); one track per core label ("AIC3", "AIV7", "server", "hccl", "host",
  and a "run" track with one span per scenario);
- complete spans ("X") for kernels, waits, SyncAll, mmads, fixpipes, puts, gets, signals, quiets, barriers
  and HCCL calls; BEGIN/END pairs are paired here (a begin without its end becomes a span to the rank's last
  event, marked `unfinished`); point events with `dur_ns` or `t0_ns` become spans of that length;
- flow arrows ("s" -> "f"): flag raise -> the Wait consuming it (same `token`); signal post -> the wait it
  released; HCCL repeat r -> each core's (r+1)-th Wait on that handle; HCCL put -> the peer's first core
  returning from that Wait; other puts -> the peer's next TeamBarrier CrossDevice; any `flow_out=<id>` /
  `flow_in=<id>` pair (global string ids);
- instants ("i") for hazards, perturbation delays, atomic-mode switches, L2 hints and flag Sets.
Overlapping spans on one track are moved to extra lanes ("AIC0 · 2"): Perfetto requires nested slices.

Usage: `rec = ChromeTraceRecorder()`, `device.events.subscribe(rec)`, launches, then
`write_trace("trace.json", merge_traces({device.rank: rec.records()}))`. Across ranks, gather `rec.records()`
and `clock_offset_ns()` of every rank to one rank and merge there: stamps are each rank's
`time.perf_counter_ns()`, mapped to the wall clock (ranks on different hosts line up to their clock sync).
"""

from __future__ import annotations

import enum
import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mc2emu.runtime.events import CROSS_DEVICE_STEP, HCCL_EXECUTED, Event, EventKind

# GM reads and writes are one event per DataCopy: too many for a trace and not needed for its spans.
DEFAULT_KINDS = frozenset(EventKind) - {EventKind.GM_READ, EventKind.GM_WRITE}
# Point events that become spans (of their `dur_ns` / `t0_ns` length, else zero-length).
SPAN_KINDS = {
    EventKind.MMAD: "mmad",
    EventKind.VECTOR: "vector",
    EventKind.FIXPIPE: "fixpipe",
    EventKind.PUT: "comm",
    EventKind.GET: "comm",
    EventKind.SIGNAL: "comm",
    EventKind.QUIET: "comm",
    EventKind.BARRIER: "sync",
    EventKind.HCCL: "hccl",
}
# BEGIN/END pairs: begin kind -> (end kind, category).
PAIRED_KINDS = {
    EventKind.WAIT_BEGIN: (EventKind.WAIT_END, "wait"),
    EventKind.SYNC_ALL_BEGIN: (EventKind.SYNC_ALL_END, "sync"),
    EventKind.CORE_BEGIN: (EventKind.CORE_END, "kernel"),
    EventKind.LAUNCH_BEGIN: (EventKind.LAUNCH_END, "launch"),
}
INSTANT_KINDS = frozenset({EventKind.HAZARD, EventKind.PERTURB, EventKind.ATOMIC_MODE, EventKind.L2_HINT,
                           EventKind.FLAG_SET})
# HCCL events carry `handle` (int) and as value the server's HCCL_EXECUTED or the client's HcclCall (by name);
# apace TeamBarrier's CrossDevice carries `step` = CROSS_DEVICE_STEP. Flows match on these typed fields and
# the event kind, never on display names.
HCCL_WAIT = "WAIT"  # HcclCall.WAIT by name (mc2emu.comm imports MPI; the trace writer does not)
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


# -- recording ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceRecord:
    """A JSON-safe, picklable copy of one `Event` (what ranks send to the merging rank)."""

    kind: str
    rank: int
    core: str
    t_ns: int
    seq: int
    obj: str = ""
    value: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, e: Event) -> TraceRecord:
        return cls(e.kind.value, e.rank, e.core, e.t_ns, e.seq, str(e.obj), jsonable(e.value),
                   {str(k): jsonable(v) for k, v in e.extra.items()})


class ChromeTraceRecorder:
    """EventBus observer keeping the events of `kinds` (thread-safe: list appends under the GIL).

    `events` holds the raw `Event`s (for in-process consumers such as statistics); `records()` converts
    them to JSON-safe `TraceRecord`s. `span()` adds a span of the caller's own (e.g. one per scenario)."""

    def __init__(self, kinds: Iterable[EventKind] = DEFAULT_KINDS) -> None:
        self.kinds = frozenset(kinds)
        self.events: list[Event] = []
        self._extra: list[TraceRecord] = []
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        if event.kind in self.kinds:
            self.events.append(event)

    def span(self, rank: int, name: str, t0_ns: int, t1_ns: int, *, track: str = RUN_TRACK,
             **args: Any) -> None:
        """Record a span [t0_ns, t1_ns] (perf_counter_ns) named `name` on `track` of `rank`."""
        rec = TraceRecord("span", rank, track, t1_ns, 0, name, None,
                          {"dur_ns": max(0, t1_ns - t0_ns), **{k: jsonable(v) for k, v in args.items()}})
        with self._lock:
            self._extra.append(rec)

    def clear(self) -> None:
        with self._lock:
            self.events = []
            self._extra = []

    def records(self) -> list[TraceRecord]:
        with self._lock:
            extra = list(self._extra)
        return [TraceRecord.of(e) for e in list(self.events)] + extra


def clock_offset_ns() -> int:
    """Add to this process's `perf_counter_ns()` to get wall-clock ns (aligns ranks in a merge)."""
    return time.time_ns() - time.perf_counter_ns()


def jsonable(v: Any, depth: int = 0) -> Any:
    """A JSON-safe rendering of an event value (enums by name, numpy scalars as numbers, others as str)."""
    if v is None or isinstance(v, (bool, int, str)):
        return v if not isinstance(v, str) or len(v) <= _MAX_ARG_STR else v[:_MAX_ARG_STR] + "..."
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, enum.Enum):
        return v.name
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


def event_duration_ns(extra: Mapping[str, Any], t_ns: int) -> int:
    """Duration of a point event: `extra["dur_ns"]`, or `t_ns - extra["t0_ns"]`, else 0."""
    dur = extra.get("dur_ns")
    if isinstance(dur, (int, float)) and dur > 0:
        return int(dur)
    t0 = extra.get("t0_ns")
    if isinstance(t0, (int, float)) and 0 < t0 <= t_ns:
        return int(t_ns - t0)
    return 0


# -- merging --------------------------------------------------------------------------------------------------
@dataclass
class _Span:
    """One slice. `name` is for display only; flows match on `kind`, `obj` and typed `args`."""

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
    kind: EventKind | None = None
    obj: str = ""


def _kind(rec: TraceRecord) -> EventKind | None:
    try:
        return EventKind(rec.kind)
    except ValueError:
        return None


def _args(rec: TraceRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": rec.seq}
    if rec.value is not None:
        out["value"] = rec.value
    out.update(rec.extra)
    return out


def _role(rec: TraceRecord) -> str:
    return str(rec.extra.get("role", "")).upper()


def _rank_spans(rank: int, recs: Sequence[TraceRecord]) -> tuple[list[_Span], list[dict[str, Any]]]:
    """Spans and instants of one rank; times in this rank's perf_counter ns."""
    spans: list[_Span] = []
    instants: list[dict[str, Any]] = []
    open_: dict[tuple[EventKind, str, str], list[TraceRecord]] = defaultdict(list)
    ends = {end: begin for begin, (end, _) in PAIRED_KINDS.items()}
    last_t = max((r.t_ns for r in recs), default=0)
    for rec in sorted(recs, key=lambda r: (r.t_ns, r.seq)):
        kind = _kind(rec)
        span: _Span | None = None
        if rec.kind == "span":
            dur = event_duration_ns(rec.extra, rec.t_ns)
            args = {k: v for k, v in rec.extra.items() if k != "dur_ns"}
            span = _Span(rank, rec.core, rec.obj, "scenario", rec.t_ns - dur, rec.t_ns, args)
        elif kind in PAIRED_KINDS:
            open_[(kind, rec.core, rec.obj)].append(rec)
        elif kind in ends:
            stack = open_.get((ends[kind], rec.core, rec.obj))
            if stack:
                begin = stack.pop()
                _, cat = PAIRED_KINDS[ends[kind]]
                span = _Span(rank, rec.core, _paired_name(ends[kind], begin), cat, begin.t_ns, rec.t_ns,
                             _args(begin), kind=ends[kind], obj=begin.obj)
        elif kind in SPAN_KINDS:
            dur = event_duration_ns(rec.extra, rec.t_ns)
            if kind is EventKind.SIGNAL:
                name = f"signal {_role(rec).lower() or 'op'} {rec.obj}"
            elif kind is EventKind.HCCL:
                name = f"hccl {rec.value} {rec.obj}"
            else:
                name = f"{kind.value} {rec.obj}".strip()
            span = _Span(rank, rec.core, name, SPAN_KINDS[kind], rec.t_ns - dur, rec.t_ns, _args(rec), kind=kind,
                         obj=rec.obj)
        elif kind is EventKind.FLAG_RAISE:
            token = rec.extra.get("token")
            consumed = bool(rec.extra.get("consumed"))
            span = _Span(rank, rec.core, f"{'consume' if consumed else 'raise'} {rec.obj}", "flag", rec.t_ns,
                         rec.t_ns + FLOW_SLICE_NS, _args(rec))
            if token is not None:
                (span.flows_in if consumed else span.flows_out).append(f"flag:{rank}:{token}")
        elif kind in INSTANT_KINDS:
            instants.append({"name": f"{kind.value} {rec.obj}".strip(), "cat": kind.value, "ph": "i",
                             "s": "t", "rank": rank, "track": rec.core, "t": rec.t_ns, "args": _args(rec)})
        if span is not None:
            if rec.extra.get("flow_out") is not None:
                span.flows_out.append(f"x:{rec.extra['flow_out']}")
            if rec.extra.get("flow_in") is not None:
                span.flows_in.append(f"x:{rec.extra['flow_in']}")
            spans.append(span)
    for (kind, core, _obj), stack in open_.items():
        _, cat = PAIRED_KINDS[kind]
        for begin in stack:
            args = {**_args(begin), "unfinished": True}
            spans.append(_Span(rank, core, _paired_name(kind, begin), cat, begin.t_ns, max(last_t, begin.t_ns),
                               args))
    return spans, instants


def _paired_name(kind: EventKind, begin: TraceRecord) -> str:
    if kind is EventKind.WAIT_BEGIN:
        return f"wait {begin.obj}"
    if kind is EventKind.CORE_BEGIN:
        return f"kernel {begin.obj}"
    if kind is EventKind.LAUNCH_BEGIN:
        return f"launch {begin.obj}"
    return begin.obj or kind.value


def _signal_flows(spans: list[_Span], offsets: Mapping[int, int]) -> None:
    """Link each signal wait to the latest post to the same (rank, window, offset) before it returned."""
    posts: dict[tuple[Any, Any, Any], list[tuple[int, _Span]]] = defaultdict(list)
    waits: list[tuple[int, _Span]] = []
    for s in spans:
        if s.kind is not EventKind.SIGNAL:
            continue
        role = str(s.args.get("role", "")).upper()
        if role == "POST":
            posts[(s.args.get("pe"), s.args.get("window"), s.args.get("offset"))].append(
                (s.t1 + offsets.get(s.rank, 0), s))
        elif role == "WAIT":
            waits.append((s.t1 + offsets.get(s.rank, 0), s))
    for lst in posts.values():
        lst.sort(key=lambda p: p[0])
    for n, (t, w) in enumerate(waits):
        cands = posts.get((w.rank, w.args.get("window"), w.args.get("offset")), [])
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
    executed: dict[tuple[int, Any], dict[Any, _Span]] = defaultdict(dict)
    waits: dict[tuple[int, str, Any], list[_Span]] = defaultdict(list)
    for s in spans:
        if s.kind is not EventKind.HCCL:
            continue
        handle = s.args.get("handle")
        what = s.args.get("value")
        if what == HCCL_EXECUTED:
            executed[(s.rank, handle)][s.args.get("repeat")] = s
        elif what == HCCL_WAIT:
            waits[(s.rank, s.track, handle)].append(s)
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
    waits: dict[tuple[int, Any], dict[str, list[_Span]]] = defaultdict(lambda: defaultdict(list))
    barriers: dict[int, list[tuple[int, _Span]]] = defaultdict(list)
    for s in spans:
        if s.kind is EventKind.HCCL and s.args.get("value") == HCCL_WAIT:
            waits[(s.rank, s.args.get("handle"))][s.track].append(s)
        elif s.kind is EventKind.BARRIER and s.args.get("step") == CROSS_DEVICE_STEP:
            barriers[s.rank].append((s.t1 + offsets.get(s.rank, 0), s))
    for lst in barriers.values():
        lst.sort(key=lambda b: b[0])
    n = 0
    for s in spans:
        pe = s.args.get("pe")
        if s.kind is not EventKind.PUT or not isinstance(pe, int) or pe == s.rank:
            continue
        t = s.t1 + offsets.get(s.rank, 0)
        target: _Span | None = None
        if s.args.get("handle") is not None and isinstance(s.args.get("repeat"), int):
            r = s.args["repeat"]
            per_core = waits.get((pe, s.args["handle"]), {})
            cands = [sorted(lst, key=lambda w: w.t1)[r] for lst in per_core.values() if len(lst) > r]
            target = min(cands, key=lambda w: w.t1, default=None)
        else:
            target = next((b for tb, b in barriers.get(pe, []) if tb >= t), None)
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


def merge_traces(per_rank: Mapping[int, Sequence[TraceRecord]], clock_offsets_ns: Mapping[int, int] | None = None,
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
