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
    M 16384 K 2304 N 7168, OOM-killed on 24 GB)."""

    def __init__(self, entities: list[tuple[int, str]], lengths: dict[tuple[int, str], int],
                 preds: Mapping[tuple[int, str, int], Sequence[tuple[int, str, int]]],
                 tracked: Sequence[tuple[int, str]] | None = None) -> None:
        self.index = index = {ent: i for i, ent in enumerate(entities if tracked is None else tracked)}
        self.n = n_ent = len(index)
        merges: dict[tuple[int, str], list[int]] = defaultdict(list)
        for (r, core, pos), srcs in preds.items():
            if srcs and pos < lengths.get((r, core), 0):
                merges[(r, core)].append(pos)
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
                # A tuple is shared by every event with the same sources (`_check`): keyed by identity.
                key = id(srcs) if type(srcs) is tuple else tuple(srcs)
                joined = join.get(key)
                if joined is None:
                    blocker = next(((sr, sc) for sr, sc, sp in srcs if done[(sr, sc)] <= sp), None)
                    if blocker is not None:
                        done[ent] = pos          # the events before the merge have no sources
                        waiting[blocker].append(ent)
                        break
                    joined = join[key] = self._join(srcs)
                vc = mvc[-1].copy() if mvc else np.zeros(n_ent, dtype=np.int64)
                np.maximum(vc, joined, out=vc)
                if (own := index.get(ent)) is not None:
                    vc[own] = pos + 1
                mvc.append(vc)
                done[ent] = pos + 1
            if done[ent] > start:
                for w in waiting.pop(ent, ()):
                    if w not in queued:
                        queue.append(w)
                        queued.add(w)

    def _join(self, srcs: Sequence[tuple[int, str, int]]) -> np.ndarray:
        """The element-wise maximum of the clocks of swept source events."""
        vc = np.zeros(self.n, dtype=np.int64)
        for sr, sc, sp in srcs:
            src = (sr, sc)
            base = self._base(src, sp)
            if base is not None:
                np.maximum(vc, base, out=vc)
            j = self.index.get(src)
            if j is not None and vc[j] <= sp:
                vc[j] = sp + 1
        return vc

    def _base(self, ent: tuple[int, str], pos: int) -> np.ndarray | None:
        """The clock of the last merge of `ent` at or before swept event `pos` (None: no merge yet)."""
        i = bisect.bisect_right(self._merges.get(ent, ()), pos)
        return self._mvc[ent][i - 1] if i else None

    def swept(self, ent: tuple[int, str]) -> int:
        return self._done.get(ent, 0)

    def at(self, ent: tuple[int, str], pos: int) -> np.ndarray:
        """The clock of swept event `pos` of `ent` (a fresh array)."""
        base = self._base(ent, pos)
        vc = base.copy() if base is not None else np.zeros(self.n, dtype=np.int64)
        if (own := self.index.get(ent)) is not None:
            vc[own] = pos + 1
        return vc

    def component(self, ent: tuple[int, str], pos: int, j: int) -> int:
        """`at(ent, pos)[j]` without building the clock."""
        if j == self.index.get(ent):
            return pos + 1
        base = self._base(ent, pos)
        return int(base[j]) if base is not None else 0


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
