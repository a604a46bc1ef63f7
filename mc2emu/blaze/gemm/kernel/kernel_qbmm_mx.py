"""The QBMM MX kernel: `GemmUniversal<ProblemShape, BlockMmad (MX), void, BlockSchedulerQbmm>`.

Emulates ops-tensor `include/blaze/gemm/kernel/kernel_qbmm_mx.h` (seed 004, SPEC §5), AIC only: single batch
(`ProcessSingleBatch`) or 4-D batch loops (`ProcessWithBatch`). Batch broadcast: per dimension i,
multiAiCi = batchAi / batchCi (0 broadcasts A's single batch, 1 walks it); A, B, C (and a 3-D bias)
addresses advance by whole matrices per batch (`AddBatchOffset`).

Two source revisions differ in this kernel (`QbmmMxRevision`); the default is the one SPEC §5 describes:
- `R106B970C` (SPEC): the multi-batch path never calls SetAtomicNone (ATOMIC_LEFT_SET at launch end), and
  AddBatchOffset does not advance the scale addresses, so every batch reads batch 0's scaleA / scaleB
  (wrong C whenever scales differ per batch; reproduced). Run has no AIV guard; an AIV running this
  AIC-only kernel is reported (AIV_RUNS_AIC_KERNEL) and stops.
- `CC21C0D6` (later, matches seed 004's text): Run returns on AIV, SetAtomicNone after ProcessWithBatch,
  scale addresses advance by m * scaleKLen / n * scaleKLen per batch.
Both: L2 hints per SPEC §5 QBMM rules (C disabled when atomic; gate isSameBatch && baseM >= M; B by
alignment; no ScaleB hint), recorded as L2_HINT events.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, BlockMmadMxType, L1Params, Params
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams
from mc2emu.blaze.gemm.common_utils import (
    FP4_CACHE_LINE_ALIGN_MASK,
    FP8_CACHE_LINE_ALIGN_MASK,
    IDX_M_TILEIDX,
    IDX_N_TILEIDX,
    MNK_B,
    MNK_K,
    MNK_M,
    MNK_N,
    BlockCoord,
    BlockShape,
    ProblemShape,
)
from mc2emu.blaze.tensor_api.layout import (
    FrameLayoutFormat,
    MakeFrameLayout,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, GmTensor, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B4, C0_SIZE_B8, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype
from mc2emu.numerics.payload import is_payload
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:
    from collections.abc import Callable

    from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQuantBatchMatmulV3
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr



class QbmmMxRevision(enum.Enum):
    """Which revision of kernel_qbmm_mx.h to reproduce (see the module docstring)."""

    R106B970C = "106b970c"  # the revision SPEC §5 describes (default)
    CC21C0D6 = "cc21c0d6"  # the later revision seed 004 describes


@dataclass(frozen=True)
class QBMMTiling:
    """`GemmUniversal::QBMMTiling` of kernel_qbmm_mx.h (field names and order as the source)."""

    batchA1: int = 1
    batchA2: int = 1
    batchA3: int = 1
    batchA4: int = 1
    batchB1: int = 1
    batchB2: int = 1
    batchB3: int = 1
    batchB4: int = 1
    batchC1: int = 1
    batchC2: int = 1
    batchC3: int = 1
    batchC4: int = 1
    biasThreeDim: int = 0
    baseM: int = 0
    baseN: int = 0
    baseK: int = 0
    isBias: int = 0
    dbL0C: int = 1


@dataclass(frozen=True)
class QbmmMxParams:
    """`GemmUniversal::Params{problemShape, mmadParams, l1Params, schParams, qbmmParams}`."""

    problemShape: ProblemShape
    mmadParams: Params
    l1Params: L1Params
    schParams: BlockSchedulerQbmmParams
    qbmmParams: QBMMTiling


class GemmUniversalQbmmMx:
    """One core's `GemmUniversal` object for the MX schedule (`QBMMKernel qbmm; qbmm(params);`)."""

    def __init__(self, ctx: CoreContext, BlockMmad: BlockMmadMxType,
                 BlockScheduler: Callable[..., BlockSchedulerQuantBatchMatmulV3],
                 revision: QbmmMxRevision = QbmmMxRevision.R106B970C) -> None:
        self.ctx = ctx
        self.BlockMmad = BlockMmad
        self.BlockScheduler = BlockScheduler
        self.revision = revision
        self._scale_offset_reported = False
        self.weightNz = BlockMmad.weightNz
        self.transA = BlockMmad.transA
        self.transB = BlockMmad.transB
        self.isAtomicAdd = BlockMmad.DispatchPolicy.isAtomicAdd
        self.AType = BlockMmad.AType
        self.C0_SIZE = C0_SIZE_B4 if self.AType.is_fp4 else C0_SIZE_B8
        self.kCacheLineAlignMask = FP4_CACHE_LINE_ALIGN_MASK if self.AType.is_fp4 else FP8_CACHE_LINE_ALIGN_MASK
        self.MakeLayoutA = FrameLayoutFormat(BlockMmad.LayoutA, self.C0_SIZE)
        self.MakeLayoutB = FrameLayoutFormat(BlockMmad.LayoutB, self.C0_SIZE)
        self.MakeLayoutC = FrameLayoutFormat(BlockMmad.LayoutC)
        self.MakeLayoutScaleA = FrameLayoutFormat(ScaleADNLayoutPtn if self.transA else ScaleANDLayoutPtn, SCALE_C0)
        self.MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn if self.transB else ScaleBNDLayoutPtn, SCALE_C0)
        self.mmadOp_: BlockMmadMx | None = None
        # GM_ADDR members (nullptr until Init's ResetGmAddr sets them; bias stays nullptr without a bias)
        self.aGmAddr_: GmAddr = cast("GmAddr", None)
        self.bGmAddr_: GmAddr = cast("GmAddr", None)
        self.cGmAddr_: GmAddr = cast("GmAddr", None)
        self.biasGmAddr_: GmAddr = cast("GmAddr", None)
        self.scaleAGmAddr_: GmAddr = cast("GmAddr", None)
        self.scaleBGmAddr_: GmAddr = cast("GmAddr", None)
        self.batchCOffset_ = 0
        self.batchAOffset_ = 0
        self.batchBOffset_ = 0
        self.isBiasThreeDim_ = False
        self.isBias_ = False
        self.isSameBatch_ = False
        self.needUpdateTail_ = False

    def __call__(self, params: QbmmMxParams) -> None:
        self.Run(params)

    def Run(self, params: QbmmMxParams) -> None:
        ctx = self.ctx
        if ctx.ASCEND_IS_AIV:
            if self.revision is QbmmMxRevision.R106B970C:
                ctx.device.hazards.report(Hazard.AIV_RUNS_AIC_KERNEL, ctx.label,
                                          "kernel_qbmm_mx Run has no ASCEND_IS_AIV guard in this revision: the AIV "
                                          "would run the AIC schedule without L0/L1 (stopped here)")
            return
        self.mmadOp_ = self.BlockMmad(ctx)
        if self.isAtomicAdd:
            ctx.SetAtomicAdd(np.float32)
        self.Init(params)
        bs = self.BlockScheduler(params.problemShape, params.schParams, ctx)
        qbmm = params.qbmmParams
        l0TileShape = BlockShape(qbmm.baseM, qbmm.baseN, qbmm.baseK, 0)
        enableL0CPingPong = qbmm.dbL0C > 1
        self.mmadOp_.Init(params.problemShape, l0TileShape, params.l1Params, self.isBias_, enableL0CPingPong)
        if params.problemShape[MNK_B] == 1:
            self.ProcessSingleBatch(params, bs, 0, True)
            if self.isAtomicAdd:
                ctx.SetAtomicNone()
            return
        self.ProcessWithBatch(params, bs)
        if self.revision is QbmmMxRevision.CC21C0D6 and self.isAtomicAdd:
            ctx.SetAtomicNone()

    def Init(self, params: QbmmMxParams) -> None:
        qbmm = params.qbmmParams
        if qbmm.isBias == 1:
            if qbmm.biasThreeDim == 1:
                self.isBiasThreeDim_ = True
            self.isBias_ = True
        if (qbmm.batchA1, qbmm.batchA2, qbmm.batchA3, qbmm.batchA4) == (qbmm.batchB1, qbmm.batchB2, qbmm.batchB3,
                                                                         qbmm.batchB4):
            self.isSameBatch_ = True
        self.ResetGmAddr(params)

    def ResetGmAddr(self, params: QbmmMxParams) -> None:
        mp = params.mmadParams
        self.aGmAddr_ = mp.aGmAddr
        self.bGmAddr_ = mp.bGmAddr
        self.cGmAddr_ = mp.cGmAddr
        self.scaleAGmAddr_ = mp.scaleAGmAddr
        self.scaleBGmAddr_ = mp.scaleBGmAddr
        if self.isBias_:
            self.biasGmAddr_ = cast("GmAddr", mp.biasGmAddr)

    def ProcessWithBatch(self, params: QbmmMxParams, bs: BlockSchedulerQuantBatchMatmulV3) -> None:
        q = params.qbmmParams
        batchC3C4 = q.batchC3 * q.batchC4
        batchC2C3C4 = q.batchC2 * batchC3C4
        batchB3B4 = q.batchB3 * q.batchB4
        batchB2B3B4 = q.batchB2 * batchB3B4
        batchA3A4 = q.batchA3 * q.batchA4
        batchA2A3A4 = q.batchA2 * batchA3A4
        multiA1C1 = q.batchA1 // q.batchC1
        multiA2C2 = q.batchA2 // q.batchC2
        multiA3C3 = q.batchA3 // q.batchC3
        multiA4C4 = q.batchA4 // q.batchC4
        multiB1C1 = q.batchB1 // q.batchC1
        multiB2C2 = q.batchB2 // q.batchC2
        multiB3C3 = q.batchB3 // q.batchC3
        multiB4C4 = q.batchB4 // q.batchC4
        batchC1Offset = 0
        batchA1Offset = 0
        batchB1Offset = 0
        curBatchC = 1
        singleBatchTileCnt = bs.GetTotalCnt()
        batchCount = params.problemShape[MNK_B]
        blockNum = self.ctx.GetBlockNum()
        tailRoundStart = (singleBatchTileCnt * batchCount // blockNum) * blockNum
        for _b1Index in range(q.batchC1):
            batchC2Offset = batchC1Offset
            batchA2Offset = batchA1Offset
            batchB2Offset = batchB1Offset
            for _b2Index in range(q.batchC2):
                batchC3Offset = batchC2Offset
                batchA3Offset = batchA2Offset
                batchB3Offset = batchB2Offset
                for _b3Index in range(q.batchC3):
                    self.batchCOffset_ = batchC3Offset
                    self.batchAOffset_ = batchA3Offset
                    self.batchBOffset_ = batchB3Offset
                    for _b4Index in range(q.batchC4):
                        isTailRound = curBatchC * singleBatchTileCnt > tailRoundStart
                        self.AddBatchOffset(params)
                        self.ProcessSingleBatch(params, bs, batchCount - curBatchC, isTailRound)
                        curBatchC += 1
                        self.batchCOffset_ += 1
                        self.batchAOffset_ += multiA4C4
                        self.batchBOffset_ += multiB4C4
                    batchC3Offset += q.batchC4
                    batchA3Offset += q.batchA4 * multiA3C3
                    batchB3Offset += q.batchB4 * multiB3C3
                batchC2Offset += batchC3C4
                batchA2Offset += batchA3A4 * multiA2C2
                batchB2Offset += batchB3B4 * multiB2C2
            batchC1Offset += batchC2C3C4
            batchA1Offset += batchA2A3A4 * multiA1C1
            batchB1Offset += batchB2B3B4 * multiB1C1

    def AddBatchOffset(self, params: QbmmMxParams) -> None:
        self.ResetGmAddr(params)
        m, n, k = (params.problemShape[i] for i in (MNK_M, MNK_N, MNK_K))
        sizeShift = 1 if self.AType.is_fp4 else 0
        cItem = self.BlockMmad.CType.itemsize
        self.aGmAddr_ = self.aGmAddr_ + ((self.batchAOffset_ * m * k) >> sizeShift)
        self.bGmAddr_ = self.bGmAddr_ + ((self.batchBOffset_ * n * k) >> sizeShift)
        self.cGmAddr_ = self.cGmAddr_ + self.batchCOffset_ * m * n * cItem
        if self.isBiasThreeDim_:
            self.biasGmAddr_ = self.biasGmAddr_ + self.batchCOffset_ * n * self.BlockMmad.BiasType.itemsize
        if self.revision is QbmmMxRevision.CC21C0D6:
            scaleKLen = scale_k_len(k)
            self.scaleAGmAddr_ = self.scaleAGmAddr_ + self.batchAOffset_ * m * scaleKLen
            self.scaleBGmAddr_ = self.scaleBGmAddr_ + self.batchBOffset_ * n * scaleKLen
        elif (self.batchAOffset_ or self.batchBOffset_) and not self._scale_offset_reported:
            # Reproduced as the source does it (every batch reads batch 0's scales); reported once when this
            # batch's own scales differ from batch 0's, i.e. when C really comes out wrong.
            scaleKLen = scale_k_len(k)
            gm = self.ctx.device.gm
            differs = False
            for base, off, rows in ((self.scaleAGmAddr_, self.batchAOffset_, m),
                                    (self.scaleBGmAddr_, self.batchBOffset_, n)):
                if off:
                    size = rows * scaleKLen
                    own, first = gm.view(base + off * size, np.uint8, (size,)), gm.view(base, np.uint8, (size,))
                    # a protocol-only run has no scale bytes: this value check is off (docs/architecture.md)
                    differs |= not (is_payload(own) or np.array_equal(first, own))
            if differs:
                self._scale_offset_reported = True
                self.ctx.device.hazards.report(
                    Hazard.SCALE_BATCH_OFFSET_MISSING, self.ctx.label,
                    f"AddBatchOffset (revision {self.revision.value}) advances A, B and C but not scaleA / "
                    f"scaleB: batch offsets A {self.batchAOffset_} / B {self.batchBOffset_} read batch 0's "
                    f"scales, which differ from their own (fixed in revision {QbmmMxRevision.CC21C0D6.value})")

    def SetL2Cache(self, problemShape: ProblemShape, curBaseM: int, baseN: int, gmB: GmTensor, gmC: GmTensor) -> None:
        """QBMM L2 rules (SPEC §5): C disabled when atomic; gate same batch and full M tile; B by alignment;
        no ScaleB hint (seed 004 wins over the revision that still sets one)."""
        ctx = self.ctx
        if self.isAtomicAdd:
            gmC.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE)
        fullMTile = curBaseM >= problemShape[MNK_M]
        if not (self.isSameBatch_ and fullMTile):
            return
        if self.weightNz:
            gmB.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE)
        elif self.transB:
            bAlignForL2Stream = (problemShape[MNK_K] & self.kCacheLineAlignMask) == 0
            gmB.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE if bAlignForL2Stream else CacheMode.CACHE_MODE_NORMAL)
        else:
            bAlignForL2Stream = ((problemShape[MNK_N] & self.kCacheLineAlignMask) == 0
                                 and (baseN & self.kCacheLineAlignMask) == 0)
            gmB.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE if bAlignForL2Stream else CacheMode.CACHE_MODE_NORMAL)

    def ProcessSingleBatch(self, params: QbmmMxParams, bs: BlockSchedulerQuantBatchMatmulV3, restBatch: int,
                           isTailRound: bool) -> None:
        ctx = self.ctx
        T = self.BlockMmad
        problemShape = params.problemShape
        m, n, k = problemShape[MNK_M], problemShape[MNK_N], problemShape[MNK_K]
        scaleKLen = scale_k_len(k)
        layoutA = self.MakeLayoutA(m, k)
        layoutScaleA = self.MakeLayoutScaleA(m, scaleKLen)
        layoutB = self.MakeLayoutB(k, n)
        layoutScaleB = self.MakeLayoutScaleB(scaleKLen, n)
        layoutBias = MakeFrameLayout(NDExtLayoutPtn, 1, n)
        layoutC = self.MakeLayoutC(m, n)
        gmA = MakeTensor(MakeMemPtr(self.aGmAddr_, gm_storage_dtype(T.AType)), layoutA, name="A")
        gmScaleA = MakeTensor(MakeMemPtr(self.scaleAGmAddr_, E8M0_DTYPE), layoutScaleA, name="scaleA")
        gmB = MakeTensor(MakeMemPtr(self.bGmAddr_, gm_storage_dtype(T.BType)), layoutB, name="B")
        gmScaleB = MakeTensor(MakeMemPtr(self.scaleBGmAddr_, E8M0_DTYPE), layoutScaleB, name="scaleB")
        gmBias = (MakeTensor(MakeMemPtr(self.biasGmAddr_, T.BiasType), layoutBias, name="bias")
                  if self.biasGmAddr_ is not None else None)
        gmC = MakeTensor(MakeMemPtr(self.cGmAddr_, T.CType), layoutC, name="C")

        blockIdx = BlockCoord()
        mTailTile = params.schParams.mTailTile
        nTailTile = params.schParams.nTailTile
        # both tail of current batch and rest batch are tail round
        if self.needUpdateTail_ or (isTailRound and ((bs.GetEndBlockIdx() + 1) + restBatch * bs.GetTotalCnt())
                                    * mTailTile * nTailTile <= ctx.GetBlockNum()):
            self.needUpdateTail_ = True
            bs.UpdateTailTile(mTailTile, nTailTile)
        self.SetL2Cache(problemShape, params.qbmmParams.baseM, params.qbmmParams.baseN, gmB, gmC)

        kPos = 0  # K is not split, so the K coordinate is 0
        mmadOp_ = cast(BlockMmadMx, self.mmadOp_)  # Init built it (the kernel runs on AICs only)
        while bs.GetTileIdx(blockIdx):
            singleShape = bs.GetBlockShape(blockIdx, self.weightNz)
            if singleShape[IDX_M_TILEIDX] <= 0 or singleShape[IDX_N_TILEIDX] <= 0:
                if restBatch > 0:
                    ctx.device.hazards.report(
                        Hazard.EMPTY_TAIL_EARLY_RETURN, ctx.label,
                        f"empty tail piece returns from ProcessSingleBatch with {restBatch} batch(es) to go: "
                        f"UpdateNextBatchBlockRoundParams is skipped, later batches are scheduled off by one round",
                        severity=Severity.WARNING, restBatch=restBatch)
                return
            mPos, nPos = bs.GetTileCoord(blockIdx)
            curM, curN = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            gmBlockA = gmA.Slice((mPos, kPos), (curM, k))
            gmBlockScaleA = gmScaleA.Slice((mPos, kPos), (curM, scaleKLen))
            gmBlockB = gmB.Slice((kPos, nPos), (k, curN))
            gmBlockScaleB = gmScaleB.Slice((kPos, nPos), (scaleKLen, curN))
            gmBlockBias = gmBias.Slice((0, nPos), (1, curN)) if gmBias is not None else None
            gmBlockC = gmC.Slice((mPos, nPos), (curM, curN))
            mmadOp_(gmBlockA, gmBlockB, gmBlockScaleA, gmBlockScaleB, gmBlockBias, gmBlockC, singleShape)
        bs.UpdateNextBatchBlockRoundParams()


def kernel_qbmm_mx(ctx: CoreContext, BlockMmad: BlockMmadMxType,
                   BlockScheduler: Callable[..., BlockSchedulerQuantBatchMatmulV3], params: QbmmMxParams,
                   revision: QbmmMxRevision = QbmmMxRevision.R106B970C) -> Any:
    """The kernel entry one core runs: `QBMMKernel qbmm; qbmm(params);` then the destructors."""
    qbmm = GemmUniversalQbmmMx(ctx, BlockMmad, BlockScheduler, revision)
    qbmm(params)
    if qbmm.mmadOp_ is not None:
        qbmm.mmadOp_.Destroy()
