"""Host side of one all_to_all_quant_matmul call on one rank: tiling, GM and window setup, the launch.

Kept apart from the public entry (`all_to_all_quant_matmul.py`) so the entry reads as the operator's
contract and this file as the host program of the apace ST (`kernel_launcher`): tile, allocate, launch,
read back.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.all_to_all_mx_quant_matmul_hcomm_impl import (
    WORKSPACE_ALIGN,
    HcommArgs,
    all_to_all_mx_quant_matmul_hcomm,
)
from mc2emu.apace.all_to_all_mx_quant_matmul_udma_impl import UdmaArgs, all_to_all_mx_quant_matmul_udma
from mc2emu.apace.quant_matmul_mx_kernel import (
    BiasMode,
    LocalParams,
    MatmulMode,
    MmadParams,
    Params,
    QBMMTiling,
)
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, L1Params
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams, BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.common_utils import ProblemShape
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.check.deadlock import COLLECT_S, DeadlockDiagnosis
from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.comm.hccl import Hccl
from mc2emu.comm.hccl_server import HcclServer
from mc2emu.comm.shmem import Shmem
from mc2emu.comm.team_barrier import TeamBarrier
from mc2emu.comm.world import CommWorld
from mc2emu.numerics.formats import gm_storage_dtype
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.device import Device
from mc2emu.runtime.faults import FaultHook
from mc2emu.runtime.hazards import ConstraintError, DeadlockError, HazardReport
from mc2emu.runtime.kernel_type import KernelType

if TYPE_CHECKING:
    from mc2emu.ops.all_to_all_quant_matmul import A2AProblem

KERNEL_NAME = "all_to_all_quant_matmul"
# UDMA launches one AIC and one AIV per block; hcomm launches AICs only.
UDMA_KERNEL_TYPE = KernelType.MIX_AIC_1_1
HCOMM_KERNEL_TYPE = KernelType.AIC_ONLY


@dataclass
class A2ALaunchInfo:
    """What the host learnt about the launch (for the CLI table)."""

    block_dim: int
    base: tuple[int, int, int]
    comm_tiling: Any
    wall_s: float
    tiles: int


def _tiling(problem: A2AProblem, platform: Any, block_dim: int | None) -> Any:
    from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

    return QuantMatmulTilingSwat(platform, aic_num=block_dim).GetTilingData(
        problem.ori_m, problem.n, problem.ka, False, True, problem.elem, problem.b_elem)


def _elem_bytes(problem: A2AProblem, count: int) -> int:
    return count // 2 if problem.elem.is_fp4 else count


def run_a2a(problem: A2AProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
            bias: np.ndarray | None, *, block_dim: int | None, check: bool, timeout: float | None, comm: Any,
            perturb: Any, observers: tuple[Any, ...], head_tile_size: int | None,
            stats: dict[str, Any] | None, faults: Any = None) -> tuple[np.ndarray, list[HazardReport]]:
    from mc2emu.ops.all_to_all_quant_matmul import Impl, tiling_violations

    R, rank = problem.rank_size, problem.rank
    oriM, Ka, N = problem.ori_m, problem.ka, problem.n
    dev = Device(rank, check=check, timeout=timeout, perturb=perturb, faults=faults)
    unsubscribe = [dev.events.subscribe(o) for o in observers]
    tiling = _tiling(problem, dev.platform, block_dim)
    is_udma = problem.impl is Impl.UDMA
    used = tiling.usedCoreNum
    if is_udma and block_dim is None:
        # AIV block r serves peer r (constraint A2A-5): a small problem still launches R blocks; the extra
        # AICs find no tile and only drain their waits.
        used = max(used, R)
    ct, violations = tiling_violations(problem, tiling.baseM, tiling.baseN, used, head_tile_size)
    if violations:
        rule, reason = violations[0]
        raise ConstraintError(rule, reason)

    rowBytes = _elem_bytes(problem, Ka)
    scaleKLen = scale_k_len(Ka)
    scaleRowBytes = scaleKLen
    gm = dev.gm
    aStorage = gm_storage_dtype(problem.elem)
    x1_addr = gm.alloc(R * oriM * rowBytes, "x1")
    gm.write(x1_addr, np.ascontiguousarray(x1).view(aStorage) if not problem.elem.is_fp4 else
             np.ascontiguousarray(x1).view(np.uint8).view(aStorage))
    x1s_addr = gm.alloc(0, "x1_scale", data=np.ascontiguousarray(x1_scale).view(np.uint8))
    bStorage = gm_storage_dtype(problem.b_elem)
    x2_addr = gm.alloc(N * _elem_bytes(problem, R * Ka), "x2")
    gm.write(x2_addr, np.ascontiguousarray(x2).view(np.uint8).view(bStorage))
    x2s_addr = gm.alloc(0, "x2_scale", data=np.ascontiguousarray(x2_scale).view(np.uint8))
    out_dtype = problem.out.dtype
    c_addr = gm.alloc(oriM * N * out_dtype.itemsize, "y")
    bias_addr = None
    if bias is not None:
        bias_addr = gm.alloc(0, "bias", data=np.ascontiguousarray(np.asarray(bias, dtype=np.float32).reshape(1, N)))

    BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), problem.elem, NDExtLayoutPtn,
                                     problem.b_elem, DNExtLayoutPtn, problem.out)
    BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn, DNExtLayoutPtn,
                                                               problem.elem)
    world = CommWorld(dev, comm)
    diag = DeadlockDiagnosis(dev, comm)
    diag.attach()
    hb = HappensBeforeChecker(dev, comm) if check else None
    closed = False
    deadlocked = False
    try:
        if is_udma:
            win = world.window(R * oriM * rowBytes + R * oriM * scaleRowBytes, "udma_a2a")
            winA = win.addr(0)
            winScaleA = win.addr(R * oriM * rowBytes)
            team = TeamBarrier(world, jobs=R)
            shmem = Shmem(world)
            aAddr, saAddr = winA, winScaleA
        else:
            scalePart = -(-(R * oriM * scaleRowBytes) // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
            win = world.window(scalePart + R * oriM * rowBytes, "hcomm_workspace")
            workspace, dataRecv = win.addr(0), win.addr(scalePart)
            server = HcclServer(world, model=problem.hccl_server)
            aAddr, saAddr = dataRecv, workspace
        params = Params(
            problemShape=ProblemShape(oriM, N, Ka, 1),
            mmadParams=MmadParams(aAddr, x2_addr, saAddr, x2s_addr, c_addr, bias_addr),
            l1Params=L1Params(tiling.kL1, tiling.scaleKL1, tiling.nBufferNum),
            schParams=BlockSchedulerQbmmParams(tiling.baseM, tiling.baseN, tiling.mTailTile, tiling.nTailTile,
                                               tiling.mBaseTailSplitCnt, tiling.nBaseTailSplitCnt,
                                               tiling.mTailMain, tiling.nTailMain),
            qbmmParams=QBMMTiling(tiling.baseM, tiling.baseN, tiling.baseK, tiling.dbL0c,
                                  BiasMode.BIAS_ENABLED if bias is not None else BiasMode.BIAS_DISABLED),
            localParams=LocalParams(rank, R, oriM, x1_addr, x1s_addr, problem.local_matmul, R, MatmulMode.REMOTE,
                                    ct.splitAxisTileSize))
        world.barrier()
        t0 = time.perf_counter()
        if is_udma:
            args = UdmaArgs(params, ct, rowBytes, scaleRowBytes, winA, winScaleA, shmem, team, problem.wait_order)
            res = dev.launch(all_to_all_mx_quant_matmul_udma, used, UDMA_KERNEL_TYPE, args, BlockMmad,
                             BlockScheduler, name=KERNEL_NAME)
        else:
            aDtype = aStorage if not problem.elem.is_fp4 else np.uint8
            hargs = HcommArgs(params, ct, rowBytes, scaleRowBytes, x1_addr, workspace, dataRecv, server, aDtype,
                              problem.wait_order)
            kernel_type = HCOMM_KERNEL_TYPE
            if faults is not None and faults.fires(FaultHook.LAUNCH, rank, "host"):
                kernel_type = UDMA_KERNEL_TYPE   # fault injection: the AIC-only kernel launched mixed
            res = dev.launch(all_to_all_mx_quant_matmul_hcomm, used, kernel_type, hargs, BlockMmad,
                             BlockScheduler, Hccl, name=KERNEL_NAME)
            server.end_session()
        wall = time.perf_counter() - t0
        c = gm.view(c_addr, out_dtype, (oriM, N)).copy()
        world.barrier()                  # deadline-guarded: every rank finished the launch
        if hb is not None:
            hb.finish()
        world.close()
        closed = True
        if stats is not None:
            stats["launch"] = A2ALaunchInfo(used, (tiling.baseM, tiling.baseN, tiling.baseK), ct, wall,
                                            sum(v for v in res.returns.values() if isinstance(v, int)))
        return c, dev.hazards.take()
    except DeadlockError as exc:
        # Peers are stuck too: a collective close would hang. The caller ends the job (CLI, tests: Abort).
        closed = deadlocked = True
        exc.hazards = dev.hazards.take()   # what was filed before the hang (e.g. the Finalize race)
        raise
    except BaseException:
        # Any other failure on this rank leaves the peers in a deadline-guarded wait; freeing the windows
        # (collective) here could block forever, so they are left to the process's end.
        closed = True
        raise
    finally:
        if not closed:
            world.close()
        diag.close(linger=COLLECT_S if deadlocked else 0.0)
        if hb is not None:
            hb.close()
        for u in unsubscribe:
            u()
