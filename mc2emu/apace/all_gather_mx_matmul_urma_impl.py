"""AllGatherMxMatmulUrmaImpl — the slot-ring ("window reuse") orchestration of all_gather_quant_matmul,
launched MIX_AIC_1_1 (`protocol="slot_ring"`).

Emulates hicann/ops-transformer `mc2/common/op_kernel/apace/kernel/fusions/all_gather_quant_matmul/
all_gather_mx_matmul_urma_impl.h` at commit 67a83540d75e, with `basic/buffer/buffer_channel.h`
(`apace.basic.buffer_channel`) and the PUT component of that commit (`all_gather_udma_put.h`, `DoCommit` with a
buffer offset). AIC side: `AllGatherQbmmMxKernel<..., UrmaBufferSync, enableBufferReuse = true>`; `MatmulProcess` passes
`biasGM` and `isBias = (tilingData_->isBias != 0)` (here in the host's `Params`: the op's `bias`).
bufferCount_ = slotNum if 0 < slotNum < commTurn else commTurn; scale slots are never reused (commTurn).
Before reusing a data slot the AIV waits its release flag, `SyncAll<true>`, then CrossDevice.

Window (every rank): bufferCount_ data slots, each one round of the R - 1 remote tiles packed by `remoteIdx`
(source rank with this rank skipped), then the scale region at scaleWinOffset_ (commTurn slots, same packing).

Flag ids: flagId = slot % 11 + 1; slot 10 gives 11, an id hard SyncAll reserves (SPEC §2): with 11 or more
slots the runtime reports FLAG_ID_RESERVED at launch end, and AIV block 0 reports the slot and round.

Variant `AgKernelVariant.SKIP_RELEASE_WAIT` (a reproduced hazard): the AIV skips the wait before reusing a
slot, so peers' puts of round t may overwrite slot t % slotNum while an AIC still reads round t - slotNum:
READ_OVERWRITTEN (rank, core, range, slot, flag) on every run; the AIC's unconsumed Releases are UNCONSUMED_FLAG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.apace.all_gather_mx_matmul_udma_impl import report_unserved_peers
from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant, AllGatherQbmmMxKernel, Params
from mc2emu.apace.basic.buffer_channel import BufferChannel
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch.platform import Pipe
from mc2emu.comm.team_barrier import BarrierMode
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:
    from mc2emu.comm.shmem import Shmem
    from mc2emu.comm.team_barrier import TeamBarrier
    from mc2emu.runtime.core import CoreContext


class UrmaBufferSync:
    """`UrmaBufferSync`: the AIC acquires a round's slot (data ready) and releases it (consumed)."""

    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx

    def Acquire(self, flagId: int) -> None:
        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, flagId)

    def Release(self, flagId: int) -> None:
        self.ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, flagId)


def normalized_slot_num(slotNum: int, commTurn: int) -> int:
    """`bufferCount_` of InitBaseParams: 0 or >= commTurn means commTurn (no reuse)."""
    return slotNum if 0 < slotNum < commTurn else commTurn


@dataclass(frozen=True)
class AgUrmaArgs:
    """What the host hands the kernel on this rank."""

    params: Params
    shmem: Shmem
    teamBarrier: TeamBarrier
    slotNum: int                 # `tilingData.commTile.slotNum` as given (0: no reuse)
    variant: AgKernelVariant = AgKernelVariant.SOURCE


def slot_sizes(fp: Any, dataBytesPerMRow: int, scaleBytesPerMRow: int) -> tuple[int, int]:
    """(data, scale) slot bytes: R - 1 remote tiles of maxTileM rows."""
    maxTileM = max(fp.tileM, fp.tailM)
    return (fp.rankSize - 1) * maxTileM * dataBytesPerMRow, (fp.rankSize - 1) * maxTileM * scaleBytesPerMRow


class AllGatherMxMatmulUrmaImpl:
    """One core's instance of the impl."""

    def __init__(self, ctx: CoreContext, args: AgUrmaArgs, BlockMmadFragC: Any, scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        p = args.params
        fp = p.fragParams
        self.rankId_, self.rankSize_ = fp.rankId, fp.rankSize
        self.commTurn_ = fp.commTurn
        self.bufferCount_ = normalized_slot_num(args.slotNum, fp.commTurn)
        self.tileMaxDataBytes_ = max(fp.tileM, fp.tailM) * p.dataBytesPerMRow
        self.tileMaxScaleBytes_ = max(fp.tileM, fp.tailM) * p.scaleBytesPerMRow
        dataSlotBytes, scaleSlotBytes = slot_sizes(fp, p.dataBytesPerMRow, p.scaleBytesPerMRow)
        self.dataChannel_ = BufferChannel()
        self.scaleChannel_ = BufferChannel()
        self.dataChannel_.Init(dataSlotBytes, self.bufferCount_)
        self.scaleChannel_.Init(scaleSlotBytes, self.commTurn_)
        self.scaleWinOffset_ = self.dataChannel_.GetCapacity()
        self._reservedReported = False
        self.quantMatmulKernelImpl_: AllGatherQbmmMxKernel | None = None
        if ctx.ASCEND_IS_AIC:
            self.quantMatmulKernelImpl_ = AllGatherQbmmMxKernel(
                ctx, BlockMmadFragC, scheduler_cls, wait_order=WaitOrder.IN_ORDER, variant=args.variant,
                enableBufferReuse=True, bufferSyncMgr=UrmaBufferSync(ctx))
            self.quantMatmulKernelImpl_.SetChannels(self.dataChannel_, self.scaleChannel_)

    def Process(self) -> None:
        if self.ctx.ASCEND_IS_AIV:
            self.AllGatherProcess()
        if self.ctx.ASCEND_IS_AIC:
            self.MatmulProcess()

    def MatmulProcess(self) -> None:
        assert self.quantMatmulKernelImpl_ is not None
        self.quantMatmulKernelImpl_(self.args.params)

    def _commit(self, rnd: int, target: int, scaleSlotOffset: int, dataSlotOffset: int) -> None:
        """allGatherScale_.Commit(scaleSlot.offset), allGatherData_.Commit(dataSlot.offset): `DoCommit` to the
        target (none to this rank), at the packed remote index of this rank on the target."""
        ctx, a = self.ctx, self.args
        p, fp = a.params, a.params.fragParams
        if target == self.rankId_:
            return
        rows = fp.tileM if rnd < fp.tileCnt else fp.tailM
        tileRow = rnd * fp.tileM
        remoteIdx = self.rankId_ - 1 if self.rankId_ > target else self.rankId_
        scaleDst = p.winScaleBase + scaleSlotOffset + remoteIdx * self.tileMaxScaleBytes_
        dataDst = p.winDataBase + dataSlotOffset + remoteIdx * self.tileMaxDataBytes_
        a.shmem.put_nbi(ctx, scaleDst, p.aScaleGM + tileRow * p.scaleBytesPerMRow, rows * p.scaleBytesPerMRow,
                        target)
        a.shmem.put_nbi(ctx, dataDst, p.aGM + tileRow * p.dataBytesPerMRow, rows * p.dataBytesPerMRow, target)

    def AllGatherProcess(self) -> None:
        ctx = self.ctx
        a = self.args
        blockIdx = ctx.GetBlockIdx()
        serving = blockIdx < self.rankSize_
        if blockIdx == 0:
            report_unserved_peers(ctx, self.rankId_, self.rankSize_)
        if serving:
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_NONE)    # allGatherData_.Init<BARRIER_NONE>
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_BOTH)    # allGatherScale_.Init (default)
        skipRelease = a.variant is AgKernelVariant.SKIP_RELEASE_WAIT
        ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
        for rnd in range(self.commTurn_):
            dataSlot = self.dataChannel_.GetNextSlot()
            scaleSlot = self.scaleChannel_.GetNextSlot()
            flagId = dataSlot.slotIdx + 1
            if blockIdx == 0:
                self.report_reserved_slot_flag(rnd, flagId)
            if rnd >= self.dataChannel_.GetSlotNum():
                if not skipRelease:
                    ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE3, flagId)
                ctx.SyncAll(True)
                if serving:
                    a.teamBarrier.CrossDevice(ctx, blockIdx)
            if serving:
                self._commit(rnd, blockIdx, scaleSlot.offset, dataSlot.offset)
                if blockIdx != self.rankId_:
                    a.shmem.quiet(ctx)              # Wait<BARRIER_DEVICE>: Drain(channel of target)
                a.teamBarrier.CrossDevice(ctx, blockIdx)
            ctx.SyncAll(True)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, flagId)

    def report_reserved_slot_flag(self, rnd: int, flagId: int) -> None:
        """The slot's flag id among the ids hard SyncAll reserves (SPEC §2): once per launch and rank, with
        the slot that produced it (the runtime's launch-end FLAG_ID_RESERVED names the ids only)."""
        ctx = self.ctx
        reserved = ctx.device.platform.reserved_flag_ids
        if flagId not in reserved or self._reservedReported:
            return
        self._reservedReported = True
        slotRaw = rnd % self.bufferCount_
        ctx.device.hazards.report(
            Hazard.FLAG_ID_RESERVED, ctx.label,
            f"slot {slotRaw} of {self.bufferCount_} (round {rnd}) signals with flag id {flagId} = slot % "
            f"FLAG_ID_MODULO 11 + 1: one of the ids hard SyncAll reserves ({min(reserved)}-{max(reserved)}); "
            f"BufferChannel keeps slotIdx <= 10 but the +1 for HEAD's flag 0 reaches 11 from 11 slots on",
            severity=Severity.WARNING, flag=flagId, slot=slotRaw, round=rnd, slot_num=self.bufferCount_)


def all_gather_quant_matmul_urma(ctx: CoreContext, args: AgUrmaArgs, BlockMmadFragC: Any,
                                 scheduler_cls: Any) -> int:
    """The kernel entry (`AllGatherQuantMatmulKernel`, KERNEL_TYPE_MIX_AIC_1_1): Init, Process."""
    impl = AllGatherMxMatmulUrmaImpl(ctx, args, BlockMmadFragC, scheduler_cls)
    impl.Process()
    k = impl.quantMatmulKernelImpl_
    if k is None:
        return 0
    if k.mmadFrag is not None:
        k.mmadFrag.Destroy()
    return k.tiles_done
