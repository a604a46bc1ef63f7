"""AllToAllMxQuantMatmulUdmaImpl — the UDMA (one-sided put) orchestration of all_to_all_quant_matmul.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/
all_to_all_mx_quant_matmul_udma_impl.h` (seed 000 §4.5, SPEC §6), launched `MIX_AIC_1_1`. AIV: per round t
< commTurn, AIV block b < R puts the scale rows then the data rows of tile t destined to peer b (the own
rank's block puts nothing), drains (quiet), TeamBarrier CrossDevice; every AIV then `SyncAll<true>()` and
`CrossCoreSetFlag<2, PIPE_MTE3>(t)`. AIC: LOCAL (localMatmul == 1, splitKNum 1), then the matmul
(DEFERRED_SYNC if localMatmul == 2 else REMOTE; splitKNum R - 1 when localMatmul == 1, else R).
At Init the scale all-to-all runs its TeamBarrier (BARRIER_BOTH), which also keeps a fast rank from writing a
window a slow rank still reads; the data all-to-all runs none.

Window layout (symmetric on every rank): A (R * oriM, Ka) from byte 0, row block s written by rank s (the
own block is never written: the own rows are read from local A); scaleA (R * oriM, scaleKLen) from byte
R * oriM * Ka * sizeof(A) (FP4: half a byte per element).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mc2emu.apace.comm_policy import UdmaCommWaitPolicy
from mc2emu.apace.quant_matmul_mx_kernel import LocalParams, MatmulMode, Params, QuantMatmulMxKernel
from mc2emu.arch.platform import Pipe
from mc2emu.comm.team_barrier import BarrierMode
from mc2emu.runtime.faults import FaultHook

if TYPE_CHECKING:

    from mc2emu.apace.comm_policy import WaitOrder
    from mc2emu.comm.shmem import Shmem
    from mc2emu.comm.team_barrier import TeamBarrier
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.tiling.all_to_all_quant_matmul_tiling import CommTilingData


@dataclass(frozen=True)
class UdmaArgs:
    """What the host hands the kernel: tiling, addresses, and the comm objects of this rank."""

    params: Params                 # REMOTE-mode params; SetupParams derives the others
    commTiling: CommTilingData
    rowBytes: int                  # bytes of one A row (Ka elements)
    scaleRowBytes: int             # bytes of one scaleA row (scaleKLen)
    winA: GmAddr                   # window base of the A region
    winScaleA: GmAddr              # window base of the scaleA region
    shmem: Shmem
    teamBarrier: TeamBarrier
    waitOrder: WaitOrder


class AllToAllMxQuantMatmulUdmaImpl:
    """One core's instance of the UDMA impl."""

    def __init__(self, ctx: CoreContext, args: UdmaArgs, BlockMmad: Any,
                 scheduler_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        self.tilingData = args.commTiling
        lp = args.params.localParams
        self.rankId, self.rankSize = lp.rankId, lp.rankSize
        self.localMatmul = lp.localMatmul
        self.quantMatmulKernelImpl_: QuantMatmulMxKernel | None = None
        if ctx.ASCEND_IS_AIC:
            self.quantMatmulKernelImpl_ = QuantMatmulMxKernel(
                ctx, BlockMmad, scheduler_cls, UdmaCommWaitPolicy(ctx), wait_order=args.waitOrder)

    # -- AIC side ------------------------------------------------------------------------------------------
    def SetupParams(self, mode: MatmulMode) -> Params:
        base = self.args.params
        if mode == MatmulMode.LOCAL:
            splitKNum = 1
        elif self.localMatmul == 1:
            splitKNum = self.rankSize - 1
        else:
            splitKNum = self.rankSize
        faults = self.ctx.device.faults
        if faults is not None and faults.fires(FaultHook.SETUP_PARAMS, self.ctx.rank, self.ctx.label):
            splitKNum += 1   # fault injection: a splitKNum the mmad call count does not match
        lp: LocalParams = replace(base.localParams, matmulMode=mode, splitKNum=splitKNum)
        return replace(base, localParams=lp)

    def MatmulProcess(self, mode: MatmulMode) -> None:
        assert self.quantMatmulKernelImpl_ is not None
        self.quantMatmulKernelImpl_(self.SetupParams(mode))

    def RunLocalMatmul(self) -> None:
        self.MatmulProcess(MatmulMode.LOCAL)

    def RunMatmul(self) -> None:
        self.MatmulProcess(MatmulMode.DEFERRED_SYNC if self.localMatmul == 2 else MatmulMode.REMOTE)

    # -- AIV side ------------------------------------------------------------------------------------------
    def RunAllToAll(self) -> None:
        ctx = self.ctx
        a = self.args
        t_data = self.tilingData
        blockIdx = ctx.GetBlockIdx()
        rankId, rankSize = self.rankId, self.rankSize
        oriM = a.params.localParams.originalM
        local = a.params.localParams
        serving = blockIdx < rankSize
        if serving:
            # Init of the scale all-to-all (BARRIER_BOTH) and of the data all-to-all (BARRIER_NONE).
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_BOTH)
            a.teamBarrier.Init(ctx, blockIdx, BarrierMode.BARRIER_NONE)
        dataChunkBytes = oriM * a.rowBytes
        scaleChunkBytes = oriM * a.scaleRowBytes
        dataTileMax = t_data.splitAxisTileSize * a.rowBytes
        scaleTileMax = t_data.splitAxisTileSize * a.scaleRowBytes
        for t in range(t_data.commTurn):
            if serving:
                target = blockIdx
                if target != rankId:
                    rows = t_data.splitAxisTileSize if t < t_data.splitAxisTileCnt else t_data.splitAxisTailSize
                    tileRow = t * t_data.splitAxisTileSize
                    # scale first, then data (the source commits the scale task before the data task)
                    src = local.localScaleAGmAddr + target * scaleChunkBytes + t * scaleTileMax
                    dst = a.winScaleA + rankId * scaleChunkBytes + tileRow * a.scaleRowBytes
                    a.shmem.put_nbi(ctx, dst, src, rows * a.scaleRowBytes, target)
                    src = local.localAGmAddr + target * dataChunkBytes + t * dataTileMax
                    dst = a.winA + rankId * dataChunkBytes + tileRow * a.rowBytes
                    a.shmem.put_nbi(ctx, dst, src, rows * a.rowBytes, target)
                a.shmem.quiet(ctx)
                a.teamBarrier.CrossDevice(ctx, blockIdx)
            ctx.SyncAll(True)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t)

    # -- entry ---------------------------------------------------------------------------------------------
    def Run(self) -> None:
        if self.ctx.ASCEND_IS_AIV:
            self.RunAllToAll()
        if self.ctx.ASCEND_IS_AIC:
            if self.localMatmul == 1:
                self.RunLocalMatmul()
            self.RunMatmul()


def all_to_all_mx_quant_matmul_udma(ctx: CoreContext, args: UdmaArgs, BlockMmad: Any,
                                    scheduler_cls: Any) -> int:
    """The kernel entry (`__global__ __aicore__ void all_to_all_quant_matmul(...)`) for a MIX_AIC_1_1 launch."""
    impl = AllToAllMxQuantMatmulUdmaImpl(ctx, args, BlockMmad, scheduler_cls)
    impl.Run()
    k = impl.quantMatmulKernelImpl_
    if k is None:
        return 0
    if k.mmadOp_ is not None:
        k.mmadOp_.Destroy()     # ~BlockMmad(): reports a tile left without its fixpipe
    return k.tiles_done
