"""The virtual-time view of a run: the same events as the wall-time trace, at their modelled device times.

One Chrome trace (Perfetto) with two groups of processes:
- "rank r · device model": one track per core (and "link" for transfers, "sync" for flag rounds and barrier
  joins), a span per modelled node at its predicted start and duration, and a "critical path" track holding
  the steps of the predicted critical path that ran on this rank;
- "rank r · emulator wall time" (pid WALL_PID_BASE + r): the trace writer's usual view of the same records
  (`mc2emu.trace.chrome_trace.merge_traces`), so the overlap the device would achieve sits beside what the
  emulator's threads did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mc2emu.predict.replay import Cat, Prediction
from mc2emu.runtime.events import Event, GmAccess
from mc2emu.trace.chrome_trace import merge_traces, track_tid, write_trace

WALL_PID_BASE = 1000
CRITICAL_TRACK = "critical path"
LINK_TRACK = "link"
SYNC_TRACK = "sync"
_US = 1e6
# Zero-length nodes shown (waits, flag rounds, marks) get this width so Perfetto can draw them.
MIN_SPAN_US = 0.001
# Wall-time records that are not spans there (MTE loads are too many for a trace).
_WALL_SKIP = GmAccess


def _track(core: str, cat: str) -> str:
    if cat == Cat.LINK:
        return LINK_TRACK
    if core == "join" or (cat == Cat.SYNC and core.startswith("AI")):
        return SYNC_TRACK
    return core


def virtual_trace(pred: Prediction, records: Mapping[int, tuple[int, Sequence[Event]]] | None = None,
                  title: str = "") -> dict[str, Any]:
    """The Chrome trace dict (see the module docstring). `pred` must come from `replay(..., timeline=True)`;
    `records` (rank -> (clock offset, records)) adds the wall-time view."""
    if not pred.timeline:
        raise ValueError("virtual_trace needs a Prediction made with replay(..., timeline=True)")
    events: list[dict[str, Any]] = []
    tracks: dict[int, set[str]] = {}
    for s in pred.timeline:
        if s.cat == Cat.MARK and s.end_s == s.start_s and not s.what.startswith(("kernel", "launch")):
            continue
        track = _track(s.core, s.cat)
        tracks.setdefault(s.rank, set()).add(track)
        args: dict[str, Any] = {"cat": s.cat, "core": s.core}
        if s.rec >= 0:
            r = pred.records[s.rec]
            args.update(seq=r.seq, kind=r.kind)
        events.append({"name": s.what, "cat": s.cat, "ph": "X", "pid": s.rank, "tid": 0, "_track": track,
                       "ts": round(s.start_s * _US, 4), "dur": max(MIN_SPAN_US, round((s.end_s - s.start_s) * _US, 4)),
                       "args": args})
    for step in pred.critical_path:
        tracks.setdefault(step.rank, set()).add(CRITICAL_TRACK)
        events.append({"name": step.what, "cat": "critical", "ph": "X", "pid": step.rank, "tid": 0,
                       "_track": CRITICAL_TRACK, "ts": round(step.start_s * _US, 4),
                       "dur": max(MIN_SPAN_US, round((step.end_s - step.start_s) * _US, 4)),
                       "args": {"core": step.core, "cat": step.cat, "latency_before_us": step.wait_s * _US}})
    meta: list[dict[str, Any]] = []
    for rank, ts in sorted(tracks.items()):
        others = sorted(t for t in ts if track_tid(t) >= 5_000)
        meta.append({"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
                     "args": {"name": f"rank {rank} · device model"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for t in ts:
            tid = 0 if t == CRITICAL_TRACK else track_tid(t, others)
            meta.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": t}})
    for e in events:
        t = e.pop("_track")
        e["tid"] = 0 if t == CRITICAL_TRACK else track_tid(t, sorted(x for x in tracks[e["pid"]]
                                                                     if track_tid(x) >= 5_000))
    out: list[dict[str, Any]] = meta + events
    other: dict[str, Any] = {"generator": "mc2emu.predict.virtual_trace", "title": title,
                             "predicted_us": pred.total_s * _US, "summary": pred.summary()}
    if records:
        wall = merge_traces({r: [x for x in recs if not isinstance(x, _WALL_SKIP)] for r, (_, recs) in records.items()},
                            {r: off for r, (off, _) in records.items()})
        for e in wall["traceEvents"]:
            e = dict(e)
            e["pid"] = WALL_PID_BASE + int(e.get("pid", 0))
            if e.get("name") == "process_name":
                e["args"] = {"name": f"{e['args']['name']} · emulator wall time"}
            elif e.get("name") == "process_sort_index":
                e["args"] = {"sort_index": WALL_PID_BASE + int(e["args"]["sort_index"])}
            out.append(e)
        other["wall_flows"] = wall["otherData"].get("flows")
    return {"traceEvents": out, "displayTimeUnit": "ns", "otherData": other}


def write_virtual_trace(path: str | Path, pred: Prediction,
                        records: Mapping[int, tuple[int, Sequence[Event]]] | None = None,
                        title: str = "") -> Path:
    return write_trace(path, virtual_trace(pred, records, title))
