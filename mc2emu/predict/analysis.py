"""What the replay computes on its timed node graph, and the parts of its result.

`evaluate(g)` gives every node's start, end and critical predecessor (Kahn's order over the predecessor
lists: a node starts at the latest end of its predecessors plus the edge latency; a cycle is a
`ReplayError`). `union_of` / `length_of` / `overlap_of` measure how much communication time the cube hides.
`Cat` names what a node's time is spent on; `Span`, `PathStep` and `CoreUse` are the parts of a
`mc2emu.predict.replay.Prediction`. The graph itself is built by `mc2emu.predict.replay`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    """The node graph as `evaluate` reads it: per node its duration, its predecessors (node, edge latency)
    and where it runs (for the error naming a node of a cycle)."""

    dur: list[float]
    preds: list[list[tuple[int, float]]]
    rank: list[int]
    core: list[str]
    what: list[str]


def evaluate(g: NodeGraph) -> tuple[list[float], list[float], list[int]]:
    """Start, end and critical predecessor of every node (Kahn's order over the predecessor lists)."""
    n = len(g.dur)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for v, ps in enumerate(g.preds):
        indeg[v] = len(ps)
        for p, _ in ps:
            succ[p].append(v)
    start = [0.0] * n
    end = [0.0] * n
    crit = [-1] * n
    ready = [v for v in range(n) if indeg[v] == 0]
    done = 0
    dur, preds = g.dur, g.preds
    while ready:
        v = ready.pop()
        done += 1
        s, best = 0.0, -1
        for p, w in preds[v]:
            t = end[p] + w
            if t > s or best < 0:
                s, best = max(s, t), p
        start[v] = s
        end[v] = s + dur[v]
        crit[v] = best
        for u in succ[v]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if done != n:
        stuck = next(v for v in range(n) if indeg[v] > 0)
        raise ReplayError(f"the recorded dependencies contain a cycle (e.g. rank {g.rank[stuck]} {g.core[stuck]} "
                          f"'{g.what[stuck]}'): records of different runs mixed, or a record missing")
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
