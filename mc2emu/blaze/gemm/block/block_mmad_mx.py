"""BlockMmad with the MX dispatch policy: one core's GM -> L1 -> L0A/L0B -> L0C -> GM matmul of a tile.

Mirrors ops-tensor `include/blaze/gemm/block/block_mmad_qbmm_mx.h`, `BlockMmad<MatmulWithScaleMx<FullLoadMode_,
AtomicAdd_>, AType, LayoutA, BType, LayoutB, CType, LayoutC, BiasType, LayoutBias>` (SPEC §5, seed 003 §7-9):
Init with its L1 map, `operator()` with its loops (`iter0` over kL1 chunks: scales GM -> L1 every scaleKL1 /
kL1 chunks, A and B GM -> L1; `Iterate`: `iter1` over baseK steps, L1 -> L0A / L0B half `l0PingPong_ & 1`,
one MMAD with unitFlag and cmatrixInitVal), the fixpipe of the last split, `~BlockMmad`.

What differs: L1 / L0 are numpy arrays whose sizes are checked against the source's layout (CapacityError).
The MX LoadData of a whole kL1 chunk is decoded at once in exact float32 (`tile_mmad_mx.dequant_l1`; the
device decodes per baseK step: the same operands), and each MMAD is one float32 BLAS matmul added to the
L0C tile; the zero K padding to Align64 is not materialized. The intra-core pipe flags of one core order
nothing here (program order). A splitK sequence other than 0 .. splitKNum - 1 files Hazard.SPLITK_SEQUENCE
and runs on as the device would (`SplitKSequence`). Host time only, below this file: GM -> L1 loads go
through the device's read / decode cache (`GmTensor.load_l1`, `runtime.decode_cache`) and `operator()` holds
a compute slot (`runtime.compute_slots`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mc2emu.blaze.gemm.block.block_mmad_mx_l1_layout import L1_BUF_NUMS, L1BufferOffsets
from mc2emu.blaze.gemm.block.l0c_buffer import L0CBuffer
from mc2emu.blaze.gemm.block.split_k_sequence import SplitKSequence
from mc2emu.blaze.gemm.common_utils import (
    DOUBLE_BUFFER_COUNT,
    FINAL_ACCUMULATION,
    IDX_K_IDX,
    IDX_M_IDX,
    IDX_M_TILEIDX,
    IDX_N_IDX,
    IDX_N_TILEIDX,
    NON_FINAL_ACCUMULATION,
    TRIPLE_BUFFER_COUNT,
)
from mc2emu.blaze.gemm.dispatch_policy import A_FULL_LOAD_MODE, NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.gemm.tile.tile_mmad_mx import b_row_major_same, dequant_l1
from mc2emu.blaze.tensor_api.layout import IsTrans, IsWeightNz, LayoutPtn, NDExtLayoutPtn
from mc2emu.blaze.tensor_api.tensor import GmTensor, L1Tensor
from mc2emu.numerics import ElemFormat, OutDtype, fixpipe_cast
from mc2emu.numerics.constants import (
    ALIGN_64_BYTES_SHIFT,
    C0_SIZE_B4,
    C0_SIZE_B8,
    FLOAT32_BYTES,
    MX_GROUP_SIZE,
    MXFP_MULTI_BASE_SIZE,
)
from mc2emu.numerics.int_math import Align, Align16, Align64, CeilDiv
from mc2emu.numerics.payload import Payload
from mc2emu.runtime.compute_slots import holds_compute_slot
from mc2emu.runtime.events import Fixpipe, Mmad, TileTask
from mc2emu.runtime.hazards import CapacityError, ConstraintError, KernelError
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr


@dataclass(frozen=True)
class Params:
    """`BlockMmad::Params`: the GM base addresses of the operands (bias: None without a bias). The one home of
    the MX GEMM's address bundle: the QBMM kernel and the apace MC2 kernel (`BlockMmadParams`) both take it."""

    aGmAddr: GmAddr
    bGmAddr: GmAddr
    cGmAddr: GmAddr
    biasGmAddr: GmAddr | None
    scaleAGmAddr: GmAddr
    scaleBGmAddr: GmAddr


@dataclass(frozen=True)
class L1Params:
    """`BlockMmad::L1Params{kL1, scaleKL1, l1BufNum}` (tiling: {stepK * baseK, scaleKL1, nBufferNum})."""

    kL1: int
    scaleKL1: int
    l1BufNum: int


class L1Chunk(NamedTuple):
    """One kL1 chunk as `operator()` hands it to `Iterate`: the chunk index, its K extent (GM and padded to
    64), the L1 operands and scale buffers, and the scale offsets into them (scaleA's differs in
    A_FULL_LOAD_MODE, where scaleA holds all of K). A named tuple: built once per chunk (a frozen dataclass's
    init costs ~10x more host time)."""

    iter0: int
    curGmKL1: int
    curPadKL1: int
    tensorAL1: L1Tensor
    tensorBL1: L1Tensor
    tensorScaleAL1: L1Tensor
    tensorScaleBL1: L1Tensor
    scaleL1BufId: int
    scaleKOffset: int
    scaleAKOffset: int


@dataclass(frozen=True)
class BlockMmadMxType:
    """The template instantiation `BlockMmad<MatmulWithScaleMx<...>, AType, LayoutA, BType, LayoutB, CType,
    LayoutC, BiasType, LayoutBias>`: its static members, and `BlockMmad(ctx)` makes a core's object."""

    DispatchPolicy: MatmulWithScaleMx
    AType: ElemFormat
    LayoutA: type[LayoutPtn]
    BType: ElemFormat
    LayoutB: type[LayoutPtn]
    CType: Any  # an OutDtype, its name or dtype; stored as the numpy dtype (bfloat16 / float16 / float32)
    LayoutC: type[LayoutPtn] = NDExtLayoutPtn
    BiasType: Any = np.float32
    LayoutBias: type[LayoutPtn] = NDExtLayoutPtn

    def __post_init__(self) -> None:
        object.__setattr__(self, "AType", ElemFormat.parse(self.AType, "AType"))
        object.__setattr__(self, "BType", ElemFormat.parse(self.BType, "BType"))
        object.__setattr__(self, "CType", OutDtype.parse(self.CType, "CType").dtype)
        object.__setattr__(self, "BiasType", np.dtype(self.BiasType))
        if self.AType.is_fp4 != self.BType.is_fp4:
            raise ConstraintError("AType/BType", f"MX BlockMmad needs both operands FP8 or both FP4 (C0_SIZE and "
                                  f"the L1 sizes follow AType), got {self.AType.value} x {self.BType.value}")

    @property
    def WEIGHT_NZ(self) -> bool:
        return IsWeightNz(self.LayoutB)

    @property
    def TRANS_A(self) -> bool:
        return IsTrans(self.LayoutA)

    @property
    def TRANS_B(self) -> bool:
        return IsTrans(self.LayoutB)

    @property
    def weightNz(self) -> bool:
        return self.WEIGHT_NZ

    @property
    def transA(self) -> bool:
        return self.TRANS_A

    @property
    def transB(self) -> bool:
        return self.TRANS_B

    def __call__(self, ctx: CoreContext) -> BlockMmadMx:
        return BlockMmadMx(ctx, self)


class BlockMmadMx(L1BufferOffsets[BlockMmadMxType]):
    """The per-core `BlockMmad` object of the MX policy (constructed by `BlockMmadMxType(ctx)`)."""

    template = BlockMmadMxType  # BlockMmadMx.template(policy, AType, LayoutA, ...) names the instantiation

    def __init__(self, ctx: CoreContext, T: BlockMmadMxType) -> None:
        # BlockMmad(): SetFlag<MTE1_MTE2>(...), SetFlag<M_MTE1>(...), SetMMLayoutTransform(true): intra-core
        # event flags and a fixpipe ordering switch, no data effect.
        self.ctx = ctx
        self.T = T
        self.DispatchPolicy = T.DispatchPolicy
        self.AType, self.BType, self.CType, self.BiasType = T.AType, T.BType, T.CType, T.BiasType
        self._fixpipeOut = OutDtype.parse(T.CType)
        self.WEIGHT_NZ = self.weightNz = T.WEIGHT_NZ
        self.TRANS_A = self.transA = T.TRANS_A
        self.TRANS_B = self.transB = T.TRANS_B
        platform = ctx.device.platform
        self.TOTAL_L1_SIZE = platform.l1_size
        self.TOTAL_L0A_SIZE = platform.l0a_size
        self.TOTAL_L0B_SIZE = platform.l0b_size
        self.TOTAL_BT_SIZE = platform.bias_table_size
        self.C0_SIZE = C0_SIZE_B4 if T.AType.is_fp4 else C0_SIZE_B8
        ctx.local.allocate(Position.A2, "L0A", self.TOTAL_L0A_SIZE, np.uint8)
        ctx.local.allocate(Position.B2, "L0B", self.TOTAL_L0B_SIZE, np.uint8)
        ctx.local.allocate(Position.C2, "BT", self.TOTAL_BT_SIZE, np.uint8)
        self.l0c = L0CBuffer(ctx)
        self.k_ = 0
        self.kL1_ = 1
        self.scaleKL1_ = 1
        self.l1BufNum_ = 1
        self.kL1Iter_ = 0
        self.baseM_ = 16
        self.baseN_ = 16
        self.baseK_ = 16
        self.splitKNum_ = 1
        self.abL1LoopCnt_ = 0
        self.scaleLoopCnt_ = 0
        self.l0PingPong_ = 0
        self.l0cPingPong_ = 0
        self.isBias_ = False
        self.enableL0cPingPong_ = False
        self._initialized = False
        self.splitKSequence = SplitKSequence(ctx)
        self._scaleAL1: list[L1Tensor | None] = [None] * DOUBLE_BUFFER_COUNT
        self._scaleBL1: list[L1Tensor | None] = [None] * DOUBLE_BUFFER_COUNT
        self._aL1: list[L1Tensor | None] = []
        self._bL1: list[L1Tensor | None] = []
        self._aFullL1: dict[int, L1Tensor] = {}
        self._scaleAFullL1: L1Tensor | None = None
        self._biasL1: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_COUNT
        self._bt: np.ndarray | None = None
        self._step: np.ndarray | None = None
        # Emulator instrumentation, not a source member: what the kernel knows of the tile (e.g. the
        # GroupedMatmul group and scheduler round), added to the FIXPIPE event of its write-out (trace, tests).
        self.traceTile: TileTask | None = None

    # -- Init ------------------------------------------------------------------------------------------------
    def Init(self, problemShape: Any, l0TileShape: Any, l1Params: L1Params, isBias: bool, dbL0C: bool,
             splitKNum: int = 1) -> None:
        """`Init(problemShape, l0TileShape, l1Params, isBias, dbL0C, splitKNum = 1)`."""
        if self._initialized:
            # A re-Init (the next pass of a kernel) while a tile is still open: that tile's C is never written.
            self.splitKSequence.CheckClosed(atInit=True)
        self.k_ = int(problemShape[IDX_K_IDX])
        self.kL1_ = int(l1Params.kL1)
        self.scaleKL1_ = int(l1Params.scaleKL1)
        self.splitKNum_ = int(splitKNum)
        self.abL1LoopCnt_ = 0
        self.scaleLoopCnt_ = 0
        self.l0PingPong_ = 0
        self.l0cPingPong_ = 0
        self.isBias_ = bool(isBias)
        self.l1BufNum_ = int(l1Params.l1BufNum)
        self.enableL0cPingPong_ = bool(dbL0C)
        baseM = int(l0TileShape[IDX_M_IDX])
        self.baseM_ = baseM
        self.baseN_ = int(l0TileShape[IDX_N_IDX])
        self.baseK_ = int(l0TileShape[IDX_K_IDX])
        self._check_init_params()
        sizeShift = 1 if self.T.AType.is_fp4 else 0
        l1HalfBufNum = self.l1BufNum_ >> 1
        bL1OneBuffer = (self.baseN_ * self.kL1_) >> sizeShift
        scaleBL1OneBuffer = self.baseN_ * (Align64(self.scaleKL1_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        biasL1OneBuffer = self.baseN_ * self.T.BiasType.itemsize if self.isBias_ else 0
        if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
            regions = self.InitNoneFullLoadL1BufferOffsets(baseM, l1HalfBufNum, bL1OneBuffer, scaleBL1OneBuffer,
                                                           biasL1OneBuffer)
        else:
            regions = self.InitAFullLoadL1BufferOffsets(baseM, l1HalfBufNum, bL1OneBuffer, scaleBL1OneBuffer,
                                                        biasL1OneBuffer)
        self._check_l1_regions(regions)
        self.kL1Iter_ = CeilDiv(self.k_, self.kL1_)
        self._aL1 = [None] * self.l1BufNum_
        self._bL1 = [None] * self.l1BufNum_
        self._scaleAL1 = [None] * DOUBLE_BUFFER_COUNT
        self._scaleBL1 = [None] * DOUBLE_BUFFER_COUNT
        self._aFullL1 = {}
        self._scaleAFullL1 = None
        self._initialized = True
        self.splitKSequence.Reset(self.splitKNum_)

    def _check_init_params(self) -> None:
        if self.kL1_ <= 0 or self.kL1_ % 64:
            raise ConstraintError("kL1 % 64 == 0", f"kL1 = {self.kL1_} must be a positive multiple of 64 (the MX "
                                  f"scale offsets step by Align64(kL1) / 64 pairs)")
        if self.scaleKL1_ <= 0 or self.scaleKL1_ % self.kL1_:
            raise ConstraintError("scaleKL1 % kL1 == 0",
                                  f"scaleKL1 = {self.scaleKL1_} must be a positive multiple of kL1 = {self.kL1_}: "
                                  f"scales are reloaded every scaleKL1 / kL1 chunks, a remainder misplaces them")
        if self.baseK_ <= 0 or self.baseK_ % 64:
            raise ConstraintError("baseK % 64 == 0", f"baseK = {self.baseK_} must be a positive multiple of 64 "
                                  f"(one MX LoadData covers whole 64-element scale pairs)")
        if self.baseM_ <= 0 or self.baseN_ <= 0:
            raise ConstraintError("baseM, baseN > 0", f"baseM = {self.baseM_}, baseN = {self.baseN_}")
        if self.l1BufNum_ not in L1_BUF_NUMS:
            raise ConstraintError("l1BufNum in {2, 3, 4}", f"l1BufNum = {self.l1BufNum_}: the L1 offset tables of "
                                  f"the source hold 2, 3 or 4 A/B buffers")
        if self.splitKNum_ < 0:
            raise ConstraintError("splitKNum >= 0", f"splitKNum = {self.splitKNum_}")

    # -- operator() ------------------------------------------------------------------------------------------------
    @holds_compute_slot
    def __call__(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor, gmBias: GmTensor | None,
                 gmC: GmTensor, singleShape: Any, splitKIdx: int = 0) -> None:
        if not self._initialized:
            raise KernelError(f"{self.ctx.label}: BlockMmad called before Init")
        curM = int(singleShape[IDX_M_TILEIDX])
        curN = int(singleShape[IDX_N_TILEIDX])
        if curM > self.baseM_ or curN > self.baseN_:
            raise CapacityError(f"{self.ctx.label}: tile ({curM}, {curN}) exceeds the (baseM, baseN) = "
                                f"({self.baseM_}, {self.baseN_}) the L1 buffers were laid out for")
        halfL0cSize = self.l0c.total_bytes // DOUBLE_BUFFER_COUNT
        l0cOffset = (self.l0cPingPong_ & 1) * halfL0cSize
        tensorL0C = self.l0c.tile(l0cOffset, curM, curN)
        isFirstSplitK = splitKIdx == 0
        isLastSplitK = splitKIdx == self.splitKNum_ - 1
        self.splitKSequence.Check(splitKIdx, gmC.origin)
        scaleKIter = CeilDiv(self.scaleKL1_, self.kL1_)
        scaleKIterIdx = 0
        scaleKOffsetStride = (Align64(self.kL1_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        for iter0 in range(self.kL1Iter_):
            l1BufId = self.GetL1BufferId(self.abL1LoopCnt_)
            scaleL1BufId = self.scaleLoopCnt_ & 1
            kL1Offset = iter0 * self.kL1_
            scaleGmOffset = iter0 * scaleKOffsetStride
            # scaleA, scaleB GM->L1
            tensorScaleAL1, tensorScaleBL1 = self.CopyScalesInL1(gmScaleA, gmScaleB, curM, curN, scaleL1BufId,
                                                                 kL1Offset, scaleGmOffset, scaleKIterIdx == 0)
            curGmKL1 = self.k_ - kL1Offset if iter0 + 1 == self.kL1Iter_ else self.kL1_
            curPadKL1 = Align64(curGmKL1)
            # A GM->L1
            tensorAL1 = self.CopyAInL1(gmA, curM, curGmKL1, l1BufId, kL1Offset, iter0)
            # bias GM->L1
            if self.isBias_ and iter0 == 0 and isFirstSplitK:
                if gmBias is None:
                    raise KernelError(f"{self.ctx.label}: isBias set but no bias tensor passed")
                self._biasL1[scaleL1BufId] = gmBias.load(self.ctx).astype(np.float32)
            # B GM->L1; slice first, then copy (PadMxKBL1 zero-pads to curPadKL1).
            gmBlockB = gmB.Slice((kL1Offset, 0), (curGmKL1, curN))
            tensorBL1 = self._bL1[l1BufId] = gmBlockB.load_l1(self.ctx)
            scaleKOffset = scaleKIterIdx * scaleKOffsetStride
            scaleAKOffset = scaleKOffset
            if self.DispatchPolicy.FULL_LOAD_MODE == A_FULL_LOAD_MODE:
                scaleAKOffset = scaleGmOffset
            biasBtOffset = self.baseN_ * scaleL1BufId * FLOAT32_BYTES
            chunk = L1Chunk(iter0, curGmKL1, curPadKL1, tensorAL1, tensorBL1, tensorScaleAL1, tensorScaleBL1,
                            scaleL1BufId, scaleKOffset, scaleAKOffset)
            self.Iterate(chunk, curM, curN, biasBtOffset, isFirstSplitK, isLastSplitK, tensorL0C, gmC)
            if scaleKIterIdx + 1 == scaleKIter or iter0 + 1 == self.kL1Iter_:
                self.scaleLoopCnt_ += 1
                scaleKIterIdx = 0
            else:
                scaleKIterIdx += 1
            self.abL1LoopCnt_ += 1
        if isLastSplitK:
            self.CopyL0C2GM(gmC, tensorL0C, curM, curN, l0cOffset)
            if self.enableL0cPingPong_:
                self.l0cPingPong_ += 1

    def CopyL0C2GM(self, gmC: Any, tensorL0C: np.ndarray, curM: int, curN: int, l0cOffset: int) -> None:
        """C L0C->GM: `Copy(CopyL0C2GM.with(FixpipeParams(FINAL_ACCUMULATION)), gmC, tensorL0C)` (RNE cast to
        CType; adds when the core's atomic mode is set)."""
        self.ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        out = fixpipe_cast(tensorL0C, self._fixpipeOut)
        gmC.store(self.ctx, out)
        self.ctx.emit(Fixpipe, tensor=gmC.name or gmC.addr.alloc.name, origin=gmC.origin, m=curM, n=curN,
                      l0cOffset=l0cOffset, dtype=str(self.T.CType), atomic=self.ctx.atomic_dtype is not None,
                      unitFlag=FINAL_ACCUMULATION, t0_ns=t0, task=self.traceTile)

    def GetL1BufferId(self, loopCnt: int) -> int:
        # Three-buffer mode is not power-of-two, so bitmask wrapping would skip buffer 1.
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            return loopCnt % TRIPLE_BUFFER_COUNT
        return loopCnt & (self.l1BufNum_ - 1)

    def CopyScalesInL1(self, gmScaleA: GmTensor, gmScaleB: GmTensor, curM: int, curN: int, scaleL1BufId: int,
                       kL1Offset: int, scaleGmOffset: int, needCopyScale: bool) -> tuple[L1Tensor, L1Tensor]:
        """Scales GM -> L1 buffer `scaleL1BufId` when `needCopyScale` (L1 holds scaleKL1 of K; GM supplies the
        actual length, which may be a tail); returns the L1 (scaleA, scaleB) tensors. In A_FULL_LOAD_MODE
        scaleA (all of K) is loaded once, with the first chunk of the first tile."""
        if needCopyScale:
            curScaleKL1 = self.scaleKL1_
            if kL1Offset + curScaleKL1 > self.k_:
                curScaleKL1 = self.k_ - kL1Offset
            curScaleKLen = (Align64(curScaleKL1) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
            if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
                gmBlockScaleA = gmScaleA.Slice((0, scaleGmOffset), (curM, curScaleKLen))
                self._scaleAL1[scaleL1BufId] = gmBlockScaleA.load_l1(self.ctx)
            gmBlockScaleB = gmScaleB.Slice((scaleGmOffset, 0), (curScaleKLen, curN))
            self._scaleBL1[scaleL1BufId] = gmBlockScaleB.load_l1(self.ctx)
        if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
            tensorScaleAL1 = self._scaleAL1[scaleL1BufId]
        else:
            if self.abL1LoopCnt_ == 0:
                self._scaleAFullL1 = gmScaleA.load_l1(self.ctx)
            tensorScaleAL1 = self._scaleAFullL1
        tensorScaleBL1 = self._scaleBL1[scaleL1BufId]
        if tensorScaleAL1 is None or tensorScaleBL1 is None:
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} read before any load")
        return tensorScaleAL1, tensorScaleBL1

    def CopyAInL1(self, gmA: GmTensor, curM: int, curGmKL1: int, l1BufId: int, kL1Offset: int,
                  iter0: int) -> L1Tensor:
        """A GM -> L1 (PadMxKAL1 zero-pads K to Align64). In A_FULL_LOAD_MODE only the first tile's K loop
        (`abL1LoopCnt_ < kL1Iter_`) copies; later tiles reuse the resident A."""
        if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
            gmBlockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
            tensorAL1 = self._aL1[l1BufId] = gmBlockA.load_l1(self.ctx)
            return tensorAL1
        if self.abL1LoopCnt_ < self.kL1Iter_:
            gmBlockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
            self._aFullL1[iter0] = gmBlockA.load_l1(self.ctx)
        resident = self._aFullL1.get(iter0)
        if resident is None:
            raise KernelError(f"{self.ctx.label}: A_FULL_LOAD_MODE chunk {iter0} was never loaded")
        if resident.shape[0] != curM:
            # The resident A holds the first tile's rows; the device would read them for this tile too.
            raise KernelError(f"{self.ctx.label}: A_FULL_LOAD_MODE tile M {curM} differs from the resident A "
                              f"rows {resident.shape[0]} (the scheduler must keep one M block per core)")
        return resident

    def Iterate(self, chunk: L1Chunk, curM: int, curN: int, biasBtOffset: int, isFirstSplitK: bool,
                isLastSplitK: bool, tensorL0C: np.ndarray, gmC: GmTensor) -> None:
        """One L1 chunk: baseK steps L1 -> L0A/L0B (ping-pong) -> MMAD into the L0C tile. The source passes the
        chunk's fields one by one; `L1Chunk` bundles them under the source's names."""
        (iter0, curGmKL1, curPadKL1, tensorAL1, tensorBL1, tensorScaleAL1, tensorScaleBL1, scaleL1BufId, scaleKOffset,
         scaleAKOffset) = chunk
        nb = CeilDiv(curGmKL1, MX_GROUP_SIZE)
        scaleA = tensorScaleAL1.Slice((0, scaleAKOffset), (tensorScaleAL1.shape[0], nb))
        scaleB = tensorScaleBL1.Slice((scaleKOffset, 0), (nb, tensorScaleBL1.shape[1]))
        if scaleA.shape[1] != nb or scaleB.shape[0] != nb:
            raise KernelError(f"{self.ctx.label}: L1 scale window at {scaleKOffset} holds fewer than the {nb} "
                              f"scales chunk {iter0} needs (scaleKL1 / kL1 bookkeeping broken)")
        # A, ScaleA / B, ScaleB L1 -> L0A / L0B (MX LoadData), decoded for the whole chunk at once
        aF32 = dequant_l1(self.ctx, tensorAL1, scaleA, self.T.AType, 1)
        bF32 = dequant_l1(self.ctx, tensorBL1, scaleB, self.T.BType, 0)
        baseK = self.baseK_
        hasBias = self.isBias_
        kL0Iter = CeilDiv(curGmKL1, baseK)
        # B decodes row-major; a B stored transposed (DN) keeps its column-major BLAS call where the two differ
        bCodes = tensorBL1.data
        bStoredT = bCodes.flags.f_contiguous and not bCodes.flags.c_contiguous
        aColumnMajor = aF32.flags.f_contiguous and not aF32.flags.c_contiguous
        isLastL1Iter = iter0 + 1 == self.kL1Iter_
        halfL0Size = self.TOTAL_L0A_SIZE // DOUBLE_BUFFER_COUNT
        needBiasInL1 = hasBias and iter0 == 0 and isFirstSplitK
        bitsShift = 1 if self.T.AType.is_fp4 else 0
        if needBiasInL1:
            need = Align16(curN) * FLOAT32_BYTES
            if biasBtOffset + need > self.TOTAL_BT_SIZE:
                raise CapacityError(f"{self.ctx.label}: bias table slice [{biasBtOffset}, {biasBtOffset + need}) "
                                    f"exceeds the {self.TOTAL_BT_SIZE} B bias table")
        # A, ScaleA L1->L0A (NZ, C0); B, ScaleB L1->L0B (ZN, C0): the first step is the largest (later steps only
        # shrink at the K tail), so one check covers every half the loop loads.
        firstKL0 = min(baseK, curPadKL1)
        aBytes = (Align16(curM) * Align(firstKL0, self.C0_SIZE)) >> bitsShift
        bBytes = (Align(firstKL0, self.C0_SIZE) * Align16(curN)) >> bitsShift
        if aBytes > halfL0Size or bBytes > self.TOTAL_L0B_SIZE // DOUBLE_BUFFER_COUNT:
            raise CapacityError(f"{self.ctx.label}: L0A/L0B half of {halfL0Size} B cannot hold the step "
                                f"(A {aBytes} B, B {bBytes} B) of tile ({curM}, {curN}) x baseK {firstKL0}")
        for iter1 in range(kL0Iter):
            curKL0 = curPadKL1 - iter1 * baseK if iter1 * baseK + baseK > curPadKL1 else baseK
            l0PingPongId = self.l0PingPong_ & 1  # L0A/L0B half at byte offset halfL0Size * l0PingPongId
            needBias = needBiasInL1 and iter1 == 0
            if needBias:
                # bias L1->BT
                self._bt = self._biasL1[scaleL1BufId]
            isFinalAccumulation = isLastL1Iter and iter1 + 1 == kL0Iter and isLastSplitK
            initCMatrix = iter0 == 0 and iter1 == 0 and isFirstSplitK and not needBias
            kLo = iter1 * baseK
            kHi = min(kLo + baseK, curGmKL1)
            bStep = bF32[kLo:kHi, :]
            if bStoredT and not b_row_major_same(curM, kHi - kLo, curN, aColumnMajor):
                bStep = np.asfortranarray(bStep)   # the stored (transposed) layout's BLAS bits at this shape
            self.Mmad(curM, curN, curKL0, isFinalAccumulation, initCMatrix, needBias, tensorL0C,
                      aF32[:, kLo:kHi], bStep, gmC, l0PingPongId)
            self.l0PingPong_ += 1

    def Mmad(self, curM: int, curN: int, curKL0: int, isFinalAccumulation: bool, initCMatrix: bool,
             needBias: bool, tensorL0C: np.ndarray, tensorAL0: np.ndarray, tensorBL0: np.ndarray, gmC: GmTensor,
             l0PingPongId: int) -> None:
        """One MMAD (MmadParams m, n, k = Align64(curKL0), unitFlag, cmatrixInitVal): L0C (+)= A @ B."""
        ctx = self.ctx
        ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        if isinstance(tensorL0C, Payload):
            pass   # protocol-only run: the MMAD's shapes and events, no arithmetic
        elif initCMatrix:
            np.matmul(tensorAL0, tensorBL0, out=tensorL0C)
        elif needBias:
            np.matmul(tensorAL0, tensorBL0, out=tensorL0C)
            tensorL0C += self._bt
        else:
            step = self._step  # the product of this step before it enters L0C (emulator scratch)
            if step is None or step.shape != (curM, curN):
                step = self._step = np.empty((curM, curN), dtype=np.float32)
            np.matmul(tensorAL0, tensorBL0, out=step)
            tensorL0C += step
        if ctx.device.events.wants(Mmad):
            ctx.emit(Mmad, m=curM, n=curN, k=Align64(curKL0), tile=gmC.origin, l0=l0PingPongId,
                     aType=self.T.AType.value,
                     unitFlag=FINAL_ACCUMULATION if isFinalAccumulation else NON_FINAL_ACCUMULATION,
                     cmatrixInitVal=initCMatrix, bias=needBias, t0_ns=t0)
        else:
            ctx.device.waiter.progress.bump()   # counted as progress like a published step

    def Destroy(self) -> None:
        """`~BlockMmad()` at kernel exit: a tile whose sequence stopped before splitKNum - 1 was never written
        to C (reported)."""
        if self._initialized:
            self.splitKSequence.CheckClosed(atInit=False)
        self.splitKSequence.Reset(self.splitKNum_, quiet=True)
