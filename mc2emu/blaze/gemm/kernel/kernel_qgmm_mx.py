"""KernelQGmmMx's group loop: which groups a core visits and which tiles of each it runs, in the kernel's order.

Emulates the scheduling half of ops-transformer `gmm/common/cgmct/kernel/kernel_qgmm_mx.h`
(`Cgmct::Gemm::Kernel::KernelQGmmMx`, cannmirror/ops-transformer master 25fb6b92): `Run`, `SetMNK` /
`GetSplitValueFromGroupList` (cumsum, count, sparse [E, 2]), `BaseMBalance`, `IfNeedSplit` and
`ProcessSingleGroup`. `KernelQGmmMx.Tiles(groupList, ctx)` yields every tile one core runs, in order, as
`QGmmTileTask`; the kernel (`kernel_qgmm_mx_run.py`) and `grouped_matmul_mx_schedule` walk the same generator.

Source facts kept: a group with M <= 0 or K <= 0 is skipped without moving the scheduler (a sparse list stops
at its first empty entry but still runs the last entry); `BaseMBalance` (not transA) evens the M tiles:
curBaseM = Align16(ceil(m / ceil(m / baseM))) (m 600, baseM 256: 208 / 208 / 184); the last group's tail
split is tried only when `(GetEndBlockIdx() + 1) <= blockNum >> 1`; a tail piece of size 0 ends the core's
group. transA is split-K (SetMNK sets K), otherwise split-M.
Variants (`variant=`) differ here only in the tail alignments given to the scheduler and the group-list types:
- CGMCT (default; `grouped_matmul_apt.cpp` without `IS_BLAZE`): SetTailAlign(1, transB ? 16 : c0Size) for
  split-M, none for split-K.
- BLAZE (hicann/ops-tensor `include/blaze/gemm/kernel/kernel_qgmm_mx.h` 03460a61): split-M (1, TRANS_B ?
  BLOCK_CUBE : C0_SIZE), split-K (INNER_AXIS_MIN_SPLIT_VAL, TRANS_B ? BLOCK_CUBE : INNER_AXIS_MIN_SPLIT_VAL).
- BLAZE_SAMPLE (ops-tensor `quant_grouped_matmul_mx_kernel.h`, 1ea0db2f): SetTailAlign(16 for ND A / 128 for
  DN A, 128 for ND B / 16 for DN B), a count group list only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mc2emu.arch.errors import ConstraintError
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import (
    BLOCK_CUBE,
    INNER_AXIS_MIN_SPLIT_VAL,
    BlockContext,
    BlockSchedulerGmmAswtWithTailSplit,
    TailSplitVariant,
)
from mc2emu.blaze.gemm.common_utils import MNK_K, MNK_M, MNK_N
from mc2emu.numerics.constants import FP4_C0_SIZE, FP8_C0_SIZE
from mc2emu.numerics.int_math import Align16, CeilDiv

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

GROUP_LIST_TYPE_CUMSUM = 0
GROUP_LIST_TYPE_COUNT = 1
GROUP_LIST_TYPE_SPARSE = 2
SPARSE_GROUP_LIST_ITEM_STRIDE = 2  # sparse groupList rows are (groupIdx, splitValue)
SPARSE_GROUP_LIST_SPLIT_VALUE_OFFSET = 1
MATMUL_MNK_ALIGN_INT8 = FP8_C0_SIZE  # c0Size of 8-bit elements
MATMUL_MNK_ALIGN_INT4 = FP4_C0_SIZE  # c0Size of 4-bit elements
_I32 = 1 << 32


def _int32(v: int) -> int:
    v = int(v) % _I32
    return v - _I32 if v >= 1 << 31 else v


@dataclass(frozen=True)
class GMMTiling:
    """`KernelQGmmMx::GMMTiling` (the kernel's view of QuantBasicApiMMTiling + GMMQuantParams)."""

    groupNum: int
    m: int
    n: int
    k: int
    baseM: int
    baseN: int
    baseK: int
    kAL1: int = 0
    kBL1: int = 0
    scaleKAL1: int = 0
    scaleKBL1: int = 0
    isBias: int = 0
    dbL0C: int = 1
    groupType: int = 0
    groupListType: int = GROUP_LIST_TYPE_CUMSUM


@dataclass(frozen=True)
class QGmmTileTask:
    """One tile a core runs: group (the weight / output group index), loopIdx (position in the group list),
    the group's problem shape, its balanced baseM, the tile coordinate, the scheduler round and the
    `GetBlockShape` result (piece extents and the tail-split offsets inside the tile)."""

    group: int
    loopIdx: int
    problemShape: tuple[int, int, int]
    curBaseM: int
    baseN: int
    mTileIdx: int
    nTileIdx: int
    roundIdx: int
    singleCoreM: int
    singleCoreN: int
    mSplitOffset: int
    nSplitOffset: int

    @property
    def mOffset(self) -> int:
        """Row of the piece inside the group's output (`Coordinate::GetQuantOffset`: mTileIdx * l1M + split)."""
        return self.mTileIdx * self.curBaseM + self.mSplitOffset

    @property
    def nOffset(self) -> int:
        return self.nTileIdx * self.baseN + self.nSplitOffset


class KernelQGmmMx:
    """The group loop of one core (`Run` without the mmad)."""

    def __init__(self, gmmParams: GMMTiling, *, transA: bool, transB: bool, isFp4: bool = False,
                 variant: TailSplitVariant = TailSplitVariant.CGMCT) -> None:
        self.variant = TailSplitVariant(variant)
        if self.variant is TailSplitVariant.BLAZE_SAMPLE and gmmParams.groupListType != GROUP_LIST_TYPE_COUNT:
            raise ConstraintError("KernelQGmmMx (Blaze sample): count group list", "the Blaze sample kernel reads "
                                  "groupList as per-group counts only (groupListType 1)")
        self.gmmParams = gmmParams
        self.transA = bool(transA)
        self.transB = bool(transB)
        self.c0Size = MATMUL_MNK_ALIGN_INT4 if isFp4 else MATMUL_MNK_ALIGN_INT8
        self.groupNum_ = int(gmmParams.groupNum)
        self.groupListType_ = int(gmmParams.groupListType)
        self.curBaseM_ = int(gmmParams.baseM)
        self.preOffset_ = 0
        self.problemShape_ = [int(gmmParams.m), int(gmmParams.n), int(gmmParams.k)]
        self.isLastGroupAndNeedSplit_ = False

    def GetSplitValueFromGroupList(self, groupList: Sequence[int], groupIdx: int) -> int:
        if self.groupListType_ == GROUP_LIST_TYPE_CUMSUM:
            offset = _int32(groupList[groupIdx])
            splitValue = _int32(offset - self.preOffset_)
            self.preOffset_ = offset
        elif self.groupListType_ == GROUP_LIST_TYPE_COUNT:
            splitValue = _int32(groupList[groupIdx])
            self.preOffset_ = _int32(self.preOffset_ + splitValue)
        else:
            splitValue = _int32(groupList[groupIdx * SPARSE_GROUP_LIST_ITEM_STRIDE
                                          + SPARSE_GROUP_LIST_SPLIT_VALUE_OFFSET])
            self.preOffset_ = _int32(self.preOffset_ + splitValue)
        return splitValue

    def SetMNK(self, groupList: Sequence[int], groupIdx: int) -> None:
        splitValue = self.GetSplitValueFromGroupList(groupList, groupIdx)
        self.problemShape_[MNK_K if self.transA else MNK_M] = splitValue

    def BaseMBalance(self, bs: BlockSchedulerGmmAswtWithTailSplit, m: int, baseM: int) -> None:
        if not self.transA:
            mCnt = CeilDiv(m, baseM)
            self.curBaseM_ = Align16(CeilDiv(m, mCnt))
            bs.UpdateBaseM(self.curBaseM_)

    @staticmethod
    def IfNeedSplit(bs: BlockSchedulerGmmAswtWithTailSplit) -> bool:
        """Tail split only when at least half of the cores are still free."""
        return bs.GetEndBlockIdx() + 1 <= (bs.blockNum_ >> 1)

    def BeginGroup(self, groupIdx: int) -> None:
        """What ProcessSingleGroup does after its first GetTileIdx and before the tile loop (UpdateOffset,
        UpdateParamsForNextProblem, UpdateMMGlobalAddr, the L2 hints): nothing for the schedule alone;
        `KernelQGmmMxRun` (the kernel) overrides it."""

    def ProcessSingleGroup(self, bs: BlockSchedulerGmmAswtWithTailSplit, groupIdx: int,
                           loopIdx: int) -> Iterator[QGmmTileTask]:
        tileIdx = bs.GetTileIdx()
        if tileIdx is None:
            return
        shape = (self.problemShape_[MNK_M], self.problemShape_[MNK_N], self.problemShape_[MNK_K])
        self.BeginGroup(groupIdx)
        while tileIdx is not None:
            singleShape = bs.GetBlockShape(tileIdx)
            if singleShape[0] <= 0 or singleShape[1] <= 0:
                return
            yield QGmmTileTask(groupIdx, loopIdx, shape, self.curBaseM_, int(self.gmmParams.baseN), tileIdx[0],
                               tileIdx[1], bs.roundIdx_ - 1, *singleShape)
            tileIdx = bs.GetTileIdx()

    def Tiles(self, groupList: Sequence[int], ctx: BlockContext) -> Iterator[QGmmTileTask]:
        """`Run`'s loops for the core `ctx` names: every tile it runs, in order."""
        p = self.gmmParams
        bs = BlockSchedulerGmmAswtWithTailSplit(p.baseM, p.baseN, p.baseK, ctx, transA=self.transA,
                                                transB=self.transB, variant=self.variant)
        if self.variant is TailSplitVariant.BLAZE:  # kernel_qgmm_mx.h SetSchedulerTailAlign
            if not self.transA:  # mTailAlign 1, nTailAlign TRANS_B ? BLOCK_CUBE : C0_SIZE
                bs.SetTailAlign(1, BLOCK_CUBE if self.transB else self.c0Size)  # Blaze split-M
            else:
                bs.SetTailAlign(INNER_AXIS_MIN_SPLIT_VAL, BLOCK_CUBE if self.transB else INNER_AXIS_MIN_SPLIT_VAL)
        elif self.variant is TailSplitVariant.BLAZE_SAMPLE:  # the sample kernel's SetTailAlign
            bs.SetTailAlign(INNER_AXIS_MIN_SPLIT_VAL if self.transA else BLOCK_CUBE,
                            BLOCK_CUBE if self.transB else INNER_AXIS_MIN_SPLIT_VAL)
        elif not self.transA:
            bs.SetTailAlign(1, BLOCK_CUBE if self.transB else self.c0Size)
        sparse = self.groupListType_ == GROUP_LIST_TYPE_SPARSE
        for loopIdx in range(self.groupNum_ - 1):
            groupIdx = int(groupList[loopIdx * SPARSE_GROUP_LIST_ITEM_STRIDE]) if sparse else loopIdx
            self.SetMNK(groupList, loopIdx)
            if self.problemShape_[MNK_M] <= 0 or self.problemShape_[MNK_K] <= 0:
                if sparse and self.problemShape_[MNK_M] <= 0:
                    break
                continue
            self.BaseMBalance(bs, self.problemShape_[MNK_M], p.baseM)
            bs.UpdateNextProblem(tuple(self.problemShape_))
            yield from self.ProcessSingleGroup(bs, groupIdx, loopIdx)
        loopIdx = self.groupNum_ - 1
        groupIdx = int(groupList[loopIdx * SPARSE_GROUP_LIST_ITEM_STRIDE]) if sparse else loopIdx
        self.SetMNK(groupList, loopIdx)
        if self.problemShape_[MNK_M] > 0 and self.problemShape_[MNK_K] > 0:
            self.BaseMBalance(bs, self.problemShape_[MNK_M], p.baseM)
            bs.UpdateNextProblem(tuple(self.problemShape_))
            self.isLastGroupAndNeedSplit_ = self.IfNeedSplit(bs)
            if self.isLastGroupAndNeedSplit_:
                bs.UpdateTailTile()
            yield from self.ProcessSingleGroup(bs, groupIdx, loopIdx)
