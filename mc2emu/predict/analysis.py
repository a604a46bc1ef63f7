"""What the replay computes on its timed node graph, and the parts of its result.

`evaluate(g)` gives every node's start, end and critical predecessor (depth-first over the predecessor
lists: a node starts at the latest end of its predecessors plus the edge latency; a cycle is a
`ReplayError`). `union_of` / `length_of` / `overlap_of` measure how much communication time the cube hides.
`Cat` names what a node's time is spent on; `Span`, `PathStep` and `CoreUse` are the parts of a
`mc2emu.predict.replay.Prediction`. The graph itself is built by `mc2emu.predict.replay`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from mc2emu.arch.errors import Mc2EmuError


class ReplayError(Mc2EmuError):
    """The records cannot be replayed (a dependency cycle, or records of one rank missing)."""


class Cat:
    """Node categories (what a node's time is spent on)."""

    MMAD = "mmad"
    MTE2 = "mte2"
    MTE3 = "mte3"
    FIXPIPE = "fixpipe"
    LINK = "link"          # a transfer occupying the links
    ISSUE = "issue"        # a core or HCCL server issuing a put / HCCL message
    SYNC = "sync"          # flag rounds, barrier joins
    WAIT = "wait"          # a blocking point of a core
    MARK = "mark"          # begin / end markers
    COMPUTE = frozenset({MMAD, MTE2, MTE3, FIXPIPE})


class Span(NamedTuple):
    """One node's modelled times (the virtual-time trace)."""

    rec: int          # index of its record in `Prediction.records` order (-1: a join or other derived node)
    rank: int
    core: str
    cat: str
    what: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class PathStep:
    """One node of the critical path."""

    rank: int
    core: str
    what: str
    cat: str
    start_s: float
    end_s: float
    wait_s: float   # edge latency between the previous step's end and this start
    launch: int = 0  # the launch number (on its rank's stream) the step belongs to


@dataclass(frozen=True)
class CoreUse:
    """Busy time of one core by category, over the predicted kernel time."""

    rank: int
    core: str
    busy_s: Mapping[str, float]
    utilisation: float   # cube (AIC) or MTE (AIV / other) busy share of the kernel time


class NodeGraph(Protocol):
    """The node graph as `evaluate` reads it: per node its duration, its predecessors and their edge latencies
    (`lat[v]`, parallel to `preds[v]`; None when all are 0), and what it is (for the error naming a node of a
    cycle)."""

    @property
    def dur(self) -> Sequence[float]: ...

    preds: list[list[int]]
    lat: list[list[float] | None]
    rank: list[int]
    core: list[str]

    def label(self, v: int) -> str: ...


def evaluate(g: NodeGraph) -> tuple[Sequence[float], Sequence[float], list[int]]:
    """Start, end and critical predecessor of every node: a node starts at the latest end of its predecessors
    plus the edge latency (the first predecessor reaching it is the critical one). Depth-first over the
    predecessor lists (no successor lists: at 16 ranks they were ~1 GB); a predecessor met again on the path
    being followed is a cycle, a `ReplayError` naming that node."""
    n = len(g.dur)
    start = array("d", bytes(8 * n))
    end = array("d", bytes(8 * n))
    crit = [-1] * n
    state = bytearray(n)   # 0 not reached, 1 on the path being followed, 2 timed
    dur, preds, lat = g.dur, g.preds, g.lat
    for root in range(n):
        if state[root]:
            continue
        stack = [root]
        while stack:
            v = stack[-1]
            if state[v] == 0:
                state[v] = 1
                for p in preds[v]:
                    if state[p] == 0:
                        stack.append(p)
                    elif state[p] == 1:
                        raise ReplayError(f"the recorded dependencies contain a cycle (e.g. rank {g.rank[p]} "
                                          f"{g.core[p]} '{g.label(p)}'): records of different runs mixed, or a "
                                          f"record missing")
                continue
            stack.pop()
            if state[v] == 2:
                continue
            s, best = 0.0, -1
            ws = lat[v]
            if ws is None:
                for p in preds[v]:
                    t = end[p]
                    if t > s or best < 0:
                        s, best = max(s, t), p
            else:
                for p, w in zip(preds[v], ws, strict=True):
                    t = end[p] + w
                    if t > s or best < 0:
                        s, best = max(s, t), p
            start[v] = s
            end[v] = s + dur[v]
            crit[v] = best
            state[v] = 2
    return start, end, crit


def union_of(iv: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(i for i in iv if i[1] > i[0]):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def length_of(iv: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in iv)


def overlap_of(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    i = j = 0
    tot = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            tot += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot
