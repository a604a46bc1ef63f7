"""The FP32 L0C accumulator of one AIC: two halves, NZ fractal storage, and the emulator's working tile.

Emulates the L0C side of ops-tensor `block_mmad_qbmm_mx.h`: the tile tensor
`MakeTensor(MakeMemPtr<L0C, float>(l0cOffset), FrameLayoutFormat<NZLayoutPtn, Int<C0_SIZE_L0C>>{}(curM,
curN))` at `l0cOffset = (l0cPingPong_ & 1) * (TOTAL_L0C_SIZE / 2)` (seed 003 §9.2). In NZ order element
(r, c) of an (M, N) tile sits at float `(c // 16) * Align16(M) * 16 + r * 16 + c % 16`, so an (M, N) tile
occupies Align16(M) * Align16(N) floats.

The MMADs need a row-major tile for BLAS, so each half keeps a row-major *working tile* that is
authoritative while the same tile shape keeps using that half (the steady state). When a call uses a
half with another shape (tail tiles, or a splitK hazard accumulating onto a different tile's leftovers),
the old working tile is first scattered into the NZ storage and the new one gathered from it, so every
byte of L0C behaves as on the device, including what a wrong splitK sequence leaves behind. L0C starts
zeroed here (on the device: whatever the previous kernel left).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mc2emu.blaze.gemm.common_utils import DOUBLE_BUFFER_COUNT
from mc2emu.numerics.constants import C0_SIZE_L0C, FLOAT32_BYTES
from mc2emu.numerics.int_math import Align16
from mc2emu.numerics.payload import Payload
from mc2emu.runtime.hazards import CapacityError
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext



def nz_footprint(m: int, n: int) -> int:
    """Floats an (m, n) FP32 tile occupies in NZ order (fractals of 16 x 16)."""
    return Align16(m) * Align16(n)


class L0CBuffer:
    """The L0C of one core: `TOTAL_L0C_SIZE` bytes of float32 in NZ order, plus one working tile per half."""

    def __init__(self, ctx: CoreContext) -> None:
        self.total_bytes = ctx.device.platform.l0c_size
        self.storage = ctx.local.allocate(Position.CO1, "L0C", self.total_bytes // FLOAT32_BYTES, np.float32)
        self.half_bytes = self.total_bytes // DOUBLE_BUFFER_COUNT
        self._work: dict[int, np.ndarray] = {}  # l0cOffset (bytes) -> row-major working tile
        self.label = ctx.label
        self.data = ctx.device.data

    def tile(self, l0cOffset: int, m: int, n: int) -> np.ndarray:
        """The row-major (m, n) view of the tile at byte offset `l0cOffset`, capacity-checked."""
        need = nz_footprint(m, n) * FLOAT32_BYTES
        if l0cOffset + need > self.total_bytes:
            raise CapacityError(
                f"{self.label}: L0C tile ({m}, {n}) needs {need} B (NZ, Align16(M) x Align16(N) x 4) at offset "
                f"{l0cOffset}, beyond the {self.total_bytes} B L0C (dbL0C = 2 requires baseM * baseN * 4 * 2 "
                f"<= L0C size)")
        work = self._work.get(l0cOffset)
        if work is not None and work.shape == (m, n):
            return work
        if not self.data:   # protocol-only run: the MMAD results are payload, the tile holds no values
            self.storage.mark_payload()  # type: ignore[attr-defined]  # a LocalRegion (data=False)
            self._work[l0cOffset] = Payload((m, n), np.float32)  # type: ignore[assignment]
            return self._work[l0cOffset]
        self._flush_overlapping(l0cOffset, need)
        work = self._gather(l0cOffset, m, n)
        self._work[l0cOffset] = work
        return work

    def _flush_overlapping(self, offset: int, nbytes: int) -> None:
        for off in sorted(self._work):
            w = self._work[off]
            end = off + nz_footprint(*w.shape) * FLOAT32_BYTES
            if off < offset + nbytes and offset < end:
                self._scatter(off, w)
                del self._work[off]

    def _nz_view(self, offset: int, m: int, n: int) -> np.ndarray:
        m16, n16 = Align16(m), Align16(n)
        base = offset // FLOAT32_BYTES
        return self.storage[base: base + m16 * n16].reshape(n16 // C0_SIZE_L0C, m16, C0_SIZE_L0C)

    def _gather(self, offset: int, m: int, n: int) -> np.ndarray:
        nz = self._nz_view(offset, m, n)
        rows = nz[:, :m, :].transpose(1, 0, 2).reshape(m, -1)
        return np.ascontiguousarray(rows[:, :n])

    def _scatter(self, offset: int, work: np.ndarray) -> None:
        m, n = work.shape
        nz = self._nz_view(offset, m, n)
        rows = nz[:, :m, :].transpose(1, 0, 2).reshape(m, -1)  # a copy; padding columns keep their bytes
        rows[:, :n] = work
        nz[:, :m, :] = rows.reshape(m, -1, C0_SIZE_L0C).transpose(1, 0, 2)

    def nz_snapshot(self) -> np.ndarray:
        """The whole L0C in device (NZ) order, working tiles flushed (for tests and dumps)."""
        for off in list(self._work):
            self._scatter(off, self._work[off])
        return self.storage.copy()
