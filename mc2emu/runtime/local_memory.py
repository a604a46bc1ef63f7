"""Per-core local buffers: L1, L0A, L0B, L0C, bias table and fixpipe buffer on an AIC; UB on an AIV.

Kernels allocate named regions once (like `TPipe::InitBuffer`) and reuse them; the total per position is
checked against the platform table, so a tiling that would not fit on the device fails here with a
`CapacityError` naming the buffer, the request and the capacity.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.arch.platform import CoreType, PlatformSpec
from mc2emu.runtime.hazards import CapacityError

if TYPE_CHECKING:
    from collections.abc import Sequence


class Position(enum.Enum):
    """`TPosition` / `QuePosition` names of the local memories."""

    A1 = "L1"      # L1 (A1/B1 share it)
    A2 = "L0A"
    B2 = "L0B"
    CO1 = "L0C"
    C2 = "BT"      # bias table
    C2PIPE2GM = "FB"  # fixpipe buffer
    VECCALC = "UB"


def _capacities(platform: PlatformSpec, core_type: CoreType) -> dict[Position, int]:
    if core_type is CoreType.AIC:
        return {Position.A1: platform.l1_size, Position.A2: platform.l0a_size, Position.B2: platform.l0b_size,
                Position.CO1: platform.l0c_size, Position.C2: platform.bias_table_size,
                Position.C2PIPE2GM: platform.fixpipe_buffer_size}
    return {Position.VECCALC: platform.ub_usable_size}


class LocalMemory:
    """The local memories of one core."""

    def __init__(self, platform: PlatformSpec, core_type: CoreType, label: str) -> None:
        self.label = label
        self.capacity = _capacities(platform, core_type)
        self.used: dict[Position, int] = dict.fromkeys(self.capacity, 0)
        self.regions: dict[tuple[Position, str], np.ndarray] = {}

    def allocate(self, pos: Position, name: str, shape: Sequence[int] | int, dtype: np.dtype | type) -> np.ndarray:
        """Reserve a named region; allocating the same name again returns the same region when it fits."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if pos not in self.capacity:
            raise CapacityError(f"{self.label}: {pos.value} does not exist on this core type")
        key = (pos, name)
        old = self.regions.get(key)
        if old is not None:
            if old.nbytes >= nbytes:
                return old.reshape(-1).view(np.uint8)[:nbytes].view(dtype).reshape(shape)
            self.used[pos] -= old.nbytes
        if self.used[pos] + nbytes > self.capacity[pos]:
            raise CapacityError(
                f"{self.label}: {pos.value} region '{name}' of {nbytes} B does not fit: {self.used[pos]} B "
                f"of {self.capacity[pos]} B already in use (capacity from the platform table)")
        region = np.zeros(shape, dtype=dtype)
        self.regions[key] = region
        self.used[pos] += nbytes
        return region
