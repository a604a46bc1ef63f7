"""The CGMCT MX BlockMmad of GroupedMatmul: one core's GM -> L1 -> L0A/L0B -> L0C -> GM matmul of a tile, with
separate kAL1 / kBL1 chunks.

Emulates ops-transformer `gmm/common/cgmct/block/block_mmad_mx.h`, `Cgmct::Gemm::Block::BlockMmadMx<
MatmulWithScale<Shape<_0, _0, _0, _0>, 0>, ...>` (cannmirror/ops-transformer 25fb6b92; the NZ B copy at
libochao-huawei 5778144), the BlockMmad of `GmmCgmctMxKernel`. It reuses the QBMM BlockMmad's
(`block_mmad_mx.py`) per-core state, MMAD and fixpipe; loads and decodes go through `runtime.decode_cache`.
Loops: A-major (kAL1 >= kBL1, `IterAL1BL1`) or B-major; per L0 step curKL0 = min(baseK, minPadKL1 +
kL1Offset - kL0Offset), mmad.k = Align64(curKL0), unitFlag 3 when kL0Offset + baseK >= k else 2. The intra-core
event flags have no data effect (a core's steps run in program order); l1BufNum is 2 (the kernel passes 2UL).
B in FRACTAL_NZ (`formatB == CubeFormat::NZ`: NZLayoutPtn / ZNLayoutPtn): CopyBInL1 runs `CopyInB1WeightNz`, one
DataCopyPad of whole fractals (blockCount C0 blocks of blockLen bytes, srcStride apart; the K or N tail read
from the format's padding) where ND runs ND2NZ; the L1 image, so the MMADs and bits, are the ND path's.

Numerics as `block_mmad_mx.py`: each L1 chunk is dequantized once (exact float32) and each baseK step is one
float32 matmul added to the L0C tile; the zero padding to 64 is not materialized. KernelError (the device
would compute silently wrong) when a step reads scales of another K range than the L1 scale buffer holds
(scaleKL1 not a multiple of the outer chunk), or steps past the outer chunk held in L1 (kAL1 and kBL1 not
multiples of each other with K beyond the first outer chunk; harmless while one outer chunk covers K).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, BlockMmadMxType
from mc2emu.blaze.gemm.common_utils import DOUBLE_BUFFER_COUNT
from mc2emu.blaze.gemm.tile.tile_mmad_mx import dequant_l1
from mc2emu.blaze.tensor_api.layout import IsNz
from mc2emu.numerics.constants import (
    C0_SIZE_B4,
    C0_SIZE_B8,
    FLOAT32_BYTES,
    MX_GROUP_SIZE,
    MXFP_DIVISOR_SIZE,
    MXFP_MULTI_BASE_SIZE,
)
from mc2emu.numerics.int_math import Align, Align16, Align64, CeilDiv
from mc2emu.runtime.compute_slots import holds_compute_slot
from mc2emu.runtime.hazards import CapacityError, ConstraintError, KernelError

if TYPE_CHECKING:
    from mc2emu.blaze.tensor_api.tensor import GmTensor, L1Tensor
    from mc2emu.runtime.core import CoreContext

SCALE_BUFFER_NUM = 2  # two L1 scale buffers (SCALE_BUFFER_FLAG_0 / _1)
CGMCT_L1_BUF_NUM = 2  # KernelQGmmMx::Init passes l1BufNum 2UL: l1BufferStage is not read


@dataclass(frozen=True)
class CgmctL1Params:
    """`BlockMmadMx::L1Params{kAL1, kBL1, scaleKL1, l1BufNum}` of block_mmad_mx.h."""

    kAL1: int
    kBL1: int
    scaleKL1: int
    l1BufNum: int = CGMCT_L1_BUF_NUM


@dataclass
class TileL1L0Param:
    """`TileL1L0Param` of block_mmad_mx.h (the tile's extents and the current chunk / step sizes)."""

    curM: int = 0
    curN: int = 0
    curAlignM: int = 0
    curAlignN: int = 0
    curGmAKL1: int = 0
    curGmBKL1: int = 0
    curPadAKL1: int = 0  # pad to 64 align for mx
    curPadBKL1: int = 0
    curKL0: int = 0


@dataclass(frozen=True)
class BlockMmadMxCgmctType(BlockMmadMxType):
    """The instantiation `Cgmct::Gemm::Block::BlockMmadMx<...>`; `BlockMmad(ctx)` makes a core's object."""

    def __call__(self, ctx: CoreContext) -> BlockMmadMxCgmct:
        return BlockMmadMxCgmct(ctx, self)


class _ScaleL1:
    """One L1 scale buffer: the K offset it was loaded at and the (scaleA, scaleB) L1 tensors."""

    __slots__ = ("a", "b", "kStart")

    def __init__(self, kStart: int, a: L1Tensor, b: L1Tensor) -> None:
        self.kStart, self.a, self.b = kStart, a, b


class BlockMmadMxCgmct(BlockMmadMx):
    """The per-core CGMCT `BlockMmadMx` object (see the module docstring)."""

    template = BlockMmadMxCgmctType

    def __init__(self, ctx: CoreContext, T: BlockMmadMxType) -> None:
        super().__init__(ctx, T)  # L0A / L0B / BT / L0C of the core, the fixpipe
        self.IS_FP4 = T.AType.is_fp4
        self.C0_SIZE = C0_SIZE_B4 if self.IS_FP4 else C0_SIZE_B8  # AuxGetC0Size<AType>(): 32 bytes
        self.formatBNz = IsNz(T.LayoutB)  # formatB == CubeFormat::NZ
        self.m_ = self.n_ = 0
        self.kAL1_ = self.kBL1_ = self.minKL1_ = 1
        self.aL1LoopCnt_ = 0
        self.bL1LoopCnt_ = 0
        self.biasBufId_ = 0
        self.orderAL1BL1_ = False
        self._aL1Chunks: list[tuple[int, L1Tensor] | None] = [None] * CGMCT_L1_BUF_NUM
        self._bL1Chunks: list[tuple[int, L1Tensor] | None] = [None] * CGMCT_L1_BUF_NUM
        self._scaleL1: list[_ScaleL1 | None] = [None] * SCALE_BUFFER_NUM
        self._biasL1C: list[np.ndarray | None] = [None] * SCALE_BUFFER_NUM

    # -- Init ------------------------------------------------------------------------------------------------
    def Init(self, problemShape: Any, l0TileShape: Any, l1Params: CgmctL1Params,  # type: ignore[override]
             isBias: bool, dbL0C: bool, splitKNum: int = 1) -> None:
        self.m_, self.n_, self.k_ = (int(v) for v in problemShape[:3])
        self.kAL1_ = int(l1Params.kAL1)
        self.kBL1_ = int(l1Params.kBL1)
        self.scaleKL1_ = int(l1Params.scaleKL1)
        self.baseM_, self.baseN_, self.baseK_ = (int(v) for v in l0TileShape[:3])
        self.orderAL1BL1_ = self.kAL1_ >= self.kBL1_
        self.minKL1_ = min(self.kAL1_, self.kBL1_)
        self.kL1_ = max(self.kAL1_, self.kBL1_)  # for the shared L1 messages
        self.isBias_ = bool(isBias)
        self.l1BufNum_ = int(l1Params.l1BufNum)
        self.enableL0cPingPong_ = bool(dbL0C)
        self._check_cgmct_params()
        bL1OneBuffer = self.baseN_ * Align(self.kBL1_, MXFP_DIVISOR_SIZE)
        mxScaleKL1 = CeilDiv(self.scaleKL1_, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        scaleBL1OneBuffer = self.baseN_ * mxScaleKL1
        biasL1OneBuffer = self.baseN_ * self.T.BiasType.itemsize if self.isBias_ else 0
        aL1OneBuffer = self.baseM_ * Align(self.kAL1_, MXFP_DIVISOR_SIZE)
        scaleAL1OneBuffer = self.baseM_ * mxScaleKL1
        regions: list[tuple[str, int, int]] = []
        shift = 1 if self.IS_FP4 else 0
        for bufferId in range(self.l1BufNum_):
            # 2 buffers: A0|B0|AScale0|BScale0|bias0 in the first half of L1, A1|B1|... in the second (elements)
            l1Offset = (self.TOTAL_L1_SIZE if self.IS_FP4 else self.TOTAL_L1_SIZE >> 1) * (bufferId & 1)
            aOff = l1Offset + aL1OneBuffer * (bufferId >> 1)
            bOff = l1Offset + aL1OneBuffer * (self.l1BufNum_ >> 1) + bL1OneBuffer * (bufferId >> 1)
            regions += [(f"A{bufferId}", aOff >> shift, aL1OneBuffer >> shift),
                        (f"B{bufferId}", bOff >> shift, bL1OneBuffer >> shift)]
        for bufferId in range(SCALE_BUFFER_NUM):
            bOff = ((self.TOTAL_L1_SIZE if self.IS_FP4 else self.TOTAL_L1_SIZE >> 1) * (bufferId & 1)
                    + aL1OneBuffer * (self.l1BufNum_ >> 1))
            scaleAOff = (bOff + bL1OneBuffer * (self.l1BufNum_ >> 1)) >> shift
            scaleBOff = scaleAOff + scaleAL1OneBuffer
            regions += [(f"scaleA{bufferId}", scaleAOff, scaleAL1OneBuffer),
                        (f"scaleB{bufferId}", scaleBOff, scaleBL1OneBuffer),
                        (f"bias{bufferId}", scaleBOff + scaleBL1OneBuffer, biasL1OneBuffer)]
        self._check_l1_regions(regions)
        self._initialized = True

    def _check_cgmct_params(self) -> None:
        for name, v in (("kAL1", self.kAL1_), ("kBL1", self.kBL1_), ("baseK", self.baseK_)):
            if v <= 0 or v % MXFP_DIVISOR_SIZE:
                raise ConstraintError(f"{name} % 64 == 0", f"{name} = {v} must be a positive multiple of 64 (MX "
                                      f"scales are loaded in 64-element pairs)")
        if self.scaleKL1_ <= 0:
            raise ConstraintError("scaleKL1 > 0", f"scaleKL1 = {self.scaleKL1_}")
        if self.baseM_ <= 0 or self.baseN_ <= 0:
            raise ConstraintError("baseM, baseN > 0", f"baseM = {self.baseM_}, baseN = {self.baseN_}")
        if self.l1BufNum_ != CGMCT_L1_BUF_NUM:
            raise ConstraintError("l1BufNum == 2", f"l1BufNum = {self.l1BufNum_}: block_mmad_mx.h holds two "
                                  f"A / B buffer offsets")

    def UpdateParamsForNextProblem(self, problemShape: Any) -> None:
        self.m_, self.n_, self.k_ = (int(v) for v in problemShape[:3])

    # -- operator() ------------------------------------------------------------------------------------------------
    @holds_compute_slot
    def __call__(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor,  # type: ignore[override]
                 gmScaleB: GmTensor, gmBias: GmTensor | None, gmC: GmTensor, singleShape: Any) -> None:
        if not self._initialized:
            raise KernelError(f"{self.ctx.label}: BlockMmadMx called before Init")
        self.run(gmA, gmB, gmScaleA, gmScaleB, gmBias, gmC, singleShape)

    def run(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor, gmBias: GmTensor | None,
            gmC: GmTensor, singleShape: Any) -> None:
        tile, l0cOffset, tensorL0C = self.RunMmadLoop(gmA, gmB, gmScaleA, gmScaleB, gmBias, singleShape, gmC)
        # Copy out to GM
        self.CopyL0C2GM(gmC, tensorL0C, tile.curM, tile.curN, l0cOffset)
        self.UpdateL0cPingPong()

    def UpdateL0cPingPong(self) -> None:
        if self.enableL0cPingPong_:
            self.l0cPingPong_ += 1

    def GetAlignMN(self, tile: TileL1L0Param) -> None:
        if self.transA:
            tile.curAlignM = Align64(tile.curM) if self.IS_FP4 else Align(tile.curM, 32)
        else:
            tile.curAlignM = Align16(tile.curM)
        if not self.transB:
            tile.curAlignN = Align64(tile.curN) if self.IS_FP4 else Align(tile.curN, 32)
        else:
            tile.curAlignN = Align16(tile.curN)

    def RunMmadLoop(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor,
                    gmBias: GmTensor | None, singleShape: Any, gmC: GmTensor) -> tuple[TileL1L0Param, int, np.ndarray]:
        tile = TileL1L0Param(curM=int(singleShape[0]), curN=int(singleShape[1]))
        if tile.curM > self.baseM_ or tile.curN > self.baseN_:
            raise CapacityError(f"{self.ctx.label}: tile ({tile.curM}, {tile.curN}) exceeds the (baseM, baseN) = "
                                f"({self.baseM_}, {self.baseN_}) the L1 buffers were laid out for")
        self.GetAlignMN(tile)
        l0cOffset = (self.l0cPingPong_ & 1) * (self.l0c.total_bytes // DOUBLE_BUFFER_COUNT)
        tensorL0C = self.l0c.tile(l0cOffset, tile.curM, tile.curN)
        ops = (gmA, gmB, gmScaleA, gmScaleB, gmBias, tensorL0C, gmC, l0cOffset)
        if self.orderAL1BL1_:
            self.IterAL1BL1(tile, *ops)
        else:
            self.IterBL1AL1(tile, *ops)
        return tile, l0cOffset, tensorL0C

    # -- the two K loop orders -------------------------------------------------------------------------------------
    def IterAL1BL1(self, tile: TileL1L0Param, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor,
                   gmBias: GmTensor | None, tensorL0C: np.ndarray, gmC: GmTensor, l0cOffset: int) -> None:
        for kOuter in range(0, self.k_, self.kAL1_):
            scaleL1BufId = self.scaleLoopCnt_ & 1
            aL1BufId = self.aL1LoopCnt_ & (self.l1BufNum_ - 1)
            self.CopyScalesInL1(gmScaleA, gmScaleB, tile, kOuter, scaleL1BufId)
            self.biasBufId_ = scaleL1BufId
            self.UpdateKAL1(tile, kOuter)
            self.CopyAInL1(gmA, tile, aL1BufId, kOuter)
            if self.isBias_ and kOuter == 0:
                self.CopyInBias(gmBias, tile.curN)
            for kInner in range(kOuter, min(kOuter + self.kAL1_, self.k_), self.kBL1_):
                bL1BufId = self.bL1LoopCnt_ & (self.l1BufNum_ - 1)
                self.UpdateKBL1(tile, kInner)
                self.CopyBInL1(gmB, tile, bL1BufId, kInner)
                self.Iterate(tile, kInner, aL1BufId, bL1BufId, scaleL1BufId, tensorL0C, gmC)
                self.bL1LoopCnt_ += 1
            if (kOuter + self.kAL1_) % self.scaleKL1_ == 0 or kOuter + self.kAL1_ >= self.k_:
                self.scaleLoopCnt_ += 1
            self.aL1LoopCnt_ += 1

    def IterBL1AL1(self, tile: TileL1L0Param, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor,
                   gmBias: GmTensor | None, tensorL0C: np.ndarray, gmC: GmTensor, l0cOffset: int) -> None:
        for kOuter in range(0, self.k_, self.kBL1_):
            scaleL1BufId = self.scaleLoopCnt_ & 1
            bL1BufId = self.bL1LoopCnt_ & (self.l1BufNum_ - 1)
            self.CopyScalesInL1(gmScaleA, gmScaleB, tile, kOuter, scaleL1BufId)
            self.biasBufId_ = scaleL1BufId
            self.UpdateKBL1(tile, kOuter)
            self.CopyBInL1(gmB, tile, bL1BufId, kOuter)
            if self.isBias_ and kOuter == 0:
                self.CopyInBias(gmBias, tile.curN)
            for kInner in range(kOuter, min(kOuter + self.kBL1_, self.k_), self.kAL1_):
                aL1BufId = self.aL1LoopCnt_ & (self.l1BufNum_ - 1)
                self.UpdateKAL1(tile, kInner)
                self.CopyAInL1(gmA, tile, aL1BufId, kInner)
                self.Iterate(tile, kInner, aL1BufId, bL1BufId, scaleL1BufId, tensorL0C, gmC)
                self.aL1LoopCnt_ += 1
            if (kOuter + self.kBL1_) % self.scaleKL1_ == 0 or kOuter + self.kBL1_ >= self.k_:
                self.scaleLoopCnt_ += 1
            self.bL1LoopCnt_ += 1

    def UpdateKAL1(self, tile: TileL1L0Param, offsetKAL1: int) -> None:
        tile.curGmAKL1 = min(self.kAL1_, self.k_ - offsetKAL1)
        tile.curPadAKL1 = Align64(tile.curGmAKL1)

    def UpdateKBL1(self, tile: TileL1L0Param, offsetKBL1: int) -> None:
        tile.curGmBKL1 = min(self.kBL1_, self.k_ - offsetKBL1)
        tile.curPadBKL1 = Align64(tile.curGmBKL1)

    # -- GM -> L1 ----------------------------------------------------------------------------------------------------
    def CopyScalesInL1(self, gmScaleA: GmTensor, gmScaleB: GmTensor, tile: TileL1L0Param,  # type: ignore[override]
                       kL1Offset: int, scaleL1BufId: int) -> None:
        """CopyInScaleA / CopyInScaleB into L1 scale buffer `scaleL1BufId` when kL1Offset % scaleKL1 == 0: the
        scales of min(scaleKL1, k - kL1Offset) of K from pair column kL1Offset / 64."""
        if kL1Offset % self.scaleKL1_ != 0:
            return
        curScaleKL1 = min(self.scaleKL1_, self.k_ - kL1Offset)
        col = kL1Offset // MXFP_DIVISOR_SIZE * MXFP_MULTI_BASE_SIZE
        cols = CeilDiv(curScaleKL1, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        sA = gmScaleA.Slice((0, col), (tile.curM, cols))
        sB = gmScaleB.Slice((col, 0), (cols, tile.curN))
        self._scaleL1[scaleL1BufId] = _ScaleL1(kL1Offset, sA.load_l1(self.ctx), sB.load_l1(self.ctx))

    def CopyAInL1(self, gmA: GmTensor, tile: TileL1L0Param, l1BufId: int,  # type: ignore[override]
                  kL1Offset: int) -> None:
        """InitA1 (zero pad to 64, not materialized) + CopyInA1 (ND2NZ) of A[:, kL1Offset : +curGmAKL1]."""
        chunk = gmA.Slice((0, kL1Offset), (tile.curM, tile.curGmAKL1))
        self._aL1Chunks[l1BufId] = (kL1Offset, chunk.load_l1(self.ctx))

    def CopyBInL1(self, gmB: GmTensor, tile: TileL1L0Param, l1BufId: int, kL1Offset: int) -> None:
        """InitB1 + CopyInB1 (ND2NZ) of B[kL1Offset : +curGmBKL1, :], or for an NZ B CopyInB1WeightNz."""
        if self.formatBNz:
            self.CopyInB1WeightNz(gmB, tile, l1BufId, kL1Offset)
            return
        chunk = gmB.Slice((kL1Offset, 0), (tile.curGmBKL1, tile.curN))
        self._bL1Chunks[l1BufId] = (kL1Offset, chunk.load_l1(self.ctx))

    def CopyInB1WeightNz(self, gmB: GmTensor, tile: TileL1L0Param, l1BufId: int, kL1Offset: int) -> None:
        """`CopyInB1WeightNz(bGlobal[offsetB], ...)`: offsetB = transB ? kL1Offset * Align16(n_) : kL1Offset * C0;
        DataCopyPad of blockCount blocks of blockLen bytes, srcStride bytes apart in GM (dstStride C0 rows apart in
        L1: the NZ image ND2NZ would build). transB: ceil(curGmBKL1 / C0) blocks of curAlignN rows x C0; else
        curAlignN / C0 blocks of Align16(curGmBKL1) rows x C0. The read covers the padding of the K or N tail."""
        C0 = self.C0_SIZE
        shift = 1 if self.IS_FP4 else 0
        if self.transB:
            blockCount = CeilDiv(tile.curGmBKL1, C0)
            blockLen = (tile.curAlignN * C0) >> shift
            srcStride = ((Align16(self.n_) - tile.curAlignN) * C0) >> shift
            rows, cols = blockCount * C0, tile.curAlignN  # logical (k, n) extent of the read
        else:
            curGmBKL1NZ = Align16(tile.curGmBKL1)
            blockCount = tile.curAlignN // C0
            blockLen = (curGmBKL1NZ * C0) >> shift
            srcStride = ((Align16(self.k_) - curGmBKL1NZ) * C0) >> shift
            rows, cols = curGmBKL1NZ, tile.curAlignN
        src = gmB.Slice((kL1Offset, 0), (rows, cols))  # bGlobal[offsetB]: the layout adds offsetB
        blockStart = [src.layout.offset((b * C0, 0) if self.transB else (0, b * C0)) >> shift
                      for b in range(min(blockCount, 2))]
        if (rows * cols // blockCount) >> shift != blockLen or \
                (blockCount > 1 and blockStart[1] - blockStart[0] != blockLen + srcStride):
            raise KernelError(f"{self.ctx.label}: CopyInB1WeightNz of {blockCount} x {blockLen} B (srcStride "
                              f"{srcStride} B) is not the NZ layout's read of ({rows}, {cols}) from K {kL1Offset}")
        self._bL1Chunks[l1BufId] = (kL1Offset, src.load_l1(self.ctx).Slice((0, 0), (tile.curGmBKL1, tile.curN)))

    def CopyInBias(self, gmBias: GmTensor | None, curNL1: int) -> None:
        if gmBias is None:
            raise KernelError(f"{self.ctx.label}: isBias set but no bias tensor passed")
        self._biasL1C[self.biasBufId_] = gmBias.Slice((0, 0), (1, curNL1)).load(self.ctx).astype(np.float32)

    # -- L1 -> L0 -> MMAD --------------------------------------------------------------------------------------------
    def _scale_window(self, scaleL1BufId: int, kStart: int, kLen: int) -> tuple[_ScaleL1, int, int]:
        """The L1 scale buffer's column of K offset kStart (`(kStart % scaleKL1) / 32`) and the group count."""
        buf = self._scaleL1[scaleL1BufId]
        want = kStart - kStart % self.scaleKL1_
        if buf is None or buf.kStart != want:
            held = "nothing" if buf is None else f"K from {buf.kStart}"
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} holds {held}, but the step at K "
                              f"{kStart} reads it as the scales of K from {want} (scaleKL1 {self.scaleKL1_}, kAL1 "
                              f"{self.kAL1_}, kBL1 {self.kBL1_}): the device would use wrong scales")
        return buf, (kStart % self.scaleKL1_) // MX_GROUP_SIZE, CeilDiv(kLen, MX_GROUP_SIZE)

    def _chunk_f32(self, operand: str, entry: tuple[int, L1Tensor] | None,
                   scaleL1BufId: int) -> tuple[int, np.ndarray]:
        if entry is None:
            raise KernelError(f"{self.ctx.label}: L1 {operand} buffer read before any load")
        kStart, op = entry
        k_axis = 1 if operand == "A" else 0
        kLen = op.shape[k_axis]
        buf, col, nb = self._scale_window(scaleL1BufId, kStart, kLen)
        if operand == "A":
            scale, elem = buf.a.Slice((0, col), (buf.a.shape[0], nb)), self.T.AType
        else:
            scale, elem = buf.b.Slice((col, 0), (nb, buf.b.shape[1])), self.T.BType
        if scale.shape[k_axis] != nb:
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} holds fewer than the {nb} scales "
                              f"the {operand} chunk at K {kStart} needs")
        return kStart, dequant_l1(self.ctx, op, scale, elem, k_axis)

    def Iterate(self, tile: TileL1L0Param, kL1Offset: int, al1BufId: int, bl1BufId: int,  # type: ignore[override]
                scaleL1BufId: int, tensorL0C: np.ndarray, gmC: GmTensor) -> None:
        aStart, aF32 = self._chunk_f32("A", self._aL1Chunks[al1BufId], scaleL1BufId)
        bStart, bF32 = self._chunk_f32("B", self._bL1Chunks[bl1BufId], scaleL1BufId)
        minPadKL1 = min(tile.curPadBKL1, tile.curPadAKL1)
        for kL0Offset in range(kL1Offset, min(kL1Offset + self.minKL1_, self.k_), self.baseK_):
            tile.curKL0 = min(self.baseK_, minPadKL1 + kL1Offset - kL0Offset)
            needBias = self.isBias_ and kL0Offset == 0  # NeedBias(kL0Offset)
            isFinal = kL0Offset + self.baseK_ >= self.k_
            initCMatrix = kL0Offset == 0 and not self.isBias_
            self._l0_step(tile, kL0Offset, needBias, isFinal, initCMatrix, aStart, aF32, bStart, bF32, tensorL0C, gmC)

    def _l0_step(self, tile: TileL1L0Param, kL0Offset: int, needBias: bool, isFinal: bool, initCMatrix: bool,
                 aStart: int, aF32: np.ndarray, bStart: int, bF32: np.ndarray, tensorL0C: np.ndarray,
                 gmC: GmTensor) -> None:
        """One L0 step of Iterate at absolute K kL0Offset, tile.curKL0 wide: L1 -> L0A / L0B half l0PingPong_ & 1
        (+ bias L1 -> BT), the MMAD with the given unitFlag / cmatrixInitVal, and the L0 flip."""
        halfL0 = self.TOTAL_L0A_SIZE // DOUBLE_BUFFER_COUNT
        shift = 1 if self.IS_FP4 else 0
        l0PingPongId = self.l0PingPong_ & 1
        aBytes = (tile.curAlignM * Align64(tile.curKL0)) >> shift
        bBytes = (Align64(tile.curKL0) * tile.curAlignN) >> shift
        if aBytes > halfL0 or bBytes > self.TOTAL_L0B_SIZE // DOUBLE_BUFFER_COUNT:
            raise CapacityError(f"{self.ctx.label}: L0A/L0B half of {halfL0} B cannot hold the step (A {aBytes} "
                                f"B, B {bBytes} B) of tile ({tile.curM}, {tile.curN}) x {tile.curKL0}")
        if needBias:  # CopyInC2: bias L1 -> BT
            if Align16(tile.curN) * FLOAT32_BYTES + self.baseN_ * self.biasBufId_ * FLOAT32_BYTES > \
                    self.TOTAL_BT_SIZE:
                raise CapacityError(f"{self.ctx.label}: bias of {tile.curN} at BT buffer {self.biasBufId_} "
                                    f"exceeds the {self.TOTAL_BT_SIZE} B bias table")
            self._bt = self._biasL1C[self.biasBufId_]
        kHi = min(kL0Offset + tile.curKL0, self.k_)
        a = aF32[:, kL0Offset - aStart:kHi - aStart]
        b = bF32[kL0Offset - bStart:kHi - bStart, :]
        if a.shape[1] != kHi - kL0Offset or b.shape[0] != kHi - kL0Offset:
            raise KernelError(f"{self.ctx.label}: the K step [{kL0Offset}, {kHi}) runs past the A chunk at "
                              f"{aStart} or the B chunk at {bStart} held in L1")
        self.Mmad(tile.curM, tile.curN, tile.curKL0, isFinal, initCMatrix, needBias, tensorL0C, a, b, gmC,
                  l0PingPongId)
        self.l0PingPong_ += 1

    def Destroy(self) -> None:
        """`~BlockMmadMx()`: waits its own intra-core event flags; no accumulation index to close (CopyOut, the
        inherited `CopyL0C2GM`, fixpipes every tile with unitFlag 3)."""


__all__ = ["CGMCT_L1_BUF_NUM", "BlockMmadMxCgmct", "BlockMmadMxCgmctType", "CgmctL1Params", "TileL1L0Param"]
