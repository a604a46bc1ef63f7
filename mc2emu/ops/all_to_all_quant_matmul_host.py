"""Host program of one all_to_all_quant_matmul call on one rank: tile, allocate, launch, read back.

The host program of the apace ST (`kernel_launcher`), on the shared host harness (`mc2emu.host`), which
owns the device, the communication world, the checkers and the teardown. It owns the problem type
(`A2AProblem`, its modes `Impl` / `LaunchMode`) that the entry (`all_to_all_quant_matmul_op.py`) validates
and fills; tiling is computed once, here, and passed down.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from mc2emu.apace.all_to_all_mx_quant_matmul_hcomm_impl import (
    WORKSPACE_ALIGN,
    HcommArgs,
    all_to_all_mx_quant_matmul_hcomm,
)
from mc2emu.apace.all_to_all_mx_quant_matmul_udma_impl import UdmaArgs, all_to_all_mx_quant_matmul_udma
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.apace.quant_matmul_mx_kernel import (
    BiasMode,
    LocalParams,
    MatmulMode,
    Params,
)
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, L1Params
from mc2emu.blaze.gemm.block.block_mmad_mx import Params as BlockMmadParams
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams, BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.common_utils import ProblemShape
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import QBMMTiling
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.comm.hccl import Hccl
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.comm.shmem import Shmem
from mc2emu.host.call_options import CallOptions
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.formats import gm_storage_dtype
from mc2emu.numerics.int_math import Align
from mc2emu.numerics.payload import contiguous
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.all_to_all_quant_matmul_tiling import a2a_tiling

KERNEL_NAME = "all_to_all_quant_matmul"
# UDMA launches one AIC and one AIV per block; hcomm launches AICs only.
UDMA_KERNEL_TYPE = KernelType.MIX_AIC_1_1
HCOMM_KERNEL_TYPE = KernelType.AIC_ONLY


class Impl(enum.Enum):
    UDMA = "udma"
    HCOMM = "hcomm"


class LaunchMode(enum.Enum):
    """How many blocks the UDMA host launches when `block_dim` is not given (AIV block r serves peer r).

    CONVENIENT: the tiling's usedCoreNum, raised to R when it is smaller (the extra AICs find no tile and
    only drain their waits); the launch info says so (`A2ALaunchInfo.note`). SOURCE: exactly usedCoreNum,
    as the apace ST host does (`<<<tilingData.tileQbmmTilingData.usedCoreNum>>>` in
    tests/st/all_to_all_quant_matmul/src/main.cpp, libochao-huawei/ops-transformer bb298b1c5), so a
    tiling with fewer cores than ranks is refused with constraint 5 (peers would never be served)."""

    CONVENIENT = "convenient"
    SOURCE = "source"


@dataclass(frozen=True)
class A2AProblem:
    """The validated problem of one rank."""

    rank: int
    rank_size: int
    ori_m: int
    ka: int
    n: int
    elem: ElemFormat
    b_elem: ElemFormat
    out: OutDtype
    impl: Impl
    local_matmul: int
    wait_order: WaitOrder
    hccl_server: HcclServerType
    has_bias: bool
    head_tile_size: int | None = None
    launch: LaunchMode = LaunchMode.CONVENIENT


@dataclass(frozen=True)
class A2ALaunchInfo:
    """What the host learnt about the launch (`return_stats=True`; the CLI table)."""

    block_dim: int
    base: tuple[int, int, int]
    comm_tiling: Any
    wall_s: float
    tiles: int
    tiling_cores: int = 0   # the tiling's usedCoreNum (block_dim differs when the host raised it to R)
    note: str = ""          # why the launch differs from the tiling, if it does


def _elem_bytes(problem: A2AProblem, count: int) -> int:
    return count // 2 if problem.elem.is_fp4 else count


def run_a2a(problem: A2AProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
            bias: np.ndarray | None, opts: CallOptions, *, block_dim: int | None
            ) -> tuple[np.ndarray, list[HazardReport], A2ALaunchInfo]:
    R, rank = problem.rank_size, problem.rank
    oriM, Ka, N = problem.ori_m, problem.ka, problem.n
    is_udma = problem.impl is Impl.UDMA
    # Tiling before any collective set-up: a refused tiling is refused on every rank (same shapes).
    tiling = a2a_tiling(DAV_3510, ori_m=oriM, ka=Ka, n=N, rank_size=R, elem=problem.elem, b_elem=problem.b_elem,
                        aiv_served=is_udma, wait_order=problem.wait_order, block_dim=block_dim,
                        head_tile_size=problem.head_tile_size, source_launch=problem.launch is LaunchMode.SOURCE)
    mm, ct, used = tiling.mm, tiling.comm, tiling.usedCoreNum
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        rowBytes = _elem_bytes(problem, Ka)
        scaleRowBytes = scale_k_len(Ka)
        gm = h.device.gm
        aStorage = gm_storage_dtype(problem.elem)
        x1_addr = gm.alloc(R * oriM * rowBytes, "x1")
        gm.write(x1_addr, contiguous(x1).view(aStorage) if not problem.elem.is_fp4 else
                 contiguous(x1).view(np.uint8).view(aStorage))
        x1s_addr = gm.alloc(0, "x1_scale", data=contiguous(x1_scale).view(np.uint8))
        bStorage = gm_storage_dtype(problem.b_elem)
        x2_addr = gm.alloc(N * _elem_bytes(problem, R * Ka), "x2")
        gm.write(x2_addr, contiguous(x2).view(np.uint8).view(bStorage))
        x2s_addr = gm.alloc(0, "x2_scale", data=contiguous(x2_scale).view(np.uint8))
        out_dtype = problem.out.dtype
        c_addr = gm.alloc(oriM * N * out_dtype.itemsize, "y")
        bias_addr = None
        if bias is not None:
            bias_addr = gm.alloc(0, "bias",
                                 data=contiguous(bias, np.float32).reshape(1, N))

        BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), problem.elem,
                                         NDExtLayoutPtn, problem.b_elem, DNExtLayoutPtn, problem.out)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn,
                                                                   DNExtLayoutPtn, problem.elem)
        assert h.world is not None
        if is_udma:
            win = h.data_window(R * oriM * rowBytes + R * oriM * scaleRowBytes, "udma_a2a")
            if opts.check:
                win.poison()    # the own block is never written: a read of it is NaN and reported
            winA = win.addr(0)
            winScaleA = win.addr(R * oriM * rowBytes)
            team = h.team_barrier(R)
            shmem = Shmem(h.world)
            aAddr, saAddr = winA, winScaleA
        else:
            scalePart = Align(R * oriM * scaleRowBytes, WORKSPACE_ALIGN)
            win = h.data_window(scalePart + R * oriM * rowBytes, "hcomm_workspace")
            if opts.check:
                win.poison()    # HCCL workspace: bytes no task writes (the alignment gap) read as NaN
            workspace, dataRecv = win.addr(0), win.addr(scalePart)
            server = h.hccl_server(problem.hccl_server)
            aAddr, saAddr = dataRecv, workspace
        params = Params(
            problemShape=ProblemShape(oriM, N, Ka, 1),
            mmadParams=BlockMmadParams(aGmAddr=aAddr, bGmAddr=x2_addr, cGmAddr=c_addr, biasGmAddr=bias_addr,
                                       scaleAGmAddr=saAddr, scaleBGmAddr=x2s_addr),
            l1Params=L1Params(mm.kL1, mm.scaleKL1, mm.nBufferNum),
            schParams=BlockSchedulerQbmmParams(mm.baseM, mm.baseN, mm.mTailTile, mm.nTailTile,
                                               mm.mBaseTailSplitCnt, mm.nBaseTailSplitCnt, mm.mTailMain,
                                               mm.nTailMain),
            qbmmParams=QBMMTiling(baseM=mm.baseM, baseN=mm.baseN, baseK=mm.baseK, dbL0C=mm.dbL0c,
                                  isBias=BiasMode.BIAS_ENABLED if bias is not None else BiasMode.BIAS_DISABLED),
            localParams=LocalParams(rank, R, oriM, x1_addr, x1s_addr, problem.local_matmul, R, MatmulMode.REMOTE,
                                    ct.splitAxisTileSize))
        if is_udma:
            args = UdmaArgs(params, ct, rowBytes, scaleRowBytes, winA, winScaleA, shmem, team, problem.wait_order)
            res = h.launch(all_to_all_mx_quant_matmul_udma, used, UDMA_KERNEL_TYPE, args, BlockMmad, BlockScheduler)
        else:
            aDtype = aStorage if not problem.elem.is_fp4 else np.uint8
            hargs = HcommArgs(params, ct, rowBytes, scaleRowBytes, x1_addr, workspace, dataRecv, server, aDtype,
                              problem.wait_order)
            res = h.launch(all_to_all_mx_quant_matmul_hcomm, used, HCOMM_KERNEL_TYPE, hargs, BlockMmad,
                           BlockScheduler, Hccl)
            server.end_session()
        c = h.read(c_addr, out_dtype, (oriM, N))
    info = A2ALaunchInfo(used, (mm.baseM, mm.baseN, mm.baseK), ct, res.wall_s,
                         sum(v for v in res.returns.values() if isinstance(v, int)), mm.usedCoreNum, tiling.note)
    return c, h.hazards, info
