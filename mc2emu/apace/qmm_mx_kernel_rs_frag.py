"""QmmMxKernelRsFrag (namespace ReduceScatterFragImpl) — the AIC FragmentTensor matmul of one round of the
design-spec compute-first reduce-scatter kernel (`impl="rounds"`).

Emulates the kernel the cannbot MC2 skill prescribes for scenario `compute-first-reduce-scatter`
(`development.md` §5.8, §5.10 per-tile sub-range contract, §5.11 localLast; `design.md` §3.4). No
ops-transformer source of it is public; the skill calls it an adaptation of the AllGather kernel, so its
structure (scheduler over the logical M, `QmmMxBlockMmadFragment.Init`, `BuildFragmentTensors`, `Process`;
WINDOW_LEN 1) follows `all_gather_qbmm_mx_kernel.h` (hicann/ops-transformer 5778144076) with the changes of §5.8.

One round t (problem M = R * curTileM): C fragments are staging rows in original rank order; A / scaleA / C
address lists in localLast order (remote ranks ascending, then local). Once a core's mPos reaches the local
fragment ((R - 1) * curTileM) it sets flagA (the PUT may start); a core with no local tile sets it at the end.

Bias (seed 000 §4.7 推论 2, optional): `mmadFrag.Init(..., isBias, ...)` and each tile passes the (1, curN)
slice of the (1, N) float32 bias at nPos (seed 000 §5.1); the fragment mmad starts that MMAD from it
(init_with_zero false), so each C row gets it once, in its round.

No wait: computing does not depend on communication (seed 000 §7.2). The impl sets flagB after each round
(`quant_matmul_reduce_scatter_rounds_impl.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.apace.basic.fragment_tensor import MAX_FRAGMENT_COUNT, FragmentParam, FragmentTensor, MakeFragmentTensor
from mc2emu.arch.platform import Pipe
from mc2emu.blaze.gemm.block.block_mmad_mx import L1Params
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams
from mc2emu.blaze.gemm.common_utils import FP8_CACHE_LINE_ALIGN_MASK, IDX_M_TILEIDX, IDX_N_TILEIDX, BlockCoord
from mc2emu.blaze.tensor_api.layout import (
    DNExtLayoutPtn,
    FrameLayoutFormat,
    NDExtLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B8, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData

# `#define WINDOW_LEN 1L`, as in the AllGather kernel this one adapts: no serpentine M windows, so the M
# position of a core's tiles never decreases and the localLast boundary is crossed once.
RS_WINDOW_LEN = 1
# design.md §3.4: counting flags, event id 0 (flagA: remote fragments of the round done) and 1 (flagB: the
# whole round done).
FLAG_A = 0
FLAG_B = 1


@dataclass(frozen=True)
class RsFragParams:
    """`Params` of development.md §5.8 (one round)."""

    mmTile: QuantMatmulTilingData
    rankSize: int
    rankId: int
    mPerRank: int
    tileM: int
    k: int
    n: int
    scaleKLen: int
    aGM: GmAddr
    aScaleGM: GmAddr
    bGM: GmAddr
    bScaleGM: GmAddr
    stagingGm: GmAddr
    dataBytesPerMRow: int
    scaleBytesPerMRow: int
    cBytesPerM: int
    tileMOffset: int
    biasGM: GmAddr | None = None   # the (1, N) float32 bias; None: isBias 0 (seed 000 §4.7 推论 2: optional)


def local_last_order(rankSize: int, rankId: int) -> list[int]:
    """The localLast fragment order: the remote ranks ascending, then the own rank."""
    return [r for r in range(rankSize) if r != rankId] + [rankId]


class QmmMxKernelRsFrag:
    """One AIC's instance, reused over the rounds (the mmad object is re-Initialized per round)."""

    def __init__(self, ctx: CoreContext, BlockMmadFragC: Any, scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.BlockMmadFragC = BlockMmadFragC
        self.BlockScheduler = scheduler_cls
        self.weightNz = bool(BlockMmadFragC.WEIGHT_NZ)
        self.AType = gm_storage_dtype(BlockMmadFragC.AType)
        self.BType = gm_storage_dtype(BlockMmadFragC.BType)
        self.CType = BlockMmadFragC.CType
        self.MakeLayoutA = FrameLayoutFormat(NDExtLayoutPtn, C0_SIZE_B8)
        self.MakeLayoutScaleA = FrameLayoutFormat(ScaleANDLayoutPtn, SCALE_C0)
        self.MakeLayoutB = FrameLayoutFormat(DNExtLayoutPtn, C0_SIZE_B8)
        self.MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn, SCALE_C0)
        self.MakeLayoutC = FrameLayoutFormat(NDExtLayoutPtn)
        self.MakeLayoutBias = FrameLayoutFormat(NDExtLayoutPtn)   # seed 000 §5.1: Bias (1, N) NDExt
        self.BiasType = BlockMmadFragC.BiasType
        self.cFragAddrs_: list[Any] = [None] * MAX_FRAGMENT_COUNT
        self.addrListA_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.addrListScale_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.addrListC_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.mmadFrag: Any = None
        self.tiles_done = 0
        self.flagA_tiles: list[int] = []   # per round: tiles computed before flagA was Set (trace / tests)

    def __call__(self, params: RsFragParams) -> None:
        self.Run(params)

    def Run(self, params: RsFragParams) -> None:
        mmT = params.mmTile
        problemShape = (params.rankSize * params.tileM, params.n, params.k, 1)
        schParams = BlockSchedulerQbmmParams(mmT.baseM, mmT.baseN, mmT.mTailTile, mmT.nTailTile,
                                             mmT.mBaseTailSplitCnt, mmT.nBaseTailSplitCnt, mmT.mTailMain,
                                             mmT.nTailMain)
        sch = self.BlockScheduler(problemShape, schParams, self.ctx)
        if self.mmadFrag is None:
            self.mmadFrag = self.BlockMmadFragC(self.ctx)
        self.mmadFrag.Init(problemShape, (mmT.baseM, mmT.baseN, mmT.baseK, 0),
                           L1Params(mmT.stepK * mmT.baseK, mmT.scaleKL1, mmT.nBufferNum), params.biasGM is not None,
                           mmT.dbL0c > 1)
        fragA, fragScaleA, fragC = self.BuildFragmentTensors(params)
        self.Process(params, problemShape, sch, fragA, fragScaleA, fragC)

    @staticmethod
    def MakeFragParam(fragSize: int, fragCnt: int, shape1: int) -> FragmentParam:
        return FragmentParam((fragSize * fragCnt, shape1), fragSize, fragSize, 0, fragCnt)

    def BuildFragmentTensors(self, p: RsFragParams) -> tuple[FragmentTensor, FragmentTensor, FragmentTensor]:
        for r in range(p.rankSize):
            self.cFragAddrs_[r] = p.stagingGm + r * p.mPerRank * p.cBytesPerM
        for f, r in enumerate(local_last_order(p.rankSize, p.rankId)):
            row = r * p.mPerRank + p.tileMOffset
            self.addrListA_[f] = p.aGM + row * p.dataBytesPerMRow
            self.addrListScale_[f] = p.aScaleGM + row * p.scaleBytesPerMRow
            self.addrListC_[f] = p.stagingGm + row * p.cBytesPerM
        R = p.rankSize
        fragA = MakeFragmentTensor(self.MakeFragParam(p.tileM, R, p.k), self.addrListA_,
                                   LayoutFactory=self.MakeLayoutA, ElementType=self.AType, name="fragA_")
        fragScaleA = MakeFragmentTensor(self.MakeFragParam(p.tileM, R, p.scaleKLen), self.addrListScale_,
                                        LayoutFactory=self.MakeLayoutScaleA, ElementType=E8M0_DTYPE,
                                        name="fragScaleA_")
        fragC = MakeFragmentTensor(self.MakeFragParam(p.tileM, R, p.n), self.addrListC_,
                                   LayoutFactory=self.MakeLayoutC, ElementType=self.CType, name="fragC_")
        return fragA, fragScaleA, fragC

    def Process(self, p: RsFragParams, problemShape: tuple[int, int, int, int], sch: Any, fragA: FragmentTensor,
                fragScaleA: FragmentTensor, fragC: FragmentTensor) -> None:
        ctx = self.ctx
        mmT = p.mmTile
        Ki, Ni, scaleKLen = p.k, p.n, p.scaleKLen
        gmB = MakeTensor(MakeMemPtr(p.bGM, self.BType), self.MakeLayoutB(Ki, Ni), name="B")
        gmScaleB = MakeTensor(MakeMemPtr(p.bScaleGM, E8M0_DTYPE), self.MakeLayoutScaleB(scaleKLen, Ni),
                              name="scaleB")
        gmBias = (None if p.biasGM is None else
                  MakeTensor(MakeMemPtr(p.biasGM, self.BiasType), self.MakeLayoutBias(1, Ni), name="bias"))
        if (sch.GetEndBlockIdx() + 1) * mmT.mTailTile * mmT.nTailTile <= ctx.GetBlockNum():
            sch.UpdateTailTile(mmT.mTailTile, mmT.nTailTile)
        headMainRows = p.rankSize * p.tileM
        localFragBoundary = headMainRows - p.tileM
        remoteFlagSet = False
        before = 0
        blockIdx = BlockCoord()
        while sch.GetTileIdx(blockIdx):
            singleShape = sch.GetBlockShape(blockIdx, self.weightNz)
            curMtile, curNtile = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            if curMtile <= 0 or curNtile <= 0:
                break
            mPos, nPos = sch.GetTileCoord(blockIdx)
            if not remoteFlagSet and mPos >= localFragBoundary:
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, FLAG_A)
                remoteFlagSet = True
            if not remoteFlagSet:
                before += 1
            self.SetL2Cache(problemShape, curMtile, gmB, gmScaleB, curNtile)
            blockA = fragA.Slice((mPos, 0), (curMtile, Ki))
            blockScaleA = fragScaleA.Slice((mPos, 0), (curMtile, scaleKLen))
            blockC = fragC.Slice((mPos, nPos), (curMtile, curNtile))
            gmBlockBias = None if gmBias is None else gmBias.Slice((0, nPos), (1, curNtile))
            self.mmadFrag(blockA, gmB.Slice((0, nPos), (Ki, curNtile)), blockScaleA,
                          gmScaleB.Slice((0, nPos), (scaleKLen, curNtile)), gmBlockBias, self.cFragAddrs_, p.mPerRank,
                          p.tileM, 1, 0, p.rankSize, Ni, singleShape, mPos, nPos, 0, blockC)
            self.tiles_done += 1
        if not remoteFlagSet:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, FLAG_A)
        self.flagA_tiles.append(before)

    def SetL2Cache(self, problemShape: tuple[int, int, int, int], curM: int, gmB: Any, gmScaleB: Any,
                   baseN: int) -> None:
        """development.md §5.8 keeps the AllGather kernel's `SetL2Cache` (fullMBlock + 128-byte alignment) and
        the AG kernel passes the tile's own extents (`curMtile`, `curNtile`; G `all_gather_qbmm_mx_kernel.h`
        :375): B (DN) streams when the tile covers all of M and K is 128-byte aligned; scaleB when it covers
        all of M and N * 2 and curNtile * 2 (the `baseN` argument) are 128-byte aligned."""
        M, N, K, _ = problemShape
        fullMBlock = curM >= M
        mask = FP8_CACHE_LINE_ALIGN_MASK
        bStream = fullMBlock and (K & mask) == 0
        gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if bStream else CacheMode.CACHE_MODE_NORMAL)
        scaleAlign = ((N * SCALE_C0) & mask) == 0 and ((baseN * SCALE_C0) & mask) == 0
        gmScaleB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock and scaleAlign
                                else CacheMode.CACHE_MODE_NORMAL)
