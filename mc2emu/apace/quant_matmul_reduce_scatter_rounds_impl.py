"""The design-spec compute-first reduce-scatter kernel (`impl="rounds"`), launched MIX_AIC_1_1.

Emulates the orchestration the cannbot MC2 skill prescribes for scenario `compute-first-reduce-scatter`
(`development.md` §5.1, §5.2, §5.9-§5.11; `design.md` §3.1-§3.6; seed 000 §4.6-4.8, SPEC §7.2); no public
ops-transformer source implements it. AIC: per round t, `QmmMxKernelRsFrag` (flagA at the local fragment), then
flagB. AIV, per round: wait flagA, SyncAll, the last R cores PUT their staging segment into slot rankId of the
target's window and drain, the compute cores reduce round t - 1, SyncAll / CrossDevice / SyncAll, wait flagB;
after the loop the last ReduceSum (§5.2, seed 000 §4.8): rows over the compute cores, j = 0 .. R - 1 ascending,
bf16 -> fp32 adds, fp32 -> bf16 (CAST_RINT), DataCopyPad to y, in batches of redUbM rows x redUbN columns from
the §5.4 UB budget (18 B an element; N segmented past it).
Departures: design.md §3.4 / §5.11 has the comm cores wait flagA and the reduce cores flagB, but a mode-2 Set
only reaches its own AIC's AIVs, so every AIV waits both flags and the SyncAll after makes them launch-wide
(each counter may hold up to T pending Sets: T <= 15). The window follows design.md §3.6: the TeamBarrier in a
window of its own, data slot j = rank j's rows at j * chunkBytes.
Hazard variants (`RsKernelVariant`): TEMPLATED_WAIT (`CrossCoreWaitFlag<0x2, PIPE_MTE2>` does not block the
scalar pipe: the Commit is issued before the wait) reports READ_BEFORE_WAIT and READ_UNWRITTEN;
TAIL_COPY_ROUNDED (DataCopy rounded up to 32 bytes instead of DataCopyPad, seed 000 §4.8 rule 2) reports
TAIL_COPY_OVERRUN (rank, core, byte range, overrun size).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mc2emu.apace.qmm_mx_kernel_rs_frag import FLAG_A, FLAG_B, QmmMxKernelRsFrag, RsFragParams
from mc2emu.arch.platform import Pipe
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.runtime.hazards import Hazard
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.comm.shmem import Shmem
    from mc2emu.comm.team_barrier import TeamBarrier
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import RsCommTiling
    from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData

BF16 = np.dtype(ml_dtypes.bfloat16)
# The UB / MTE block granule: a DataCopy moves whole 32-byte blocks (DataCopyPad moves exact bytes).
UB_BLOCK_BYTES = 32
# development.md §5.4, the 6-slot layout: UB bytes per element of a reduction batch, perElemBytes =
# 2 * sizeof(CType) (srcBuf ping-pong) + 2 * sizeof(float) (srcFP32 ping-pong) + sizeof(float) (acc) +
# sizeof(CType) (dst) = 18 for a bf16 output.
REDUCE_BYTES_PER_ELEM = 2 * 2 + 2 * 4 + 4 + 2
# UB the 6 slots cannot use for elements: the bf16 buffers (two src, one dst) each get one 32-byte block of
# slack (the rounded DataCopy variant), and each of the 6 slots starts 32-byte aligned in the one UB.
REDUCE_BF16_SLOTS = 3
REDUCE_SLOTS = 6
REDUCE_UB_SLACK = (REDUCE_BF16_SLOTS + REDUCE_SLOTS) * UB_BLOCK_BYTES
# redUbN granule: whole 32-byte blocks of bf16.
REDUCE_N_ALIGN = UB_BLOCK_BYTES // 2
# The TeamBarrier job that runs CrossDevice (development.md §5.1a: totalJobs = 1).
BARRIER_JOB = 0


class RsKernelVariant(enum.Enum):
    """The design-spec kernel, or one of its reproduced hazards (module docstring)."""

    SOURCE = "source"
    TEMPLATED_WAIT = "templated_wait"
    TAIL_COPY_ROUNDED = "tail_copy_rounded"


@dataclass(frozen=True)
class RsRoundsArgs:
    """What the host hands the kernel on this rank."""

    rankId: int
    rankSize: int
    comm: RsCommTiling
    roundTilings: tuple[QuantMatmulTilingData, ...]
    k: int
    n: int
    scaleKLen: int
    aGM: GmAddr
    aScaleGM: GmAddr
    bGM: GmAddr
    bScaleGM: GmAddr
    stagingGm: GmAddr
    yGm: GmAddr
    winData: GmAddr
    shmem: Shmem
    teamBarrier: TeamBarrier
    variant: RsKernelVariant = RsKernelVariant.SOURCE
    biasGM: GmAddr | None = None    # float32 (1, N); None: no bias (isBias 0)

    @property
    def cBytesPerM(self) -> int:
        return self.n * BF16.itemsize

    @property
    def chunkBytes(self) -> int:
        return self.comm.mSeg * self.cBytesPerM


def SplitToCore(curSendCnt: int, curUseCoreNum: int, coreId: int) -> tuple[int, int, int]:
    """(startId, endId, sendNum): contiguous blocks, the remainder to the first cores."""
    sendNum = curSendCnt // curUseCoreNum
    remainderNum = curSendCnt % curUseCoreNum
    startId = sendNum * coreId
    if coreId < remainderNum:
        sendNum += 1
        startId += coreId
    else:
        startId += remainderNum
    return startId, startId + sendNum, sendNum


def ReduceUbTiling(rowNum: int, n: int, availableUB: int) -> tuple[int, int]:
    """(redUbM, redUbN) of development.md §5.4: maxElements = availableUB / perElemBytes; redUbN = N when a row
    fits, else the largest 16-element multiple that does (the N segmentation of fusion.md §6.2.6 rule 4; the
    spec names no other column limit); redUbM = min(rows, maxElements / redUbN). The spec's redUbM <= 32 when N
    is segmented (a strided DataCopyPad silently drops rows past it: fusion.md §6.2.6 rule 3) holds: redUbM is
    1 then."""
    maxElements = availableUB // REDUCE_BYTES_PER_ELEM
    redUbN = n if n <= maxElements else maxElements // REDUCE_N_ALIGN * REDUCE_N_ALIGN
    redUbM = max(1, min(rowNum, maxElements // redUbN))
    return redUbM, redUbN


class QuantMatmulReduceScatterRoundsImpl:
    """One core's instance."""

    def __init__(self, ctx: CoreContext, args: RsRoundsArgs, BlockMmadFragC: Any, scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        self.mmKernel_: QmmMxKernelRsFrag | None = None
        if ctx.ASCEND_IS_AIC:
            self.mmKernel_ = QmmMxKernelRsFrag(ctx, BlockMmadFragC, scheduler_cls)

    def Process(self) -> None:
        if self.ctx.ASCEND_IS_AIC:
            self.RunMatmul()
        if self.ctx.ASCEND_IS_AIV:
            self.RunAllToAllAndReduceSum()

    # -- AIC -------------------------------------------------------------------------------------------------
    def RunMatmul(self) -> None:
        a = self.args
        ct = a.comm
        assert self.mmKernel_ is not None
        for t in range(ct.commTurn):
            curTileM = ct.tile_m(t)
            tileMOffset = ct.tile_m_offset(t)
            params = RsFragParams(a.roundTilings[t], a.rankSize, a.rankId, ct.mSeg, curTileM, a.k, a.n, a.scaleKLen,
                                  a.aGM, a.aScaleGM, a.bGM, a.bScaleGM, a.stagingGm, a.k, a.scaleKLen,
                                  a.cBytesPerM, tileMOffset, a.biasGM)
            self.mmKernel_(params)
            self.ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, FLAG_B)

    # -- AIV -------------------------------------------------------------------------------------------------
    def _WaitFlag(self, flagId: int) -> None:
        """The untemplated `CrossCoreWaitFlag(flagId)` (design.md §3.4: pairs with the AIC's templated
        `<0x2, PIPE_FIX>` Set and blocks the scalar pipe as well): a blocking mode-2 wait here."""
        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE3, flagId)

    def RunAllToAllAndReduceSum(self) -> None:
        ctx, a = self.ctx, self.args
        ct = a.comm
        blockIdx, blockNum = ctx.GetBlockIdx(), ctx.GetBlockNum()
        jobIndex = blockNum - 1 - blockIdx
        isCommBlock = jobIndex < a.rankSize
        rsCoreNum = blockNum - a.rankSize
        isComputeBlock = blockIdx < rsCoreNum
        templated = a.variant is RsKernelVariant.TEMPLATED_WAIT
        for t in range(ct.commTurn):
            if isCommBlock and templated:
                self.Commit(t, jobIndex, early=True)
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, FLAG_A)   # the templated wait: MTE2 only
            else:
                self._WaitFlag(FLAG_A)
            ctx.SyncAll(True)
            if isCommBlock and not templated:
                self.Commit(t, jobIndex)
            if isComputeBlock and t > 0:
                self.ReduceSum(t - 1, blockIdx, rsCoreNum)
            ctx.SyncAll(True)
            if jobIndex == BARRIER_JOB:
                a.teamBarrier.CrossDevice(ctx, BARRIER_JOB)
            ctx.SyncAll(True)
            self._WaitFlag(FLAG_B)
        ctx.SyncAll(True)
        if isComputeBlock:
            self.ReduceSum(ct.commTurn - 1, blockIdx, rsCoreNum)

    def Commit(self, t: int, target: int, *, early: bool = False) -> None:
        """The AllToAll Commit of round t to `target` (the core's job) + `Wait<BARRIER_NONE>` (drain only)."""
        ctx, a = self.ctx, self.args
        ct = a.comm
        if target == a.rankId:
            return                      # the own segment is reduced straight from staging
        rows = ct.tile_m(t)
        rowOff = ct.tile_m_offset(t)
        src = a.stagingGm + (target * ct.mSeg + rowOff) * a.cBytesPerM
        nbytes = rows * a.cBytesPerM
        if early:
            lo = src.offset
            ctx.device.hazards.report(
                Hazard.READ_BEFORE_WAIT, ctx.label,
                f"round {t}: Commit to rank {target} reads staging bytes [{lo:#x}, {lo + nbytes:#x}) before "
                f"CrossCoreWaitFlag({FLAG_A}) takes effect (the templated <0x2, PIPE_MTE2> wait does not block "
                f"the scalar pipe that issues the Commit): the PUT may read rows the AIC has not written",
                round=t, target=target, range=(lo, lo + nbytes), flag=FLAG_A, buffer="staging")
        dst = a.winData + a.rankId * a.chunkBytes + rowOff * a.cBytesPerM
        a.shmem.put_nbi(ctx, dst, src, nbytes, target)
        a.shmem.quiet(ctx)

    def ReduceSum(self, t: int, blockIdx: int, rsCoreNum: int) -> None:
        """One compute core's rows of round t (module docstring), in batches of redUbM rows x redUbN columns
        (development.md §5.2 / §5.4: N segments when a row does not fit the UB budget)."""
        ctx, a = self.ctx, self.args
        ct = a.comm
        curTileM, rowOff = ct.tile_m(t), ct.tile_m_offset(t)
        startRowId, _, rowNum = SplitToCore(curTileM, rsCoreNum, blockIdx)
        if rowNum == 0:
            return
        n = a.n
        availableUB = ctx.device.platform.ub_usable_size - REDUCE_UB_SLACK
        # slots sized once for the largest share of any round (the head's), so every round reuses them
        redUbM, redUbN = ReduceUbTiling(CeilDiv(ct.headMSize, rsCoreNum), n, availableUB)
        # the 6 UB slots (development.md §5.4): srcBuf[2], srcFP32[2] ping-pong (slot j % 2), acc, dst
        padElems = UB_BLOCK_BYTES // BF16.itemsize
        elems = redUbM * redUbN
        srcBuf = [ctx.local.allocate(Position.VECCALC, f"rs_src{i}", elems + padElems, BF16) for i in range(2)]
        srcFP32 = [ctx.local.allocate(Position.VECCALC, f"rs_src_fp32{i}", elems, np.float32) for i in range(2)]
        accFP32 = ctx.local.allocate(Position.VECCALC, "rs_acc", elems, np.float32)
        dstBuf = ctx.local.allocate(Position.VECCALC, "rs_dst", elems + padElems, BF16)
        for b0 in range(0, rowNum, redUbM):
            rows = min(redUbM, rowNum - b0)
            segRow = rowOff + startRowId + b0        # row inside every rank segment
            for n0 in range(0, n, redUbN):
                cols = min(redUbN, n - n0)
                cnt = rows * cols
                strides = None if cols == n else (a.cBytesPerM, BF16.itemsize)
                accFP32[:cnt] = 0.0
                for j in range(a.rankSize):
                    slot = j % 2
                    if j == a.rankId:
                        src = a.stagingGm + (a.rankId * ct.mSeg + segRow) * a.cBytesPerM + n0 * BF16.itemsize
                    else:
                        src = a.winData + j * a.chunkBytes + segRow * a.cBytesPerM + n0 * BF16.itemsize
                    ctx.gm_read(src, BF16, (rows, cols), strides,
                                out=srcBuf[slot][:cnt].reshape(rows, cols))              # DataCopyPad, exact bytes
                    srcFP32[slot][:cnt] = srcBuf[slot][:cnt]                             # Cast CAST_NONE
                    np.add(accFP32[:cnt], srcFP32[slot][:cnt], out=accFP32[:cnt])        # Add (fp32, RNE)
                dstBuf[:cnt] = accFP32[:cnt]                                             # Cast CAST_RINT
                dst = a.yGm + segRow * a.cBytesPerM + n0 * BF16.itemsize
                if cols == n:
                    self.CopyOut(dst, dstBuf, cnt, t)
                elif a.variant is not RsKernelVariant.TAIL_COPY_ROUNDED:     # a strided 2D DataCopyPad
                    ctx.gm_write(dst, dstBuf[:cnt].reshape(rows, cols), (a.cBytesPerM, BF16.itemsize))
                else:                                # the rounded DataCopy: each row of the block on its own
                    for r in range(rows):
                        self.CopyOut(dst + r * a.cBytesPerM, dstBuf[r * cols:], cols, t)

    def CopyOut(self, dst: GmAddr, dstBuf: np.ndarray, cnt: int, t: int) -> None:
        """DataCopyPad UB -> y of exactly cnt elements; TAIL_COPY_ROUNDED: a DataCopy of whole 32-byte blocks."""
        ctx = self.ctx
        nbytes = cnt * BF16.itemsize
        if self.args.variant is not RsKernelVariant.TAIL_COPY_ROUNDED or nbytes % UB_BLOCK_BYTES == 0:
            ctx.gm_write(dst, dstBuf[:cnt])
            return
        rounded = CeilDiv(nbytes, UB_BLOCK_BYTES) * UB_BLOCK_BYTES
        end = dst.alloc.nbytes
        wrote = min(rounded, end - dst.offset)
        ctx.device.hazards.report(
            Hazard.TAIL_COPY_OVERRUN, ctx.label,
            f"round {t}: DataCopy of {nbytes} B rounded up to {rounded} B writes y bytes "
            f"[{dst.offset + nbytes:#x}, {dst.offset + rounded:#x}) past this core's rows (the next core's rows"
            f"{' and past the end of y' if rounded > wrote else ''}); DataCopyPad copies the exact bytes",
            round=t, range=(dst.offset, dst.offset + rounded), overrun=rounded - nbytes, buffer="y")
        ctx.gm_write(dst, dstBuf[: wrote // BF16.itemsize])


def quant_matmul_reduce_scatter_rounds(ctx: CoreContext, args: RsRoundsArgs, BlockMmadFragC: Any,
                                       scheduler_cls: Any) -> int:
    """The kernel entry (KERNEL_TYPE_MIX_AIC_1_1, development.md §2)."""
    impl = QuantMatmulReduceScatterRoundsImpl(ctx, args, BlockMmadFragC, scheduler_cls)
    impl.Process()
    k = impl.mmKernel_
    if k is None:
        return 0
    if k.mmadFrag is not None:
        k.mmadFrag.Destroy()
    return k.tiles_done
