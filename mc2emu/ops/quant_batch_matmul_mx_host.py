"""Host program of one quant_batch_matmul_mx call: tile, allocate, launch, read back (one NPU, no MPI).

The host side of the ops-tensor QBMM ST on the shared host harness (`mc2emu.host`): SWAT tiling
(`mc2emu.tiling.quant_matmul_tiling_swat`), then an AIC_ONLY launch of `GemmUniversal<.., BlockMmad<
MatmulWithScaleMx<NONE_FULL_LOAD_MODE, atomic>>, void, BlockSchedulerQbmm>` (`kernel_qbmm_mx`). The
validated problem comes from the entry (`quant_batch_matmul_mx_op.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze import (
    NONE_FULL_LOAD_MODE,
    BlockMmadMx,
    BlockSchedulerQbmmParams,
    BlockSchedulerQuantBatchMatmulV3,
    DNExtLayoutPtn,
    L1Params,
    MatmulWithScaleMx,
    NDExtLayoutPtn,
    Params,
    ProblemShape,
    QbmmMxParams,
    QbmmMxRevision,
    QBMMTiling,
    kernel_qbmm_mx,
)
from mc2emu.host.call_options import CallOptions
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.formats import gm_storage_dtype
from mc2emu.numerics.payload import contiguous
from mc2emu.runtime.hazards import HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingData, QuantMatmulTilingSwat

KERNEL_NAME = "quant_batch_matmul_mx"


@dataclass(frozen=True)
class QbmmProblem:
    """The validated call: operands (as given), formats, shapes, batches, bias, the kernel's policies."""

    a: np.ndarray
    fa: ElemFormat
    b: np.ndarray
    fb: ElemFormat
    sa: np.ndarray
    sb: np.ndarray
    out: OutDtype
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    batchA: tuple[int, int, int, int]
    batchB: tuple[int, int, int, int]
    batchC: tuple[int, int, int, int]
    c_shape: tuple[int, ...]
    bias: np.ndarray | None
    biasThreeDim: int
    c_init: Any
    atomic: bool
    revision: QbmmMxRevision


@dataclass(frozen=True)
class QbmmLaunchInfo:
    """What the host learnt about the launch (`return_stats=True`): blocks launched, the tiling, wall time."""

    block_dim: int
    tiling: QuantMatmulTilingData
    wall_s: float


def run_qbmm(p: QbmmProblem, opts: CallOptions, *, block_dim: int | None
             ) -> tuple[np.ndarray, list[HazardReport], QbmmLaunchInfo]:
    tiling = QuantMatmulTilingSwat(DAV_3510, aic_num=block_dim).GetTilingData(p.m, p.n, p.k, p.trans_a, p.trans_b,
                                                                             p.fa, p.fb)
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        gm = h.device.gm
        a, b = p.a, p.b
        a_addr = gm.alloc(-(-a.size // 2) if p.fa.is_fp4 else a.size, "x1")
        gm.write(a_addr, contiguous(a.view(np.uint8)).reshape(-1, a.shape[-1]).view(gm_storage_dtype(p.fa)))
        b_addr = gm.alloc(-(-b.size // 2) if p.fb.is_fp4 else b.size, "x2")
        gm.write(b_addr, contiguous(b.view(np.uint8)).reshape(-1, b.shape[-1]).view(gm_storage_dtype(p.fb)))
        sa_addr = gm.alloc(p.sa.size, "x1_scale", data=contiguous(p.sa).view(np.uint8))
        sb_addr = gm.alloc(p.sb.size, "x2_scale", data=contiguous(p.sb).view(np.uint8))
        c_elems = int(np.prod(p.c_shape))
        if p.c_init is None:
            c_addr = gm.alloc(c_elems * p.out.dtype.itemsize, "y", zero=True)
        else:
            c_addr = gm.alloc(0, "y", data=contiguous(np.asarray(p.c_init, dtype=p.out.dtype)))
        bias_addr = None
        if p.bias is not None:
            bias_addr = gm.alloc(0, "bias", data=contiguous(p.bias))

        layoutA = DNExtLayoutPtn if p.trans_a else NDExtLayoutPtn
        layoutB = DNExtLayoutPtn if p.trans_b else NDExtLayoutPtn
        BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, p.atomic), p.fa, layoutA, p.fb,
                                         layoutB, p.out, NDExtLayoutPtn,
                                         p.bias.dtype if p.bias is not None else np.float32, NDExtLayoutPtn)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, layoutA, layoutB, p.fa)
        params = QbmmMxParams(
            problemShape=ProblemShape(p.m, p.n, p.k, int(np.prod(p.batchC))),
            mmadParams=Params(aGmAddr=a_addr, bGmAddr=b_addr, cGmAddr=c_addr, biasGmAddr=bias_addr,
                              scaleAGmAddr=sa_addr, scaleBGmAddr=sb_addr),
            l1Params=L1Params(tiling.kL1, tiling.scaleKL1, tiling.nBufferNum),
            schParams=BlockSchedulerQbmmParams(tiling.baseM, tiling.baseN, tiling.mTailTile, tiling.nTailTile,
                                               tiling.mBaseTailSplitCnt, tiling.nBaseTailSplitCnt, tiling.mTailMain,
                                               tiling.nTailMain),
            qbmmParams=QBMMTiling(*p.batchA, *p.batchB, *p.batchC, biasThreeDim=p.biasThreeDim, baseM=tiling.baseM,
                                  baseN=tiling.baseN, baseK=tiling.baseK, isBias=int(p.bias is not None),
                                  dbL0C=tiling.dbL0c))
        res = h.launch(kernel_qbmm_mx, tiling.block_dim, KernelType.AIC_ONLY, BlockMmad, BlockScheduler, params,
                       p.revision)
        c = h.read(c_addr, p.out.dtype, p.c_shape)
    return c, h.hazards, QbmmLaunchInfo(tiling.block_dim, tiling, res.wall_s)
