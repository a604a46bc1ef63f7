"""Vector clocks over the happens-before graph of HappensBeforeChecker (mc2emu/check/happens_before.py).

`_Clocks` sweeps the sync events of every (rank, core) in topological order and keeps a clock only at the
events with sources (merges); the checker asks it whether a put's completion happens before a read.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
from collections import defaultdict, deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


# A clock component counts events of one chain: int32 holds 2^31 of them and halves the clocks' memory (a clock
# is stored at every merge of every entity: per_block at 16 ranks, M 16384, ~1.4 GB per rank in int64).
CLOCK_DTYPE = np.int32


class _Clocks:
    """Vector clocks of the sync events of every entity (rank, core): `at(ent, pos)[j]` counts the events of
    entity j that happen before or at event `pos` of `ent` (program order plus the `preds` edges: event
    (r, core, pos) -> its source events (r', core', pos')).

    A topological sweep: an entity blocked on a source event waits for that source's entity to advance, so each
    entity is re-tried only when something it waits for moved; events on or after a cycle stay unswept
    (`swept(ent)` counts the swept prefix). A clock is stored only at an event with sources (a merge): an event
    without sources has the clock of the entity's last merge at or before it, its own component advanced. Most
    records are Sets, puts and quiets, so the sweep steps from merge to merge.

    `tracked`: the entities whose components the caller reads (default: all). A clock restricted to them is
    exact on them (joins and program-order steps are per component); `index` then holds only them. One rank's
    check reads only the components of the cores that put into it and of its own reading cores: tracking every
    (rank, core) made each rank hold merges x R x cores clocks (1.3 GB per rank at 16 ranks, QMRS per_block
    M 16384 K 2304 N 7168, OOM-killed on 24 GB).

    `chains`: lists of entities each of which happens wholly after the one before it in its list (a core's logs
    of launches 0, 1, 2 on one rank: stream order puts every event of launch k before launch k + 1 starts). A
    chain is one totally ordered sequence of events, so it needs one component, not one per entity: event `pos`
    of an entity is event `offset + pos` of its chain, `offset` the lengths of the entities before it. A clock
    per (rank, core, launch) made the clocks of a loop of L launches grow as L^2 (AG 2 ranks, 40 launches:
    1 GB); per (rank, core) they grow as L. A chain is tracked when any of its entities is."""

    def __init__(self, entities: list[tuple[int, str]], lengths: dict[tuple[int, str], int],
                 preds: Mapping[tuple[int, str, int], Sequence[tuple[int, str, int]]],
                 tracked: Sequence[tuple[int, str]] | None = None,
                 chains: Sequence[Sequence[tuple[int, str]]] = ()) -> None:
        head: dict[tuple[int, str], tuple[tuple[int, str], int]] = {}   # entity -> (its chain's first, offset)
        for chain in chains:
            offset = 0
            for ent in chain:
                head[ent] = (chain[0], offset)
                offset += lengths.get(ent, 0)
        for ent in entities:
            head.setdefault(ent, (ent, 0))   # an entity in no chain is a chain of its own
        self.index: dict[tuple[int, str], int] = {}   # chain (its first entity) -> its component
        for ent in entities if tracked is None else tracked:
            self.index.setdefault(head.get(ent, (ent, 0))[0], len(self.index))
        index = self.index
        # entity -> (component, offset): where its events count
        self._slot = slot = {ent: (index[first], off) for ent, (first, off) in head.items() if first in index}
        self.n = n_ent = len(index)
        merges: dict[tuple[int, str], list[int]] = defaultdict(list)
        uses: dict[object, int] = defaultdict(int)   # merges per source list: its join is dropped after the last
        for (r, core, pos), srcs in preds.items():
            if srcs and pos < lengths.get((r, core), 0):
                merges[(r, core)].append(pos)
                uses[_source_key(srcs)] += 1
        for mlist in merges.values():
            mlist.sort()
        self._merges = merges                                               # merge positions, ascending
        self._mvc: dict[tuple[int, str], list[np.ndarray]] = {ent: [] for ent in entities}   # their clocks
        done = self._done = dict.fromkeys(entities, 0)
        # The join of a source list, once all its sources are swept: every core acquiring one round of a flag
        # (a SyncAll: each core waits on every core's Set) has the same sources, so it is computed once.
        join: dict[object, np.ndarray] = {}
        waiting: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
        queue = deque(entities)
        queued = set(entities)
        while queue:
            ent = queue.popleft()
            queued.discard(ent)
            r, core = ent
            start = done[ent]
            mpos, mvc, length = merges.get(ent, ()), self._mvc[ent], lengths.get(ent, 0)
            while done[ent] < length:
                if len(mvc) == len(mpos):
                    done[ent] = length           # no merge left: the rest has no sources
                    break
                pos = mpos[len(mvc)]
                srcs = preds[(r, core, pos)]
                key = _source_key(srcs)
                joined = join.get(key)
                if joined is None:
                    blocker = next(((sr, sc) for sr, sc, sp in srcs if done[(sr, sc)] <= sp), None)
                    if blocker is not None:
                        done[ent] = pos          # the events before the merge have no sources
                        waiting[blocker].append(ent)
                        break
                    joined = join[key] = self._join(srcs)
                vc = mvc[-1].copy() if mvc else np.zeros(n_ent, dtype=CLOCK_DTYPE)
                np.maximum(vc, joined, out=vc)
                uses[key] -= 1
                if not uses[key]:      # a flag's one-to-one rounds: every join would be kept beside its clock
                    del join[key], uses[key]
                if (own := slot.get(ent)) is not None:
                    vc[own[0]] = own[1] + pos + 1
                mvc.append(vc)
                done[ent] = pos + 1
            if done[ent] > start:
                for w in waiting.pop(ent, ()):
                    if w not in queued:
                        queue.append(w)
                        queued.add(w)

    def _join(self, srcs: Sequence[tuple[int, str, int]]) -> np.ndarray:
        """The element-wise maximum of the clocks of swept source events."""
        vc = np.zeros(self.n, dtype=CLOCK_DTYPE)
        for sr, sc, sp in srcs:
            src = (sr, sc)
            base = self._base(src, sp)
            if base is not None:
                np.maximum(vc, base, out=vc)
            own = self._slot.get(src)
            if own is not None and vc[own[0]] <= own[1] + sp:
                vc[own[0]] = own[1] + sp + 1
        return vc

    def _base(self, ent: tuple[int, str], pos: int) -> np.ndarray | None:
        """The clock of the last merge of `ent` at or before swept event `pos` (None: no merge yet)."""
        i = bisect.bisect_right(self._merges.get(ent, ()), pos)
        return self._mvc[ent][i - 1] if i else None

    def swept(self, ent: tuple[int, str]) -> int:
        return self._done.get(ent, 0)

    def slot(self, ent: tuple[int, str]) -> tuple[int, int] | None:
        """(component, offset) of a tracked entity: its event `pos` is counted as `offset + pos + 1` there."""
        return self._slot.get(ent)

    def stamp(self, ent: tuple[int, str], pos: int) -> tuple[int, int] | None:
        """(component, value): a swept event `b` happens at or after event `pos` of tracked `ent` iff
        `at(b)[component] >= value` (None: `ent` is not tracked)."""
        own = self._slot.get(ent)
        return None if own is None else (own[0], own[1] + pos + 1)

    def at(self, ent: tuple[int, str], pos: int) -> np.ndarray:
        """The clock of swept event `pos` of `ent` (a fresh array)."""
        base = self._base(ent, pos)
        vc = base.copy() if base is not None else np.zeros(self.n, dtype=CLOCK_DTYPE)
        if (own := self._slot.get(ent)) is not None:
            vc[own[0]] = own[1] + pos + 1
        return vc

    def component(self, ent: tuple[int, str], pos: int, j: int) -> int:
        """`at(ent, pos)[j]` without building the clock."""
        own = self._slot.get(ent)
        if own is not None and j == own[0]:
            return own[1] + pos + 1
        base = self._base(ent, pos)
        return int(base[j]) if base is not None else 0

    def happens_before(self, a: tuple[int, str], a_pos: int, b: tuple[int, str], b_pos: int) -> bool:
        """Event `a_pos` of tracked `a` happens before (or is) swept event `b_pos` of `b`."""
        st = self.stamp(a, a_pos)
        if st is None:
            raise KeyError(f"{a} is not tracked")
        return self.component(b, b_pos, st[0]) >= st[1]


def _source_key(srcs: Sequence[tuple[int, str, int]]) -> object:
    """The join cache's key of a source list: a tuple is shared by every event with the same sources (`_check`)
    and keyed by identity (`preds` holds it for the whole sweep); a list by its content."""
    return id(srcs) if type(srcs) is tuple else tuple(srcs)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for a collective check: the checks build no cycles, and their many
    small records made every generation-2 pass walk the whole log (about a third of a check's time)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
