"""The V+C weight-quant matmul kernel (seed 001): AIVs dequantize B into L1, the AIC runs the MMADs.

Emulates the Blaze skill asset `kernel/weight_quant_matmul_kernel.h` (hicann cannbot-skills,
`ascendc-blaze-best-practice` assets; the stored copy carries no commit): `WeightQuantMatmulPrologue` (AIV) and
the `GemmUniversal` specialization for `KernelWeightQuantMatmul`, launched `MIX_AIC_1_2`. Both core types walk
the tiles of `BlockSchedulerMatmulSwatWithTailSplit`; both AIVs of an AI core take the same tile and split
each K-L1 chunk (transB: N halves, (curN / 32) * 16 to AIV0; !transB: K halves the same way). Per chunk an
AIV loads B (and the scale / offset once per UB half), dequantizes (`WeightDequantVf`), waits "L1 free",
copies into L1 and sets "L1 filled"; `Cleanup()` waits the AIC's last two Sets.

The AIV's `if (curN <= 0) return;` skips `Cleanup`: the AIC's two last Sets stay pending (UNCONSUMED_FLAG;
the return itself EMPTY_TAIL_EARLY_RETURN). A consistent tiling never yields an empty piece; a hand-made one
can (an nTailMain larger than the merged N edge, which the scheduler's uint64 arithmetic wraps).

Isolation modes (seed 001, pitfalls-and-diagnosis §2; the emulator's own harness around the source): FULL;
A_ONLY_MMAD (B arrives dequantized, the VF is skipped, flags / L1 / AIC as FULL); DEQUANT_ONLY (no MMAD, no
flags: the AIVs write B_dequant to a GM workspace, C stays zero). The VF evaluates the chain once per channel
for the 256 byte codes and gathers from that table (`numerics.weight_dequant.channel_dequant_table`), bit for
bit the per-element chain (tested); the golden shares none of it.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.arch.platform import Pipe
from mc2emu.blaze.gemm.block.block_scheduler_matmul_swat_with_tail_split import (
    BlockSchedulerMatmulSwatParams,
    BlockSchedulerMatmulSwatWithTailSplit,
)
from mc2emu.blaze.gemm.block.weight_quant_matmul_block_mmad import (
    AIC_TO_AIV_FLAG,
    AIV_TO_AIC_FLAG,
    CV_SYNC_MODE,
    WeightQuantMatmulBlockMmad,
)
from mc2emu.blaze.gemm.block.weight_quant_matmul_l1 import (
    WeightQuantL1,
    nz_view,
    store_nz,
    store_zn_rows_major,
    zn_view,
)
from mc2emu.blaze.gemm.common_utils import MNK_M, MNK_N
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, MakeFrameLayout, NDExtLayoutPtn
from mc2emu.blaze.tensor_api.tensor import GmTensor, MakeTensor
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.payload import Payload, contiguous, is_payload
from mc2emu.numerics.weight_dequant import DequantDtype, WeightDtype, channel_dequant_table, dequant_by_table
from mc2emu.runtime.events import Vector
from mc2emu.runtime.hazards import CapacityError, Hazard, Severity

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

BLOCK_CUBE = 16
AIV_SPLIT = 32  # (len / 32) * 16: AIV0's share of the split axis
DOUBLE_BUFFER_NUM = 2


class WeightQuantMatmulMode(enum.Enum):
    """The isolation modes of the seed's precision diagnosis (A-only-MMAD, Dequant-only, Full)."""

    FULL = "full"
    A_ONLY_MMAD = "a_only_mmad"
    DEQUANT_ONLY = "dequant_only"


@dataclass(frozen=True)
class WeightQuantMatmulTiling:
    """`GemmUniversal::MatmulTiling`."""

    baseM: int
    baseN: int
    baseK: int
    dbL0C: int


@dataclass(frozen=True)
class WeightQuantPrologueParams:
    """`WeightQuantMatmulPrologue::Params` (bGmAddr holds B_dequant in A_ONLY_MMAD)."""

    bGmAddr: GmAddr
    scaleGmAddr: GmAddr
    offsetGmAddr: GmAddr | None
    nUbSize: int
    kUbSize: int
    hasOffset: int


@dataclass(frozen=True)
class WeightQuantMatmulParams:
    """`GemmUniversal::Params`, plus what the C++ template arguments fix (types, transB) and the mode."""

    problemShape: tuple[int, int, int]
    aGmAddr: GmAddr
    biasGmAddr: GmAddr | None
    cGmAddr: GmAddr
    kL1: int
    schParams: BlockSchedulerMatmulSwatParams
    mmadTiling: WeightQuantMatmulTiling
    prologueParams: WeightQuantPrologueParams
    AType: np.dtype
    BType: WeightDtype
    CType: np.dtype
    transB: bool
    mode: WeightQuantMatmulMode = WeightQuantMatmulMode.FULL
    bDequantGmAddr: GmAddr | None = None  # DEQUANT_ONLY: where the AIVs write B_dequant (weight layout)


class WeightQuantMatmulPrologue:
    """One AIV's dequant prologue (`WeightQuantMatmulPrologue<BType, DequantBType, TransB>`)."""

    def __init__(self, ctx: CoreContext, l1: WeightQuantL1, BType: WeightDtype, DequantBType: DequantDtype,
                 transB: bool, mode: WeightQuantMatmulMode, gmBDequant: GmTensor | None = None) -> None:
        self.ctx = ctx
        self.l1 = l1.of(ctx.group)
        self.l1Size = l1.l1Size
        self.BType = BType
        self.DequantBType = DequantBType
        self.transB = transB
        self.mode = mode
        self.gmBDequant = gmBDequant
        self.ubLoopCnt_ = 0

    def Init(self, kL1: int, kSize: int, nUbSize: int, kUbSize: int, hasOffset: bool) -> None:
        self.nUbSize_, self.kUbSize_, self.hasOffset_ = int(nUbSize), int(kUbSize), bool(hasOffset)
        self.kL1_, self.kSize_ = int(kL1), int(kSize)
        self.iterKNum_ = CeilDiv(self.kSize_, self.kL1_)
        self.l1HalfSize_ = self.l1Size >> 1
        # UB: per half [bIn | bOut (+1 bank padding) | scale | offset] at halfUBSize * i, halfUBSize =
        # TOTAL_UB_SIZE >> 1: slots in the AIV's one UB byte array, so halves that overrun overlap (UB_OVERLAP)
        # and corrupt each other's bytes as on the device. A_ONLY_MMAD (the emulator's harness) feeds
        # B_dequant through bIn unchanged: no UB slots.
        ctx = self.ctx
        halfUBSize = ctx.device.platform.ub_usable_size >> 1  # AscendC::TOTAL_UB_SIZE >> 1
        wBytes = np.dtype(self.BType.value).itemsize
        dBytes = np.dtype(self.DequantBType.dtype).itemsize
        bInSize = self.kUbSize_ * self.nUbSize_ * wBytes
        bOutSize = (self.kUbSize_ * (self.nUbSize_ + 1) if self.transB
                    else (self.kUbSize_ + 1) * self.nUbSize_) * dBytes
        scaleSize = self.nUbSize_ * dBytes
        self.bInUb_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.bOutUb_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.scaleUb_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.offsetUb_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        if self.mode is not WeightQuantMatmulMode.A_ONLY_MMAD:
            for i in range(DOUBLE_BUFFER_NUM):
                base = halfUBSize * i
                self.bInUb_[i] = ctx.local.allocate_at(f"bIn{i}", base, bInSize, np.uint8)
                self.bOutUb_[i] = ctx.local.allocate_at(f"bOut{i}", base + bInSize, bOutSize, np.uint8)
                self.scaleUb_[i] = ctx.local.allocate_at(f"scale{i}", base + bInSize + bOutSize, scaleSize,
                                                         np.uint8)
                if self.hasOffset_:
                    self.offsetUb_[i] = ctx.local.allocate_at(f"offset{i}", base + bInSize + bOutSize + scaleSize,
                                                              scaleSize, np.uint8)
        self.scale_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.offset_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.vfTable_: list[np.ndarray | None] = [None] * DOUBLE_BUFFER_NUM
        self.vfKey_: list[bytes | None] = [None] * DOUBLE_BUFFER_NUM
        # SetFlag<V_MTE2>(0, 1), SetFlag<MTE3_V>(0, 1): intra-core, program order here

    def _to_ub(self, slot: np.ndarray | None, data: np.ndarray) -> np.ndarray:
        """Copy a tile into its UB slot from the slot's first byte (dense, row by row; a tile longer than the
        slot runs on into the next bytes, as the device's copy does) and return UB's view of it."""
        if slot is None:
            return data
        raw = contiguous(data).reshape(-1).view(np.uint8)
        ub = self.ctx.local.ub
        start = slot.__array_interface__["data"][0] - ub.__array_interface__["data"][0]
        if start + raw.size > ub.size:
            raise CapacityError(f"{self.ctx.label}: a {raw.size} B tile at UB byte {start} runs past the "
                                f"{ub.size} B UB")
        ub[start: start + raw.size] = raw
        return ub[start: start + raw.size].view(data.dtype).reshape(data.shape)

    # ============ Stage 1: GM -> UB ============
    def LoadGM2UB(self, ubBufId: int, iterK: int, kSubOffset: int, nSubOffset: int, kUbLen: int, nUbLen: int,
                  gmB: GmTensor, gmScale: GmTensor, gmOffset: GmTensor | None) -> np.ndarray:
        """B's (kUbLen, nUbLen) block ((nUbLen, kUbLen) in DN order when transB) into bIn; scale / offset into
        this half's slot when iterK is 0 or 1."""
        ctx = self.ctx
        block = gmB.Slice((kSubOffset, nSubOffset), (kUbLen, nUbLen)).load(ctx)
        bIn = self._to_ub(self.bInUb_[ubBufId], block.T if self.transB else block)
        if iterK in (0, 1):
            self.scale_[ubBufId] = self._to_ub(self.scaleUb_[ubBufId],
                                               gmScale.Slice((0, nSubOffset), (1, nUbLen)).load(ctx).reshape(-1))
            if self.hasOffset_ and gmOffset is not None:
                self.offset_[ubBufId] = self._to_ub(
                    self.offsetUb_[ubBufId], gmOffset.Slice((0, nSubOffset), (1, nUbLen)).load(ctx).reshape(-1))
        return bIn

    # ============ Stage 2: VF dequant ============
    def DequantVF(self, ubBufId: int, kUbLen: int, nUbLen: int, bIn: np.ndarray) -> np.ndarray:
        """`asc_vf_call<WeightDequantVf<BType, DequantBType, transB, hasOffset, LOAD_TRAIT_SCALE>>`."""
        ctx = self.ctx
        ctx.checkpoint("vector")
        t0 = time.perf_counter_ns()
        scale = self.scale_[ubBufId]
        offset = self.offset_[ubBufId] if self.hasOffset_ else None
        if is_payload(bIn) or is_payload(scale) or is_payload(offset):   # protocol-only run: no dequant
            shapeOnly: Any = Payload(bIn.shape, self.DequantBType.dtype)
            bOut = self._to_ub(self.bOutUb_[ubBufId], shapeOnly)
            ctx.emit(Vector, stage="dequant", k=kUbLen, n=nUbLen, ubBufId=ubBufId, t0_ns=t0)
            return bOut
        # the VF reads scale / offset from their UB slots: rebuild the table when those bytes changed
        key = scale.tobytes() + (offset.tobytes() if offset is not None else b"")  # type: ignore[union-attr]
        table = self.vfTable_[ubBufId]
        if table is None or self.vfKey_[ubBufId] != key:
            table = self.vfTable_[ubBufId] = channel_dequant_table(self.BType, scale, offset,  # type: ignore[arg-type]
                                                                   trans_b=self.transB)
            self.vfKey_[ubBufId] = key
        bOut = self._to_ub(self.bOutUb_[ubBufId], dequant_by_table(bIn, table, self.DequantBType,
                                                                   trans_b=self.transB))
        ctx.emit(Vector, stage="dequant", k=kUbLen, n=nUbLen, ubBufId=ubBufId, t0_ns=t0)
        return bOut

    # ============ Stage 3: UB -> L1 ============
    def StoreUB2L1(self, ubBufId: int, kUbLen: int, nUbLen: int, curKL1: int, curN: int, subBlockIdx: int,
                   kHalf: int, nHalf: int, bOut: np.ndarray) -> None:
        """copy_ubuf_to_cbuf into `MakeLayoutDequantB{}(curKL1, curN)` at `l1HalfSize_ * ubBufId`, this AIV's
        slice ((0, subBlockIdx * nHalf) when transB, else (subBlockIdx * kHalf, 0))."""
        ctx = self.ctx
        t0 = time.perf_counter_ns()
        offset = self.l1HalfSize_ * ubBufId
        dt = self.DequantBType.dtype
        if self.transB:
            store_zn_rows_major(zn_view(self.l1, offset, dt, curKL1, curN, f"B{ubBufId}"), subBlockIdx * nHalf, bOut)
        else:
            store_nz(nz_view(self.l1, offset, dt, curKL1, curN, f"B{ubBufId}"), subBlockIdx * kHalf, bOut)
        ctx.emit(Vector, stage="ub2l1", k=kUbLen, n=nUbLen, ubBufId=ubBufId, t0_ns=t0)

    def StoreUB2GM(self, kSubOffset: int, nSubOffset: int, kUbLen: int, nUbLen: int, bOut: np.ndarray) -> None:
        """DEQUANT_ONLY: bOut to the B_dequant workspace (MTE3), in the weight's layout."""
        assert self.gmBDequant is not None
        self.gmBDequant.Slice((kSubOffset, nSubOffset), (kUbLen, nUbLen)).store(self.ctx, bOut.T if self.transB
                                                                                   else bOut)

    def __call__(self, gmB: GmTensor, gmScale: GmTensor, gmOffset: GmTensor | None, curN: int, nPos: int) -> None:
        ctx = self.ctx
        transB = self.transB
        subBlockIdx = ctx.GetSubBlockIdx()
        nHalf = (curN // AIV_SPLIT) * BLOCK_CUBE
        nUbLen = (nHalf if subBlockIdx == 0 else curN - nHalf) if transB else curN
        nSubOffset = subBlockIdx * nHalf if transB else 0
        for iterK in range(self.iterKNum_):
            ubBufId = self.ubLoopCnt_ & 1
            kL1Offset = iterK * self.kL1_
            curKL1 = self.kSize_ - kL1Offset if iterK + 1 == self.iterKNum_ else self.kL1_
            kHalf = (curKL1 // AIV_SPLIT) * BLOCK_CUBE
            kUbLen = curKL1 if transB else (kHalf if subBlockIdx == 0 else curKL1 - kHalf)
            kSubOffset = kL1Offset + (0 if transB else subBlockIdx * kHalf)
            # Stage 1: WaitFlag<V_MTE2>(ubBufId); LoadGM2UB; SetFlag<MTE2_V>(ubBufId)
            bIn = self.LoadGM2UB(ubBufId, iterK, kSubOffset, nSubOffset, kUbLen, nUbLen, gmB, gmScale, gmOffset)
            # Stage 2: WaitFlag<MTE2_V>, WaitFlag<MTE3_V>; DequantVF; SetFlag<V_MTE2>, SetFlag<V_MTE3>
            bOut = bIn if self.mode is WeightQuantMatmulMode.A_ONLY_MMAD else self.DequantVF(ubBufId, kUbLen,
                                                                                            nUbLen, bIn)
            # Stage 3: WaitFlag<V_MTE3>(ubBufId)
            if self.mode is WeightQuantMatmulMode.DEQUANT_ONLY:
                self.StoreUB2GM(kSubOffset, nPos + nSubOffset, kUbLen, nUbLen, bOut)
            else:
                ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE3, AIC_TO_AIV_FLAG + ubBufId)
                self.StoreUB2L1(ubBufId, kUbLen, nUbLen, curKL1, curN, subBlockIdx, kHalf, nHalf, bOut)
                # SetFlag<MTE3_V>(ubBufId)
                ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE3, AIV_TO_AIC_FLAG + ubBufId)
            self.ubLoopCnt_ += 1

    def Cleanup(self) -> None:
        """WaitFlag<V_MTE2>(0, 1), <MTE3_V>(0, 1); then the AIC's last "L1 free" Sets of both buffers."""
        if self.mode is WeightQuantMatmulMode.DEQUANT_ONLY:
            return
        self.ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE3, AIC_TO_AIV_FLAG)
        self.ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE3, AIC_TO_AIV_FLAG + 1)


def _report_early_return(ctx: CoreContext, tileIdx: int, curM: int, curN: int, skipped: str) -> None:
    ctx.device.hazards.report(
        Hazard.EMPTY_TAIL_EARLY_RETURN, ctx.label,
        f"tile {tileIdx} has an empty extent (curM {curM}, curN {curN}): the tile loop returns, {skipped}",
        severity=Severity.WARNING, tileIdx=tileIdx, curM=curM, curN=curN)


def weight_quant_matmul_kernel(ctx: CoreContext, params: WeightQuantMatmulParams, l1: WeightQuantL1) -> None:
    """`GemmUniversal<ProblemShape, BlockMmad<WeightQuantMatmulPolicy<..>>, void, BlockScheduler>::operator()`."""
    bs = BlockSchedulerMatmulSwatWithTailSplit(params.problemShape, params.schParams, ctx)
    m, n, k = params.problemShape
    dequant = DequantDtype.parse(params.AType)
    layoutB = DNExtLayoutPtn if params.transB else NDExtLayoutPtn
    kPos = 0
    mode = params.mode

    if ctx.ASCEND_IS_AIC:
        if mode is WeightQuantMatmulMode.DEQUANT_ONLY:
            return  # Dequant-only: zero MMADs, C as the host left it
        blockMmadOp = WeightQuantMatmulBlockMmad(ctx, l1, params.AType, params.CType, params.transB)
        t = params.mmadTiling
        blockMmadOp.Init((m, n, k), (t.baseM, t.baseN, t.baseK), params.kL1, t.dbL0C > 1,
                         params.biasGmAddr is not None)
        gmA = MakeTensor(params.aGmAddr, MakeFrameLayout(NDExtLayoutPtn, m, k), params.AType, name="x")
        gmC = MakeTensor(params.cGmAddr, MakeFrameLayout(NDExtLayoutPtn, m, n), params.CType, name="y")
        gmBiasFull = (MakeTensor(params.biasGmAddr, MakeFrameLayout(NDExtLayoutPtn, 1, n), np.float32, name="bias")
                      if params.biasGmAddr is not None else None)
        curBlockIdx, coreNums = ctx.GetBlockIdx(), ctx.GetBlockNum()
        for tileIdx in range(curBlockIdx, bs.GetTileCount(), coreNums):
            blockCoord = bs.GetBlockCoord(tileIdx)
            blockShape = bs.GetBlockShape(blockCoord)
            mPos, nPos = blockCoord[MNK_M], blockCoord[MNK_N]
            curM, curN = blockShape[MNK_M], blockShape[MNK_N]
            if curM <= 0 or curN <= 0:
                _report_early_return(ctx, tileIdx, curM, curN, "this AIC's later tiles are skipped")
                return
            gmBlockA = gmA.Slice((mPos, kPos), (curM, k))
            gmBlockC = gmC.Slice((mPos, nPos), (curM, curN))
            gmBias = gmBiasFull.Slice((0, nPos), (1, curN)) if gmBiasFull is not None else None
            blockMmadOp(gmBlockA, gmBias, gmBlockC, blockShape)
        blockMmadOp.Destroy()

    if ctx.ASCEND_IS_AIV:
        pp = params.prologueParams
        bType = (np.dtype(dequant.dtype) if mode is WeightQuantMatmulMode.A_ONLY_MMAD
                 else np.dtype(params.BType.value))
        gmBDequant = (MakeTensor(params.bDequantGmAddr, MakeFrameLayout(layoutB, k, n), dequant.dtype,
                                 name="b_dequant") if params.bDequantGmAddr is not None else None)
        prologueOp = WeightQuantMatmulPrologue(ctx, l1, params.BType, dequant, params.transB, mode, gmBDequant)
        prologueOp.Init(params.kL1, k, pp.nUbSize, pp.kUbSize, pp.hasOffset != 0)
        gmB = MakeTensor(pp.bGmAddr, MakeFrameLayout(layoutB, k, n), bType, name="weight")
        gmScale = MakeTensor(pp.scaleGmAddr, MakeFrameLayout(NDExtLayoutPtn, 1, n), dequant.dtype, name="scale")
        gmOffset = (MakeTensor(pp.offsetGmAddr, MakeFrameLayout(NDExtLayoutPtn, 1, n), dequant.dtype, name="offset")
                    if pp.offsetGmAddr is not None else None)
        curBlockIdx, coreNums = ctx.GetBlockIdx() // ctx.GetTaskRation(), ctx.GetBlockNum()
        for tileIdx in range(curBlockIdx, bs.GetTileCount(), coreNums):
            blockCoord = bs.GetBlockCoord(tileIdx)
            blockShape = bs.GetBlockShape(blockCoord)
            nPos, curN = blockCoord[MNK_N], blockShape[MNK_N]
            if curN <= 0:
                _report_early_return(ctx, tileIdx, blockShape[MNK_M], curN,
                                     "skipping Cleanup: the AIC's last Sets of flags 8 and 9 stay pending")
                return
            gmBlockB = gmB.Slice((kPos, nPos), (k, curN))
            gmBlockScale = gmScale.Slice((0, nPos), (1, curN))
            gmBlockOffset = gmOffset.Slice((0, nPos), (1, curN)) if gmOffset is not None else None
            prologueOp(gmBlockB, gmBlockScale, gmBlockOffset, curN, nPos)
        prologueOp.Cleanup()
