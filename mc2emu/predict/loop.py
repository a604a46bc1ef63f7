"""A loop of launches read back from a stream replay (`replay(..., stream=True)`): per launch, when it began and
ended on each rank, the drift between ranks and the gap to the launch before.

    p = replay(gathered, model, stream=True)       # the records of N calls on one Communicator
    loop = loop_of(p)
    print(format_loop(loop))

Per launch k (times from the first launch begin): `begin_s` / `end_s` the earliest begin and latest end over
the ranks; `device_s` the longest one rank spent in it (its end - its begin on that rank); `skew_s` how far
apart the ranks began it (the drift: a rank begins launch k when its own launch k - 1 ends); `gap_s`
begin_s - the previous launch's end_s (negative: the launches overlap across ranks, a rank already in launch k
while a peer is still in k - 1; a wait of launch k on that peer then waits for it). `critical_s`: the part of
the loop's critical path in launch k (the parts sum to the loop time).
"""

from __future__ import annotations

from dataclasses import dataclass

from mc2emu.predict.analysis import ReplayError
from mc2emu.predict.replay import Prediction

_US = 1e6


@dataclass(frozen=True)
class LaunchRow:
    """One launch of the loop over every rank (module docstring)."""

    launch: int
    begin_s: float
    end_s: float
    device_s: float
    skew_s: float
    gap_s: float | None   # None: the first launch
    critical_s: float
    per_rank: dict[int, tuple[float, float]]   # rank -> (begin_s, end_s)


@dataclass(frozen=True)
class LoopPrediction:
    """The loop of a stream replay: its launches and total time (`total_s`: first begin to last end)."""

    rows: tuple[LaunchRow, ...]
    total_s: float
    ranks: int

    @property
    def launches(self) -> int:
        return len(self.rows)

    @property
    def mean_launch_s(self) -> float:
        """The loop time per launch (what a launch costs in the loop)."""
        return self.total_s / len(self.rows)

    @property
    def max_skew_s(self) -> float:
        return max(r.skew_s for r in self.rows)


def loop_of(p: Prediction) -> LoopPrediction:
    """The loop of `p` (every rank must have run the same number of launches)."""
    by_launch: dict[int, dict[int, tuple[float, float]]] = {}
    ranks = {s.rank for s in p.launches}
    for s in p.launches:
        by_launch.setdefault(s.launch, {})[s.rank] = (s.begin_s, s.end_s)
    short = {k: sorted(ranks - set(v)) for k, v in by_launch.items() if set(v) != ranks}
    if short:
        k = min(short)
        raise ReplayError(f"launch {k} has no record on rank(s) {short[k]}: every rank of a loop runs every launch")
    rows: list[LaunchRow] = []
    prev_end: float | None = None
    for k in sorted(by_launch):
        per = by_launch[k]
        begin = min(b for b, _ in per.values())
        end = max(e for _, e in per.values())
        rows.append(LaunchRow(k, begin, end, max(e - b for b, e in per.values()),
                              max(b for b, _ in per.values()) - begin,
                              None if prev_end is None else begin - prev_end, p.critical_by_launch.get(k, 0.0),
                              dict(sorted(per.items()))))
        prev_end = end
    return LoopPrediction(tuple(rows), p.total_s, len(ranks))


def format_loop(loop: LoopPrediction, title: str = "") -> str:
    """The per-launch table and the loop's totals (plain text, times in us)."""
    cols = ["launch", "begin us", "end us", "device us", "skew us", "gap us", "critical us"]
    body = [[str(r.launch), f"{r.begin_s * _US:.2f}", f"{r.end_s * _US:.2f}", f"{r.device_s * _US:.2f}",
             f"{r.skew_s * _US:.2f}", "-" if r.gap_s is None else f"{r.gap_s * _US:.2f}",
             f"{r.critical_s * _US:.2f}"] for r in loop.rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    lines = [title] if title else []
    lines.append("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths, strict=True)).rstrip() for b in body]
    lines.append(f"loop: {loop.launches} launch(es) on {loop.ranks} rank(s) in {loop.total_s * _US:.2f} us "
                 f"({loop.mean_launch_s * _US:.2f} us per launch; largest skew between ranks "
                 f"{loop.max_skew_s * _US:.2f} us)")
    return "\n".join(lines)


def chain_loop(singles: list[Prediction]) -> LoopPrediction:
    """The loop of one NPU's launches, each replayed alone (`singles`, in stream order, one rank): each begins
    when the one before ends (nothing else crosses launches on one NPU)."""
    if not singles:
        raise ReplayError("no launches to chain")
    rows: list[LaunchRow] = []
    t = 0.0
    for k, p in enumerate(singles):
        ranks = sorted(p.per_rank_s)
        rows.append(LaunchRow(k, t, t + p.total_s, p.total_s, 0.0, None if k == 0 else 0.0, p.total_s,
                              {r: (t, t + p.per_rank_s[r]) for r in ranks}))
        t += p.total_s
    return LoopPrediction(tuple(rows), t, len(singles[0].per_rank_s))
