"""Host side of one quant_matmul_reduce_scatter call on one rank: tile, allocate, launch, read back.

`impl="rounds"` (the design-spec kernel): GM holds x1 (M, K), x1_scale, x2 (N, K), x2_scale, the bf16
staging [M, N] (the workspace the AIC writes and the PUTs read: development.md §5.7 `stagingSize`) and y
(M/R, N); the data window holds R slots of chunkBytes = mSeg * N * 2 (slot j: rank j's rows for this rank),
the TeamBarrier a window of its own. The launch is MIX_AIC_1_1 with block_dim = max(usedCoreNum of the full
(M, N, K) SWAT tiling, R + 1) unless given (development.md §5.7 `coreNum`; §3.1 #3 and #9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.block.qmm_mx_block_mmad_fragment import QmmMxBlockMmadFragment
from mc2emu.apace.qmm_mx_kernel_rs_frag import RS_WINDOW_LEN
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import (
    BF16,
    RsRoundsArgs,
    quant_matmul_reduce_scatter_rounds,
)
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.comm.shmem import Shmem
from mc2emu.comm.team_barrier import TeamBarrier
from mc2emu.host.harness import CallOptions, LaunchHarness
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import ConstraintError, HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    make_rs_comm_tiling,
    rounds_violations,
    rs_round_tiling,
)

if TYPE_CHECKING:
    from mc2emu.ops.quant_matmul_reduce_scatter_op import QmrsProblem

KERNEL_NAME = "quant_matmul_reduce_scatter"
ROUNDS_KERNEL_TYPE = KernelType.MIX_AIC_1_1
# The TeamBarrier of the rounds kernel: one job runs CrossDevice over every rank (development.md §5.1a).
TEAM_BARRIER_JOBS = 1


@dataclass
class QmrsLaunchInfo:
    impl: str
    block_dim: int
    comm_tiling: Any
    round_tilings: tuple[Any, ...]
    wall_s: float
    tiles: int


def run_qmrs(problem: QmrsProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
             opts: CallOptions, *, comm: Any, block_dim: int | None, stats: dict[str, Any] | None
             ) -> tuple[np.ndarray, list[HazardReport]]:
    R, rank = problem.rank_size, problem.rank
    m, k, n = problem.m, problem.k, problem.n
    # Tiling before any collective set-up: a refused tiling is refused on every rank (same shapes).
    ct = make_rs_comm_tiling(m, R, problem.head_m_size)
    full = rs_round_tiling(m, n, k, problem.elem, problem.b_elem, DAV_3510, block_dim)
    used = block_dim if block_dim is not None else max(full.usedCoreNum, R + 1)
    violations = rounds_violations(ct, n, R, used, DAV_3510)
    if violations:
        rule, reason = violations[0]
        raise ConstraintError(rule, reason)
    tilings = tuple(rs_round_tiling(R * ct.tile_m(t), n, k, problem.elem, problem.b_elem, DAV_3510, used)
                    for t in range(ct.commTurn))
    scaleKLen = scale_k_len(k)
    cBytesPerM = n * BF16.itemsize
    with LaunchHarness(KERNEL_NAME, opts, comm=comm, platform=DAV_3510) as h:
        gm = h.device.gm
        x1_addr = gm.alloc(0, "x1", data=np.ascontiguousarray(x1).view(np.uint8))
        x1s_addr = gm.alloc(0, "x1_scale", data=np.ascontiguousarray(x1_scale).view(np.uint8))
        x2_addr = gm.alloc(0, "x2", data=np.ascontiguousarray(x2).view(np.uint8))
        x2s_addr = gm.alloc(0, "x2_scale", data=np.ascontiguousarray(x2_scale).view(np.uint8))
        staging = gm.alloc(m * cBytesPerM, "staging")
        y_addr = gm.alloc(ct.mSeg * cBytesPerM, "y")
        BlockMmadFragC = QmmMxBlockMmadFragment.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False),
                                                         problem.elem, NDExtLayoutPtn, problem.b_elem,
                                                         DNExtLayoutPtn, problem.out)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn,
                                                                   DNExtLayoutPtn, problem.elem,
                                                                   window_len=RS_WINDOW_LEN)
        assert h.world is not None
        win = h.window(R * ct.mSeg * cBytesPerM, "qmrs_data")
        team = TeamBarrier(h.world, jobs=TEAM_BARRIER_JOBS, name="qmrs_team_barrier")
        shmem = Shmem(h.world)
        args = RsRoundsArgs(rank, R, ct, tilings, k, n, scaleKLen, x1_addr, x1s_addr, x2_addr, x2s_addr, staging,
                            y_addr, win.addr(0), shmem, team, problem.variant)
        res = h.launch(quant_matmul_reduce_scatter_rounds, used, ROUNDS_KERNEL_TYPE, args, BlockMmadFragC,
                       BlockScheduler)
        y = h.read(y_addr, problem.out.dtype, (ct.mSeg, n))
    if stats is not None:
        stats["launch"] = QmrsLaunchInfo(problem.impl.value, used, ct, tilings, res.wall_s,
                                         sum(v for v in res.returns.values() if isinstance(v, int)))
    return y, h.hazards
