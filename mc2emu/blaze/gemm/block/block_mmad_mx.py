"""BlockMmad with the MX dispatch policy: one core's GM -> L1 -> L0A/L0B -> L0C -> GM matmul of a tile.

Emulates ops-tensor `include/blaze/gemm/block/block_mmad_qbmm_mx.h`,
`BlockMmad<MatmulWithScaleMx<FullLoadMode_, AtomicAdd_>, AType, LayoutA, BType, LayoutB, CType, LayoutC,
BiasType, LayoutBias>` (SPEC §5, seed 003 §7-9). Usage, as the kernels write it:

    BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), ElemFormat.E4M3,
                                     NDExtLayoutPtn, ElemFormat.E4M3, DNExtLayoutPtn, OutDtype.BF16)
    mmadOp_ = BlockMmad(ctx)                       # the per-core object (`BlockMmad mmadOp_;`)
    mmadOp_.Init(problemShape, l0TileShape, L1Params(kL1, scaleKL1, l1BufNum), isBias, dbL0C, splitKNum)
    mmadOp_(gmBlockA, gmBlockB, gmBlockScaleA, gmBlockScaleB, gmBlockBias, gmBlockC, singleShape, splitKIdx)
    mmadOp_.Destroy()                              # ~BlockMmad(): at kernel exit

Per call (`operator()`), exactly the source's loops: for each kL1 chunk `iter0` (CeilDiv(K, kL1) of them)
the scales are (re)loaded into the L1 scale buffer `scaleLoopCnt_ & 1` when `scaleKIterIdx == 0`, i.e.
every scaleKL1 / kL1 chunks (`scaleKL1 % kL1 == 0` is checked at Init); A (unless resident, A full load)
and B are copied GM -> L1 buffer `GetL1BufferId(abL1LoopCnt_)`, zero-padded to Align64; then each baseK
step `iter1` loads L0A / L0B half `l0PingPong_ & 1` and issues one MMAD (`mmadParams.k = Align64(curKL0)`,
unitFlag FINAL on the very last step of the last split, `cmatrixInitVal` on the first step of split 0
without bias; with bias the first step adds the (1, N) FP32 bias from the bias table instead). The call
with `splitKIdx == splitKNum - 1` fixpipes L0C (half `l0cPingPong_ & 1`) to C, converting to CType (RNE)
and adding when the core's atomic mode is set, then flips the L0C half when dbL0C.

Numerics (SPEC §4): one float32 BLAS matmul per baseK step on the dequantized operands, added to the
float32 L0C tile: the rounding sequence across K steps is the device's. K padding is all zeros on both
sides, so it is not materialized.

Data movement and checks: every call reads its A/B chunks and scales from GM through the core (bounds,
poison, events), except what the source keeps resident (A and scaleA in A_FULL_LOAD_MODE after the first
tile). L1 is accounted as the source lays it out (`InitNoneFullLoadL1BufferOffsets` /
`InitAFullLoadL1BufferOffsets`): overlapping or out-of-L1 buffers raise CapacityError, as do L0A/L0B/L0C/
bias-table tiles that do not fit. Host performance (no effect on results, reads, events or hazards; see
`BlockMmadHost`): the dequantization of a chunk is memoized launch-wide per (operand, GM location) and
reused only when the codes and scales just read are byte-identical to those it was decoded from, and at
most `os.cpu_count()` cores run their MMAD loops at once.

splitK protocol: any per-tile sequence other than 0, 1, ..., splitKNum - 1 files Hazard.SPLITK_SEQUENCE
and runs on as the device would (a mid-tile 0 discards the partial sum, calls beyond splitKNum accumulate
into the other L0C half, fewer calls leave C unwritten; see `Destroy`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.blaze.gemm.block.l0c_buffer import L0CBuffer
from mc2emu.blaze.gemm.common_utils import (
    DOUBLE_BUFFER_COUNT,
    FINAL_ACCUMULATION,
    IDX_K_IDX,
    IDX_M_IDX,
    IDX_M_TILEIDX,
    IDX_N_IDX,
    IDX_N_TILEIDX,
    NON_FINAL_ACCUMULATION,
    QUADRUPLE_BUFFER_COUNT,
    TRIPLE_BUFFER_COUNT,
)
from mc2emu.blaze.gemm.dispatch_policy import A_FULL_LOAD_MODE, NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.gemm.tile.tile_mmad_mx import DequantMemo
from mc2emu.blaze.tensor_api.layout import IsTrans, LayoutPtn, NDExtLayoutPtn
from mc2emu.blaze.tensor_api.tensor import GmTensor
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
from mc2emu.runtime.events import EventKind
from mc2emu.runtime.hazards import CapacityError, ConstraintError, Hazard, KernelError
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

L1_BUF_NUMS = (DOUBLE_BUFFER_COUNT, TRIPLE_BUFFER_COUNT, QUADRUPLE_BUFFER_COUNT)  # l1BufNum the source lays out


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


class BlockMmadHost:
    """Host-side resources the cores of one BlockMmad instantiation share; they change host time only.

    - `slots`: how many cores may run their MMAD loops on the host at once. With 32 core threads on a few
      host CPUs, every core interleaving its numpy calls thrashes the caches and convoys on the GIL
      (measured: ~2x the CPU time of the same work on 2 threads). A core holds a slot for one `BlockMmad`
      call, which never waits on another core (no flags, no HCCL inside), so slots cannot deadlock and
      cannot change a result; cores still interleave at tile boundaries.
    - `memo`: the launch-wide `DequantMemo` (decode once per GM chunk, verified against the bytes read)."""

    def __init__(self, slots: int | None = None) -> None:
        self.count = max(1, int(slots if slots is not None else (os.cpu_count() or 1)))
        self._sem = threading.BoundedSemaphore(self.count)
        self.memo = DequantMemo()

    def __enter__(self) -> BlockMmadHost:
        self._sem.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sem.release()


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
    host: BlockMmadHost = field(default_factory=BlockMmadHost, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "AType", ElemFormat.parse(self.AType, "AType"))
        object.__setattr__(self, "BType", ElemFormat.parse(self.BType, "BType"))
        object.__setattr__(self, "CType", OutDtype.parse(self.CType, "CType").dtype)
        object.__setattr__(self, "BiasType", np.dtype(self.BiasType))
        if self.AType.is_fp4 != self.BType.is_fp4:
            raise ConstraintError("AType/BType", f"MX BlockMmad needs both operands FP8 or both FP4 (C0_SIZE and "
                                  f"the L1 sizes follow AType), got {self.AType.value} x {self.BType.value}")

    WEIGHT_NZ = False  # NZ weights are not emulated

    @property
    def TRANS_A(self) -> bool:
        return IsTrans(self.LayoutA)

    @property
    def TRANS_B(self) -> bool:
        return IsTrans(self.LayoutB)

    weightNz = WEIGHT_NZ

    @property
    def transA(self) -> bool:
        return self.TRANS_A

    @property
    def transB(self) -> bool:
        return self.TRANS_B

    def __call__(self, ctx: CoreContext) -> BlockMmadMx:
        return BlockMmadMx(ctx, self)


class _L1Operand:
    """One operand chunk held in L1: its raw codes as read from GM location `where` (allocation id, offset),
    and the `stamp` of that read (see `_stamp`)."""

    __slots__ = ("codes", "stamp", "where")

    def __init__(self, codes: np.ndarray, where: tuple[int, int], stamp: tuple | None = None) -> None:
        self.codes = codes
        self.where = where
        self.stamp = stamp


def _where(t: GmTensor) -> tuple[int, int]:
    return (t.addr.alloc.aid, t.addr.offset)


def _stamp(t: GmTensor) -> tuple | None:
    """(allocation, offset, shape, generation) of a read from GM this rank alone writes; None for a window.
    Two reads with equal stamps returned the same bytes (no write in between), so the decode memo may skip
    its byte compare; reads of windows (peers write them unseen) keep it."""
    alloc = t.addr.alloc
    if not alloc.stable:
        return None
    return (alloc.aid, t.addr.offset, t.shape, alloc.generation)


def _pair(codes: tuple | None, scales: tuple | None, scaleOffset: int, nb: int) -> tuple | None:
    """The stamp of an (operand chunk, scale window) pair: None unless both reads are stamped."""
    if codes is None or scales is None:
        return None
    return (codes, scales, scaleOffset, nb)


class BlockMmadMx:
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
        self._nextSplitKIdx = 0  # the splitKIdx the protocol expects next on the current tile
        self._tileOrigin: tuple[int, int] | None = None
        self._scaleAL1: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_COUNT
        self._scaleBL1: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_COUNT
        self._aL1: list[_L1Operand | None] = []
        self._bL1: list[_L1Operand | None] = []
        self._aFullL1: dict[int, _L1Operand] = {}
        self._scaleAFullL1: np.ndarray | None = None
        # stamps of the reads that filled the L1 scale buffers (None: a window, or never filled)
        self._scaleAStamp: list[tuple | None] = [None, None]
        self._scaleBStamp: list[tuple | None] = [None, None]
        self._scaleAFullStamp: tuple | None = None
        self._biasL1: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_COUNT
        self._bt: np.ndarray | None = None
        self._step: np.ndarray | None = None

    # -- Init ------------------------------------------------------------------------------------------------
    def Init(self, problemShape: Any, l0TileShape: Any, l1Params: L1Params, isBias: bool, dbL0C: bool,
             splitKNum: int = 1) -> None:
        """`Init(problemShape, l0TileShape, l1Params, isBias, dbL0C, splitKNum = 1)`."""
        if self._initialized and self._nextSplitKIdx != 0:
            # A re-Init (the next pass of a kernel) while a tile is still open: that tile's C is never written.
            self._report(f"Init while tile {self._tileOrigin} is open at splitKIdx {self._nextSplitKIdx - 1} of "
                         f"splitKNum {self.splitKNum_}: its C was never written", expected=self._nextSplitKIdx,
                         splitKNum=self.splitKNum_, tile=self._tileOrigin)
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
        self._nextSplitKIdx = 0
        self._tileOrigin = None
        self._initialized = True
        if self.splitKNum_ == 0:
            self._report("Init with splitKNum 0: no call can satisfy splitKIdx == splitKNum - 1, so this core "
                         "never fixpipes C", splitKNum=0)

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

    def InitNoneFullLoadL1BufferOffsets(self, baseM: int, l1HalfBufNum: int, bL1OneBuffer: int,
                                        scaleBL1OneBuffer: int, biasL1OneBuffer: int) -> list[tuple[str, int, int]]:
        """The source's L1 map for streamed A and B; returns (name, offset, bytes) of every buffer."""
        sizeShift = 1 if self.T.AType.is_fp4 else 0
        halfL1Size = self.TOTAL_L1_SIZE >> 1
        aL1OneBuffer = (baseM * Align64(self.kL1_)) >> sizeShift
        scaleAL1OneBuffer = baseM * (Align64(self.scaleKL1_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        a = [0] * QUADRUPLE_BUFFER_COUNT
        b = [0] * QUADRUPLE_BUFFER_COUNT
        sa = [0] * DOUBLE_BUFFER_COUNT
        sb = [0] * DOUBLE_BUFFER_COUNT
        bias = [0] * DOUBLE_BUFFER_COUNT
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            # L1 space: A0|A2|B0|B2|AScale0|BScale0|bias0|...|A1|B1|AScale1|BScale1|bias1
            a[0] = 0
            a[2] = a[0] + aL1OneBuffer
            b[0] = a[2] + aL1OneBuffer
            b[2] = b[0] + bL1OneBuffer
            sa[0] = b[2] + bL1OneBuffer
            sb[0] = sa[0] + scaleAL1OneBuffer
            bias[0] = sb[0] + scaleBL1OneBuffer
            a[1] = max(halfL1Size, bias[0] + biasL1OneBuffer)
            b[1] = a[1] + aL1OneBuffer
            sa[1] = b[1] + bL1OneBuffer
            sb[1] = sa[1] + scaleAL1OneBuffer
            bias[1] = sb[1] + scaleBL1OneBuffer
        else:
            # 2 buffer: A0|B0|AScale0|BScale0|bias0|...|A1|B1|AScale1|BScale1|bias1|...
            # 4 buffer: A0A2|B0B2|AScale0|BScale0|bias0|...|A1A3|B1B3|AScale1|BScale1|bias1|...
            for bufferId in range(self.l1BufNum_):
                l1Offset = halfL1Size * (bufferId & 1)
                a[bufferId] = l1Offset + aL1OneBuffer * (bufferId >> 1)
                b[bufferId] = l1Offset + aL1OneBuffer * l1HalfBufNum + bL1OneBuffer * (bufferId >> 1)
            scaleABaseOffset = bL1OneBuffer * l1HalfBufNum
            for bufferId in range(DOUBLE_BUFFER_COUNT):
                sa[bufferId] = b[bufferId] + scaleABaseOffset
                sb[bufferId] = sa[bufferId] + scaleAL1OneBuffer
                bias[bufferId] = sb[bufferId] + scaleBL1OneBuffer
        regions = [(f"A{i}", a[i], aL1OneBuffer) for i in range(self.l1BufNum_)]
        regions += [(f"B{i}", b[i], bL1OneBuffer) for i in range(self.l1BufNum_)]
        for i in range(DOUBLE_BUFFER_COUNT):
            regions += [(f"ScaleA{i}", sa[i], scaleAL1OneBuffer), (f"ScaleB{i}", sb[i], scaleBL1OneBuffer),
                        (f"Bias{i}", bias[i], biasL1OneBuffer)]
        return regions

    def InitAFullLoadL1BufferOffsets(self, baseM: int, l1HalfBufNum: int, bL1OneBuffer: int,
                                     scaleBL1OneBuffer: int, biasL1OneBuffer: int) -> list[tuple[str, int, int]]:
        """The source's L1 map with A (all of K) resident; returns (name, offset, bytes) of every buffer."""
        sizeShift = 1 if self.T.AType.is_fp4 else 0
        halfL1Size = self.TOTAL_L1_SIZE >> 1
        mAlign = Align(baseM, self.C0_SIZE) if self.TRANS_A else Align16(baseM)
        kAlign = Align64(self.k_)
        aL1OneBuffer = (mAlign * kAlign) >> sizeShift
        scaleAL1OneBuffer = baseM * (Align64(self.k_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        b = [0] * QUADRUPLE_BUFFER_COUNT
        sb = [0] * DOUBLE_BUFFER_COUNT
        bias = [0] * DOUBLE_BUFFER_COUNT
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            # B0|B2|BScale0|bias0|A|AScale|...|B1|BScale1|bias1
            b[0] = 0
            b[2] = b[0] + bL1OneBuffer
            sb[0] = b[2] + bL1OneBuffer
            bias[0] = sb[0] + scaleBL1OneBuffer
            a0 = bias[0] + biasL1OneBuffer
            sa0 = a0 + aL1OneBuffer
            b[1] = max(halfL1Size, sa0 + scaleAL1OneBuffer)
            sb[1] = b[1] + bL1OneBuffer
            bias[1] = sb[1] + scaleBL1OneBuffer
        else:
            # 2 buffer: B0|BScale0|bias0|A|AScale|...|B1|BScale1|bias1|
            a0 = bL1OneBuffer * l1HalfBufNum + scaleBL1OneBuffer + biasL1OneBuffer
            sa0 = a0 + aL1OneBuffer
            b1Offset = sa0 + scaleAL1OneBuffer if sa0 + scaleAL1OneBuffer >= halfL1Size else halfL1Size
            for bufferId in range(self.l1BufNum_):
                b[bufferId] = b1Offset * (bufferId & 1) + bL1OneBuffer * (bufferId >> 1)
            scaleBBaseOffset = bL1OneBuffer * l1HalfBufNum
            for bufferId in range(DOUBLE_BUFFER_COUNT):
                sb[bufferId] = b[bufferId] + scaleBBaseOffset
                bias[bufferId] = sb[bufferId] + scaleBL1OneBuffer
        regions = [("A", a0, aL1OneBuffer), ("ScaleA", sa0, scaleAL1OneBuffer)]
        regions += [(f"B{i}", b[i], bL1OneBuffer) for i in range(self.l1BufNum_)]
        for i in range(DOUBLE_BUFFER_COUNT):
            regions += [(f"ScaleB{i}", sb[i], scaleBL1OneBuffer), (f"Bias{i}", bias[i], biasL1OneBuffer)]
        return regions

    def _check_l1_regions(self, regions: list[tuple[str, int, int]]) -> None:
        used = [(name, off, size) for name, off, size in regions if size > 0]
        end = max((off + size for _, off, size in used), default=0)
        if end > self.TOTAL_L1_SIZE:
            worst = max(used, key=lambda r: r[1] + r[2])
            raise CapacityError(
                f"{self.ctx.label}: BlockMmad MX L1 buffer {worst[0]} [{worst[1]}, {worst[1] + worst[2]}) ends beyond "
                f"the {self.TOTAL_L1_SIZE} B L1 (baseM {self.baseM_}, baseN {self.baseN_}, kL1 {self.kL1_}, "
                f"scaleKL1 {self.scaleKL1_}, l1BufNum {self.l1BufNum_}, {self.DispatchPolicy.FULL_LOAD_MODE.name})")
        ordered = sorted(used, key=lambda r: r[1])
        for (n0, o0, s0), (n1, o1, _) in itertools.pairwise(ordered):
            if o0 + s0 > o1:
                raise CapacityError(
                    f"{self.ctx.label}: BlockMmad MX L1 buffers {n0} [{o0}, {o0 + s0}) and {n1} (from {o1}) overlap: "
                    f"one half of L1 ({self.TOTAL_L1_SIZE >> 1} B) cannot hold a buffer set for baseM {self.baseM_}, "
                    f"baseN {self.baseN_}, kL1 {self.kL1_}, scaleKL1 {self.scaleKL1_}")
        self.ctx.local.allocate(Position.A1, "BlockMmadMx", end, np.uint8)

    # -- operator() ------------------------------------------------------------------------------------------------
    def __call__(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor, gmBias: GmTensor | None,
                 gmC: GmTensor, singleShape: Any, splitKIdx: int = 0) -> None:
        with self.T.host:
            self._call(gmA, gmB, gmScaleA, gmScaleB, gmBias, gmC, singleShape, splitKIdx)

    def _call(self, gmA: GmTensor, gmB: GmTensor, gmScaleA: GmTensor, gmScaleB: GmTensor, gmBias: GmTensor | None,
              gmC: GmTensor, singleShape: Any, splitKIdx: int) -> None:
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
        self._check_split_k(splitKIdx, gmC.origin)
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
            stampB = _stamp(gmBlockB)
            tensorBL1 = _L1Operand(gmBlockB.load(self.ctx), _where(gmBlockB), stampB)
            self._bL1[l1BufId] = tensorBL1
            scaleKOffset = scaleKIterIdx * scaleKOffsetStride
            scaleAKOffset = scaleKOffset
            if self.DispatchPolicy.FULL_LOAD_MODE == A_FULL_LOAD_MODE:
                scaleAKOffset = scaleGmOffset
            biasBtOffset = self.baseN_ * scaleL1BufId * FLOAT32_BYTES
            self.Iterate(curM, curN, curGmKL1, curPadKL1, iter0, scaleKOffset, scaleAKOffset, biasBtOffset,
                         isFirstSplitK, isLastSplitK, tensorScaleAL1, tensorScaleBL1, tensorAL1, tensorBL1,
                         scaleL1BufId, tensorL0C, gmC)
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
        self.ctx.emit(EventKind.FIXPIPE, gmC.name or gmC.addr.alloc.name, (*gmC.origin, curM, curN),
                      l0cOffset=l0cOffset, dtype=str(self.T.CType), atomic=self.ctx.atomic_dtype is not None,
                      unitFlag=FINAL_ACCUMULATION, t0_ns=t0)

    def GetL1BufferId(self, loopCnt: int) -> int:
        # Three-buffer mode is not power-of-two, so bitmask wrapping would skip buffer 1.
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            return loopCnt % TRIPLE_BUFFER_COUNT
        return loopCnt & (self.l1BufNum_ - 1)

    def CopyScalesInL1(self, gmScaleA: GmTensor, gmScaleB: GmTensor, curM: int, curN: int, scaleL1BufId: int,
                       kL1Offset: int, scaleGmOffset: int, needCopyScale: bool) -> tuple[np.ndarray, np.ndarray]:
        """Scales GM -> L1 buffer `scaleL1BufId` when `needCopyScale` (L1 holds scaleKL1 of K; GM supplies the
        actual length, which may be a tail); returns the L1 (scaleA, scaleB) codes. In A_FULL_LOAD_MODE
        scaleA (all of K) is loaded once, with the first chunk of the first tile."""
        if needCopyScale:
            curScaleKL1 = self.scaleKL1_
            if kL1Offset + curScaleKL1 > self.k_:
                curScaleKL1 = self.k_ - kL1Offset
            curScaleKLen = (Align64(curScaleKL1) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
            if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
                gmBlockScaleA = gmScaleA.Slice((0, scaleGmOffset), (curM, curScaleKLen))
                self._scaleAStamp[scaleL1BufId] = _stamp(gmBlockScaleA)
                self._scaleAL1[scaleL1BufId] = gmBlockScaleA.load(self.ctx)
            gmBlockScaleB = gmScaleB.Slice((scaleGmOffset, 0), (curScaleKLen, curN))
            self._scaleBStamp[scaleL1BufId] = _stamp(gmBlockScaleB)
            self._scaleBL1[scaleL1BufId] = gmBlockScaleB.load(self.ctx)
        if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
            tensorScaleAL1 = self._scaleAL1[scaleL1BufId]
        else:
            if self.abL1LoopCnt_ == 0:
                self._scaleAFullStamp = _stamp(gmScaleA)
                self._scaleAFullL1 = gmScaleA.load(self.ctx)
            tensorScaleAL1 = self._scaleAFullL1
        tensorScaleBL1 = self._scaleBL1[scaleL1BufId]
        if tensorScaleAL1 is None or tensorScaleBL1 is None:
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} read before any load")
        return tensorScaleAL1, tensorScaleBL1

    def CopyAInL1(self, gmA: GmTensor, curM: int, curGmKL1: int, l1BufId: int, kL1Offset: int,
                  iter0: int) -> _L1Operand:
        """A GM -> L1 (PadMxKAL1 zero-pads K to Align64). In A_FULL_LOAD_MODE only the first tile's K loop
        (`abL1LoopCnt_ < kL1Iter_`) copies; later tiles reuse the resident A."""
        if self.DispatchPolicy.FULL_LOAD_MODE == NONE_FULL_LOAD_MODE:
            gmBlockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
            stampA = _stamp(gmBlockA)
            tensorAL1 = _L1Operand(gmBlockA.load(self.ctx), _where(gmBlockA), stampA)
            self._aL1[l1BufId] = tensorAL1
            return tensorAL1
        if self.abL1LoopCnt_ < self.kL1Iter_:
            gmBlockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
            stampA = _stamp(gmBlockA)
            self._aFullL1[iter0] = _L1Operand(gmBlockA.load(self.ctx), _where(gmBlockA), stampA)
        resident = self._aFullL1.get(iter0)
        if resident is None:
            raise KernelError(f"{self.ctx.label}: A_FULL_LOAD_MODE chunk {iter0} was never loaded")
        if resident.codes.shape[0] != curM:
            # The resident A holds the first tile's rows; the device would read them for this tile too.
            raise KernelError(f"{self.ctx.label}: A_FULL_LOAD_MODE tile M {curM} differs from the resident A "
                              f"rows {resident.codes.shape[0]} (the scheduler must keep one M block per core)")
        return resident

    def _dequant(self, operand: str, tensor: _L1Operand, scale: np.ndarray, elem: ElemFormat,
                 k_axis: int, stamp: tuple | None = None) -> np.ndarray:
        """fp32 operand chunk through the launch-wide memo (reused only for byte-identical codes and scales;
        equal `stamp`s prove it without comparing)."""
        key = (operand, *tensor.where, *tensor.codes.shape)
        return self.T.host.memo.dequant(self.ctx.launch, key, tensor.codes, scale, elem, k_axis, stamp)

    def Iterate(self, curM: int, curN: int, curGmKL1: int, curPadKL1: int, iter0: int, scaleKOffset: int,
                scaleAKOffset: int, biasBtOffset: int, isFirstSplitK: bool, isLastSplitK: bool,
                tensorScaleAL1: np.ndarray, tensorScaleBL1: np.ndarray, tensorAL1: _L1Operand, tensorBL1: _L1Operand,
                scaleL1BufId: int, tensorL0C: np.ndarray, gmC: GmTensor) -> None:
        """One L1 chunk: baseK steps L1 -> L0A/L0B (ping-pong) -> MMAD into the L0C tile."""
        nb = CeilDiv(curGmKL1, MX_GROUP_SIZE)
        scaleA = tensorScaleAL1[:, scaleAKOffset:scaleAKOffset + nb]
        scaleB = tensorScaleBL1[scaleKOffset:scaleKOffset + nb, :]
        if scaleA.shape[1] != nb or scaleB.shape[0] != nb:
            raise KernelError(f"{self.ctx.label}: L1 scale window at {scaleKOffset} holds fewer than the {nb} "
                              f"scales chunk {iter0} needs (scaleKL1 / kL1 bookkeeping broken)")
        full = self.DispatchPolicy.FULL_LOAD_MODE == A_FULL_LOAD_MODE
        sAStamp = self._scaleAFullStamp if full else self._scaleAStamp[scaleL1BufId]
        sBStamp = self._scaleBStamp[scaleL1BufId]
        aF32 = self._dequant("A", tensorAL1, scaleA, self.T.AType, 1,
                             _pair(tensorAL1.stamp, sAStamp, scaleAKOffset, nb))
        bF32 = self._dequant("B", tensorBL1, scaleB, self.T.BType, 0,
                             _pair(tensorBL1.stamp, sBStamp, scaleKOffset, nb))
        baseK = self.baseK_
        hasBias = self.isBias_
        kL0Iter = CeilDiv(curGmKL1, baseK)
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
            self.Mmad(curM, curN, curKL0, isFinalAccumulation, initCMatrix, needBias, tensorL0C,
                      aF32[:, kLo:kHi], bF32[kLo:kHi, :], gmC, l0PingPongId)
            self.l0PingPong_ += 1

    def Mmad(self, curM: int, curN: int, curKL0: int, isFinalAccumulation: bool, initCMatrix: bool,
             needBias: bool, tensorL0C: np.ndarray, tensorAL0: np.ndarray, tensorBL0: np.ndarray, gmC: GmTensor,
             l0PingPongId: int) -> None:
        """One MMAD (MmadParams m, n, k = Align64(curKL0), unitFlag, cmatrixInitVal): L0C (+)= A @ B."""
        ctx = self.ctx
        ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        if initCMatrix:
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
        ctx.emit(EventKind.MMAD, "mmad", (curM, curN, Align64(curKL0)), tile=gmC.origin, l0=l0PingPongId,
                 unitFlag=FINAL_ACCUMULATION if isFinalAccumulation else NON_FINAL_ACCUMULATION,
                 cmatrixInitVal=initCMatrix, bias=needBias, t0_ns=t0)

    # -- splitK protocol ---------------------------------------------------------------------------------------------
    def _check_split_k(self, splitKIdx: int, origin: tuple[int, int]) -> None:
        expected = self._nextSplitKIdx
        n = self.splitKNum_
        if splitKIdx == 0 and expected != 0:
            self._report(f"splitKIdx 0 at tile {origin} while tile {self._tileOrigin} expected {expected} of "
                         f"{n}: L0C is reset, that tile's partial sum is discarded and its C never written",
                         splitKIdx=0, expected=expected, splitKNum=n, tile=origin)
        elif splitKIdx != expected:
            if n and splitKIdx >= n:
                what = (f"beyond splitKNum {n}: it accumulates into the other L0C half, which the next tile's "
                        f"splitKIdx 0 discards")
            elif expected == 0:
                what = "no splitKIdx 0 opened this tile: it accumulates onto what the L0C half still holds"
            else:
                what = f"out of order (expected {expected})"
            self._report(f"splitKIdx {splitKIdx} at tile {origin} {what}", splitKIdx=splitKIdx, expected=expected,
                         splitKNum=n, tile=origin)
        if splitKIdx == 0:
            self._tileOrigin = origin
        self._nextSplitKIdx = 0 if splitKIdx >= n - 1 else splitKIdx + 1  # a tile closes at its last index

    def _report(self, message: str, **details: Any) -> None:
        self.ctx.device.hazards.report(Hazard.SPLITK_SEQUENCE, self.ctx.label, message, **details)

    def Destroy(self) -> None:
        """`~BlockMmad()` at kernel exit: a tile whose sequence stopped before splitKNum - 1 was never written
        to C (reported)."""
        if self._initialized and self._nextSplitKIdx != 0:
            self._report(f"kernel ended with tile {self._tileOrigin} at splitKIdx {self._nextSplitKIdx - 1} of "
                         f"splitKNum {self.splitKNum_}: its C was never written", expected=self._nextSplitKIdx,
                         splitKNum=self.splitKNum_, tile=self._tileOrigin)
        self._nextSplitKIdx = 0
