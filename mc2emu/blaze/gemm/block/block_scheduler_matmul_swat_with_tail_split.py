"""The M/N SWAT tile scheduler with edge merging and compact tail splitting (no quantization semantics).

Emulates ops-tensor `include/blaze/gemm/block/block_scheduler_matmul_swat_with_tail_split.h`,
`BlockSchedulerMatmulSwatWithTailSplit<ProblemShape>` (hicann/ops-tensor @ 7e940009), the scheduler the
weight-quant matmul kernel (seed 001) walks on both core types:

    bs = BlockSchedulerMatmulSwatWithTailSplit(problemShape, params, ctx)
    for tileIdx in range(blockIdx, bs.GetTileCount(), GetBlockNum()):
        blockCoord = bs.GetBlockCoord(tileIdx)          # (mOffset, nOffset, logicalTileIdx, splitIdx)
        blockShape = bs.GetBlockShape(blockCoord)       # (singleCoreM, singleCoreN, k, 1)

Facts of the source kept here: windows of WINDOW_LEN M-tile rows (the last window takes the remaining
rows), walked M-fastest, N reversed on odd windows; the last mBaseTailSplitCnt / nBaseTailSplitCnt tiles of
an axis are merged tiles of m/nTailMain (the last keeps the rest); the tiles of the last, partial round
(totalCnt % blockNum of them) are split into mTailTile x nTailTile pieces and the pieces are *compacted*:
a split that would start past a tile's edge is never counted (`CalcValidSplit`), so unlike the QBMM
scheduler no core gets an empty piece from a consistent tiling. The split is dropped (1 x 1) when there
is no partial round or the compacted pieces outnumber the cores. All arithmetic is uint64 in the source:
a tail size that underflows (a `nTailMain` larger than the merged extent) wraps, and the kernel's int64
cast of it reads negative; `_u64` / `_as_int64` reproduce that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.blaze.gemm.common_utils import MNK_K, MNK_M, MNK_N, WINDOW_LEN
from mc2emu.numerics.int_math import Align16, CeilDiv

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext

NO_SPLIT = -1
UINT64_MASK = (1 << 64) - 1
INT64_SIGN = 1 << 63


def _u64(x: int) -> int:
    return x & UINT64_MASK


def _as_int64(x: int) -> int:
    """`static_cast<int64_t>(uint64_t)`."""
    x &= UINT64_MASK
    return x - (1 << 64) if x & INT64_SIGN else x


@dataclass(frozen=True)
class BlockSchedulerMatmulSwatParams:
    """`BlockSchedulerMatmulSwatWithTailSplit::Params`."""

    baseM: int
    baseN: int
    mTailTile: int = 1
    nTailTile: int = 1
    mBaseTailSplitCnt: int = 1
    nBaseTailSplitCnt: int = 1
    mTailMain: int = 0
    nTailMain: int = 0


class BlockSchedulerMatmulSwatWithTailSplit:
    """One core's scheduler (`BlockSchedulerOp bs(params.problemShape, params.schParams)`)."""

    Params = BlockSchedulerMatmulSwatParams

    def __init__(self, problemShape: Any, params: BlockSchedulerMatmulSwatParams, ctx: CoreContext | None = None,
                 *, block_num: int | None = None) -> None:
        self.mSize_ = int(problemShape[MNK_M])
        self.nSize_ = int(problemShape[MNK_N])
        self.kSize_ = int(problemShape[MNK_K])
        self.baseM_ = int(params.baseM)
        self.baseN_ = int(params.baseN)
        self.totalTileNum_ = 0
        if self.baseM_ == 0 or self.baseN_ == 0:
            return
        self.mCnt_ = CeilDiv(self.mSize_, self.baseM_)
        self.nCnt_ = CeilDiv(self.nSize_, self.baseN_)
        self.totalCnt_ = self.mCnt_ * self.nCnt_
        self.blockNum_ = ctx.GetBlockNum() if ctx is not None else int(block_num or 1)
        self.tailBlockCnt_ = 0 if self.blockNum_ == 0 else self.totalCnt_ % self.blockNum_
        self.mCoreNum_ = min(WINDOW_LEN, self.mCnt_)
        self.mainRow_ = 0 if self.mCoreNum_ == 0 else _u64(self.mCnt_ // self.mCoreNum_ - 1)
        self.mTailCoreNum_ = 0 if self.mCoreNum_ == 0 else self.mCnt_ - self.mCoreNum_ * self.mainRow_
        self.InitTailParams(params)

    def GetTileCount(self) -> int:
        return self.totalTileNum_

    def GetBlockCoord(self, tileIdx: int) -> tuple[int, int, int, int]:
        logicalTileIdx, splitIdx = tileIdx, NO_SPLIT
        if self.tailBlockCnt_ > 0 and tileIdx >= self.baseRoundTileNum_:
            logicalTileIdx, splitIdx = self.ResolveCompactTailTile(tileIdx - self.baseRoundTileNum_)
        mTileIdx, nTileIdx = self.GetLogicalTileCoord(logicalTileIdx)
        mOffset = self.GetMOrigin(mTileIdx)
        nOffset = self.GetNOrigin(nTileIdx)
        if splitIdx >= 0:
            singleCoreMSplit = Align16(CeilDiv(self.GetSingleCoreM(mTileIdx), self.mTailTile_))
            singleCoreNSplit = Align16(CeilDiv(self.GetSingleCoreN(nTileIdx), self.nTailTile_))
            mOffset += (splitIdx % self.mTailTile_) * singleCoreMSplit
            nOffset += (splitIdx // self.mTailTile_) * singleCoreNSplit
        return (_as_int64(mOffset), _as_int64(nOffset), logicalTileIdx, splitIdx)

    def GetBlockShape(self, blockCoord: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        logicalTileIdx, splitIdx = int(blockCoord[2]), int(blockCoord[3])
        mTileIdx, nTileIdx = self.GetLogicalTileCoord(logicalTileIdx)
        singleCoreM = self.GetSingleCoreM(mTileIdx)
        singleCoreN = self.GetSingleCoreN(nTileIdx)
        if splitIdx >= 0:
            singleCoreMSplit = Align16(CeilDiv(singleCoreM, self.mTailTile_))
            singleCoreNSplit = Align16(CeilDiv(singleCoreN, self.nTailTile_))
            mSplitOffset = (splitIdx % self.mTailTile_) * singleCoreMSplit
            nSplitOffset = (splitIdx // self.mTailTile_) * singleCoreNSplit
            singleCoreM = min(_u64(singleCoreM - mSplitOffset), singleCoreMSplit)
            singleCoreN = min(_u64(singleCoreN - nSplitOffset), singleCoreNSplit)
        return (_as_int64(singleCoreM), _as_int64(singleCoreN), self.kSize_, 1)

    # -- private in the source ---------------------------------------------------------------------------------
    def InitTailParams(self, params: BlockSchedulerMatmulSwatParams) -> None:
        self.mTailTile_ = max(1, int(params.mTailTile))
        self.nTailTile_ = max(1, int(params.nTailTile))
        self.baseRoundTileNum_ = self.totalCnt_ - self.tailBlockCnt_
        self.mBaseTailSplitCnt_ = min(max(1, int(params.mBaseTailSplitCnt)), self.mCnt_)
        self.nBaseTailSplitCnt_ = min(max(1, int(params.nBaseTailSplitCnt)), self.nCnt_)
        self.mBaseNormCnt_ = self.mCnt_ - self.mBaseTailSplitCnt_
        self.nBaseNormCnt_ = self.nCnt_ - self.nBaseTailSplitCnt_
        mMergeSize = self.mSize_ - self.mBaseNormCnt_ * self.baseM_
        nMergeSize = self.nSize_ - self.nBaseNormCnt_ * self.baseN_
        self.mBaseTailMain_ = mMergeSize if self.mBaseTailSplitCnt_ == 1 else int(params.mTailMain)
        self.nBaseTailMain_ = nMergeSize if self.nBaseTailSplitCnt_ == 1 else int(params.nTailMain)
        self.mBaseTailLast_ = _u64(mMergeSize - (self.mBaseTailSplitCnt_ - 1) * self.mBaseTailMain_)
        self.nBaseTailLast_ = _u64(nMergeSize - (self.nBaseTailSplitCnt_ - 1) * self.nBaseTailMain_)
        self.compactTailTileNum_ = self.CalcCompactTailTileNum(self.mTailTile_, self.nTailTile_)
        if self.tailBlockCnt_ == 0 or self.compactTailTileNum_ > self.blockNum_:
            self.mTailTile_ = self.nTailTile_ = 1
            self.compactTailTileNum_ = self.CalcCompactTailTileNum(1, 1)
        self.totalTileNum_ = self.baseRoundTileNum_ + self.compactTailTileNum_

    def ResolveCompactTailTile(self, tailTileIdx: int) -> tuple[int, int]:
        remain = tailTileIdx
        for tailIdx in range(self.tailBlockCnt_):
            curLogicalTileIdx = self.baseRoundTileNum_ + tailIdx
            mTileIdx, nTileIdx = self.GetLogicalTileCoord(curLogicalTileIdx)
            validM, validN = self.CalcValidSplit(self.GetSingleCoreM(mTileIdx), self.GetSingleCoreN(nTileIdx),
                                                 self.mTailTile_, self.nTailTile_)
            if remain < validM * validN:
                return curLogicalTileIdx, (remain // validM) * self.mTailTile_ + remain % validM
            remain -= validM * validN
        return self.baseRoundTileNum_, 0

    def CalcCompactTailTileNum(self, mTile: int, nTile: int) -> int:
        tileNum = 0
        for tailIdx in range(self.tailBlockCnt_):
            mTileIdx, nTileIdx = self.GetLogicalTileCoord(self.baseRoundTileNum_ + tailIdx)
            validM, validN = self.CalcValidSplit(self.GetSingleCoreM(mTileIdx), self.GetSingleCoreN(nTileIdx),
                                                 mTile, nTile)
            tileNum += validM * validN
        return tileNum

    @staticmethod
    def CalcValidSplit(singleCoreM: int, singleCoreN: int, mTile: int, nTile: int) -> tuple[int, int]:
        singleCoreMSplit = Align16(CeilDiv(singleCoreM, mTile))
        singleCoreNSplit = Align16(CeilDiv(singleCoreN, nTile))
        validM = min(mTile, CeilDiv(singleCoreM, singleCoreMSplit)) if singleCoreMSplit else mTile
        validN = min(nTile, CeilDiv(singleCoreN, singleCoreNSplit)) if singleCoreNSplit else nTile
        return validM, validN

    def GetLogicalTileCoord(self, tileIdx: int) -> tuple[int, int]:
        rowIdx = tileIdx // (self.mCoreNum_ * self.nCnt_)
        if rowIdx < self.mainRow_:
            localTileIdx = tileIdx - rowIdx * self.mCoreNum_ * self.nCnt_
            mTileIdx = rowIdx * self.mCoreNum_ + localTileIdx % self.mCoreNum_
            nTileIdx = (localTileIdx // self.mCoreNum_) % self.nCnt_
        else:
            rowIdx = self.mainRow_
            tailIdx = tileIdx - self.mainRow_ * self.mCoreNum_ * self.nCnt_
            mTileIdx = self.mainRow_ * self.mCoreNum_ + tailIdx % self.mTailCoreNum_
            nTileIdx = (tailIdx // self.mTailCoreNum_) % self.nCnt_
        if rowIdx & 1:
            nTileIdx = self.nCnt_ - 1 - nTileIdx
        return mTileIdx, nTileIdx

    def GetSingleCoreM(self, mTileIdx: int) -> int:
        if mTileIdx >= self.mBaseNormCnt_:
            return self.mBaseTailMain_ if mTileIdx < self.mCnt_ - 1 else self.mBaseTailLast_
        return self.baseM_

    def GetSingleCoreN(self, nTileIdx: int) -> int:
        if nTileIdx >= self.nBaseNormCnt_:
            return self.nBaseTailMain_ if nTileIdx < self.nCnt_ - 1 else self.nBaseTailLast_
        return self.baseN_

    def GetMOrigin(self, mTileIdx: int) -> int:
        if mTileIdx > self.mBaseNormCnt_:
            return _u64(mTileIdx * self.baseM_ - (mTileIdx - self.mBaseNormCnt_) * (self.baseM_ - self.mBaseTailMain_))
        return mTileIdx * self.baseM_

    def GetNOrigin(self, nTileIdx: int) -> int:
        if nTileIdx > self.nBaseNormCnt_:
            return _u64(nTileIdx * self.baseN_ - (nTileIdx - self.nBaseNormCnt_) * (self.baseN_ - self.nBaseTailMain_))
        return nTileIdx * self.baseN_
