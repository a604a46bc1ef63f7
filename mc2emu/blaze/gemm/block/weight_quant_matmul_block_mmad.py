"""The AIC side of the V+C weight-quant matmul: a BlockMmad that reads the dequantized B from L1.

Emulates the Blaze skill asset `block/weight_quant_matmul_block_mmad.h` (hicann cannbot-skills,
`ascendc-blaze-best-practice` assets, seed 001; the stored copy carries no commit), `BlockMmad<
WeightQuantMatmulPolicy<NO_FULL_LOAD_MODE>, ...>`, with its flag ids from `epilogue/cv_sync_constants.h`
(hicann/cannbot-skills @ a22f1523). The constructor pre-sets "L1 free" for both buffers and both AIVs; per
K chunk (l1BufId = a running counter & 1) the AIC loads A (and the bias at chunk 0), waits both AIVs'
"B filled", runs the baseK MMADs and sets "L1 free"; the fixpipe rounds L0C to CType (RNE). The destructor
has no cross-core wait (every AIV_SYNC_AIC_FLAG is consumed in the loop).

Flag ids (mode 4, MIX_AIC_1_2; AIC ids 0-15 pair with AIV0, 16-31 with AIV1): AIC_SYNC_AIV_FLAG = 8 (AIC ->
AIV "L1 free"), AIV_SYNC_AIC_FLAG = 5 (AIV -> AIC "L1 filled"), FLAG_ID_MAX = 16 (the AIV1 offset).

L1 (byte offsets, shared with the AIV prologue, `weight_quant_matmul_l1.py`): half i at i * L1 / 2 holds
[B_i | A_i] (baseN * kL1 * 2 and baseM * kL1 * 2 bytes), the bias at L1 - Align64(baseN * 4). B_dequant is
NZ when !transB, ZN when transB; A NZ. The intra-core HardEvent pairs order pipes of one core; a core is one
thread here, so they are noted where they stand, not emulated. MMADs accumulate in FP32 per baseK step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.arch.platform import Pipe
from mc2emu.blaze.gemm.block.l0c_buffer import L0CBuffer
from mc2emu.blaze.gemm.block.weight_quant_matmul_l1 import load_nz, load_zn, nz_view, store_nz, zn_view
from mc2emu.blaze.gemm.common_utils import (
    DOUBLE_BUFFER_COUNT,
    FINAL_ACCUMULATION,
    IDX_M_TILEIDX,
    IDX_N_TILEIDX,
    NON_FINAL_ACCUMULATION,
)
from mc2emu.numerics.int_math import Align, CeilDiv
from mc2emu.numerics.mx_matmul import fixpipe_cast
from mc2emu.runtime.events import Fixpipe, Mmad

if TYPE_CHECKING:
    from mc2emu.blaze.gemm.block.weight_quant_matmul_l1 import WeightQuantL1
    from mc2emu.blaze.tensor_api.tensor import GmTensor
    from mc2emu.runtime.core import CoreContext

# epilogue/cv_sync_constants.h (reference values the asset uses)
CV_SYNC_MODE = 4  # CvSync::MODE: one AIC with one AIV (MIX 1:2)
AIC_TO_AIV_FLAG = 8  # CvSync::AIC_TO_AIV_FLAG: "this L1 buffer is free again"
AIV_TO_AIC_FLAG = 5  # CvSync::AIV_TO_AIC_FLAG: "this L1 buffer holds the dequantized B"
FLAG_ID_MAX = 16  # AIC-side mode-4 ids 16-31 address AIV1
L1_BUFFER_NUM = 2
L1_BUFFER_MASK = L1_BUFFER_NUM - 1
BIAS_L1_ALIGN = 64  # CeilAlign(baseN * sizeof(BiasType), 64UL)
BIAS_ELEM_BYTES = 4  # BiasType is float whatever the operator's bias type


def widen(x: np.ndarray) -> np.ndarray:
    """float32 value of a bf16 / half operand as the cube reads it (exact)."""
    if x.dtype.itemsize == 2 and x.dtype != np.float16:  # bfloat16: its bits are the float32's upper half
        return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32)


class WeightQuantMatmulBlockMmad:
    """One AIC's BlockMmad (constructed at the top of the AIC branch, destroyed at its end)."""

    def __init__(self, ctx: CoreContext, l1: WeightQuantL1, AType: np.dtype, CType: np.dtype, transB: bool) -> None:
        self.ctx = ctx
        self.AType = np.dtype(AType)
        self.DequantBType = self.AType
        self.CType = np.dtype(CType)
        self.transB = transB
        self.l1 = l1.of(ctx.group)
        self.l1Size = l1.l1Size
        self.abL1LoopCnt_ = 0
        self.l0PingPong_ = 0
        self.l0cPingPong_ = 0
        # SetFlag<MTE1_MTE2>(0, 1), SetFlag<M_MTE1>(0, 1), SetFlag<FIX_M>(0, 1): intra-core, program order here
        ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG)
        ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG + 1)
        ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG + FLAG_ID_MAX)
        ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG + FLAG_ID_MAX + 1)
        self.l0c = L0CBuffer(ctx)

    def Init(self, problemShape: tuple[int, int, int], l0TileShape: tuple[int, int, int], kL1: int,
             enableL0cPingPong: bool, hasBias: bool = False) -> None:
        self.m_, self.n_, self.k_ = (int(v) for v in problemShape)
        self.kL1_ = int(kL1)
        self.baseM_, self.baseN_, self.baseK_ = (int(v) for v in l0TileShape)
        self.enableL0cPingPong_ = enableL0cPingPong
        self.hasBias_ = hasBias
        self.aL1OneBuffer_ = self.baseM_ * self.kL1_ * self.AType.itemsize
        self.bL1OneBuffer_ = self.baseN_ * self.kL1_ * self.DequantBType.itemsize
        l1HalfSize = self.l1Size >> 1
        self.l1BufferBOffset_ = [(i & 1) * l1HalfSize for i in range(L1_BUFFER_NUM)]
        self.l1BufferAOffset_ = [o + self.bL1OneBuffer_ for o in self.l1BufferBOffset_]
        self.biasL1Offset_ = (self.l1Size - Align(self.baseN_ * BIAS_ELEM_BYTES, BIAS_L1_ALIGN)) if hasBias else 0
        self.kL1Iter_ = CeilDiv(self.k_, self.kL1_)

    def B_l1_view(self, l1BufId: int, curKL1: int, curN: int) -> np.ndarray:
        """`MakeLayoutBL1{}(curKL1, curN)` at `l1BufferBOffset_[l1BufId]` (what the AIVs write, too)."""
        view = zn_view if self.transB else nz_view
        return view(self.l1, self.l1BufferBOffset_[l1BufId], self.DequantBType, curKL1, curN, f"B{l1BufId}")

    def __call__(self, gmA: GmTensor, gmBias: GmTensor | None, gmC: GmTensor, singleShape: tuple[int, ...]) -> None:
        ctx = self.ctx
        curM, curN = int(singleShape[IDX_M_TILEIDX]), int(singleShape[IDX_N_TILEIDX])
        l0cBufId = self.l0cPingPong_ & 1
        l0cOffset = l0cBufId * (self.l0c.total_bytes // DOUBLE_BUFFER_COUNT)
        tensorL0C = self.l0c.tile(l0cOffset, curM, curN)
        bt = None
        # WaitFlag<FIX_M>(l0cBufId)
        for iter0 in range(self.kL1Iter_):
            l1BufId = self.abL1LoopCnt_ & L1_BUFFER_MASK
            kL1Offset = iter0 * self.kL1_
            curKL1 = self.k_ - kL1Offset if iter0 + 1 == self.kL1Iter_ else self.kL1_
            # WaitFlag<MTE1_MTE2>(l1BufId)
            tensorAL1 = nz_view(self.l1, self.l1BufferAOffset_[l1BufId], self.AType, curM, curKL1, f"A{l1BufId}")
            store_nz(tensorAL1, 0, gmA.Slice((0, kL1Offset), (curM, curKL1)).load(ctx))
            if self.hasBias_ and iter0 == 0 and gmBias is not None:
                biasL1 = self.l1[self.biasL1Offset_: self.biasL1Offset_ + curN * BIAS_ELEM_BYTES]
                biasL1[:] = gmBias.load(ctx).reshape(-1).astype(np.float32).view(np.uint8)
            ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIV_TO_AIC_FLAG + l1BufId)
            ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIV_TO_AIC_FLAG + l1BufId + FLAG_ID_MAX)
            # SetFlag / WaitFlag<MTE2_MTE1>(l1BufId)
            aF32 = widen(load_nz(tensorAL1, curM, curKL1))
            bL1 = self.B_l1_view(l1BufId, curKL1, curN)
            bF32 = widen(load_zn(bL1, curKL1, curN) if self.transB else load_nz(bL1, curKL1, curN))
            kL0Iter = CeilDiv(curKL1, self.baseK_)
            for iter1 in range(kL0Iter):
                kL0Offset = iter1 * self.baseK_
                curKL0 = curKL1 - kL0Offset if kL0Offset + self.baseK_ > curKL1 else self.baseK_
                l0BufId = self.l0PingPong_ & 1
                # WaitFlag<M_MTE1>(l0BufId); L1 -> L0A / L0B
                if self.hasBias_ and iter0 == 0 and iter1 == 0:  # L1 -> BT
                    bt = self.l1[self.biasL1Offset_: self.biasL1Offset_ + curN * BIAS_ELEM_BYTES].view(np.float32)
                # SetFlag / WaitFlag<MTE1_M>(l0BufId)
                final = iter0 + 1 == self.kL1Iter_ and iter1 + 1 == kL0Iter
                init = iter0 == 0 and iter1 == 0
                self.Mmad(tensorL0C, aF32[:, kL0Offset: kL0Offset + curKL0], bF32[kL0Offset: kL0Offset + curKL0],
                          init, bt if (self.hasBias_ and init) else None, final, gmC, l0BufId)
                # SetFlag<M_MTE1>(l0BufId)
                self.l0PingPong_ += 1
            # SetFlag<MTE1_MTE2>(l1BufId)
            ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG + l1BufId)
            ctx.CrossCoreSetFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIC_TO_AIV_FLAG + l1BufId + FLAG_ID_MAX)
            self.abL1LoopCnt_ += 1
        # SetFlag / WaitFlag<M_FIX>(l0cBufId)
        self.CopyL0C2GM(gmC, tensorL0C, curM, curN, l0cOffset)
        # SetFlag<FIX_M>(l0cBufId)
        if self.enableL0cPingPong_:
            self.l0cPingPong_ += 1

    def Mmad(self, tensorL0C: np.ndarray, a: np.ndarray, b: np.ndarray, init: bool, bias: np.ndarray | None,
             final: bool, gmC: GmTensor, l0BufId: int) -> None:
        """One `Te::Mmad` (MmadParams curM, curN, curKL0, unitFlag, cmatrixInitVal): L0C (+)= A @ B, the
        bias-table row added on the initializing MMAD when hasBias."""
        ctx = self.ctx
        ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        with np.errstate(over="ignore", invalid="ignore"):  # FP32 overflow to +-Inf / NaN, as the cube
            if init:
                np.matmul(a, b, out=tensorL0C)
                if bias is not None:
                    tensorL0C += bias[None, :]
            else:
                tensorL0C += a @ b
        ctx.emit(Mmad, m=tensorL0C.shape[0], n=tensorL0C.shape[1], k=a.shape[1], tile=gmC.origin,
                 l0=l0BufId, aType=self.AType.name, unitFlag=FINAL_ACCUMULATION if final else NON_FINAL_ACCUMULATION,
                 cmatrixInitVal=init, bias=bias is not None, t0_ns=t0)

    def CopyL0C2GM(self, gmC: GmTensor, tensorL0C: np.ndarray, curM: int, curN: int, l0cOffset: int) -> None:
        """`copyL0C2GM.Call(gmC, tensorL0C, FixpipeParams{FINAL_ACCUMULATION})`: RNE to CType."""
        ctx = self.ctx
        ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        gmC.store(ctx, fixpipe_cast(tensorL0C, self.CType))
        ctx.emit(Fixpipe, tensor=gmC.name or gmC.addr.alloc.name, origin=gmC.origin, m=curM, n=curN,
                 l0cOffset=l0cOffset, dtype=str(self.CType), atomic=False, unitFlag=FINAL_ACCUMULATION, t0_ns=t0)

    def Destroy(self) -> Any:
        """`~BlockMmad()`: WaitFlag<MTE1_MTE2>(0, 1), <M_MTE1>(0, 1), <FIX_M>(0, 1); no cross-core wait."""
        return None
