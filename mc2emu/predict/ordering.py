"""Happens-before over recorded events: the replay's dependency graph without its clock.

`event_order` builds the graph `replay` times (each core's program order and pipes, the synchronization the
records prove: flag rounds, TeamBarrier stores and observations, signal posts, put completion, SyncAll and
launch joins, HCCL repeats) and answers, for two recorded events, whether one must come before the other.
The answer does not depend on timing: a loaded machine changes when things happened, not what waited for what.

"Before" is happens-before: a path of program-order and synchronization edges. The link FIFO edges
(transfer -> transfer) are recorded queue orders, not synchronization, and are left out. Two events with no
path either way are `concurrent`: the device may overlap them (e.g. a reduction of round t on the AIVs and
the matmul of round t + 1 on the AICs of the compute-first reduce-scatter).

    order = event_order(gather_records(comm, recorder, root=None))
    i, j = order.index(rank, rec_a), order.index(rank, rec_b)  # records by (rank, record) identity
    order.before(i, j), order.concurrent(i, j)

Records that are no node of the replay (a wait's BEGIN, an AIC's GM write carried by its FIXPIPE, a GM read
folded into the put it sources, host markers) have no index (`index` returns None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mc2emu.predict.cost_model import DEFAULT_COST_MODEL
from mc2emu.predict.replay import Cat, ReplayError, _Builder
from mc2emu.runtime.events import Event


@dataclass
class EventOrder:
    """Happens-before between the recorded events of one run (module docstring)."""

    records: list[Event]          # every rank's records, each rank's in program (seq) order
    node_of: dict[int, int]             # record position in `records` -> graph node
    ancestors: list[int]                # per node: bit set of the nodes that happen before it

    def index(self, rank: int, rec: Event) -> int | None:
        """The graph node of record `rec` of `rank` (None: no node), found by identity then equality."""
        for pos, r in enumerate(self.records):
            if r.rank == rank and (r is rec or r == rec):
                return self.node_of.get(pos)
        return None

    def before(self, a: int, b: int) -> bool:
        """Node a happens before node b."""
        return bool(self.ancestors[b] >> a & 1)

    def concurrent(self, a: int, b: int) -> bool:
        """Neither happens before the other (the device may run them at the same time)."""
        return a != b and not self.before(a, b) and not self.before(b, a)


def event_order(per_rank: Mapping[int, tuple[int, Sequence[Event]] | Sequence[Event]]) -> EventOrder:
    """The happens-before relation of a recorded run; `per_rank` as `replay` takes it."""
    if not per_rank:
        raise ReplayError("no records to order")
    b = _Builder(DEFAULT_COST_MODEL)
    for rank in sorted(per_rank):
        item = per_rank[rank]
        offset, recs = item if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int) else (0, item)
        b.rank(rank, offset, recs)
    b.finish()
    g = b.g
    n = len(g.dur)
    preds = [[p for p in ps if not (g.cat[p] == Cat.LINK and g.cat[v] == Cat.LINK)]
             for v, ps in enumerate(g.preds)]
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [len(ps) for ps in preds]
    for v, ps in enumerate(preds):
        for p in ps:
            succ[p].append(v)
    anc = [0] * n
    ready = [v for v in range(n) if indeg[v] == 0]
    done = 0
    while ready:
        v = ready.pop()
        done += 1
        acc = 0
        for p in preds[v]:
            acc |= anc[p] | (1 << p)
        anc[v] = acc
        for u in succ[v]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if done != n:
        raise ReplayError("the recorded dependencies contain a cycle: records of different runs mixed, or missing")
    node_of = {rec: v for v, rec in enumerate(g.rec) if rec >= 0}
    return EventOrder(b.records, node_of, anc)
