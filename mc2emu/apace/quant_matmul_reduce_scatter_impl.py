"""QuantMatmulReduceScatterImpl — the shipped compute-first kernel (`impl="per_block"`), launched MIX_AIC_1_2.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/fusions/quant_matmul_reduce_scatter/
quant_matmul_reduce_scatter_impl.h` (hicann/ops-transformer b993c14f78) with the kernel it wraps
(`kernel_qbmm_mx_mix.py`) and the launcher `QuantMatmulReduceScatterUbmemKernel`. After the kernel has
scattered every C block to its owner's window (row rankId * M/R + g % (M/R), self included), the AIVs
reduce: SyncAll, status handshake (coreVid < R writes 1.0f into slot rankId of rank coreVid, then polls its
own slot coreVid until in [0.5, 1.5] and writes 0), SyncAll, then each AIV sums its rows of M/R over the
R window rows in fp32 (`sum = sum * 0.0` first) and writes y as bf16 (CastRoundMode::RN).

UB (one byte array per AIV) holds the fp32 sum at offset 0, where the epilogue's last sub-tile and the
status words also were. `sum * 0` clears finite garbage but keeps NaN / Inf: with the `UB_STALE_NAN`
variant the UB starts as a previous kernel may leave it (all 0xFF), and every element not overwritten stays
NaN through the first row's sum: MUL_ZERO_KEEPS_NAN (rank, core, row, count), visible in y.

The status words are 64-bit signal slots here (`Shmem.signal_op` SET of the bits of 1.0f, then
`signal_wait_until` >= bits(0.5f): for non-negative floats the bit order is the float order), so the
handshake is also a happens-before edge for the checker; the reset to 0 is a plain store, as the source's Copy.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.block_epilogue_all_to_all import BF16, UB_ALIGN_BYTES, BlockEpilogueAlltoAll, ub_bytes, ub_view
from mc2emu.apace.comm_resource_builder import (
    GetBaseWindAddrByRankId,
    GetBaseWindStateAddrByRankId,
    GetRankDim,
    GetRankId,
    HcclOpParam,
)
from mc2emu.apace.kernel_qbmm_mx_mix import GemmUniversalQbmmMxMix, MixKernelVariant, MixParams
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import SplitToCore
from mc2emu.comm.shmem import Cmp, SignalOp
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.payload import nonfinite_count
from mc2emu.runtime.hazards import Hazard, KernelError

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

# The bits of float 0 of a status slot read as a 64-bit signal word (little-endian: the low half).
F32_BITS_MASK = 0xFFFF_FFFF
# `FLOAT_UB_ALIGN_NUM`: floats per 32-byte status word.
FLOAT_UB_ALIGN_NUM = 8
FLOAT_BYTES = 4
# `STATUS_FLAG_VAL` (the poll's start value) and `STATUS_FLAG_THREDSHOLD`: the poll accepts 1.0 +- 0.5.
STATUS_FLAG_VAL = -1.0
STATUS_FLAG_THREDSHOLD = 0.5
STATUS_ONE = 1.0
# What a previous kernel may leave in UB (the UB_STALE_NAN variant): all ones, NaN as fp32 and bf16.
STALE_UB_BYTE = 0xFF


def _f32_bits(x: float) -> int:
    return int(np.array([x], dtype=np.float32).view(np.uint32)[0])


class PerBlockVariant(enum.Enum):
    """The shipped kernel, one of its reproduced hazards, or the fix of its leftover flag 9."""

    SOURCE = "source"
    UB_STALE_NAN = "ub_stale_nan"
    FINAL_WAIT = "final_wait"


@dataclass(frozen=True)
class PerBlockArgs:
    """`QuantMatmulReduceScatterImpl::Params` (matmulKernelParams, yGM, hcclContext) and the variant."""

    matmulKernelParams: MixParams
    yGM: GmAddr
    hcclContext: HcclOpParam
    variant: PerBlockVariant = PerBlockVariant.SOURCE


class QuantMatmulReduceScatterImpl:
    def __init__(self, ctx: CoreContext, args: PerBlockArgs, BlockMmad: Any, scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        mix = MixKernelVariant.FINAL_WAIT if args.variant is PerBlockVariant.FINAL_WAIT else MixKernelVariant.SOURCE
        self.kernel = GemmUniversalQbmmMxMix(ctx, BlockMmad, BlockEpilogueAlltoAll(ctx), scheduler_cls, mix)
        self.rows_reduced = 0

    def __call__(self) -> None:
        ctx = self.ctx
        if ctx.ASCEND_IS_AIV and self.args.variant is PerBlockVariant.UB_STALE_NAN:
            ub_bytes(ctx)[:] = STALE_UB_BYTE
        self.kernel(self.args.matmulKernelParams)
        if ctx.ASCEND_IS_AIV:
            self.ReduceAddInit()
            self.ReduceAddProcess()

    def ReduceAddInit(self) -> None:
        a = self.args
        self.winContext_ = a.hcclContext
        self.rankId_ = GetRankId(self.winContext_)
        self.coreVid_ = self.ctx.GetBlockIdx()
        self.tpWorldSize_ = GetRankDim(self.winContext_)
        self.m_, self.n_ = a.matmulKernelParams.problemShape[0], a.matmulKernelParams.problemShape[1]
        self.yGM_ = a.yGM

    def ReduceAddProcess(self) -> None:
        self.ctx.SyncAll(True)
        self.WriteStatusToWin()
        self.ReadStatus()
        self.ctx.SyncAll(True)
        self.ReadRemoteDataAdd()

    def WriteStatusToWin(self) -> None:
        if self.coreVid_ >= self.tpWorldSize_:
            return
        ctx = self.ctx
        curOffset = self.rankId_ * FLOAT_UB_ALIGN_NUM * FLOAT_BYTES
        ubStatus = ub_view(ub_bytes(ctx), 0, np.float32, (FLOAT_UB_ALIGN_NUM,))
        ubStatus[0] = STATUS_ONE
        state = GetBaseWindStateAddrByRankId(self.winContext_, self.coreVid_) + curOffset
        self.winContext_.shmem.signal_op(ctx, state.addr, _f32_bits(float(ubStatus[0])), SignalOp.SET, state.rank)

    def ReadStatus(self) -> None:
        if self.coreVid_ >= self.tpWorldSize_:
            return
        ctx = self.ctx
        ub = ub_bytes(ctx)
        ubStatusOffset = UB_ALIGN_BYTES * 1
        ubResetOffset = ubStatusOffset + UB_ALIGN_BYTES
        gmStatusoffset = self.coreVid_ * FLOAT_UB_ALIGN_NUM * FLOAT_BYTES
        state = GetBaseWindStateAddrByRankId(self.winContext_, self.rankId_) + gmStatusoffset
        minTarget, maxTarget = 1.0 - STATUS_FLAG_THREDSHOLD, 1.0 + STATUS_FLAG_THREDSHOLD
        # The source polls float 0 of the 32-byte slot (its reset Copy writes the whole UB block, floats 1-7
        # hold what UB held): only those 32 bits are compared.
        got = self.winContext_.shmem.signal_wait_until(ctx, state.addr, Cmp.GE, _f32_bits(minTarget),
                                                       from_pe=self.coreVid_, mask=F32_BITS_MASK)
        ubStatus = ub_view(ub, ubStatusOffset, np.float32, (FLOAT_UB_ALIGN_NUM,))
        ubStatus[:2] = np.array([got], dtype=np.uint64).view(np.float32)
        flag = float(ubStatus[0])
        if not minTarget <= flag <= maxTarget:
            raise KernelError(f"{ctx.label}: status word {flag} outside [{minTarget}, {maxTarget}]: the source "
                              f"would poll forever")
        ubReset = ub_view(ub, ubResetOffset, np.float32, (FLOAT_UB_ALIGN_NUM,))
        ubReset[0] = 0.0
        ctx.gm_write(state.addr, ubReset.copy())

    def ReadRemoteDataAdd(self) -> None:
        ctx = self.ctx
        R, n_ = self.tpWorldSize_, self.n_
        tpRankM = self.m_ if R == 0 else self.m_ // R
        startRowId, _, rowNum = SplitToCore(tpRankM, ctx.GetBlockNum() * 2, self.coreVid_)
        gmC: GmAddr = GetBaseWindAddrByRankId(self.winContext_, self.rankId_).addr
        rowPaddedBytes = CeilDiv(n_ * BF16.itemsize, UB_ALIGN_BYTES) * UB_ALIGN_BYTES
        paddingN = rowPaddedBytes // BF16.itemsize
        localbf16Offset = paddingN * FLOAT_BYTES
        localfp32Offset = localbf16Offset + paddingN * BF16.itemsize
        sumbf16Offset = localfp32Offset + paddingN * FLOAT_BYTES
        ub = ub_bytes(ctx)
        sumfp32 = ub_view(ub, 0, np.float32, (paddingN,))
        ubTensor = ub_view(ub, localbf16Offset, BF16, (paddingN,))
        fp32Ub = ub_view(ub, localfp32Offset, np.float32, (paddingN,))
        sumbf16 = ub_view(ub, sumbf16Offset, BF16, (paddingN,))
        for tileIdx in range(rowNum):
            tokenIndex = startRowId + tileIdx
            bad = nonfinite_count(sumfp32[:n_])   # None in a protocol-only run (no bytes to check)
            if bad:
                ctx.device.hazards.report(
                    Hazard.MUL_ZERO_KEEPS_NAN, ctx.label,
                    f"row {tokenIndex}: the fp32 sum is cleared by MulScalar(sum, 0.0f) but {bad} of its {n_} "
                    f"elements hold NaN / Inf from UB garbage (offset 0), and NaN * 0 = NaN: they survive into y",
                    row=tokenIndex, count=bad)
            with np.errstate(invalid="ignore"):
                sumfp32[:] = sumfp32 * np.float32(0.0)                 # Transform<MulScalar>(sum, sum, 0.0f)
            for tpIndex in range(R):
                mPos = tokenIndex + tpIndex * tpRankM
                ubTensor[:n_] = ctx.gm_read(gmC + mPos * n_ * BF16.itemsize, BF16, (n_,))
                with np.errstate(invalid="ignore"):
                    fp32Ub[:] = ubTensor.astype(np.float32)             # Transform<Cast> (whole padded row)
                    sumfp32[:] = sumfp32 + fp32Ub                        # Transform<Add>
            with np.errstate(invalid="ignore", over="ignore"):
                sumbf16[:] = sumfp32.astype(BF16)                        # Cast<CastTraitF322Bf16> (RN)
            ctx.gm_write(self.yGM_ + tokenIndex * n_ * BF16.itemsize, sumbf16[:n_].copy())
            self.rows_reduced += 1


def quant_matmul_reduce_scatter_per_block(ctx: CoreContext, args: PerBlockArgs, BlockMmad: Any,
                                          scheduler_cls: Any) -> int:
    """`QuantMatmulReduceScatterUbmemKernel` (KERNEL_TYPE_MIX_AIC_1_2): `Impl impl; impl(params);`."""
    impl = QuantMatmulReduceScatterImpl(ctx, args, BlockMmad, scheduler_cls)
    impl()
    if impl.kernel.mmadOp_ is not None:
        impl.kernel.mmadOp_.Destroy()
    return impl.kernel.blocks if ctx.ASCEND_IS_AIC else 0
