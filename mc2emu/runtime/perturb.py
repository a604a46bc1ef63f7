"""Seeded timing perturbation: the only source of artificial delay in mc2emu.

Each (rank, core) draws from its own `numpy.random.Generator` seeded from (seed, rank, core), so a run
with the same seed makes the same draws in each core's program order; the resulting interleaving still
depends on the OS scheduler, which is the point: outputs of a correct kernel must not change.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field

import numpy as np

# Delays are short so a stress run stays fast, yet long enough to reorder threads on a loaded machine.
DEFAULT_MAX_DELAY_S = 2e-3
DEFAULT_PROBABILITY = 0.25
# What a Set held back by `reorder_sets` may be overtaken by (checkpoint names of the core's later
# operations): the next Set, an mmad, and the one-sided puts and signal posts a UDMA kernel issues after
# its `CrossCoreSetFlag` (no pipe barrier orders the Set's pipe against the put engine, so the consumer
# may see the flag after the next round's puts started). A wait, a SyncAll (`pipe_barrier(PIPE_ALL)` +
# the cross-core barrier) and the kernel end complete the held Set: the device orders those.
SET_OVERTAKEN_BY = frozenset({"set", "mmad", "put", "signal"})
# A core's plain store into window memory (per_block's status-word reset after its poll). Not a default point:
# opt in with `points=DEFAULT_POINTS | {WINDOW_STORE}` (a delay there is what lets a peer's next-launch post
# land before the reset that erases it: docs/hazards.md "Between launches").
WINDOW_STORE = "window_store"
DEFAULT_POINTS = frozenset({"set", "wait", "put", "mmad", "sync_all", "signal"})


@dataclass
class PerturbPolicy:
    seed: int
    probability: float = DEFAULT_PROBABILITY
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    points: frozenset[str] = DEFAULT_POINTS
    # Consecutive Sets of one core may complete out of order (hardware does not order them).
    reorder_sets: bool = True
    swap_probability: float = 0.5
    set_overtaken_by: frozenset[str] = SET_OVERTAKEN_BY
    _rngs: dict[tuple[int, str], np.random.Generator] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _rng(self, rank: int, core: str) -> np.random.Generator:
        key = (rank, core)
        rng = self._rngs.get(key)
        if rng is None:
            with self._lock:
                rng = self._rngs.get(key)
                if rng is None:
                    rng = np.random.default_rng([self.seed, rank, zlib.crc32(core.encode())])
                    self._rngs[key] = rng
        return rng

    def delay(self, point: str, rank: int, core: str) -> float:
        if point not in self.points:
            return 0.0
        rng = self._rng(rank, core)
        if rng.random() >= self.probability:
            return 0.0
        return float(rng.random() * self.max_delay_s)

    def swap(self, rank: int, core: str) -> bool:
        """Whether the next Set of this core overtakes the one held back."""
        return bool(self._rng(rank, core).random() < self.swap_probability)
