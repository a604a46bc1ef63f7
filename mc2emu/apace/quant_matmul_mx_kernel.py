"""QuantMatmulMxKernel — the apace composition-mode MX quant matmul kernel of the MC2 all-to-all operator.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/quant_matmul_mx_kernel.h`
(`QuantMatmulMxKernel<ProblemShape, BlockMmad, BlockScheduler, CommPolicy>`, seed 000 §3-4, SPEC §6);
structure, names, loop order and wait order follow the source.

ProcessSingleBatch walks this core's output tiles; per tile one of three branches (SPEC §6):
- localFirst (LOCAL && localMatmul == 1): local A rows rankId*oriM + mPos x B segment rankId, index 0;
- deferredSync (DEFERRED_SYNC): self rank from local A at index 0, WaitTile(dep), the other ranks in
  ascending order from the window at indices 1 .. R-1;
- REMOTE (everything else): WaitTile(dep), ranks in ascending order; the own rank is skipped when
  localMatmul == 1, else read from local A; indices count executed mmads from 0.
dep = min((mPos + blockM - 1) / headTileSize, totalTiles - 1). Wait order "mask" (the seed's uint32
`waitedMask`: each dep once, then a final drain of unwaited tiles) or "in_order" (the later source:
`while ready < dep: WaitTile(++ready)`, drain up to totalTiles - 1). Run has no AIV guard: an AIV that runs
it (an AIC-only kernel launched mixed) joins the waits, as on the device (reported).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.comm_policy import (
    WAIT_ORDERS,
    CommPolicy,
    FaultInjectingCommPolicy,
    TileWaitState,
    WaitOrder,
    check_comm_policy,
)
from mc2emu.blaze.gemm.block.block_mmad_mx import Params as BlockMmadParams
from mc2emu.blaze.gemm.common_utils import (
    FP4_CACHE_LINE_ALIGN_MASK,
    FP8_CACHE_LINE_ALIGN_MASK,
    IDX_M_TILEIDX,
    IDX_N_TILEIDX,
    BlockCoord,
)
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import QBMMTiling
from mc2emu.blaze.tensor_api.layout import (
    FrameLayoutFormat,
    MakeFrameLayout,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B4, C0_SIZE_B8, MXFP_MULTI_BASE_SIZE, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.faults import FaultHook
from mc2emu.runtime.gm import Allocation, GmAddr
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext



# What an address member holds before ResetGmAddr sets it (an AIV: Init returns first). An empty
# allocation: any access through it fails its bounds check instead of touching real data.
UNSET_GM_ADDR = GmAddr(Allocation(0, "<unset: QuantMatmulMxKernel::Init returned early>", np.zeros(0, np.uint8), None))


class MatmulMode(enum.IntEnum):
    REMOTE = 0
    LOCAL = 1
    DEFERRED_SYNC = 2


class BiasMode(enum.IntEnum):
    BIAS_DISABLED = 0
    BIAS_ENABLED = 1


@dataclass(frozen=True)
class LocalParams:
    rankId: int
    rankSize: int
    originalM: int
    localAGmAddr: GmAddr
    localScaleAGmAddr: GmAddr
    localMatmul: int
    splitKNum: int
    matmulMode: MatmulMode
    headTileSize: int


@dataclass(frozen=True)
class Params:
    problemShape: tuple[int, int, int, int]   # (M, N, K, B): M = oriM, K = Ka (per rank), B = 1
    mmadParams: BlockMmadParams   # `typename BlockMmad::Params` (blaze block_mmad_mx.Params)
    l1Params: Any
    schParams: Any
    qbmmParams: QBMMTiling        # the QBMM tiling struct (blaze kernel_qbmm_mx.QBMMTiling; the batch fields stay 1)
    localParams: LocalParams


def CalcDependTileIdx(lastRow: int, headTileSize: int, totalTiles: int) -> int:
    """The communication tile that holds row `lastRow` of every peer block, clamped to the last tile."""
    return min(lastRow // headTileSize, totalTiles - 1)


class QuantMatmulMxKernel:
    """One core's instance of the kernel (the C++ class is instantiated per core in the kernel body).

    `BlockMmad` is the template instantiation (`BlockMmadMx.template(...)`, a `BlockMmadMxType`: `TRANS_A`,
    `TRANS_B`, `WEIGHT_NZ`, `AType`, `BType`, `CType`, and `BlockMmad(ctx)` making the core's `mmadOp_`);
    `scheduler_cls` is `BlockSchedulerQuantBatchMatmulV3.template(...)`; `comm_policy` the CommPolicy."""

    def __init__(self, ctx: CoreContext, BlockMmad: Any, scheduler_cls: Any, comm_policy: CommPolicy, *,
                 wait_order: WaitOrder = WaitOrder.MASK) -> None:
        check_comm_policy(comm_policy, "QuantMatmulMxKernel")
        self.ctx = ctx
        self.BlockMmad = BlockMmad
        # The AIC's cube objects; an AIV has no L1 / L0 (see Run).
        self.mmadOp_ = BlockMmad(ctx) if ctx.ASCEND_IS_AIC else None
        self.BlockScheduler = scheduler_cls
        self.commPolicy_ = comm_policy
        self.wait_order = wait_order
        self.WaitOrderPolicy = WAIT_ORDERS[wait_order]
        self.weightNz = bool(BlockMmad.WEIGHT_NZ)
        self.transA = bool(BlockMmad.TRANS_A)
        self.transB = bool(BlockMmad.TRANS_B)
        isFp4 = BlockMmad.AType.is_fp4
        self.C0_SIZE = C0_SIZE_B4 if isFp4 else C0_SIZE_B8
        self.kCacheLineAlignMask = FP4_CACHE_LINE_ALIGN_MASK if isFp4 else FP8_CACHE_LINE_ALIGN_MASK
        self.isBias_ = False
        self.isAtomicAdd_ = False
        self.needUpdateTail_ = False
        self.tiles_done = 0
        # The GM address members before ResetGmAddr: never set on an AIV (Init returns first).
        self.aGmAddr_ = self.bGmAddr_ = self.scaleAGmAddr_ = self.scaleBGmAddr_ = UNSET_GM_ADDR
        self.cGmAddr_ = self.localAGmAddr_ = self.localScaleAGmAddr_ = UNSET_GM_ADDR
        self.biasGmAddr_: GmAddr | None = None

    def GetCommPolicy(self) -> Any:
        return self.commPolicy_

    def __call__(self, params: Params) -> None:
        self.Run(params)

    # -- Init / Run -----------------------------------------------------------------------------------
    def Init(self, params: Params) -> bool:
        """Returns False on an AIV (the source's `if ASCEND_IS_AIV { return; }`)."""
        if self.ctx.ASCEND_IS_AIV:
            return False
        lp = params.localParams
        self.isBias_ = params.qbmmParams.isBias == BiasMode.BIAS_ENABLED
        self.isAtomicAdd_ = lp.matmulMode == MatmulMode.REMOTE and lp.localMatmul == 1
        faults = self.ctx.device.faults
        if (self.isAtomicAdd_ and faults is not None
                and faults.fires(FaultHook.KERNEL_INIT, self.ctx.rank, self.ctx.label)):
            self.isAtomicAdd_ = False   # fault injection: the REMOTE pass of localMatmul 1 without atomic add
        self.needUpdateTail_ = False   # the source's Init resets it (the impls reuse one kernel for both passes)
        if lp.matmulMode == MatmulMode.REMOTE and lp.localMatmul == 1 and not self.isAtomicAdd_:
            self.ctx.device.hazards.report(
                Hazard.LOCAL_WITHOUT_ATOMIC, self.ctx.label,
                "REMOTE pass with localMatmul 1 but no SetAtomicAdd: its write-out overwrites the LOCAL pass's C "
                "instead of adding to it (seed 000 §4.4 constraint 1)")
        self.ResetGmAddr(params)
        return True

    def ResetGmAddr(self, params: Params) -> None:
        mp, lp = params.mmadParams, params.localParams
        self.aGmAddr_, self.bGmAddr_ = mp.aGmAddr, mp.bGmAddr
        self.scaleAGmAddr_, self.scaleBGmAddr_ = mp.scaleAGmAddr, mp.scaleBGmAddr
        self.cGmAddr_, self.biasGmAddr_ = mp.cGmAddr, mp.biasGmAddr
        self.localAGmAddr_, self.localScaleAGmAddr_ = lp.localAGmAddr, lp.localScaleAGmAddr

    def Run(self, params: Params) -> None:
        ctx = self.ctx
        if not self.Init(params):
            # Run has no AIV guard in the source: an AIV reaching here runs the rest on stale members.
            ctx.device.hazards.report(
                Hazard.AIV_RUNS_AIC_KERNEL, ctx.label,
                "QuantMatmulMxKernel::Run on an AIV: only Init returns early on AIV, so this AIV joins the "
                "tile loop and its communication waits (launch the kernel AIC-only, or guard Run)")
            # isAtomicAdd_, isBias_ and the GM addresses keep what they held: Init returned before setting
            # them (on a fresh kernel: false and unset), as on the device.
        if self.isAtomicAdd_:
            ctx.SetAtomicAdd(self.BlockMmad.CType)
        bs = self.BlockScheduler(params.problemShape, params.schParams, ctx)
        q = params.qbmmParams
        l0TileShape = (q.baseM, q.baseN, q.baseK, 0)
        if self.mmadOp_ is not None:
            self.mmadOp_.Init(params.problemShape, l0TileShape, params.l1Params, self.isBias_, q.dbL0C > 1,
                              params.localParams.splitKNum)
        self.ProcessSingleBatch(params, bs, 0, True)
        if self.isAtomicAdd_:
            ctx.SetAtomicNone()

    # -- the tile loop ---------------------------------------------------------------------------------
    def ProcessSingleBatch(self, params: Params, bs: Any, restBatch: int, isTailRound: bool) -> None:
        ctx = self.ctx
        lp = params.localParams
        M, N, K, _ = params.problemShape
        rankSize, rankId, oriM = lp.rankSize, lp.rankId, lp.originalM
        scaleKLen = scale_k_len(K)
        T = self.BlockMmad
        # An AIV running Run (no cube) only joins the waits: its mmads do nothing.
        mm = self.mmadOp_ if self.mmadOp_ is not None else (lambda *args: None)

        # Global layouts (seed 000 §5.1): A and the local A stack the ranks along M, B along K.
        MakeLayoutA = FrameLayoutFormat(T.LayoutA, self.C0_SIZE)
        MakeLayoutB = FrameLayoutFormat(T.LayoutB, self.C0_SIZE)
        MakeLayoutC = FrameLayoutFormat(NDExtLayoutPtn, self.C0_SIZE)
        MakeLayoutScaleA = FrameLayoutFormat(ScaleADNLayoutPtn if self.transA else ScaleANDLayoutPtn, SCALE_C0)
        MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn if self.transB else ScaleBNDLayoutPtn, SCALE_C0)
        layoutA = MakeLayoutA(rankSize * oriM, K)
        layoutScaleA = MakeLayoutScaleA(rankSize * oriM, scaleKLen)
        layoutB = MakeLayoutB(rankSize * K, N)
        layoutScaleB = MakeLayoutScaleB(rankSize * scaleKLen, N)
        layoutC = MakeLayoutC(M, N)
        aType, bType = gm_storage_dtype(T.AType), gm_storage_dtype(T.BType)
        gmA = MakeTensor(MakeMemPtr(self.aGmAddr_, aType), layoutA, name="A(window)")
        gmALocal = MakeTensor(MakeMemPtr(self.localAGmAddr_, aType), layoutA, name="A(local)")
        gmScaleA = MakeTensor(MakeMemPtr(self.scaleAGmAddr_, E8M0_DTYPE), layoutScaleA, name="scaleA(window)")
        gmScaleALocal = MakeTensor(MakeMemPtr(self.localScaleAGmAddr_, E8M0_DTYPE), layoutScaleA,
                                   name="scaleA(local)")
        gmB = MakeTensor(MakeMemPtr(self.bGmAddr_, bType), layoutB, name="B")
        gmScaleB = MakeTensor(MakeMemPtr(self.scaleBGmAddr_, E8M0_DTYPE), layoutScaleB, name="scaleB")
        gmC = MakeTensor(MakeMemPtr(self.cGmAddr_, T.CType), layoutC, name="C")
        gmBias = None
        if self.isBias_ and self.biasGmAddr_ is not None:
            gmBias = MakeTensor(MakeMemPtr(self.biasGmAddr_, T.BiasType), MakeFrameLayout(NDExtLayoutPtn, 1, N),
                                name="bias")

        mTailTile, nTailTile = params.schParams.mTailTile, params.schParams.nTailTile
        if self.needUpdateTail_ or (isTailRound and ((bs.GetEndBlockIdx() + 1) + restBatch * bs.GetTotalCnt())
                                    * mTailTile * nTailTile <= ctx.GetBlockNum()):
            self.needUpdateTail_ = True
            bs.UpdateTailTile(mTailTile, nTailTile)
        self.SetL2Cache(params, gmB, gmScaleB, gmC)

        localFirst = lp.matmulMode == MatmulMode.LOCAL and lp.localMatmul == 1
        deferredSync = lp.matmulMode == MatmulMode.DEFERRED_SYNC
        headTileSize = lp.headTileSize
        totalTiles = CeilDiv(oriM, headTileSize)
        # waitedMask / ready and the fault hook live in the policy wrappers (comm_policy.py): the wait order
        # decides which tiles WaitTile gets, the fault wrapper may skip or swap one.
        waitState = TileWaitState()
        waitOrder = self.WaitOrderPolicy(FaultInjectingCommPolicy(self.commPolicy_, ctx, waitState, totalTiles),
                                         waitState)

        blockIdx = BlockCoord()
        while bs.GetTileIdx(blockIdx):
            singleShape = bs.GetBlockShape(blockIdx, self.weightNz)
            blockM, blockN = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            if blockM <= 0 or blockN <= 0:
                # The source returns at once on an empty tail piece, skipping the drain below. The LOCAL
                # pass (localFirst) has no drain: nothing is skipped there, a note only.
                skipped = ("the LOCAL pass waits on nothing, so no communication wait is skipped" if localFirst
                           else "the drain of its communication waits below is skipped")
                ctx.device.hazards.report(
                    Hazard.EMPTY_TAIL_EARLY_RETURN, ctx.label,
                    f"tile ({blockIdx[0]}, {blockIdx[1]}) has an empty tail piece ({blockM}, {blockN}): "
                    f"ProcessSingleBatch returns at once; {skipped}",
                    severity=Severity.WARNING if localFirst else Severity.ERROR, tile=(blockIdx[0], blockIdx[1]))
                return
            mPos, nPos = bs.GetTileCoord(blockIdx)
            gmBlockC = gmC.Slice((mPos, nPos), (blockM, blockN))
            gmBlockBias = gmBias.Slice((0, nPos), (1, blockN)) if gmBias is not None else None
            gmBlockB = [gmB.Slice((s * K, nPos), (K, blockN)) for s in range(rankSize)]
            gmBlockScaleB = [gmScaleB.Slice((s * scaleKLen, nPos), (scaleKLen, blockN)) for s in range(rankSize)]

            def a_blocks(rank: int, local: bool, mPos: int = mPos, blockM: int = blockM) -> tuple[Any, Any]:
                actualMPos = rank * oriM + mPos
                srcA, srcS = (gmALocal, gmScaleALocal) if local else (gmA, gmScaleA)
                return (srcA.Slice((actualMPos, 0), (blockM, K)),
                        srcS.Slice((actualMPos, 0), (blockM, scaleKLen)))

            if localFirst:
                blockA, blockScaleA = a_blocks(rankId, True)
                mm(blockA, gmBlockB[rankId], blockScaleA, gmBlockScaleB[rankId], gmBlockBias, gmBlockC,
                   singleShape, 0)
            elif deferredSync:
                blockA, blockScaleA = a_blocks(rankId, True)
                mm(blockA, gmBlockB[rankId], blockScaleA, gmBlockScaleB[rankId], gmBlockBias, gmBlockC,
                   singleShape, 0)
                # The wait sits between the self mmad and the remote mmads (the kernel's contract).
                waitOrder.WaitDep(CalcDependTileIdx(mPos + blockM - 1, headTileSize, totalTiles))
                remoteRankCnt = 1
                for rank in range(rankSize):
                    if rank == rankId:
                        continue
                    blockA, blockScaleA = a_blocks(rank, False)
                    mm(blockA, gmBlockB[rank], blockScaleA, gmBlockScaleB[rank], gmBlockBias, gmBlockC,
                       singleShape, remoteRankCnt)
                    remoteRankCnt += 1
            else:
                waitOrder.WaitDep(CalcDependTileIdx(mPos + blockM - 1, headTileSize, totalTiles))
                remoteRankCnt = 0
                for rank in range(rankSize):
                    if rank == rankId:
                        if lp.localMatmul == 1:
                            continue
                        blockA, blockScaleA = a_blocks(rank, True)
                    else:
                        blockA, blockScaleA = a_blocks(rank, False)
                    mm(blockA, gmBlockB[rank], blockScaleA, gmBlockScaleB[rank], gmBlockBias, gmBlockC,
                       singleShape, remoteRankCnt)
                    remoteRankCnt += 1
            self.tiles_done += 1

        if not localFirst:
            # Drain: every communication tile is waited exactly once, so Waits pair with the Sets.
            waitOrder.Drain(totalTiles)

    # -- L2 cache hints (seed 000 §5.3; SPEC §5 "A2A") ---------------------------------------------------
    def SetL2Cache(self, params: Params, gmB: Any, gmScaleB: Any, gmC: Any) -> None:
        ctx = self.ctx
        M, N, K, _ = params.problemShape
        q = params.qbmmParams
        if self.isAtomicAdd_:
            gmC.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE)
        fullMTile = q.baseM >= M
        if not fullMTile:
            return
        self.SetScaleL2Cache(params, gmScaleB)
        mask = self.kCacheLineAlignMask
        if self.weightNz:
            bAlignForL2Stream = True
        elif self.transB:
            bAlignForL2Stream = (K & mask) == 0
        else:
            bAlignForL2Stream = (N & mask) == 0 and (q.baseN & mask) == 0
        gmB.SetL2CacheHint(ctx, CacheMode.CACHE_MODE_DISABLE if bAlignForL2Stream
                           else CacheMode.CACHE_MODE_NORMAL)

    def SetScaleL2Cache(self, params: Params, gmScaleB: Any) -> None:
        _, N, K, B = params.problemShape
        if B != 1:
            return
        mask = self.kCacheLineAlignMask
        if self.transB:
            scaleKL1 = params.l1Params.scaleKL1
            scaleKRowBytes = scale_k_len(K)
            scaleKL1RowBytes = scale_k_len(scaleKL1)
            aligned = (scaleKRowBytes & mask) == 0 and (scaleKL1RowBytes & mask) == 0
        else:
            scaleNStrideBytes = N * MXFP_MULTI_BASE_SIZE
            scaleBaseNStrideBytes = params.qbmmParams.baseN * MXFP_MULTI_BASE_SIZE
            aligned = (scaleNStrideBytes & mask) == 0 and (scaleBaseNStrideBytes & mask) == 0
        gmScaleB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if aligned else CacheMode.CACHE_MODE_NORMAL)
