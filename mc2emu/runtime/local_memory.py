"""Per-core local buffers: L1, L0A, L0B, L0C, bias table and fixpipe buffer on an AIC; UB on an AIV.

Kernels allocate named regions once (like `TPipe::InitBuffer`) and reuse them; the total per position is
checked against the platform table, so a tiling that would not fit on the device fails here with a
`CapacityError` naming the buffer, the request and the capacity.

UB is one memory: every UB slot is a view into one byte array per AIV, the physical UB (`ub_size`); the
kernel may use its first `AscendC::TOTAL_UB_SIZE` bytes (`ub_usable_size`), the rest is the runtime's
(slot `UB_RESERVED_SLOT`). `allocate` places a slot first-fit (32-byte aligned) where no other slot is;
`allocate_at` places it at the kernel's own byte offset, as a kernel that computes its UB addresses does
(`LocalTensor` at `TOTAL_UB_SIZE / 2 * i`): slots that overlap share bytes, so one slot's writes corrupt the
other's data as on the device, and each overlap is filed as a `UB_OVERLAP` hazard naming both slots and
their byte ranges (a warning: the extents overlap; whether live bytes are lost shows in the data).
In a protocol-only run (`data=False`) every region is a `LocalRegion` (`runtime.local_region`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.arch.platform import CoreType, PlatformSpec
from mc2emu.runtime.hazards import CapacityError, Hazard, Severity
from mc2emu.runtime.local_region import local_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mc2emu.runtime.hazards import HazardLog

# UB addresses are 32-byte aligned (ONE_BLK_SIZE).
UB_ALIGN = 32
# The bytes past TOTAL_UB_SIZE (the runtime's reserve) as a slot, so a kernel slot running into them overlaps it.
UB_RESERVED_SLOT = "runtime reserved"


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
    """The local memories of one core (UB: one byte array, module docstring)."""

    def __init__(self, platform: PlatformSpec, core_type: CoreType, label: str,
                 hazards: HazardLog | None = None, *, data: bool = True) -> None:
        self.label = label
        self.data = data   # False: regions are `LocalRegion`s (payload bytes marked, not held)
        self.capacity = _capacities(platform, core_type)
        self.used: dict[Position, int] = dict.fromkeys(self.capacity, 0)
        self.regions: dict[tuple[Position, str], np.ndarray] = {}
        self.hazards = hazards
        self.ub_physical_size = platform.ub_size
        # UB slots: name -> (byte offset, bytes); the reserve past TOTAL_UB_SIZE is one of them
        self.ub_slots: dict[str, tuple[int, int]] = {}
        if Position.VECCALC in self.capacity and platform.ub_size > platform.ub_usable_size:
            self.ub_slots[UB_RESERVED_SLOT] = (platform.ub_usable_size, platform.ub_size - platform.ub_usable_size)
        self._ub: np.ndarray | None = None
        self._overlaps_reported: set[tuple[str, str, int, int]] = set()

    @property
    def ub(self) -> np.ndarray:
        """This AIV's UB as bytes (made at first use)."""
        if self._ub is None:
            if Position.VECCALC not in self.capacity:
                raise CapacityError(f"{self.label}: UB does not exist on this core type")
            self._ub = self._zeros(self.ub_physical_size)
        return self._ub

    def _zeros(self, nbytes: int) -> np.ndarray:
        return np.zeros(nbytes, dtype=np.uint8) if self.data else local_bytes(nbytes)

    def _ub_view(self, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.ub[offset: offset + nbytes].view(dtype).reshape(shape)

    def allocate(self, pos: Position, name: str, shape: Sequence[int] | int, dtype: np.dtype | type) -> np.ndarray:
        """Reserve a named region; allocating the same name again returns the same region when it fits."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if pos not in self.capacity:
            raise CapacityError(f"{self.label}: {pos.value} does not exist on this core type")
        if pos is Position.VECCALC:
            return self._allocate_ub(name, shape, dtype, nbytes)
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
        region = self._zeros(nbytes).view(dtype).reshape(shape)
        self.regions[key] = region
        self.used[pos] += nbytes
        return region

    def _allocate_ub(self, name: str, shape: tuple[int, ...], dtype: np.dtype, nbytes: int) -> np.ndarray:
        """First fit in [0, TOTAL_UB_SIZE) clear of every other slot; the new bytes are zeroed."""
        pos = Position.VECCALC
        old = self.ub_slots.get(name)
        if old is not None:
            if old[1] >= nbytes:
                return self._ub_view(old[0], shape, dtype)
            del self.ub_slots[name]
            self.used[pos] -= old[1]
        cap = self.capacity[pos]
        busy = sorted(self.ub_slots.values())
        offset = 0
        for o, n in busy:
            if offset + nbytes <= o:
                break
            offset = max(offset, -(-(o + n) // UB_ALIGN) * UB_ALIGN)
        if offset + nbytes > cap:
            if old is not None:
                self.ub_slots[name] = old
                self.used[pos] += old[1]
            raise CapacityError(
                f"{self.label}: {pos.value} region '{name}' of {nbytes} B does not fit: {self.used[pos]} B "
                f"of {cap} B already in use (capacity from the platform table)")
        self.ub_slots[name] = (offset, nbytes)
        self.used[pos] += nbytes
        self.ub[offset: offset + nbytes] = 0
        return self._ub_view(offset, shape, dtype)

    def allocate_at(self, name: str, offset: int, shape: Sequence[int] | int, dtype: np.dtype | type) -> np.ndarray:
        """A UB slot at the kernel's own byte offset; an overlap with another slot is reproduced (shared
        bytes) and reported (`UB_OVERLAP`); past the physical UB the device faults: `CapacityError`."""
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        offset = int(offset)
        end = offset + nbytes
        if offset < 0 or end > self.ub_physical_size:
            raise CapacityError(
                f"{self.label}: UB slot '{name}' [{offset}, {end}) lies outside the {self.ub_physical_size} B UB")
        old = self.ub_slots.get(name)
        if old is not None:
            self.used[Position.VECCALC] -= min(old[1], max(0, self.capacity[Position.VECCALC] - old[0]))
        self.ub_slots[name] = (offset, nbytes)
        self.used[Position.VECCALC] += min(nbytes, max(0, self.capacity[Position.VECCALC] - offset))
        for other, (o, n) in self.ub_slots.items():
            if other != name and o < end and offset < o + n:
                self._report_overlap(name, (offset, end), other, (o, o + n))
        return self._ub_view(offset, shape, dtype)

    def _report_overlap(self, name: str, rng: tuple[int, int], other: str, other_rng: tuple[int, int]) -> None:
        lo, hi = max(rng[0], other_rng[0]), min(rng[1], other_rng[1])
        key = (*sorted((name, other)), lo, hi)
        if self.hazards is None or key in self._overlaps_reported:
            return
        self._overlaps_reported.add(key)  # type: ignore[arg-type]
        self.hazards.report(
            Hazard.UB_OVERLAP, self.label,
            f"UB slot '{name}' [{rng[0]}, {rng[1]}) overlaps slot '{other}' [{other_rng[0]}, {other_rng[1]}) in "
            f"bytes [{lo}, {hi}) ({hi - lo} B): writes to one corrupt the other, as on the device",
            severity=Severity.WARNING, slot=name, range=rng, other=other, other_range=other_rng, overlap=(lo, hi))
