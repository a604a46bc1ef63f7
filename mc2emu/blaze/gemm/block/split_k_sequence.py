"""The splitKIdx protocol of one core's MX BlockMmad (SPEC §5): per output tile the calls must carry
splitKIdx 0, 1, ..., splitKNum - 1. Index 0 resets L0C (or loads the bias), the last index fixpipes C.
Any other sequence is `Hazard.SPLITK_SEQUENCE`, reported while the block runs on as the device would:
a mid-tile 0 discards the partial sum, calls beyond splitKNum accumulate into the other L0C half, fewer
calls leave C unwritten (reported at the next `Init` or at `Destroy`), splitKNum 0 never fixpipes.

The device has no such check: this is the emulator's observer of `BlockMmad::operator()`'s splitKIdx
argument (ops-tensor `include/blaze/gemm/block/block_mmad_qbmm_mx.h`), kept beside the block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mc2emu.runtime.hazards import Hazard

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext


class SplitKSequence:
    """The expected next splitKIdx of one core's BlockMmad and the tile it belongs to."""

    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.splitKNum = 1
        self.next = 0  # the splitKIdx the protocol expects next on the current tile
        self.tile: tuple[int, int] | None = None

    def Reset(self, splitKNum: int, *, quiet: bool = False) -> None:
        """Init (or Destroy with `quiet`): no tile open; splitKNum 0 is reported at Init."""
        self.splitKNum = int(splitKNum)
        self.next = 0
        self.tile = None
        if not quiet and self.splitKNum == 0:
            self.Report("Init with splitKNum 0: no call can satisfy splitKIdx == splitKNum - 1, so this core "
                        "never fixpipes C", splitKNum=0)

    def CheckClosed(self, *, atInit: bool) -> None:
        """At a re-Init (the next pass of a kernel) or at Destroy (kernel exit): a tile whose sequence stopped
        before splitKNum - 1 never reached C."""
        if self.next == 0:
            return
        where = f"Init while tile {self.tile} is open" if atInit else f"kernel ended with tile {self.tile}"
        self.Report(f"{where} at splitKIdx {self.next - 1} of splitKNum {self.splitKNum}: its C was never written",
                    expected=self.next, splitKNum=self.splitKNum, tile=self.tile)

    def Check(self, splitKIdx: int, origin: tuple[int, int]) -> None:
        expected = self.next
        n = self.splitKNum
        if splitKIdx == 0 and expected != 0:
            self.Report(f"splitKIdx 0 at tile {origin} while tile {self.tile} expected {expected} of "
                        f"{n}: L0C is reset, that tile's partial sum is discarded and its C never written",
                        splitKIdx=0, expected=expected, splitKNum=n, tile=origin)
        elif splitKIdx != expected:
            if n and splitKIdx >= n:
                what = (f"beyond splitKNum {n}: it accumulates into the other L0C half, which the next tile's "
                        f"splitKIdx 0 discards")
            elif expected == 0:
                what = "no splitKIdx 0 opened this tile: it accumulates onto what the L0C half still holds"
            else:
                what = f"out of order (expected {expected})"
            self.Report(f"splitKIdx {splitKIdx} at tile {origin} {what}", splitKIdx=splitKIdx, expected=expected,
                        splitKNum=n, tile=origin)
        if splitKIdx == 0:
            self.tile = origin
        self.next = 0 if splitKIdx >= n - 1 else splitKIdx + 1  # a tile closes at its last index

    def Report(self, message: str, **details: Any) -> None:
        self.ctx.device.hazards.report(Hazard.SPLITK_SEQUENCE, self.ctx.label, message, **details)
