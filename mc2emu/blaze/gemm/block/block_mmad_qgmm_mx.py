"""The production Blaze MX BlockMmad of GroupedMatmul: the CGMCT BlockMmad's L1 map and chunk loops with a
relative Iterate, conditional K padding and the unitFlag of the absolute K end.

Emulates hicann/ops-tensor `include/blaze/gemm/block/block_mmad_qgmm_mx.h` at 03460a61 (the BlockMmad of
`kernel_qgmm_mx.h`, which ops-transformer's `GmmTensorApiMxKernel` runs on the `IS_BLAZE` branch of
`grouped_matmul_apt.cpp`). It shares everything but Run's Iterate calls and Iterate with `BlockMmadMxCgmct`,
so it subclasses it. Init: scaleKL1_ = Max(scaleKL1, 1) (no refusal); two A / B buffers hard-wired (no
l1BufNum, no l1BufferStage at 03460a61; a later revision's l1BufferStage 3 is not emulated).

Iterate: K is padded to 64 in L1 only where the source sets it (NEED_A_SET_L1_K_ZERO: FP8 A;
NEED_B_SET_L1_K_ZERO: FP8 B, FP4 B without transB); curKL0 = min(baseK, minPadKL1 - kL0Offset);
mmad.k = CeilAlign(curKL0, 64); unitFlag = 3 when absKOffset + curKL0 >= k_ else 2;
cmatrixInitVal = !NeedBias(absKOffset) && absKOffset == 0.

Against CGMCT (`kL0Offset + baseK >= k` for unitFlag; both chunks always padded): the unitFlag differs on a
short step that is not the last (an inner chunk not a multiple of baseK within baseK of the end of K). The
operator's tiling gives kAL1, kBL1 multiples of baseK, so through the operator both give the same MMAD events
and bits (tests/ops/test_grouped_matmul_blaze.py drives the block directly to show the difference). For FP4 A,
or FP4 B with transB, the K-tail step is narrower with the same mmad.k; the padding is never materialized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mc2emu.blaze.gemm.block.block_mmad_mx_cgmct import BlockMmadMxCgmct, BlockMmadMxCgmctType, TileL1L0Param
from mc2emu.numerics.int_math import Align64

if TYPE_CHECKING:
    import numpy as np

    from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMxType
    from mc2emu.blaze.tensor_api.tensor import GmTensor
    from mc2emu.runtime.core import CoreContext


@dataclass(frozen=True)
class BlockMmadQgmmMxType(BlockMmadMxCgmctType):
    """The instantiation `Blaze::Gemm::Block::BlockMmad<MatmulWithScaleMx..., ...>` of block_mmad_qgmm_mx.h."""

    def __call__(self, ctx: CoreContext) -> BlockMmadQgmmMx:
        return BlockMmadQgmmMx(ctx, self)


class BlockMmadQgmmMx(BlockMmadMxCgmct):
    """The per-core Blaze QGMM MX BlockMmad (see the module docstring)."""

    template = BlockMmadQgmmMxType

    def __init__(self, ctx: CoreContext, T: BlockMmadMxType) -> None:
        super().__init__(ctx, T)
        self.NEED_A_SET_L1_K_ZERO = not T.AType.is_fp4  # fp8_e5m2_t / fp8_e4m3fn_t
        self.NEED_B_SET_L1_K_ZERO = not T.BType.is_fp4 or not self.transB

    def _check_cgmct_params(self) -> None:
        self.scaleKL1_ = max(self.scaleKL1_, 1)  # scaleKL1_ = Max(params.l1Params.scaleKL1, 1UL)
        super()._check_cgmct_params()

    def IterAL1BL1(self, tile: TileL1L0Param, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor,
                   gmBias: GmTensor | None, tensorL0C: np.ndarray, gmC: GmTensor, l0cOffset: int) -> None:
        """Run, A-major: A is reused across the inner B K strips."""
        for kOuter in range(0, self.k_, self.kAL1_):
            scaleL1BufId = self.scaleLoopCnt_ & 1
            aL1BufId = self.aL1LoopCnt_ & 1
            nextKOuter = kOuter + self.kAL1_
            self.UpdateKAL1(tile, kOuter)  # curGmAKL1 = nextKOuter > k_ ? k_ - kOuter : kAL1_
            self.CopyScalesInL1(gmScaleA, gmScaleB, tile, kOuter, scaleL1BufId)
            self.CopyAInL1(gmA, tile, aL1BufId, kOuter)
            self.biasBufId_ = scaleL1BufId
            if self.isBias_ and kOuter == 0:  # CopyBiasInL1(gmBias, curN, scaleL1BufId, NeedBias(kOuter))
                self.CopyInBias(gmBias, tile.curN)
            for kInner in range(kOuter, min(kOuter + self.kAL1_, self.k_), self.kBL1_):
                bL1BufId = self.bL1LoopCnt_ & 1
                self.UpdateKBL1(tile, kInner)
                self.CopyBInL1(gmB, tile, bL1BufId, kInner)
                self.Iterate(tile, aL1BufId, bL1BufId, scaleL1BufId, kOuter, kInner, kInner - kOuter, 0,
                             tensorL0C, gmC)
                self.bL1LoopCnt_ += 1
            if nextKOuter % self.scaleKL1_ == 0 or nextKOuter >= self.k_:
                self.scaleLoopCnt_ += 1
            self.aL1LoopCnt_ += 1

    def IterBL1AL1(self, tile: TileL1L0Param, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor,
                   gmBias: GmTensor | None, tensorL0C: np.ndarray, gmC: GmTensor, l0cOffset: int) -> None:
        """Run, B-major: B is reused across the inner A K strips."""
        for kOuter in range(0, self.k_, self.kBL1_):
            scaleL1BufId = self.scaleLoopCnt_ & 1
            bL1BufId = self.bL1LoopCnt_ & 1
            nextKOuter = kOuter + self.kBL1_
            self.UpdateKBL1(tile, kOuter)
            self.CopyScalesInL1(gmScaleA, gmScaleB, tile, kOuter, scaleL1BufId)
            self.CopyBInL1(gmB, tile, bL1BufId, kOuter)
            self.biasBufId_ = scaleL1BufId
            if self.isBias_ and kOuter == 0:
                self.CopyInBias(gmBias, tile.curN)
            for kInner in range(kOuter, min(kOuter + self.kBL1_, self.k_), self.kAL1_):
                aL1BufId = self.aL1LoopCnt_ & 1
                self.UpdateKAL1(tile, kInner)
                self.CopyAInL1(gmA, tile, aL1BufId, kInner)
                self.Iterate(tile, aL1BufId, bL1BufId, scaleL1BufId, kInner, kOuter, 0, kInner - kOuter,
                             tensorL0C, gmC)
                self.aL1LoopCnt_ += 1
            if nextKOuter % self.scaleKL1_ == 0 or nextKOuter >= self.k_:
                self.scaleLoopCnt_ += 1
            self.bL1LoopCnt_ += 1

    def Iterate(self, tile: TileL1L0Param, al1BufId: int, bl1BufId: int,  # type: ignore[override]
                scaleL1BufId: int, absKStartA: int, absKStartB: int, kaL1Offset: int, kbL1Offset: int,
                tensorL0C: np.ndarray, gmC: GmTensor) -> None:
        aStart, aF32 = self._chunk_f32("A", self._aL1Chunks[al1BufId], scaleL1BufId)
        bStart, bF32 = self._chunk_f32("B", self._bL1Chunks[bl1BufId], scaleL1BufId)
        l1Ka = Align64(tile.curGmAKL1) if self.NEED_A_SET_L1_K_ZERO else tile.curGmAKL1
        l1Kb = Align64(tile.curGmBKL1) if self.NEED_B_SET_L1_K_ZERO else tile.curGmBKL1
        minPadKL1 = min(l1Ka, l1Kb)
        minGmKL1 = min(tile.curGmAKL1, tile.curGmBKL1)
        for kL0Offset in range(0, minGmKL1, self.baseK_):
            tile.curKL0 = minPadKL1 - kL0Offset if kL0Offset + self.baseK_ > minPadKL1 else self.baseK_
            absKOffset = absKStartA + kaL1Offset + kL0Offset
            needBiasThisIter = self.isBias_ and absKOffset == 0  # NeedBias(absKOffset)
            isFinal = absKOffset + tile.curKL0 >= self.k_
            initCMatrix = not needBiasThisIter and absKOffset == 0
            self._l0_step(tile, absKOffset, needBiasThisIter, isFinal, initCMatrix, aStart, aF32, bStart, bF32,
                          tensorL0C, gmC)

__all__ = ["BlockMmadQgmmMx", "BlockMmadQgmmMxType"]
