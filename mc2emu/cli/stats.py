"""Per-case statistics derived from the event stream of one rank, and their combination across ranks.

Pure functions over `Event`s (a span event without `t0_ns` lasts 0 ns).

- tiles: output tiles written (`Fixpipe` events); without fixpipe events, `Mmad` events.
- mmads: `Mmad` events (one per `mmad` call, i.e. per K pass of a tile).
- waits: blocking waits (`WaitBegin` matched by `WaitEnd` on the same core and object), and their time.
- puts / bytes: `Put` events and the bytes of `Put` and `Get` events.
- hidden share: |communication ∩ compute| / |communication| over time on this rank, where
  communication = the spans of `Put` / `Get` / `SignalPost` events that carry a duration, or, when none
  does, the window from the first to the last such event; and compute = `Mmad` / `Fixpipe` spans with a
  duration, or, when none has one, each AIC's kernel span (`CoreBegin`..`CoreEnd`) minus its blocking waits.
  1.0 means every moment of communication had a cube core computing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mc2emu.runtime.comm_events import Get, Put, SignalPost
from mc2emu.runtime.events import CoreBegin, CoreEnd, Event, Fixpipe, HazardReported, Mmad, Span, WaitBegin, WaitEnd

Interval = tuple[int, int]

# Communication moves bytes: puts, gets, signal posts (the HCCL client's calls move none; the server's work
# shows as its puts).
DATA_MOVEMENT = (Put, Get, SignalPost)
COMPUTE = (Mmad, Fixpipe)
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
    return e.t_ns - (e.duration_ns if isinstance(e, Span) else 0), e.t_ns


def _paired(events: Sequence[Event], begin: type[WaitBegin | CoreBegin], end: type[WaitEnd | CoreEnd]
            ) -> dict[str, list[Interval]]:
    """BEGIN/END pairs per core (waits matched LIFO on (core, what waited on); kernels on the core)."""
    open_: dict[tuple[str, str], list[int]] = defaultdict(list)
    out: dict[str, list[Interval]] = defaultdict(list)
    for e in events:
        if isinstance(e, begin | end):
            k = (e.core, e.what if isinstance(e, WaitBegin | WaitEnd) else "")
            if isinstance(e, begin):
                open_[k].append(e.t_ns)
            elif open_[k]:
                out[e.core].append((open_[k].pop(), e.t_ns))
    return out


def derive_stats(events: Iterable[Event]) -> CaseStats:
    """Statistics of one rank's events (any order)."""
    evs = sorted(events, key=lambda e: (e.t_ns, e.seq))
    counts: dict[type[Event], int] = defaultdict(int)
    bytes_moved = 0
    comm_spans: list[Interval] = []
    comm_points: list[int] = []
    compute_spans: list[Interval] = []
    for e in evs:
        counts[type(e)] += 1
        if isinstance(e, Put | Get):
            bytes_moved += max(0, e.nbytes)
        if isinstance(e, DATA_MOVEMENT):
            a, b = _span(e)
            comm_points.append(e.t_ns)
            if b > a:
                comm_spans.append((a, b))
        elif isinstance(e, COMPUTE):
            a, b = _span(e)
            if b > a:
                compute_spans.append((a, b))

    waits = _paired(evs, WaitBegin, WaitEnd)
    wait_ns = sum(b - a for lst in waits.values() for a, b in lst)
    n_waits = sum(len(lst) for lst in waits.values())

    comm = union(comm_spans)
    if not comm and len(comm_points) >= 2:
        comm = [(min(comm_points), max(comm_points))]
    compute = union(compute_spans)
    if not compute:
        cores = _paired(evs, CoreBegin, CoreEnd)
        busy: list[Interval] = []
        for core, spans in cores.items():
            if core.startswith(COMPUTE_CORE_PREFIX):
                busy += subtract(union(spans), union(waits.get(core, [])))
        compute = union(busy)
    comm_ns = length(comm)
    hidden_ns = length(intersect(comm, compute))
    fixpipes = counts[Fixpipe]
    mmads = counts[Mmad]
    return CaseStats(tiles=fixpipes or mmads, mmads=mmads, waits=n_waits, wait_ns=wait_ns,
                     puts=counts[Put], bytes_moved=bytes_moved, comm_ns=comm_ns, hidden_ns=hidden_ns,
                     hazards=counts[HazardReported], events=len(evs))


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
