"""The QBMM / MX tile scheduler: which output tiles this core computes, in which order, with which shape.

Emulates ops-tensor `include/blaze/gemm/block/block_scheduler_qbmm.h`,
`BlockSchedulerQuantBatchMatmulV3<ProblemShape, FullLoadMode, LayoutA, LayoutB, AType>` (seed 004 calls it
`BlockSchedulerQbmm`; SPEC §5). Method and member names are the source's; the template arguments are keyword
arguments bound once with `template(...)`; `GetTileCoord`'s C++ out-parameters become a return value, and
`tiles()` is the `while bs.GetTileIdx(blockIdx)` loop as an iterator.

Mapping (from the source): mCnt * nCnt tiles; round r of core blockIdx = GetBlockIdx() / GetTaskRation()
takes logical tile blockIdx + r * blockNum (shifted by the batch's start core), mapped through windows of
`WINDOW_LEN` M-tile rows (the last window takes the remaining 4..7 rows) walked M-fastest, with the N
order reversed on odd windows. With !transA the last mBaseTailSplitCnt M tiles are merged tiles of
mTailMain rows (the last one keeps the rest); with transB the same for N (nBaseTailSplitCnt / nTailMain).
`UpdateTailTile(mTailTile, nTailTile)` splits each tile of the last round into mTailTile x nTailTile
pieces for otherwise idle cores; a piece may be empty ((0, 0, 0, 0)). A_FULL_LOAD_MODE pins each core to
M block blockIdx % mCnt. WINDOW_LEN is a parameter (default 4, `common_utils.h`).

The per-group / per-block quant-mode branches of `GetBlockShape` do not apply to MX (MX_PERGROUP_MODE) and
are not emulated; `weightNz` is.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.blaze.gemm.common_utils import MNK_M, MNK_N, WINDOW_LEN, BlockCoord, BlockShape
from mc2emu.blaze.gemm.dispatch_policy import A_FULL_LOAD_MODE, NONE_FULL_LOAD_MODE, FullLoadMode
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, IsTrans, LayoutPtn, NDExtLayoutPtn
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.int_math import Align16, Align32, Align64, CeilDiv, cdiv, cmod

if TYPE_CHECKING:
    from collections.abc import Iterator

    from mc2emu.runtime.core import CoreContext


@dataclass(frozen=True)
class BlockSchedulerQbmmParams:
    """`BlockSchedulerQuantBatchMatmulV3::Params` (tiling: baseM, baseN and the tail fields)."""

    baseM: int
    baseN: int
    mTailTile: int = 1
    nTailTile: int = 1
    mBaseTailSplitCnt: int = 1
    nBaseTailSplitCnt: int = 1
    mTailMain: int = 0
    nTailMain: int = 0


class BlockSchedulerQuantBatchMatmulV3:
    """One core's scheduler state (`BlockScheduler bs(problemShape, schParams)`)."""

    Params = BlockSchedulerQbmmParams

    @classmethod
    def template(cls, fullLoadMode: FullLoadMode = NONE_FULL_LOAD_MODE, layoutA: type[LayoutPtn] = NDExtLayoutPtn,
                 layoutB: type[LayoutPtn] = DNExtLayoutPtn, aType: ElemFormat | str = ElemFormat.E4M3,
                 window_len: int = WINDOW_LEN) -> functools.partial[BlockSchedulerQuantBatchMatmulV3]:
        """Bind the template arguments: the result is called as `BlockScheduler(problemShape, params, ctx)`."""
        return functools.partial(cls, fullLoadMode=fullLoadMode, layoutA=layoutA, layoutB=layoutB, aType=aType,
                                 window_len=window_len)

    def __init__(self, shape: Any, params: BlockSchedulerQbmmParams, ctx: CoreContext, *,
                 fullLoadMode: FullLoadMode = NONE_FULL_LOAD_MODE, layoutA: type[LayoutPtn] = NDExtLayoutPtn,
                 layoutB: type[LayoutPtn] = DNExtLayoutPtn, aType: ElemFormat | str = ElemFormat.E4M3,
                 window_len: int = WINDOW_LEN) -> None:
        self.FullLoadMode_ = FullLoadMode(fullLoadMode)
        self.TRANS_A = IsTrans(layoutA)
        self.TRANS_B = IsTrans(layoutB)
        self.IS_FP4_A = ElemFormat.parse(aType, "aType").is_fp4
        self.WINDOW_LEN = int(window_len)
        self.mTailTile_ = 1  # init value must be 1
        self.nTailTile_ = 1
        self.totalTailTile_ = 1
        self.mBaseNormCnt_ = 0
        self.nBaseNormCnt_ = 0
        self.mBaseTailMain_ = 0
        self.nBaseTailMain_ = 0
        self.mBaseTailLast_ = 0
        self.nBaseTailLast_ = 0
        self.mainWindow_ = 0
        self.tailWindow_ = 0
        self.mainRow_ = 0
        self.startBlockIdx_ = 0
        self.endBlockIdx_ = 0
        self.roundIdx_ = 0
        self.roundNums_ = 0
        self.mSplitAddrOffset_ = 0
        self.nSplitAddrOffset_ = 0

        m = int(shape[MNK_M])
        n = int(shape[MNK_N])
        self.baseM_ = int(params.baseM)
        self.baseN_ = int(params.baseN)
        self.mBlockNums_ = CeilDiv(m, self.baseM_)
        self.nBlockNums_ = CeilDiv(n, self.baseN_)
        self.blockNums_ = self.mBlockNums_ * self.nBlockNums_
        self.blockIdx_ = ctx.GetBlockIdx() // ctx.GetTaskRation()
        self.coreNums_ = ctx.GetBlockNum()
        if self.coreNums_ <= 0:
            return
        self.mainWindow_ = min(self.WINDOW_LEN, self.mBlockNums_)
        if self.mainWindow_ != 0:
            self.mainRow_ = cdiv(self.mBlockNums_, self.mainWindow_) - 1
        self.tailWindow_ = self.mBlockNums_ - self.mainWindow_ * self.mainRow_
        self.endBlockIdx_ = cmod(self.blockNums_ - 1, self.coreNums_)
        self.roundNums_ = CeilDiv(self.blockNums_, self.coreNums_)
        if self.blockIdx_ > self.endBlockIdx_:
            self.roundNums_ -= 1
        if not self.TRANS_A:
            self.mBaseNormCnt_ = self.mBlockNums_ - int(params.mBaseTailSplitCnt)
            mMergeSize = m - self.mBaseNormCnt_ * self.baseM_
            self.mBaseTailMain_ = mMergeSize if params.mBaseTailSplitCnt == 1 else int(params.mTailMain)
            self.mBaseTailLast_ = mMergeSize - (int(params.mBaseTailSplitCnt) - 1) * self.mBaseTailMain_
        else:
            self.mBaseTailMain_ = m - (self.mBlockNums_ - 1) * self.baseM_
        if self.TRANS_B:
            self.nBaseNormCnt_ = self.nBlockNums_ - int(params.nBaseTailSplitCnt)
            nMergeSize = n - self.nBaseNormCnt_ * self.baseN_
            self.nBaseTailMain_ = nMergeSize if params.nBaseTailSplitCnt == 1 else int(params.nTailMain)
            self.nBaseTailLast_ = nMergeSize - (int(params.nBaseTailSplitCnt) - 1) * self.nBaseTailMain_
        else:
            self.nBaseTailMain_ = n - (self.nBlockNums_ - 1) * self.baseN_

    def UpdateTailTile(self, mTailTile: int, nTailTile: int) -> None:
        """Split every tile of the last round into mTailTile x nTailTile pieces for the idle cores."""
        self.mTailTile_ = int(mTailTile)
        self.nTailTile_ = int(nTailTile)
        self.totalTailTile_ = self.mTailTile_ * self.nTailTile_
        tailOriginalBlockNums = min(self.blockNums_, self.endBlockIdx_ + 1)
        newEndBlockIdx = self.endBlockIdx_ + tailOriginalBlockNums * (self.totalTailTile_ - 1)
        if self.endBlockIdx_ < self.blockIdx_ <= newEndBlockIdx:
            self.roundNums_ += 1
        if self.blockIdx_ > newEndBlockIdx:
            self.mTailTile_ = 1
            self.nTailTile_ = 1
            self.totalTailTile_ = 1
        self.endBlockIdx_ = newEndBlockIdx

    def tiles(self, ctx: CoreContext | None = None) -> Iterator[BlockCoord]:
        """`while (bs.GetTileIdx(blockCoord))` as a Python loop: yields a fresh BlockCoord per tile. (`ctx`
        is accepted for symmetry with the kernels and unused: the scheduler already knows its core.)"""
        del ctx
        while True:
            blockCoord = BlockCoord()
            if not self.GetTileIdx(blockCoord):
                return
            yield blockCoord

    def GetBlockNum(self) -> int:
        """`AscendC::GetBlockNum()` as this scheduler saw it (coreNums_)."""
        return self.coreNums_

    def GetTotalCnt(self) -> int:
        return self.blockNums_

    def GetEndBlockIdx(self) -> int:
        return self.endBlockIdx_

    def GetBlockShape(self, blockCoord: BlockCoord, weightNz: bool = False) -> BlockShape:
        """`GetBlockShape<MX_PERGROUP_MODE, MX_PERGROUP_MODE, WeightNz>(blockCoord)`: (m, n, mOff, nOff)."""
        singleCoreM, singleCoreN = self.CalSingleCoreShapeByCoord(self.baseM_, self.baseN_, blockCoord)
        if self.totalTailTile_ == 1 or self.roundIdx_ < self.roundNums_:
            return BlockShape(singleCoreM, singleCoreN, 0, 0)
        singleCoreMSplit = CeilDiv(singleCoreM, self.mTailTile_)
        singleCoreNSplit = CeilDiv(singleCoreN, self.nTailTile_)
        if self.IS_FP4_A and self.TRANS_A:
            singleCoreMSplit = (singleCoreMSplit + 1) & ~1
        if self.IS_FP4_A and not self.TRANS_B:
            singleCoreNSplit = (singleCoreNSplit + 1) & ~1
        if weightNz:
            if not self.TRANS_B:
                singleCoreNSplit = Align64(singleCoreNSplit) if self.IS_FP4_A else Align32(singleCoreNSplit)
            else:
                singleCoreNSplit = Align16(singleCoreNSplit)
        tailSplitIdx = cmod(self.blockIdx_, self.totalTailTile_)
        mSplitIdx = cmod(tailSplitIdx, self.mTailTile_)
        if self.FullLoadMode_ == A_FULL_LOAD_MODE:
            nSplitIdx = cmod(cdiv(self.blockIdx_, self.mBlockNums_), self.nTailTile_)
        else:
            nSplitIdx = cdiv(tailSplitIdx, self.mTailTile_)
        self.mSplitAddrOffset_ = mSplitIdx * singleCoreMSplit
        self.nSplitAddrOffset_ = nSplitIdx * singleCoreNSplit
        if self.mSplitAddrOffset_ >= singleCoreM or self.nSplitAddrOffset_ >= singleCoreN:
            return BlockShape(0, 0, 0, 0)
        singleCoreM = min(singleCoreM - self.mSplitAddrOffset_, singleCoreMSplit)
        singleCoreN = min(singleCoreN - self.nSplitAddrOffset_, singleCoreNSplit)
        return BlockShape(singleCoreM, singleCoreN, self.mSplitAddrOffset_, self.nSplitAddrOffset_)

    def UpdateNextBatchBlockRoundParams(self) -> None:
        """After a batch: the next batch's tiles continue the round-robin from the core after its last."""
        self.startBlockIdx_ = 0 if self.endBlockIdx_ + 1 == self.coreNums_ else self.endBlockIdx_ + 1
        self.endBlockIdx_ = cmod(self.blockNums_ + self.startBlockIdx_ - 1, self.coreNums_)
        self.roundIdx_ = 0
        self.roundNums_ = CeilDiv(self.blockNums_, self.coreNums_)
        wraps = self.startBlockIdx_ > self.endBlockIdx_
        if (wraps and self.endBlockIdx_ < self.blockIdx_ < self.startBlockIdx_) or (
                not wraps and (self.blockIdx_ > self.endBlockIdx_ or self.blockIdx_ < self.startBlockIdx_)):
            self.roundNums_ -= 1  # this core gets no tile in the batch's last round

    def GetTileIdx(self, blockCoord: BlockCoord) -> bool:
        """Fill `blockCoord` with this core's next tile (mTileIdx, nTileIdx); False when it has none left."""
        if self.roundIdx_ >= self.roundNums_:
            return False
        currentBlockIdx = (cdiv(self.blockIdx_, self.totalTailTile_) if self.roundIdx_ == self.roundNums_ - 1
                           else self.blockIdx_)
        logicalBlockIdx = currentBlockIdx + self.roundIdx_ * self.coreNums_
        if self.FullLoadMode_ == A_FULL_LOAD_MODE:
            blockCoordM = cmod(self.blockIdx_, self.mBlockNums_)
            curNTailTile = self.nTailTile_ if self.roundIdx_ == self.roundNums_ - 1 else 1
            blockCoordN = (cmod(cdiv(self.roundIdx_ * self.coreNums_, self.mBlockNums_), self.nBlockNums_)
                           + cdiv(cdiv(self.blockIdx_, self.mBlockNums_), curNTailTile))
            self.roundIdx_ += 1
            blockCoord.set(blockCoordM, blockCoordN, 0, 0)
            return True
        if self.blockIdx_ < self.startBlockIdx_:
            logicalBlockIdx += self.coreNums_ - self.startBlockIdx_
        elif self.endBlockIdx_ + 1 >= self.totalTailTile_ * self.blockNums_:
            logicalBlockIdx -= cdiv(self.startBlockIdx_, self.totalTailTile_)
        else:
            logicalBlockIdx -= self.startBlockIdx_
        rowIdx = cdiv(cdiv(logicalBlockIdx, self.nBlockNums_), self.mainWindow_)
        if rowIdx < self.mainRow_:
            blockCoordM = rowIdx * self.mainWindow_ + cmod(logicalBlockIdx, self.mainWindow_)
            nIdx = cmod(cdiv(logicalBlockIdx, self.mainWindow_), self.nBlockNums_)
        else:
            rowIdx = self.mainRow_
            tailIdx = logicalBlockIdx - self.mainRow_ * self.mainWindow_ * self.nBlockNums_
            blockCoordM = self.mainRow_ * self.mainWindow_ + cmod(tailIdx, self.tailWindow_)
            nIdx = cmod(cdiv(tailIdx, self.tailWindow_), self.nBlockNums_)
        if rowIdx & 1:
            nIdx = self.nBlockNums_ - 1 - nIdx
        self.roundIdx_ += 1
        blockCoord.set(blockCoordM, nIdx, 0, 0)
        return True

    def GetTileCoord(self, blockCoord: BlockCoord) -> tuple[int, int]:
        """(mPos, nPos) of the tile (and of the piece chosen by the last GetBlockShape)."""
        mBlockIdx = blockCoord[MNK_M]
        nBlockIdx = blockCoord[MNK_N]
        mPos = mBlockIdx * self.baseM_ + self.mSplitAddrOffset_
        nPos = nBlockIdx * self.baseN_ + self.nSplitAddrOffset_
        if not self.TRANS_A and mBlockIdx > self.mBaseNormCnt_:
            mPos -= (mBlockIdx - self.mBaseNormCnt_) * (self.baseM_ - self.mBaseTailMain_)
        if self.TRANS_B and nBlockIdx > self.nBaseNormCnt_:
            nPos -= (nBlockIdx - self.nBaseNormCnt_) * (self.baseN_ - self.nBaseTailMain_)
        return mPos, nPos

    def CalSingleCoreShapeByCoord(self, singleCoreM: int, singleCoreN: int,
                                  blockCoord: BlockCoord) -> tuple[int, int]:
        mIdx = blockCoord[MNK_M]
        nIdx = blockCoord[MNK_N]
        if not self.TRANS_A:
            if mIdx >= self.mBaseNormCnt_:
                singleCoreM = self.mBaseTailMain_ if mIdx < self.mBlockNums_ - 1 else self.mBaseTailLast_
        elif mIdx == self.mBlockNums_ - 1:
            singleCoreM = self.mBaseTailMain_
        if self.TRANS_B:
            if nIdx >= self.nBaseNormCnt_:
                singleCoreN = self.nBaseTailMain_ if nIdx < self.nBlockNums_ - 1 else self.nBaseTailLast_
        elif nIdx == self.nBlockNums_ - 1:
            singleCoreN = self.nBaseTailMain_
        return singleCoreM, singleCoreN


BlockSchedulerQbmm = BlockSchedulerQuantBatchMatmulV3  # the name seed 004 uses
