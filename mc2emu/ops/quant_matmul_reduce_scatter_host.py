"""Host side of one quant_matmul_reduce_scatter call on one rank: tile, allocate, launch, read back. It owns
the problem type (`QmrsProblem`, `QmrsImpl`, `QmrsSplit`) the entry validates.

`impl="per_block"` (the shipped kernel, `tests/st/quant_matmul_reduce_scatter/ubmem/src/main.cpp` 0f2296ba3e):
the SWAT tiling of (M, N, K) with optimization off, M-tail alignment on and baseM capped at min(256,
floor16(M/R)) with its fallbacks (`SetMaxBaseM`), transB false for the launcher's NZ B (weight_format "NZ"),
true for the (N, K) B of "ND" (`per_block_tiling`). MIX_AIC_1_2 with block_dim = usedCoreNum.

`impl="rounds"` (the design-spec kernel): GM holds x1 (M, K), x1_scale, x2 (N, K), x2_scale, the bf16
staging [M, N] (the workspace the AIC writes and the PUTs read: development.md §5.7 `stagingSize`) and y
(M/R, N); the data window holds R slots of chunkBytes = mSeg * N * 2 (slot j: rank j's rows for this rank),
the TeamBarrier a window of its own. The launch is MIX_AIC_1_1 with block_dim = usedCoreNum of the full
(M, N, K) SWAT tiling unless given (development.md §5.7 `coreNum`), refused below R + 1 (§3.1 #3, #9).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from mc2emu.apace.block.qmm_mx_block_mmad_fragment import QmmMxBlockMmadFragment
from mc2emu.apace.block_epilogue_all_to_all import EpilogueParams
from mc2emu.apace.comm_resource_builder import A5_MTE_STATE_WIN_SIZE, HcclOpParam
from mc2emu.apace.kernel_qbmm_mx_mix import MixParams, MixQBMMTiling
from mc2emu.apace.qmm_mx_kernel_rs_frag import RS_WINDOW_LEN
from mc2emu.apace.quant_matmul_reduce_scatter_impl import (
    PerBlockArgs,
    PerBlockVariant,
    quant_matmul_reduce_scatter_per_block,
)
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import (
    BF16,
    RsKernelVariant,
    RsRoundsArgs,
    quant_matmul_reduce_scatter_rounds,
)
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, L1Params
from mc2emu.blaze.gemm.block.block_mmad_mx import Params as MmadParams
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams, BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn, NZViewLayoutPtn
from mc2emu.comm.shmem import Shmem
from mc2emu.host.call_options import CallOptions
from mc2emu.host.collective import refuse
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.payload import contiguous
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    make_rs_comm_tiling,
    per_block_tiling,
    per_block_violations,
    rounds_bias_violations,
    rounds_violations,
    rs_round_tiling,
    rs_round_tilings,
)

KERNEL_NAME = "quant_matmul_reduce_scatter"
ROUNDS_KERNEL_TYPE = KernelType.MIX_AIC_1_1
PER_BLOCK_KERNEL_TYPE = KernelType.MIX_AIC_1_2
# The launcher's l1Params nBufferNum.
PER_BLOCK_L1_BUFFERS = 2
# The TeamBarrier of the rounds kernel: one job runs CrossDevice over every rank (development.md §5.1a).
TEAM_BARRIER_JOBS = 1


class QmrsImpl(enum.Enum):
    ROUNDS = "rounds"        # the cannbot design-spec kernel
    PER_BLOCK = "per_block"  # the shipped ops-transformer kernel


class WeightFormat(enum.Enum):
    ND = "ND"   # B stored (N, K): the DN layout, transB
    NZ = "NZ"   # B (K, N) as FRACTAL_NZ: the ST launcher's LayoutB = nz_layout_ptn (per_block)


class QmrsSplit(enum.Enum):
    M = "m"   # full input per rank (seed 000 §4.7 完整输入)
    K = "k"   # K-split, tensor parallel (§4.7 K 轴切分)


@dataclass(frozen=True)
class QmrsProblem:
    """The validated problem of one rank (filled by the entry, `quant_matmul_reduce_scatter_op.py`)."""

    rank: int
    rank_size: int
    m: int
    k: int
    n: int
    elem: ElemFormat
    b_elem: ElemFormat
    out: OutDtype
    impl: QmrsImpl
    split: QmrsSplit
    head_m_size: int | None
    variant: RsKernelVariant | PerBlockVariant
    weight_nz: bool = False


@dataclass(frozen=True)
class QmrsLaunchInfo:
    """What the host learnt about the launch (`return_stats=True`)."""

    impl: str
    block_dim: int
    comm_tiling: Any
    round_tilings: tuple[Any, ...]
    wall_s: float
    tiles: int


def run_qmrs(problem: QmrsProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
             opts: CallOptions, *, block_dim: int | None, bias: np.ndarray | None = None
             ) -> tuple[np.ndarray, list[HazardReport], QmrsLaunchInfo]:
    if problem.impl is QmrsImpl.PER_BLOCK:
        return _run_per_block(problem, x1, x1_scale, x2, x2_scale, opts, block_dim=block_dim, bias=bias)
    return _run_rounds(problem, x1, x1_scale, x2, x2_scale, opts, block_dim=block_dim, bias=bias)


def _inputs(gm: Any, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray) -> tuple[Any, ...]:
    return tuple(gm.alloc(0, name, data=contiguous(a).view(np.uint8))
                 for name, a in (("x1", x1), ("x1_scale", x1_scale), ("x2", x2), ("x2_scale", x2_scale)))


def _bias(gm: Any, bias: np.ndarray | None) -> Any:
    """The (1, N) float32 bias in GM, or None (isBias 0)."""
    if bias is None:
        return None
    return gm.alloc(0, "bias", data=contiguous(bias, dtype=np.float32).reshape(-1).view(np.uint8))


def _run_per_block(problem: QmrsProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray,
                   x2_scale: np.ndarray, opts: CallOptions, *, block_dim: int | None, bias: np.ndarray | None = None
                   ) -> tuple[np.ndarray, list[HazardReport], QmrsLaunchInfo]:
    """The ST host (main.cpp): SWAT tiling of (M, N, K); block_dim = usedCoreNum; workspace [M, N] bf16 for C
    (cGM = workspaceGM); y (M/R, N); the HCCL window (state area + data [M, N]). With a bias: the (1, N)
    float32 bias in GM, isBias = 1 (the ST main.cpp passes none)."""
    R, rank = problem.rank_size, problem.rank
    m, k, n = problem.m, problem.k, problem.n
    tiling = per_block_tiling(m, n, k, R, problem.elem, problem.b_elem, problem.weight_nz, DAV_3510, block_dim)
    used = tiling.usedCoreNum if block_dim is None else block_dim
    refuse(per_block_violations(R, used, DAV_3510))
    cBytesPerM = n * BF16.itemsize
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        gm = h.device.gm
        x1_addr, x1s_addr, x2_addr, x2s_addr = _inputs(gm, x1, x1_scale, x2, x2_scale)
        workspace = gm.alloc(m * cBytesPerM, "workspace")
        y_addr = gm.alloc((m // R) * cBytesPerM, "y")
        bias_addr = _bias(gm, bias)
        LayoutB = NZViewLayoutPtn if problem.weight_nz else DNExtLayoutPtn
        BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), problem.elem,
                                         NDExtLayoutPtn, problem.b_elem, LayoutB, problem.out)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn,
                                                                   LayoutB, problem.elem)
        assert h.world is not None
        win = h.data_window(HcclOpParam.window_bytes(R, m * cBytesPerM), "qmrs_hccl_window",
                            control_bytes=A5_MTE_STATE_WIN_SIZE)
        ctx_param = HcclOpParam(rank, R, win.addr(0), Shmem(h.world))
        problemShape = (m, n, k, 1)
        params = MixParams(
            problemShape,
            MmadParams(aGmAddr=x1_addr, bGmAddr=x2_addr, cGmAddr=workspace, biasGmAddr=bias_addr,
                       scaleAGmAddr=x1s_addr, scaleBGmAddr=x2s_addr),
            L1Params(tiling.stepK * tiling.baseK, tiling.scaleKL1, PER_BLOCK_L1_BUFFERS),
            BlockSchedulerQbmmParams(tiling.baseM, tiling.baseN, tiling.mTailTile, tiling.nTailTile,
                                     tiling.mBaseTailSplitCnt, tiling.nBaseTailSplitCnt, tiling.mTailMain,
                                     tiling.nTailMain),
            MixQBMMTiling(tiling.baseM, tiling.baseN, tiling.baseK, int(bias_addr is not None), tiling.dbL0c),
            EpilogueParams(workspace, m, n, 0, ctx_param))
        args = PerBlockArgs(params, y_addr, ctx_param, cast(PerBlockVariant, problem.variant))
        res = h.launch(quant_matmul_reduce_scatter_per_block, used, PER_BLOCK_KERNEL_TYPE, args, BlockMmad,
                       BlockScheduler)
        y = h.read(y_addr, problem.out.dtype, (m // R, n))
    info = QmrsLaunchInfo(problem.impl.value, used, None, (tiling,), res.wall_s,
                          sum(v for v in res.returns.values() if isinstance(v, int)))
    return y, h.hazards, info


def _run_rounds(problem: QmrsProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
                opts: CallOptions, *, block_dim: int | None, bias: np.ndarray | None = None
                ) -> tuple[np.ndarray, list[HazardReport], QmrsLaunchInfo]:
    R, rank = problem.rank_size, problem.rank
    m, k, n = problem.m, problem.k, problem.n
    # Tiling before any collective set-up: a refused tiling is refused on every rank (same shapes).
    ct = make_rs_comm_tiling(m, R, problem.head_m_size, n)
    full = rs_round_tiling(m, n, k, problem.elem, problem.b_elem, DAV_3510, block_dim)
    used = block_dim if block_dim is not None else full.usedCoreNum
    refuse(rounds_violations(ct, n, R, used, DAV_3510))
    tilings = rs_round_tilings(ct, m, n, k, problem.elem, problem.b_elem, DAV_3510, used)
    if bias is not None:
        refuse(rounds_bias_violations(tilings, problem.elem, DAV_3510))
    scaleKLen = scale_k_len(k)
    cBytesPerM = n * BF16.itemsize
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        gm = h.device.gm
        x1_addr, x1s_addr, x2_addr, x2s_addr = _inputs(gm, x1, x1_scale, x2, x2_scale)
        staging = gm.alloc(m * cBytesPerM, "staging")
        y_addr = gm.alloc(ct.mSeg * cBytesPerM, "y")
        bias_addr = _bias(gm, bias)
        BlockMmadFragC = QmmMxBlockMmadFragment.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False),
                                                         problem.elem, NDExtLayoutPtn, problem.b_elem,
                                                         DNExtLayoutPtn, problem.out)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn,
                                                                   DNExtLayoutPtn, problem.elem,
                                                                   window_len=RS_WINDOW_LEN)
        assert h.world is not None
        win = h.data_window(R * ct.mSeg * cBytesPerM, "qmrs_data")
        team = h.team_barrier(TEAM_BARRIER_JOBS, "qmrs_team_barrier")
        shmem = Shmem(h.world)
        args = RsRoundsArgs(rank, R, ct, tilings, k, n, scaleKLen, x1_addr, x1s_addr, x2_addr, x2s_addr, staging,
                            y_addr, win.addr(0), shmem, team, cast(RsKernelVariant, problem.variant), bias_addr)
        res = h.launch(quant_matmul_reduce_scatter_rounds, used, ROUNDS_KERNEL_TYPE, args, BlockMmadFragC,
                       BlockScheduler)
        y = h.read(y_addr, problem.out.dtype, (ct.mSeg, n))
    info = QmrsLaunchInfo(problem.impl.value, used, ct, tilings, res.wall_s,
                          sum(v for v in res.returns.values() if isinstance(v, int)))
    return y, h.hazards, info
