"""The design-spec compute-first reduce-scatter kernel (`impl="rounds"`), launched MIX_AIC_1_1.

Emulates the orchestration the cannbot MC2 skill prescribes for scenario `compute-first-reduce-scatter`
(`development.md` §5.1 AIV strict separation, §5.2 batched reduction, §5.9 unified for-t loop, §5.10 AIC
per-round loop, §5.11 localLast two flags; `design.md` §3.1-§3.6; seed 000 §4.6-4.8, SPEC §7.2). Read through
the public code index (development.md: file id 60509613752; design.md: 67045480779 and 60671537757); the
index does not name the repository or commit. No public ops-transformer source implements this kernel.

    AIC (RunMatmul, §5.10):
      for t in [0, T):
        mmKernel_(params of round t)              # QmmMxKernelRsFrag: Sets flagA at the local fragment
        CrossCoreSetFlag<0x2, PIPE_FIX>(flagB)    # the whole round is in staging
    AIV (RunAllToAllAndReduceSum, §5.1 / §5.9), jobIndex = GetBlockNum() - 1 - GetBlockIdx():
      isCommBlock = jobIndex < R (the last R cores), isComputeBlock = blockIdx < usedCoreNum - R
      for t in [0, T):
        CrossCoreWaitFlag(flagA)                  # untemplated: blocks the scalar pipe too
        SyncAll                                   # every AIC has finished round t's remote fragments
        comm core (target = jobIndex): Commit     # PUT staging rows of segment `target`, round t, into slot
                                                  #   rankId of target's window; none for the own segment
                                       Wait<BARRIER_NONE>   # drain only
        compute core, t > 0: ReduceSum(t - 1)     # overlaps the AIC's round t (and t + 1, ...)
        SyncAll; CrossDevice (jobIndex 0, TeamBarrier totalJobs = 1); SyncAll
        CrossCoreWaitFlag(flagB)                  # round t complete in this core's AIC
      SyncAll; compute core: ReduceSum(T - 1)

ReduceSum(t) (§5.2, seed 000 §4.8): the compute cores split round t's curTileM rows (SplitToCore: contiguous
row blocks, the remainder to the first cores); for each batch of rows: for j = 0 .. R - 1 ascending,
DataCopyPad GM -> UB of exactly rows * N * 2 bytes (the own segment from staging, the others from window slot
j), Cast bf16 -> fp32 (CAST_NONE), Add into the fp32 accumulator; Cast fp32 -> bf16 (CAST_RINT); DataCopyPad
UB -> y of exactly rows * N * 2 bytes.

Departures, written down for the note:
- design.md §3.4 / §5.11 item 4 has the comm cores wait flagA and the reduce cores wait flagB. A mode-2 Set
  only reaches the AIV(s) of its own AIC, so a reduce core's flagB says nothing about the other AICs; here
  every AIV waits both flags of every round and the SyncAll that follows makes them launch-wide. Each counter
  may still hold up to T pending Sets (the AIC never waits), the reason for T <= 15.
- The Win layout is the "官网布局" of design.md §3.6: the TeamBarrier lives in a window of its own, so the
  data slots start at offset 0 (slot j = rank j's rows, j * chunkBytes, chunkBytes = mSeg * N * 2).

Hazard variants (`RsKernelVariant`), reproduced and reported:
- TEMPLATED_WAIT: the comm cores wait `CrossCoreWaitFlag<0x2, PIPE_MTE2>(flagA)` (design.md §3.4: the
  templated form does not block the scalar pipe, so the Commit runs before the flag takes effect and the
  PUT reads staging the AIC has not finished). Emulated by issuing the Commit before the wait; the kernel
  reports READ_BEFORE_WAIT (rank, core, round, staging byte range, flag) whatever the timing, and the bytes
  read are whatever staging held (poison when never written, READ_UNWRITTEN).
- TAIL_COPY_ROUNDED: the reduction's copy-out is a DataCopy rounded up to 32 bytes instead of DataCopyPad
  (seed 000 §4.8 rule 2): when a core's rows * N * 2 is not a multiple of 32 the copy overruns into the next
  core's first row (or past the end of y); reported as TAIL_COPY_OVERRUN with rank, core, byte range and the
  overrun size.
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
# development.md §5.4: UB bytes per element of a reduction batch (bf16 src, fp32 src, fp32 acc, bf16 dst).
REDUCE_BYTES_PER_ELEM = 2 + 4 + 4 + 2
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
        """One compute core's rows of round t (module docstring)."""
        ctx, a = self.ctx, self.args
        ct = a.comm
        curTileM, rowOff = ct.tile_m(t), ct.tile_m_offset(t)
        startRowId, _, rowNum = SplitToCore(curTileM, rsCoreNum, blockIdx)
        if rowNum == 0:
            return
        n = a.n
        ubBytes = ctx.device.platform.ub_usable_size
        redUbM = max(1, min(rowNum, ubBytes // (n * REDUCE_BYTES_PER_ELEM + UB_BLOCK_BYTES)))
        # UB regions (development.md §5.4, one src buffer: copies here are synchronous)
        padElems = UB_BLOCK_BYTES // BF16.itemsize
        srcBuf = ctx.local.allocate(Position.VECCALC, "rs_src", redUbM * n + padElems, BF16)
        srcFP32 = ctx.local.allocate(Position.VECCALC, "rs_src_fp32", redUbM * n, np.float32)
        accFP32 = ctx.local.allocate(Position.VECCALC, "rs_acc", redUbM * n, np.float32)
        dstBuf = ctx.local.allocate(Position.VECCALC, "rs_dst", redUbM * n + padElems, BF16)
        for b0 in range(0, rowNum, redUbM):
            rows = min(redUbM, rowNum - b0)
            segRow = rowOff + startRowId + b0        # row inside every rank segment
            cnt = rows * n
            accFP32[:cnt] = 0.0
            for j in range(a.rankSize):
                if j == a.rankId:
                    src = a.stagingGm + (a.rankId * ct.mSeg + segRow) * a.cBytesPerM
                else:
                    src = a.winData + j * a.chunkBytes + segRow * a.cBytesPerM
                ctx.gm_read(src, BF16, (cnt,), out=srcBuf[:cnt])                   # DataCopyPad, exact bytes
                srcFP32[:cnt] = srcBuf[:cnt]                                       # Cast CAST_NONE
                np.add(accFP32[:cnt], srcFP32[:cnt], out=accFP32[:cnt])            # Add (fp32, RNE)
            dstBuf[:cnt] = accFP32[:cnt]                                           # Cast CAST_RINT
            self.CopyOut(a.yGm + segRow * a.cBytesPerM, dstBuf, cnt, t)

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
