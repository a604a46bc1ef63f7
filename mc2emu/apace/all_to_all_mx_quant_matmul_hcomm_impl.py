"""AllToAllMxQuantMatmulHcommImpl — the HCCL (hcomm) orchestration of all_to_all_quant_matmul, launched AIC only.

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/
all_to_all_mx_quant_matmul_hcomm_impl.h` (libochao-huawei/ops-transformer bb298b1c5; seed 000 §3, §4.5,
SPEC §6). The HCCL server moves the data; the AIC is its client: Init commits a scale handle (1 repeat) and
data head / tail handles (tileCnt / tailCnt repeats), Run does LOCAL (if localMatmul != 0) then REMOTE,
`SyncAll()` (a no-op on an AIC) and Finalize. Workspace (the HCCL window): the received scaleA at offset 0
(size aligned up to 512 B), then the received A rows (the `all2all_out` role).

Consequences reproduced (SPEC §6 "Consequences"):
- localMatmul == 2: the LOCAL pass takes the REMOTE branch with splitKNum 1 and drains every tile; the
  REMOTE pass then Waits beyond Commit: AICPU returns -1 at once, CCU hangs (caught by the deadline).
- Bias is loaded at index 0 of every pass: added twice with localMatmul == 1 (BIAS_DOUBLE_ADD).
- `SyncAll()` does not order block 0's Finalize after the other AICs' Waits: under AICPU a Wait after
  Finalize<true> hangs; the deadline report names the waiting AICs and the finalized session.
- mask-ordered waits through repeat handles may read tiles before they arrive: the happens-before check
  reports each such read (READ_BEFORE_WAIT, with the byte range, the task and the missing Wait).

The source has no PipeBarrier between the LOCAL and REMOTE passes (none under `mc2/common/op_kernel/apace`);
the passes run in program order and write C through the same fixpipe, so no barrier is modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.comm_policy import HcommCommState, HcommCommWaitPolicy
from mc2emu.apace.quant_matmul_mx_kernel import BiasMode, MatmulMode, Params, QuantMatmulMxKernel
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.runtime.faults import FaultHook
from mc2emu.runtime.hazards import Hazard, Severity

if TYPE_CHECKING:

    from mc2emu.apace.comm_policy import WaitOrder
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.tiling.all_to_all_quant_matmul_tiling import CommTilingData

# The received scale part of the workspace is aligned up to this before the data part.
WORKSPACE_ALIGN = 512


@dataclass(frozen=True)
class HcommArgs:
    params: Params                # REMOTE-mode params (aGmAddr / scaleAGmAddr point into the workspace)
    commTiling: CommTilingData
    rowBytes: int
    scaleRowBytes: int
    x1GmAddr: GmAddr              # local A (the AlltoAll send buffer)
    workspace: GmAddr             # window: scaleA recv at 0, A recv after the aligned scale part
    dataRecv: GmAddr
    hcclServer: Any
    aDtype: Any
    waitOrder: WaitOrder


class AllToAllMxQuantMatmulHcommImpl:
    """One AIC's instance of the hcomm impl."""

    def __init__(self, ctx: CoreContext, args: HcommArgs, BlockMmad: Any,
                 scheduler_cls: Any, hccl_cls: Any) -> None:
        self.ctx = ctx
        self.args = args
        lp = args.params.localParams
        self.rankDim_ = lp.rankSize
        self.localMatmul = lp.localMatmul
        self.hccl_ = hccl_cls(ctx, args.hcclServer)
        policy = HcommCommWaitPolicy(ctx)
        self.quantMatmulKernelImpl_ = QuantMatmulMxKernel(ctx, BlockMmad, scheduler_cls, policy,
                                                          wait_order=args.waitOrder)

    def Init(self) -> None:
        a = self.args
        ct = a.commTiling
        oriM = a.params.localParams.originalM
        # HCCL counts are in units of aDtype: FP8 elements, or bytes of packed FP4 (two elements per byte).
        ka = a.rowBytes // np.dtype(a.aDtype).itemsize
        hccl = self.hccl_
        hccl.Init()
        scaleHandle = hccl.AlltoAll(a.params.localParams.localScaleAGmAddr, a.workspace, oriM * a.scaleRowBytes,
                                    np.uint8, 0, 1, commit=True)
        headHandle = hccl.AlltoAll(a.x1GmAddr, a.dataRecv, ct.splitAxisTileSize * ka, a.aDtype, oriM * ka,
                                   ct.splitAxisTileCnt, commit=True) if ct.splitAxisTileCnt else None
        tailHandle = None
        if ct.splitAxisTailCnt:
            off = ct.splitAxisTileCnt * ct.splitAxisTileSize * a.rowBytes
            tailHandle = hccl.AlltoAll(a.x1GmAddr + off, a.dataRecv + off, ct.splitAxisTailSize * ka, a.aDtype,
                                       oriM * ka, ct.splitAxisTailCnt, commit=True)
        policy = self.quantMatmulKernelImpl_.GetCommPolicy()
        policy.state_ = HcommCommState(hccl, scaleHandle, headHandle, tailHandle, ct.splitAxisTileCnt)

    def SetupParams(self, mode: MatmulMode) -> Params:
        base = self.args.params
        if mode == MatmulMode.LOCAL:
            splitKNum = 1
        elif self.localMatmul != 0:
            splitKNum = self.rankDim_ - 1
        else:
            splitKNum = self.rankDim_
        faults = self.ctx.device.faults
        if faults is not None and faults.fires(FaultHook.SETUP_PARAMS, self.ctx.rank, self.ctx.label):
            splitKNum += 1   # fault injection: a splitKNum the mmad call count does not match
        return replace(base, localParams=replace(base.localParams, matmulMode=mode, splitKNum=splitKNum))

    def MatmulProcess(self, mode: MatmulMode) -> None:
        self.quantMatmulKernelImpl_(self.SetupParams(mode))

    def Run(self) -> None:
        ctx = self.ctx
        hz = ctx.device.hazards
        if ctx.GetBlockIdx() == 0:
            # localMatmul 1 only: its REMOTE pass adds atomically onto the LOCAL pass's C (isAtomicAdd_).
            # With localMatmul 2 the REMOTE pass plain-writes over it (isAtomicAdd_ is false): bias once.
            if self.localMatmul == 1 and self.args.params.qbmmParams.isBias == BiasMode.BIAS_ENABLED:
                hz.report(Hazard.BIAS_DOUBLE_ADD, ctx.label,
                          "bias is loaded at splitKIdx 0 of both the LOCAL and the REMOTE pass and the REMOTE "
                          "pass adds atomically onto the LOCAL pass's C (localMatmul = 1): C gets it twice")
            session = self.hccl_.session
            if ctx.GetBlockNum() > 1 and session is not None and session.model is HcclServerType.AICPU:
                # The race needs another core still owing Waits when block 0's Finalize<true> resets the
                # finish counters: several AICs, AICPU model. (CCU: a non-working core's Wait completes on
                # block 0's Wait count, final before Finalize; one AIC: nobody else waits.)
                hz.report(Hazard.HCCL_FINALIZE_WHILE_WAITING, ctx.label,
                          f"SyncAll() before Finalize is SyncAll<true>, a no-op on an AIC: block 0's "
                          f"Finalize<true> is not ordered after the Waits of the other "
                          f"{ctx.GetBlockNum() - 1} AIC(s) (AICPU model: a Wait after it hangs)",
                          severity=Severity.WARNING)
        if self.localMatmul != 0:
            self.MatmulProcess(MatmulMode.LOCAL)
        self.MatmulProcess(MatmulMode.REMOTE)
        ctx.SyncAll()
        self.hccl_.Finalize()


def all_to_all_mx_quant_matmul_hcomm(ctx: CoreContext, args: HcommArgs, BlockMmad: Any,
                                     scheduler_cls: Any, hccl_cls: Any) -> int:
    """The kernel entry for an AIC_ONLY launch (every AIC prepares; only block 0 talks to the server)."""
    impl = AllToAllMxQuantMatmulHcommImpl(ctx, args, BlockMmad, scheduler_cls, hccl_cls)
    impl.Init()
    impl.Run()
    k = impl.quantMatmulKernelImpl_
    if k.mmadOp_ is not None:
        k.mmadOp_.Destroy()
    return k.tiles_done
