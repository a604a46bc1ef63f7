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


@dataclass
class PerturbPolicy:
    seed: int
    probability: float = DEFAULT_PROBABILITY
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    points: frozenset[str] = frozenset({"set", "wait", "put", "mmad", "sync_all", "signal"})
    # Consecutive Sets of one core may complete out of order (hardware does not order them).
    reorder_sets: bool = True
    swap_probability: float = 0.5
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
