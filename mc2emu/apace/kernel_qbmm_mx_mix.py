"""GemmUniversal (QBMM MX, MIX) — the per-block matmul + epilogue kernel of the shipped quant_matmul_reduce_scatter.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/matmul/quant_batch_matmul/kernel_qbmm_mx_mix.h`
(hicann/ops-transformer 8fbd92b1d1), launched MIX_AIC_1_2 by `QuantMatmulReduceScatterUbmemKernel`
(`tests/st/quant_matmul_reduce_scatter/ubmem/src/kernel_launcher.h`). Per block: AIC (after flag 9 unless
it is its first block) mmad into the workspace, `CrossCoreSetFlag<0x2, PIPE_FIX>(8)`; AIV waits 8, runs the
epilogue, sets 9. The multi-batch path is not emulated (the launcher passes batch 1).

The single-batch path returns before the final flag-9 wait that only the multi-batch path has: every AIC
that ran a block ends with one unconsumed flag-9 round, UNCONSUMED_FLAG (AIC, id 9) at launch end. Whether
the count persists into the next launch is undocumented (SPEC §2 assumption: it does): then each launch adds
one and the 16th pending Set is a hardware error. The `FINAL_WAIT` variant adds the final wait (a fix, for
comparison).

The untemplated `CrossCoreWaitFlag(id)` is `CrossCoreWaitFlag<0, PIPE_S>(id)` in asc-devkit; on DAV_3510 it
waits on the counter the mode-2 Set raised. The flag model rejects PIPE_S and tracks modes per id, so it is
emulated as the mode-2 wait on that counter (on an existing pipe of the core).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.arch.platform import Pipe
from mc2emu.blaze.gemm.common_utils import FP8_CACHE_LINE_ALIGN_MASK, IDX_M_TILEIDX, IDX_N_TILEIDX, MNK_B, BlockCoord
from mc2emu.blaze.tensor_api.layout import (
    FrameLayoutFormat,
    NDExtLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B8, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import KernelError

if TYPE_CHECKING:
    from mc2emu.apace.block_epilogue_all_to_all import BlockEpilogueAlltoAll, EpilogueParams
    from mc2emu.blaze.gemm.block.block_mmad_mx import L1Params, Params
    from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams
    from mc2emu.runtime.core import CoreContext

# `CROSS_CORE_NOTIFY_VEC_FLAG` / `CROSS_CORE_NOTIFY_CUBE_FLAG`.
CROSS_CORE_NOTIFY_VEC_FLAG = 8
CROSS_CORE_NOTIFY_CUBE_FLAG = 9


class MixKernelVariant(enum.Enum):
    SOURCE = "source"
    FINAL_WAIT = "final_wait"    # the multi-batch path's final CrossCoreWaitFlag(9) on the single-batch path


@dataclass(frozen=True)
class MixQBMMTiling:
    """The `QBMMTiling` fields this path reads (the launcher sets every batch dim 1, biasThreeDim 0; the ST
    launcher passes isBias 0, the operator API sets 1 when given a bias: Init reads it, as the source does)."""

    baseM: int
    baseN: int
    baseK: int
    isBias: int
    dbL0C: int
    bMustHitL2: int = 1


@dataclass(frozen=True)
class MixParams:
    """`GemmUniversal::Params{problemShape, mmadParams, l1Params, schParams, qbmmParams, epilogueParams}`."""

    problemShape: tuple[int, int, int, int]
    mmadParams: Params
    l1Params: L1Params
    schParams: BlockSchedulerQbmmParams
    qbmmParams: MixQBMMTiling
    epilogueParams: EpilogueParams


def untemplated_wait(ctx: CoreContext, flagId: int) -> None:
    """`CrossCoreWaitFlag(flagId)` (module docstring)."""
    ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2 if ctx.ASCEND_IS_AIC else Pipe.PIPE_MTE3, flagId)


class GemmUniversalQbmmMxMix:
    """One core's `KernelImpl kernel;`."""

    def __init__(self, ctx: CoreContext, BlockMmad: Any, epilogue: BlockEpilogueAlltoAll, scheduler_cls: Any,
                 variant: MixKernelVariant = MixKernelVariant.SOURCE) -> None:
        self.ctx = ctx
        self.BlockMmad = BlockMmad
        self.epilogueOp_ = epilogue
        self.BlockScheduler = scheduler_cls
        self.variant = variant
        self.weightNz = bool(BlockMmad.WEIGHT_NZ)
        self.MakeLayoutA = FrameLayoutFormat(NDExtLayoutPtn, C0_SIZE_B8)
        # B as the BlockMmad's LayoutB: the ST launcher's NZ (b993c14f, transB false, scaleB (ceil(K/64), N, 2)),
        # or the (N, K) DN of its earlier "ND layout (TransB=true)" path (scaleB (N, ceil(K/64), 2))
        self.MakeLayoutB = FrameLayoutFormat(BlockMmad.LayoutB, C0_SIZE_B8)
        self.MakeLayoutScaleA = FrameLayoutFormat(ScaleANDLayoutPtn, SCALE_C0)
        self.MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn if BlockMmad.TRANS_B else ScaleBNDLayoutPtn,
                                                  SCALE_C0)
        self.mmadOp_: Any = None
        self.isBias_ = False
        self.isFirstBlock_ = True
        self.needUpdateTail_ = False
        self.blocks = 0

    def __call__(self, params: MixParams) -> None:
        self.Run(params)

    def Run(self, params: MixParams) -> None:
        ctx = self.ctx
        self.Init(params)
        bs = self.BlockScheduler(params.problemShape, params.schParams, ctx)
        q = params.qbmmParams
        if ctx.ASCEND_IS_AIC:
            self.mmadOp_ = self.BlockMmad(ctx)
            self.mmadOp_.Init(params.problemShape, (q.baseM, q.baseN, q.baseK, 0), params.l1Params, self.isBias_,
                              q.dbL0C > 1)
        if ctx.ASCEND_IS_AIV:
            self.epilogueOp_.Init(params.epilogueParams)
        if params.problemShape[MNK_B] != 1:
            raise KernelError("GemmUniversal MIX: the multi-batch path is not emulated (the launcher passes batch 1)")
        self.ProcessSingleBatch(params, bs, 0, True)
        if self.variant is MixKernelVariant.FINAL_WAIT and ctx.ASCEND_IS_AIC and not self.isFirstBlock_:
            untemplated_wait(ctx, CROSS_CORE_NOTIFY_CUBE_FLAG)

    def Init(self, params: MixParams) -> None:
        if params.qbmmParams.isBias == 1:
            self.isBias_ = True
        mp = params.mmadParams
        self.aGmAddr_, self.bGmAddr_, self.cGmAddr_ = mp.aGmAddr, mp.bGmAddr, mp.cGmAddr
        self.scaleAGmAddr_, self.scaleBGmAddr_ = mp.scaleAGmAddr, mp.scaleBGmAddr
        self.biasGmAddr_ = mp.biasGmAddr if self.isBias_ else None

    def SetBL2Cache(self, problemShape: tuple[int, int, int, int], curM: int, curN: int, bMustHitL2: int,
                    gmB: Any) -> None:
        """B streams only when bMustHitL2 == 0 (the launcher leaves it 1), the block covers all of M and its
        N is cache-line aligned (always, for the transposed B)."""
        isCurrentNAligned = True if self.BlockMmad.TRANS_B else (curN & FP8_CACHE_LINE_ALIGN_MASK) == 0
        disable = bMustHitL2 == 0 and curM >= problemShape[0] and isCurrentNAligned
        gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if disable else CacheMode.CACHE_MODE_NORMAL)

    def ProcessSingleBatch(self, params: MixParams, bs: Any, restBatch: int, isTailRound: bool) -> None:
        ctx = self.ctx
        T = self.BlockMmad
        m, n, k, _ = params.problemShape
        scaleKLen = scale_k_len(k)
        gmA = MakeTensor(MakeMemPtr(self.aGmAddr_, gm_storage_dtype(T.AType)), self.MakeLayoutA(m, k), name="A")
        gmScaleA = MakeTensor(MakeMemPtr(self.scaleAGmAddr_, E8M0_DTYPE), self.MakeLayoutScaleA(m, scaleKLen),
                              name="scaleA")
        gmB = MakeTensor(MakeMemPtr(self.bGmAddr_, gm_storage_dtype(T.BType)), self.MakeLayoutB(k, n), name="B")
        gmScaleB = MakeTensor(MakeMemPtr(self.scaleBGmAddr_, E8M0_DTYPE), self.MakeLayoutScaleB(scaleKLen, n),
                              name="scaleB")
        gmBias = (MakeTensor(MakeMemPtr(self.biasGmAddr_, T.BiasType), FrameLayoutFormat(NDExtLayoutPtn)(1, n),
                             name="bias") if self.biasGmAddr_ is not None else None)
        gmC = MakeTensor(MakeMemPtr(self.cGmAddr_, T.CType), FrameLayoutFormat(NDExtLayoutPtn)(m, n), name="C")
        mTailTile, nTailTile = params.schParams.mTailTile, params.schParams.nTailTile
        if self.needUpdateTail_ or (isTailRound and ((bs.GetEndBlockIdx() + 1) + restBatch * bs.GetTotalCnt())
                                    * mTailTile * nTailTile <= ctx.GetBlockNum()):
            self.needUpdateTail_ = True
            bs.UpdateTailTile(mTailTile, nTailTile)
        kPos = 0
        blockCoord = BlockCoord()
        while bs.GetTileIdx(blockCoord):
            singleShape = bs.GetBlockShape(blockCoord, self.weightNz)
            baseM, baseN = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            if baseM <= 0 or baseN <= 0:
                return
            self.SetBL2Cache(params.problemShape, baseM, baseN, params.qbmmParams.bMustHitL2, gmB)
            mPos, nPos = bs.GetTileCoord(blockCoord)
            if ctx.ASCEND_IS_AIC:
                if not self.isFirstBlock_:
                    untemplated_wait(ctx, CROSS_CORE_NOTIFY_CUBE_FLAG)
                self.mmadOp_(gmA.Slice((mPos, kPos), (baseM, k)), gmB.Slice((kPos, nPos), (k, baseN)),
                             gmScaleA.Slice((mPos, kPos), (baseM, scaleKLen)),
                             gmScaleB.Slice((kPos, nPos), (scaleKLen, baseN)),
                             None if gmBias is None else gmBias.Slice((0, nPos), (1, baseN)),
                             gmC.Slice((mPos, nPos), (baseM, baseN)), singleShape)
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, CROSS_CORE_NOTIFY_VEC_FLAG)
                self.isFirstBlock_ = False
            if ctx.ASCEND_IS_AIV:
                untemplated_wait(ctx, CROSS_CORE_NOTIFY_VEC_FLAG)
                self.epilogueOp_(mPos, nPos, singleShape)
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, CROSS_CORE_NOTIFY_CUBE_FLAG)
            self.blocks += 1
        bs.UpdateNextBatchBlockRoundParams()
