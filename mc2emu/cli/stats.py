"""Per-case statistics derived from the event stream of one rank, and their combination across ranks.

Pure functions over `Event`s; robust to missing fields (an event without `nbytes` moves 0 bytes, a
point event without `dur_ns` / `t0_ns` lasts 0 ns).

- tiles: output tiles written (FIXPIPE events); without fixpipe events, MMAD events.
- mmads: MMAD events (one per `mmad` call, i.e. per K pass of a tile).
- waits: blocking waits (WAIT_BEGIN matched by WAIT_END on the same core and object), and their time.
- puts / bytes: PUT events and the bytes of PUT, GET and HCCL events (`extra["nbytes"]`, or `value`
  when it is an int on PUT / GET).
- hidden share: |communication ∩ compute| / |communication| over time on this rank, where
  communication = the spans of PUT / GET / signal-post events and of HCCL events that moved bytes, that
  carry a duration, or, when none does, the window from the first to the last such event; and
  compute = MMAD / FIXPIPE spans with a duration, or, when none has one, each AIC's kernel span
  (CORE_BEGIN..CORE_END) minus its blocking waits. 1.0 means every moment of communication had a cube
  core computing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mc2emu.runtime.events import Event, EventKind
from mc2emu.trace.chrome_trace import event_duration_ns

Interval = tuple[int, int]

COMM_KINDS = frozenset({EventKind.PUT, EventKind.GET, EventKind.HCCL})
BYTE_KINDS = frozenset({EventKind.PUT, EventKind.GET, EventKind.HCCL})
COMPUTE_KINDS = frozenset({EventKind.MMAD, EventKind.FIXPIPE})
COMPUTE_CORE_PREFIX = "AIC"


@dataclass(frozen=True)
class CaseStats:
    """Statistics of one rank (or, after `combine`, of all ranks: sums, and the pooled hidden share)."""

    tiles: int = 0
    mmads: int = 0
    waits: int = 0
    wait_ns: int = 0
    puts: int = 0
    bytes_moved: int = 0
    comm_ns: int = 0
    hidden_ns: int = 0
    hazards: int = 0
    events: int = 0

    @property
    def hidden_share(self) -> float | None:
        """Share of communication time overlapped by compute, None without communication."""
        return None if self.comm_ns <= 0 else min(1.0, self.hidden_ns / self.comm_ns)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of half-open intervals (empty ones dropped)."""
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def length(intervals: Sequence[Interval]) -> int:
    return sum(b - a for a, b in intervals)


def intersect(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    """Intersection of two sorted disjoint interval lists."""
    out: list[Interval] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        a = max(xs[i][0], ys[j][0])
        b = min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: Sequence[Interval], ys: Sequence[Interval]) -> list[Interval]:
    """xs minus ys (both sorted and disjoint)."""
    out: list[Interval] = []
    j = 0
    for a, b in xs:
        cur = a
        while j < len(ys) and ys[j][1] <= cur:
            j += 1
        k = j
        while k < len(ys) and ys[k][0] < b:
            if ys[k][0] > cur:
                out.append((cur, ys[k][0]))
            cur = max(cur, ys[k][1])
            k += 1
        if cur < b:
            out.append((cur, b))
    return out


def _span(e: Event) -> Interval:
    return e.t_ns - event_duration_ns(e.extra, e.t_ns), e.t_ns


def _nbytes(e: Event) -> int:
    n = e.extra.get("nbytes")
    if n is None and e.kind in (EventKind.PUT, EventKind.GET) and isinstance(e.value, int):
        n = e.value
    try:
        return max(0, int(n)) if n is not None else 0
    except (TypeError, ValueError):
        return 0


def _is_signal_post(e: Event) -> bool:
    role = e.extra.get("role")
    return e.kind is EventKind.SIGNAL and str(getattr(role, "name", role)).upper() == "POST"


def _is_data_movement(e: Event) -> bool:
    """Puts, gets, signal posts, and HCCL events that moved bytes (the server's work, not the client's
    Prepare / Commit / Wait calls, which would stretch the communication window over the whole kernel)."""
    if e.kind is EventKind.HCCL:
        return _nbytes(e) > 0
    return e.kind in COMM_KINDS or _is_signal_post(e)


def _paired(events: Sequence[Event], begin: EventKind, end: EventKind, key_obj: bool = True
            ) -> dict[str, list[Interval]]:
    """BEGIN/END pairs per core (matched LIFO on (core, obj))."""
    open_: dict[tuple[str, str], list[int]] = defaultdict(list)
    out: dict[str, list[Interval]] = defaultdict(list)
    for e in events:
        k = (e.core, e.obj if key_obj else "")
        if e.kind is begin:
            open_[k].append(e.t_ns)
        elif e.kind is end and open_[k]:
            out[e.core].append((open_[k].pop(), e.t_ns))
    return out


def derive_stats(events: Iterable[Event]) -> CaseStats:
    """Statistics of one rank's events (any order)."""
    evs = sorted(events, key=lambda e: (e.t_ns, e.seq))
    counts: dict[EventKind, int] = defaultdict(int)
    bytes_moved = 0
    comm_spans: list[Interval] = []
    comm_points: list[int] = []
    compute_spans: list[Interval] = []
    for e in evs:
        counts[e.kind] += 1
        if e.kind in BYTE_KINDS:
            bytes_moved += _nbytes(e)
        if _is_data_movement(e):
            a, b = _span(e)
            comm_points.append(e.t_ns)
            if b > a:
                comm_spans.append((a, b))
        elif e.kind in COMPUTE_KINDS:
            a, b = _span(e)
            if b > a:
                compute_spans.append((a, b))

    waits = _paired(evs, EventKind.WAIT_BEGIN, EventKind.WAIT_END)
    wait_ns = sum(b - a for lst in waits.values() for a, b in lst)
    n_waits = sum(len(lst) for lst in waits.values())

    comm = union(comm_spans)
    if not comm and len(comm_points) >= 2:
        comm = [(min(comm_points), max(comm_points))]
    compute = union(compute_spans)
    if not compute:
        cores = _paired(evs, EventKind.CORE_BEGIN, EventKind.CORE_END, key_obj=False)
        busy: list[Interval] = []
        for core, spans in cores.items():
            if core.startswith(COMPUTE_CORE_PREFIX):
                busy += subtract(union(spans), union(waits.get(core, [])))
        compute = union(busy)
    comm_ns = length(comm)
    hidden_ns = length(intersect(comm, compute))
    fixpipes = counts[EventKind.FIXPIPE]
    mmads = counts[EventKind.MMAD]
    return CaseStats(tiles=fixpipes or mmads, mmads=mmads, waits=n_waits, wait_ns=wait_ns,
                     puts=counts[EventKind.PUT], bytes_moved=bytes_moved, comm_ns=comm_ns, hidden_ns=hidden_ns,
                     hazards=counts[EventKind.HAZARD], events=len(evs))


def combine(per_rank: Iterable[CaseStats]) -> CaseStats:
    """All ranks: counts summed, the hidden share pooled (Σ hidden / Σ communication time)."""
    tot = CaseStats()
    for s in per_rank:
        tot = CaseStats(tiles=tot.tiles + s.tiles, mmads=tot.mmads + s.mmads, waits=tot.waits + s.waits,
                        wait_ns=tot.wait_ns + s.wait_ns, puts=tot.puts + s.puts,
                        bytes_moved=tot.bytes_moved + s.bytes_moved, comm_ns=tot.comm_ns + s.comm_ns,
                        hidden_ns=tot.hidden_ns + s.hidden_ns, hazards=tot.hazards + s.hazards,
                        events=tot.events + s.events)
    return tot
