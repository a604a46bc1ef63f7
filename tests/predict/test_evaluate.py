"""`mc2emu.predict.analysis.evaluate`, the replay's timing of its node graph, against a second implementation: the
longest-path recursion written out (a node starts at the latest end of its predecessors plus the edge latency, the
first predecessor reaching that is its critical one) on random graphs whose predecessors come before and after
them in node order, with and without edge latencies; and a cycle refused naming a node on it."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field

import pytest

from mc2emu.predict import ReplayError
from mc2emu.predict.analysis import evaluate


@dataclass
class Graph:
    dur: list[float]
    preds: list[list[int]]
    lat: list[list[float] | None]
    rank: list[int] = field(default_factory=list)
    core: list[str] = field(default_factory=list)

    def label(self, v: int) -> str:
        return f"node {v}"


def random_dag(rng: random.Random, n: int) -> Graph:
    order = list(range(n))
    rng.shuffle(order)   # topological order != node order: the evaluation may not walk the nodes as numbered
    pos = {v: i for i, v in enumerate(order)}
    preds, lat = [], []
    for v in range(n):
        earlier = [u for u in range(n) if pos[u] < pos[v]]
        ps = rng.sample(earlier, min(len(earlier), rng.randrange(4)))
        preds.append(ps)
        lat.append([rng.choice((0.0, 0.5, 2.0)) for _ in ps] if rng.random() < 0.4 else None)
    dur = [rng.choice((0.0, 1.0, 1.5, 3.0)) for _ in range(n)]
    return Graph(dur, preds, lat, [0] * n, ["AIC0"] * n)


def longest_paths(g: Graph) -> tuple[list[float], list[float], list[int]]:
    n = len(g.dur)
    memo: dict[int, tuple[float, int]] = {}

    def start(v: int) -> tuple[float, int]:
        if v not in memo:
            s, best = 0.0, -1
            for i, p in enumerate(g.preds[v]):
                w = g.lat[v][i] if g.lat[v] is not None else 0.0
                t = start(p)[0] + g.dur[p] + w
                if best < 0 or t > s:
                    s, best = max(s, t), p
            memo[v] = (s, best)
        return memo[v]

    starts = [start(v) for v in range(n)]
    return [s for s, _ in starts], [s + d for (s, _), d in zip(starts, g.dur, strict=True)], [b for _, b in starts]


@pytest.mark.parametrize("seed", range(40))
def test_times_and_critical_predecessors_equal_the_longest_path_recursion(seed):
    sys.setrecursionlimit(10_000)
    g = random_dag(random.Random(seed), 60)
    start, end, crit = evaluate(g)
    want_start, want_end, want_crit = longest_paths(g)
    assert list(start) == want_start and list(end) == want_end and crit == want_crit


def test_a_cycle_is_refused_naming_a_node_on_it():
    # 0 -> 1 -> 2 -> 3 -> 1 (a cycle of 1, 2, 3), and 4 after 3: every node of the cycle is named on some walk
    g = Graph([1.0] * 5, [[], [0, 3], [1], [2], [3]], [None] * 5, [0, 1, 2, 3, 4], ["AIV0"] * 5)
    with pytest.raises(ReplayError, match=r"cycle \(e\.g\. rank ([123]) AIV0 'node \1'\)"):
        evaluate(g)
