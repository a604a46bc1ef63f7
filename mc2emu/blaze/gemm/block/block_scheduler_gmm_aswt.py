"""The GroupedMatmul tile scheduler: which output tiles of each group a core computes, in which order and shape.

Emulates ops-transformer `gmm/common/cgmct/block/block_scheduler_gmm_aswt_with_tail_split.h`,
`Cgmct::Gemm::Block::BlockSchedulerGmmAswtWithTailSplit<ProblemShape, L1TileShape, L0TileShape, TransA, TransB>`
(cannmirror/ops-transformer master 25fb6b92). Member and method names are the source's; one instance per core,
created once per kernel and fed each group (`UpdateBaseM`, `UpdateNextProblem`, on the last group
`UpdateTailTile`, then `GetTileIdx` / `GetBlockShape` until (0, 0, 0, 0)).

Rules: tile t of a group goes to core (start + t) mod blockNum, start the core after the previous group's
last one; tiles are walked through windows of WINDOW_LEN = 4 M-tile rows, M fastest, N reversed on odd
windows. `UpdateTailTile()` splits each tile of the group's last round into mTailCnt x nTailCnt pieces for
otherwise idle cores, chosen by the absolute core index mod the piece count.

Tail-split variants (`variant=`, default `TailSplitVariant.CGMCT`, the one `GmmCgmctMxKernel` uses):
- CGMCT: minimum pieces of 128 on an inner axis (M with transA, N without transB) and 16 otherwise; M pieces
  rounded to 128 with transA only, N pieces to nTailAlign then to 128 without transB.
- BLAZE and BLAZE_SAMPLE: hicann/ops-tensor `block_scheduler_gmm_swat_with_tail_split.h` (03460a61, the
  production Blaze kernel) and `block_scheduler_gmm_aswt_with_tail_split.h` (1ea0db2f, the sample kernel):
  minimum pieces of min(16, tail align) on both axes, rounded to mTailAlign / nTailAlign only; the kernels
  set different tail alignments (kernel_qgmm_mx.py). The tile walk is the same in all.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from mc2emu.blaze.gemm.common_utils import MNK_K, MNK_M, MNK_N, WINDOW_LEN
from mc2emu.numerics.constants import CUBE_BLOCK
from mc2emu.numerics.int_math import Align, CeilDiv, cdiv

INNER_AXIS_MIN_SPLIT_VAL = 128  # ND2NZ cache line: an inner-axis tail piece is at least 128 elements
BLOCK_CUBE = CUBE_BLOCK  # AscendC::BLOCK_CUBE: the smallest outer-axis tail piece


class TailSplitVariant(enum.Enum):
    """Which source's tail split the scheduler follows."""

    CGMCT = "cgmct"  # ops-transformer gmm/common/cgmct (the production GroupedMatmul kernel)
    BLAZE = "blaze"  # ops-tensor include/blaze kernel_qgmm_mx.h (the IS_BLAZE path of grouped_matmul_apt.cpp)
    BLAZE_SAMPLE = "blaze_sample"  # ops-tensor's sample quant_grouped_matmul_mx_kernel.h (count list only)


class BlockContext(Protocol):
    def GetBlockIdx(self) -> int: ...
    def GetBlockNum(self) -> int: ...
    def GetTaskRation(self) -> int: ...


@dataclass(frozen=True)
class BlockIndex:
    """A core's indices without a launched device (host-side scheduling, e.g. `grouped_matmul_mx_schedule`)."""

    blockIdx: int
    blockNum: int
    taskRation: int = 1

    def GetBlockIdx(self) -> int:
        return self.blockIdx

    def GetBlockNum(self) -> int:
        return self.blockNum

    def GetTaskRation(self) -> int:
        return self.taskRation


class BlockSchedulerGmmAswtWithTailSplit:
    """One core's scheduler state."""

    def __init__(self, baseM: int, baseN: int, baseK: int, ctx: BlockContext, *, transA: bool = False,
                 transB: bool = False, variant: TailSplitVariant = TailSplitVariant.CGMCT) -> None:
        self.variant_ = TailSplitVariant(variant)
        self.TransA_ = bool(transA)
        self.TransB_ = bool(transB)
        self.ctx_ = ctx
        self.baseM_ = int(baseM)
        self.baseN_ = int(baseN)
        self.baseK_ = int(baseK)
        self.mCnt_ = self.nCnt_ = self.totalCnt_ = 0
        self.m_ = 0
        self.n_ = 0
        self.k_ = 0
        self.mTailCnt_ = 1
        self.nTailCnt_ = 1
        self.mTailAlign_ = 1
        self.nTailAlign_ = 1
        self.tailCnt_ = 1
        self.tailBlockBase_ = 0
        self.mainMWindow_ = self.tailWindow_ = self.mainRow_ = 0
        self.round_ = 0
        self.roundIdx_ = 0
        self.mBaseTail_ = self.nBaseTail_ = 0
        self.blockNum_ = int(ctx.GetBlockNum())
        self.blockIdx_ = int(ctx.GetBlockIdx()) // int(ctx.GetTaskRation())
        self.startBlockIdx_ = 0
        self.endBlockIdx_ = self.blockNum_ - 1

    def UpdateNextProblem(self, problemShape: Sequence[int]) -> None:
        """A new group: recount its tiles if (m, n) changed, then its core range and this core's rounds."""
        self.k_ = int(problemShape[MNK_K])
        m, n = int(problemShape[MNK_M]), int(problemShape[MNK_N])
        if self.m_ != m or self.n_ != n:
            self.m_, self.n_ = m, n
            self.mCnt_ = CeilDiv(m, self.baseM_)
            self.nCnt_ = CeilDiv(n, self.baseN_)
            self.mBaseTail_ = m - (self.mCnt_ - 1) * self.baseM_
            self.nBaseTail_ = n - (self.nCnt_ - 1) * self.baseN_
            self.totalCnt_ = self.mCnt_ * self.nCnt_
            self.mainMWindow_ = WINDOW_LEN if self.mCnt_ > WINDOW_LEN else self.mCnt_
            self.mainRow_ = self.mCnt_ // self.mainMWindow_ - 1
            self.tailWindow_ = self.mCnt_ - self.mainMWindow_ * self.mainRow_
        self.roundIdx_ = 0
        self.round_ = CeilDiv(self.totalCnt_, self.blockNum_)
        self.startBlockIdx_ = 0 if self.endBlockIdx_ == self.blockNum_ - 1 else self.endBlockIdx_ + 1
        self.endBlockIdx_ = (self.totalCnt_ + self.startBlockIdx_ - 1) % self.blockNum_
        start, end, idx = self.startBlockIdx_, self.endBlockIdx_, self.blockIdx_
        if (start > end and end < idx < start) or (start <= end and (idx > end or idx < start)):
            self.round_ -= 1

    def UpdateBaseM(self, baseM: int) -> None:
        self.baseM_ = int(baseM)

    def SetTailAlign(self, mTailAlign: int, nTailAlign: int) -> None:
        self.mTailAlign_ = int(mTailAlign)
        self.nTailAlign_ = int(nTailAlign)

    def GetTailTileCnt(self) -> int:
        return min(self.endBlockIdx_ + 1, self.totalCnt_)

    def UpdateTailTile(self, mTailCnt: int | None = None, nTailCnt: int | None = None) -> None:
        """Without arguments: choose mTailCnt x nTailCnt <= the idle cores per tail tile (the source's overload
        `UpdateTailTile()`), then split. With arguments: split each last-round tile that many ways."""
        if mTailCnt is None or nTailCnt is None:
            blaze = self.variant_ is not TailSplitVariant.CGMCT
            if blaze and self.GetTailTileCnt() == 0:
                return
            remainTile = (self.blockNum_ - self.endBlockIdx_ - 1) // self.GetTailTileCnt() + 1
            if remainTile <= 1:
                return
            if blaze:
                mMin, nMin = min(BLOCK_CUBE, self.mTailAlign_), min(BLOCK_CUBE, self.nTailAlign_)
            else:
                mMin = INNER_AXIS_MIN_SPLIT_VAL if self.TransA_ else BLOCK_CUBE
                nMin = BLOCK_CUBE if self.TransB_ else INNER_AXIS_MIN_SPLIT_VAL
            mTile = min(CeilDiv(self.mBaseTail_, mMin), remainTile)
            nTile = min(CeilDiv(self.nBaseTail_, nMin), remainTile)
            while mTile * nTile > remainTile:
                if mTile >= nTile:
                    mTile -= 1
                else:
                    nTile -= 1
            self.UpdateTailTile(mTile, nTile)
            return
        self.mTailCnt_ = int(mTailCnt)
        self.nTailCnt_ = int(nTailCnt)
        self.tailCnt_ = self.mTailCnt_ * self.nTailCnt_
        tailOriCnt = self.GetTailTileCnt()
        newEndBlockIdx = self.endBlockIdx_ + tailOriCnt * (self.tailCnt_ - 1)
        if self.endBlockIdx_ < self.blockIdx_ <= newEndBlockIdx:
            self.round_ += 1
        if self.blockIdx_ > newEndBlockIdx:
            self.mTailCnt_ = self.nTailCnt_ = self.tailCnt_ = 1
            self.tailBlockBase_ = 0
        elif self.tailCnt_ > 1:
            # the first core of the unsplit tail tiles: cores base.. take tail tile (core - base) / tailCnt
            self.tailBlockBase_ = self.endBlockIdx_ + 1 - tailOriCnt
        else:
            self.tailBlockBase_ = 0
        self.endBlockIdx_ = newEndBlockIdx

    def GetTileIdx(self) -> tuple[int, int] | None:
        """This core's next (mTileIdx, nTileIdx) of the group, or None (the C++ returns false)."""
        if self.round_ == 0 or self.roundIdx_ > self.round_ - 1:
            return None
        tc, base = self.tailCnt_, self.tailBlockBase_
        newBlockIdx = self.blockIdx_
        if self.roundIdx_ == self.round_ - 1 and tc > 1:
            newBlockIdx = cdiv(base + cdiv(newBlockIdx - base, tc) * tc, tc)
        index = newBlockIdx + self.roundIdx_ * self.blockNum_
        if self.blockIdx_ < self.startBlockIdx_:
            index += self.blockNum_ - self.startBlockIdx_
        elif tc > 1 and self.endBlockIdx_ + 1 >= tc * self.totalCnt_:
            index -= cdiv(base + cdiv(self.startBlockIdx_ - base, tc) * tc, tc)
        else:
            index -= self.startBlockIdx_
        rowIdx = index // self.nCnt_ // self.mainMWindow_
        if rowIdx < self.mainRow_:
            mIdx = rowIdx * self.mainMWindow_ + index % self.mainMWindow_
            nIdx = (index // self.mainMWindow_) % self.nCnt_
        else:
            rowIdx = self.mainRow_
            tailIndex = index - self.mainRow_ * self.mainMWindow_ * self.nCnt_
            mIdx = self.mainRow_ * self.mainMWindow_ + tailIndex % self.tailWindow_
            nIdx = (tailIndex // self.tailWindow_) % self.nCnt_
        if rowIdx & 1:
            nIdx = self.nCnt_ - 1 - nIdx
        self.roundIdx_ += 1
        return mIdx, nIdx

    def GetBlockShape(self, blockCoord: tuple[int, int]) -> tuple[int, int, int, int]:
        """(singleCoreM, singleCoreN, mSplitAddrOffset, nSplitAddrOffset) of the tile GetTileIdx just gave."""
        mIdx, nIdx = blockCoord
        singleCoreM = self.baseM_ if mIdx != self.mCnt_ - 1 else self.mBaseTail_
        singleCoreN = self.baseN_ if nIdx != self.nCnt_ - 1 else self.nBaseTail_
        if self.tailCnt_ == 1 or self.roundIdx_ < self.round_:  # roundIdx_ was advanced by GetTileIdx
            return singleCoreM, singleCoreN, 0, 0
        singleCoreMSplit = CeilDiv(singleCoreM, self.mTailCnt_)
        singleCoreNSplit = CeilDiv(singleCoreN, self.nTailCnt_)
        if self.variant_ is not TailSplitVariant.CGMCT:
            singleCoreMSplit = Align(singleCoreMSplit, self.mTailAlign_)
            singleCoreNSplit = Align(singleCoreNSplit, self.nTailAlign_)
        else:
            if self.TransA_:  # (k, m): M is the inner axis
                singleCoreMSplit = Align(singleCoreMSplit, INNER_AXIS_MIN_SPLIT_VAL)
            singleCoreNSplit = Align(singleCoreNSplit, self.nTailAlign_)
            if not self.TransB_:  # (k, n): N is the inner axis
                singleCoreNSplit = Align(singleCoreNSplit, INNER_AXIS_MIN_SPLIT_VAL)
        mSplitIdx = (self.blockIdx_ % self.tailCnt_) % self.mTailCnt_
        nSplitIdx = (self.blockIdx_ % self.tailCnt_) // self.mTailCnt_
        mSplitAddrOffset = mSplitIdx * singleCoreMSplit
        nSplitAddrOffset = nSplitIdx * singleCoreNSplit
        if mSplitAddrOffset >= singleCoreM or nSplitAddrOffset >= singleCoreN:
            return 0, 0, 0, 0
        return (min(singleCoreM - mSplitAddrOffset, singleCoreMSplit),
                min(singleCoreN - nSplitAddrOffset, singleCoreNSplit), mSplitAddrOffset, nSplitAddrOffset)

    def GetEndBlockIdx(self) -> int:
        return self.endBlockIdx_
