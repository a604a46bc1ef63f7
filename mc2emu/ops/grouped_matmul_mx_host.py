"""Host program of one grouped_matmul_mx call: tile, allocate, launch, read back (one NPU, no MPI).

The host side of aclnnGroupedMatmulV4 (MX, ND or FRACTAL_NZ weight) on the shared harness: `TilingGMM` (mc2emu/tiling/
grouped_matmul_tiling.py) on the call's shapes, then the `grouped_matmul` device entry
(`gqmm_cgmct_mx_kernel.py`): AIC_ONLY for split-M, MIX_AIC_1_2 for split-K (the AIVs zero-fill the K = 0
groups), blockDim from the tiling. With checks on, every element of y is expected to be written exactly as
the group list says (once for a row / group the list covers, never otherwise): OUTPUT_WRITE_COUNT otherwise.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_mmad_mx_cgmct import BlockMmadMxCgmct
from mc2emu.blaze.gemm.block.block_mmad_qgmm_mx import BlockMmadQgmmMx
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.gemm.kernel.gqmm_cgmct_mx_kernel import grouped_matmul_mx
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx import GMMTiling
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx_run import QGmmMxMmadParams, QGmmMxParams
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, LayoutPtn, NDExtLayoutPtn, NZLayoutPtn, ZNLayoutPtn
from mc2emu.host.call_options import CallOptions
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.formats import gm_storage_dtype
from mc2emu.numerics.payload import contiguous
from mc2emu.ops.grouped_matmul_mx_golden import group_entries, split_m_segments
from mc2emu.runtime.gm import GlobalMemory, GmAddr, MemRole
from mc2emu.runtime.hazards import HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.grouped_matmul_tiling import GmmTilingResult
from mc2emu.tiling.grouped_matmul_tiling_context import (
    GROUPLIST_TYPE_COUNT,
    GROUPLIST_TYPE_CUMSUM,
    GROUPLIST_TYPE_SPARSE_M,
    SPLIT_K,
    SPLIT_M,
)

KERNEL_NAME = "grouped_matmul_mx"


class GmmGroupType(enum.Enum):
    """The `groupType` attribute: which axis the groups split (the source's code: `code`)."""

    SPLIT_M = "split_m"
    SPLIT_K = "split_k"

    @property
    def code(self) -> int:
        return {GmmGroupType.SPLIT_M: SPLIT_M, GmmGroupType.SPLIT_K: SPLIT_K}[self]


class GmmWeightFormat(enum.Enum):
    """The weight's storage format (`FORMAT_WEIGHT`): ND, or FRACTAL_NZ (`fractal_nz` also accepted)."""

    ND = "nd"
    NZ = "nz"
    FRACTAL_NZ = "fractal_nz"

    @property
    def is_nz(self) -> bool:
        return self is not GmmWeightFormat.ND


class GmmGroupListType(enum.Enum):
    """The `groupListType` attribute: how group_list holds the group sizes (the source's code: `code`)."""

    CUMSUM = "cumsum"
    COUNT = "count"
    SPARSE = "sparse"

    @property
    def code(self) -> int:
        return {GmmGroupListType.CUMSUM: GROUPLIST_TYPE_CUMSUM, GmmGroupListType.COUNT: GROUPLIST_TYPE_COUNT,
                GmmGroupListType.SPARSE: GROUPLIST_TYPE_SPARSE_M}[self]


@dataclass(frozen=True)
class GmmProblem:
    """The validated call: operands as given, formats, shapes, the group list and the tiling."""

    x: np.ndarray
    fx: ElemFormat
    weight: np.ndarray
    fw: ElemFormat
    x_scale: np.ndarray
    weight_scale: np.ndarray
    group_list: np.ndarray
    group_list_type: str
    split_k: bool
    trans_b: bool
    m: int
    n: int
    k: int
    groups: int
    out: OutDtype
    bias: np.ndarray | None
    tiling: GmmTilingResult
    variant: TailSplitVariant
    weight_nz: bool = False  # weight holds FRACTAL_NZ storage (grouped_matmul_apt.cpp: layout::Nz / layout::Zn)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return (self.groups, self.m, self.n) if self.split_k else (self.m, self.n)

    def expected_writes(self) -> np.ndarray:
        """1 for every y element the group list covers, 0 elsewhere."""
        exp = np.zeros(self.y_shape, dtype=np.uint8)   # the write-count check's per-byte count type
        if self.split_k:
            exp[...] = 1  # the AIC writes groups with K > 0, the AIVs zero-fill the K == 0 ones
            return exp
        for _g, start, rows in split_m_segments(group_entries(self.group_list, self.group_list_type),
                                                self.group_list_type):
            exp[start:start + rows] = 1
        return exp


def _put(gm: GlobalMemory, arr: np.ndarray, fmt: ElemFormat, name: str) -> GmAddr:
    codes = contiguous(arr).view(np.uint8)
    addr = gm.alloc(-(-codes.size // 2) if fmt.is_fp4 else codes.size, name)
    gm.write(addr, codes.reshape(-1, codes.shape[-1]).view(gm_storage_dtype(fmt)))
    return addr


@dataclass(frozen=True)
class GmmLaunchInfo:
    """What the host learnt about the launch (`return_stats=True`): blocks launched, the tiling, wall time
    (0, None, 0.0: no launch, the empty y of a split-K call with M or N 0)."""

    block_dim: int
    tiling: GmmTilingResult | None
    wall_s: float


def run_grouped_matmul_mx(p: GmmProblem, opts: CallOptions) -> tuple[np.ndarray, list[HazardReport], GmmLaunchInfo]:
    mm, gq = p.tiling.mmTilingData, p.tiling.gmmQuantParams
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        gm = h.device.gm
        x_addr = _put(gm, p.x, p.fx, "x")
        w_addr = _put(gm, p.weight, p.fw, "weight")
        sx_addr = gm.alloc(p.x_scale.size, "pertokenScale", data=contiguous(p.x_scale).view(np.uint8))
        sw_addr = gm.alloc(p.weight_scale.size, "scale", data=contiguous(p.weight_scale).view(np.uint8))
        gl_addr = gm.alloc(0, "groupList", data=contiguous(p.group_list, dtype=np.int64).reshape(-1),
                           role=MemRole.CONTROL)
        y_addr = gm.alloc(int(np.prod(p.y_shape)) * p.out.dtype.itemsize, "y", zero=True)
        bias_addr = gm.alloc(0, "bias", data=contiguous(p.bias, dtype=np.float32)) \
            if p.bias is not None else None
        h.expect_writes(y_addr, p.out.dtype, p.y_shape, p.expected_writes())
        # variant "blaze": the IS_BLAZE kernel's BlockMmad (ops-tensor block_mmad_qgmm_mx.h); otherwise CGMCT's
        Mmad = BlockMmadQgmmMx if p.variant is TailSplitVariant.BLAZE else BlockMmadMxCgmct
        LayoutB: type[LayoutPtn]
        if p.weight_nz:  # grouped_matmul_apt.cpp, wFormat NZ: (RowMajor, Nz) / (RowMajor, Zn)
            LayoutB = ZNLayoutPtn if p.trans_b else NZLayoutPtn
        else:
            LayoutB = DNExtLayoutPtn if p.trans_b else NDExtLayoutPtn
        BlockMmad = Mmad.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), p.fx,
                                  DNExtLayoutPtn if p.split_k else NDExtLayoutPtn, p.fw, LayoutB, p.out,
                                  NDExtLayoutPtn, np.float32, NDExtLayoutPtn)
        gmmParams = GMMTiling(groupNum=gq.groupNum, m=mm.m, n=mm.n, k=mm.k, baseM=mm.baseM, baseN=mm.baseN,
                              baseK=mm.baseK, kAL1=mm.kAL1, kBL1=mm.kBL1, scaleKAL1=mm.scaleKAL1,
                              scaleKBL1=mm.scaleKBL1, isBias=mm.isBias, dbL0C=mm.dbL0C, groupType=gq.groupType,
                              groupListType=gq.groupListType)
        params = QGmmMxParams(QGmmMxMmadParams(aGmAddr=x_addr, bGmAddr=w_addr, x2ScaleGmAddr=sw_addr,
                                               x1ScaleGmAddr=sx_addr, cGmAddr=y_addr, biasGmAddr=bias_addr,
                                               groupListGmAddr=gl_addr), gmmParams)
        kernel_type = KernelType.MIX_AIC_1_2 if p.split_k else KernelType.AIC_ONLY
        res = h.launch(grouped_matmul_mx, p.tiling.blockDim, kernel_type, BlockMmad, params, p.variant)
        y = h.read(y_addr, p.out.dtype, p.y_shape)
    return y, h.hazards, GmmLaunchInfo(p.tiling.blockDim, p.tiling, res.wall_s)
