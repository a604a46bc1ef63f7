"""AllGatherMxMatmulUdmaImpl — the UDMA orchestration of all_gather_quant_matmul, launched MIX_AIC_1_1.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/fusions/all_gather_quant_matmul/
all_gather_mx_matmul_udma_impl.h` (commit 5778144076) and the AllGather PUT component it uses
(`core/aiv_comm/collective_comm_base.h`, `all_gather/all_gather_udma_put.h`); seed 000 §7.1, SPEC §7.1.
AIV: pre-set flag 0 (the own rows), then per round AIV block b < R puts the scale and data rows to peer b,
drains that channel (TeamBarrier CrossDevice), `SyncAll<true>` and sets flag round + 1. AIC: the kernel
(`apace.all_gather_qbmm_mx_kernel`).

Window layout (every rank): the data region (rank-major, rank r's m rows at r * m * k bytes, the own rows
never written), then the scale region (rank-major, m * scaleKLen bytes per rank). Init runs the scale
component's barriers (BARRIER_BOTH) and none for the data component (BARRIER_NONE); as in the all-to-all
emulation they run on the AIVs (blocks < R). `Finalize` and the closing `dcci` have no effect here.

Every round lands in its own window rows: this commit has no window reuse. The slot ring came with the URMA
impl (commit 67a83540d75e), emulated in `apace.all_gather_mx_matmul_urma_impl` (`protocol="slot_ring"`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant, AllGatherQbmmMxKernel, Params
from mc2emu.arch.platform import Pipe
from mc2emu.comm.team_barrier import BarrierMode
from mc2emu.runtime.hazards import Hazard
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_unserved_peers

if TYPE_CHECKING:
    from mc2emu.apace.comm_policy import WaitOrder
    from mc2emu.comm.shmem import Shmem
    from mc2emu.comm.team_barrier import TeamBarrier
    from mc2emu.runtime.core import CoreContext


@dataclass(frozen=True)
class AgUdmaArgs:
    """What the host hands the kernel on this rank."""

    params: Params
    shmem: Shmem
    teamBarrier: TeamBarrier
    waitOrder: WaitOrder
    variant: AgKernelVariant = AgKernelVariant.SOURCE


class AllGatherMxMatmulUdmaImpl:
    """One core's instance of the impl."""

    def __init__(self, ctx: CoreContext, args: AgUdmaArgs, BlockMmadFragC: Any, scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        fp = args.params.fragParams
        self.rankId_, self.rankSize_ = fp.rankId, fp.rankSize
        self.commTurn_ = fp.commTurn
        self.quantMatmulKernelImpl_: AllGatherQbmmMxKernel | None = None
        if ctx.ASCEND_IS_AIC:
            self.quantMatmulKernelImpl_ = AllGatherQbmmMxKernel(ctx, BlockMmadFragC, scheduler_cls,
                                                                wait_order=args.waitOrder, variant=args.variant)

    def Process(self) -> None:
        if self.ctx.ASCEND_IS_AIV:
            self.AllGatherProcess()
        if self.ctx.ASCEND_IS_AIC:
            self.MatmulProcess()

    def MatmulProcess(self) -> None:
        assert self.quantMatmulKernelImpl_ is not None
        self.quantMatmulKernelImpl_(self.args.params)

    def AllGatherProcess(self) -> None:
        ctx = self.ctx
        a = self.args
        p, fp = a.params, a.params.fragParams
        blockIdx = ctx.GetBlockIdx()
        serving = blockIdx < self.rankSize_
        if blockIdx == 0:
            report_unserved_peers(ctx, self.rankId_, self.rankSize_)
        if serving:
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_NONE)    # allGatherData_.Init<BARRIER_NONE>
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_BOTH)    # allGatherScale_.Init (default)
        dataChunkBytes = fp.mPerRank * p.dataBytesPerMRow
        scaleChunkBytes = fp.mPerRank * p.scaleBytesPerMRow
        ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
        for rnd in range(self.commTurn_):
            if serving:
                target = blockIdx
                rows = fp.tileM if rnd < fp.tileCnt else fp.tailM
                tileRow = rnd * fp.tileM
                if target != self.rankId_:
                    # allGatherScale_.Commit(), then allGatherData_.Commit()
                    scaleOff, dataOff = tileRow * p.scaleBytesPerMRow, tileRow * p.dataBytesPerMRow
                    a.shmem.put_nbi(ctx, p.winScaleBase + self.rankId_ * scaleChunkBytes + scaleOff,
                                    p.aScaleGM + scaleOff, rows * p.scaleBytesPerMRow, target)
                    a.shmem.put_nbi(ctx, p.winDataBase + self.rankId_ * dataChunkBytes + dataOff,
                                    p.aGM + dataOff, rows * p.dataBytesPerMRow, target)
                    a.shmem.quiet(ctx)              # Wait<BARRIER_DEVICE>: Drain(channel of target)
                a.teamBarrier.CrossDevice(ctx, blockIdx)
            ctx.SyncAll(True)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, rnd + 1)


def report_unserved_peers(ctx: CoreContext, rankId: int, rankSize: int) -> None:
    """AIV block b serves peer b only (`GetBlockIdx() < rankSize_` guards the Commit and the CrossDevice), and
    nothing checks the launch's block count against R (the ST launcher, main.cpp:239, launches
    `mmTile.usedCoreNum`): with fewer blocks the peers past them never receive this rank's rows. The launch runs
    on as the device does (their waits hang or their C rows stay unwritten); this names the rule once per rank."""
    unserved = ag_unserved_peers(rankSize, ctx.GetBlockNum())
    if not unserved:
        return
    ctx.device.hazards.report(
        Hazard.PEER_NOT_SERVED, ctx.label,
        f"block_dim {ctx.GetBlockNum()} < R {rankSize}: AIV block b puts rank {rankId}'s rows to peer b only "
        f"(`GetBlockIdx() < rankSize_`), so peer(s) {unserved} never receive them: on the device their C rows "
        f"of rank {rankId} are never written or their waits hang (the ST launcher launches usedCoreNum blocks, "
        f"unchecked against R; launch at least R blocks)",
        peers=unserved, block_dim=ctx.GetBlockNum(), rank_size=rankSize)


def all_gather_quant_matmul_udma(ctx: CoreContext, args: AgUdmaArgs, BlockMmadFragC: Any,
                                 scheduler_cls: Any) -> int:
    """The kernel entry (`AllGatherQuantMatmulKernel`, KERNEL_TYPE_MIX_AIC_1_1): Init, Process."""
    impl = AllGatherMxMatmulUdmaImpl(ctx, args, BlockMmadFragC, scheduler_cls)
    impl.Process()
    k = impl.quantMatmulKernelImpl_
    if k is None:
        return 0
    if k.mmadFrag is not None:
        k.mmadFrag.Destroy()
    return k.tiles_done
