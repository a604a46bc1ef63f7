"""Blaze compute layer (ops-tensor `include/blaze`, `include/tensor_api`): layouts and GM tensors, the MX
BlockMmad, the QBMM block scheduler and the QBMM MX kernel. Above numerics and runtime; below apace.

The names kernels use, re-exported here:

    from mc2emu.blaze import (MatmulWithScaleMx, NONE_FULL_LOAD_MODE, A_FULL_LOAD_MODE, BlockMmadMx, L1Params,
                              BlockSchedulerQuantBatchMatmulV3, BlockSchedulerQbmmParams, BlockCoord,
                              BlockShape, ProblemShape, MakeTensor, MakeMemPtr, FrameLayoutFormat, ...)
"""

from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, BlockMmadMxType, L1Params, Params
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import (
    BlockSchedulerQbmm,
    BlockSchedulerQbmmParams,
    BlockSchedulerQuantBatchMatmulV3,
)
from mc2emu.blaze.gemm.common_utils import (
    IDX_M_TILEIDX,
    IDX_N_TILEIDX,
    MNK_B,
    MNK_K,
    MNK_M,
    MNK_N,
    WINDOW_LEN,
    BlockCoord,
    BlockShape,
    ProblemShape,
)
from mc2emu.blaze.gemm.dispatch_policy import (
    A_FULL_LOAD_MODE,
    NONE_FULL_LOAD_MODE,
    FullLoadMode,
    KernelMmadWithScaleMx,
    MatmulWithScaleMx,
)
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import (
    GemmUniversalQbmmMx,
    QbmmMxParams,
    QbmmMxRevision,
    QBMMTiling,
    kernel_qbmm_mx,
)
from mc2emu.blaze.tensor_api import (
    CacheMode,
    DNExtLayoutPtn,
    FrameLayoutFormat,
    GmTensor,
    IsTrans,
    Layout,
    LayoutError,
    MakeFrameLayout,
    MakeMemPtr,
    MakeTensor,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)

__all__ = [
    "A_FULL_LOAD_MODE", "IDX_M_TILEIDX", "IDX_N_TILEIDX", "MNK_B", "MNK_K", "MNK_M", "MNK_N",
    "NONE_FULL_LOAD_MODE", "WINDOW_LEN", "BlockCoord", "BlockMmadMx", "BlockMmadMxType", "BlockSchedulerQbmm",
    "BlockSchedulerQbmmParams", "BlockSchedulerQuantBatchMatmulV3", "BlockShape", "CacheMode", "DNExtLayoutPtn",
    "FrameLayoutFormat", "FullLoadMode", "GemmUniversalQbmmMx", "GmTensor", "IsTrans", "KernelMmadWithScaleMx",
    "L1Params", "Layout", "LayoutError", "MakeFrameLayout", "MakeMemPtr", "MakeTensor", "MatmulWithScaleMx",
    "NDExtLayoutPtn", "Params", "ProblemShape", "QBMMTiling", "QbmmMxParams", "QbmmMxRevision",
    "ScaleADNLayoutPtn", "ScaleANDLayoutPtn", "ScaleBDNLayoutPtn", "ScaleBNDLayoutPtn", "kernel_qbmm_mx",
]
