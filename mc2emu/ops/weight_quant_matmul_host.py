"""Host program of one weight_quant_matmul call: tile, allocate, launch MIX_AIC_1_2, read back (one NPU).

The host side of the Blaze weight-dequant prologue fusion (seed 001) on the shared harness: the tiling is
`WeightQuantTilingSwat` (`mc2emu.tiling.weight_quant_tiling_swat`, the skill asset's
`op_tiling/weight_quant/weight_quant_tiling.h`), optionally with fields replaced by the caller (a
hand-written tiling); its L1 / UB layout findings are filed as LAYOUT_OVERLAP warnings before the launch
(inferred from the consumers' buffer offsets, not reproduced in the data); then
`weight_quant_matmul_kernel` on `usedCoreNum` AI cores. The validated problem comes from the entry
(`weight_quant_matmul_op.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

import numpy as np

from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_matmul_swat_with_tail_split import BlockSchedulerMatmulSwatParams
from mc2emu.blaze.gemm.block.weight_quant_matmul_l1 import WeightQuantL1
from mc2emu.blaze.gemm.kernel.weight_quant_matmul_kernel import (
    WeightQuantMatmulMode,
    WeightQuantMatmulParams,
    WeightQuantMatmulTiling,
    WeightQuantPrologueParams,
    weight_quant_matmul_kernel,
)
from mc2emu.host.call_options import CallOptions
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics.payload import contiguous
from mc2emu.numerics.weight_dequant import WeightDtype
from mc2emu.runtime.hazards import ConstraintError, Hazard, HazardReport, Severity
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.weight_quant_tiling_layout import layout_findings
from mc2emu.tiling.weight_quant_tiling_swat import (
    WeightQuantMatmulTilingData,
    WeightQuantPlatformInfo,
    WeightQuantTilingSwat,
)

KERNEL_NAME = "weight_quant_matmul"


@dataclass(frozen=True)
class WqmmProblem:
    """The validated call. `b_dequant` is the golden's B_dequant (A_ONLY_MMAD only)."""

    x: np.ndarray
    weight: np.ndarray
    weight_dtype: WeightDtype
    scale: np.ndarray
    offset: np.ndarray | None
    bias: np.ndarray | None
    out_dtype: np.dtype
    m: int
    n: int
    k: int
    trans_b: bool
    mode: WeightQuantMatmulMode
    b_dequant: np.ndarray | None = None


@dataclass(frozen=True)
class WqmmLaunchInfo:
    """What the host learnt about the launch (`return_stats=True`): blocks launched, the tiling, wall time."""

    block_dim: int
    tiling: WeightQuantMatmulTilingData
    wall_s: float


@dataclass(frozen=True)
class WqmmResult:
    """C (zeros in DEQUANT_ONLY), the AIVs' B_dequant (DEQUANT_ONLY, weight layout), the launch facts."""

    c: np.ndarray
    b_dequant: np.ndarray | None
    info: WqmmLaunchInfo

    @property
    def tiling(self) -> WeightQuantMatmulTilingData:
        return self.info.tiling


TILING_FIELDS = frozenset(f.name for f in fields(WeightQuantMatmulTilingData))


def wqmm_tiling(p: WqmmProblem, block_dim: int | None,
                overrides: Mapping[str, int] | None = None) -> WeightQuantMatmulTilingData:
    td = WeightQuantTilingSwat(DAV_3510, aic_num=block_dim).GetTilingData(
        p.m, p.n, p.k, p.trans_b, p.offset is not None, p.bias is not None)
    if overrides:
        bad = sorted(set(overrides) - TILING_FIELDS)
        if bad:
            raise ConstraintError("tiling_overrides", f"not WeightQuantMatmulTilingData fields: {bad}")
        td = replace(td, **{key: int(v) for key, v in overrides.items()})
        return td
    plat = WeightQuantPlatformInfo.from_platform(DAV_3510, block_dim)
    # The source's tiling leaves these overlaps open (weight_quant_tiling_swat.py): transB with k < 16 (kL1 = k, not
    # whole fractals), a UB half past its bound for large K. The kernel would compute on overlapping buffers and
    # return wrong numbers: a computed tiling with a finding is refused; `tiling_overrides` runs it, reported.
    findings = layout_findings(td, plat, dequantBElemBytes=p.x.dtype.itemsize, aElemBytes=p.x.dtype.itemsize)
    if findings:
        raise ConstraintError(f"tiling layout: {findings[0].rule}", f"{findings[0].message} (m {p.m}, n {p.n}, k "
                              f"{p.k}, trans_b {p.trans_b}): the kernel would compute on overlapping buffers")
    return td


def run_wqmm(p: WqmmProblem, opts: CallOptions, *, block_dim: int | None,
             tiling_overrides: Mapping[str, int] | None = None) -> tuple[WqmmResult, list[HazardReport]]:
    td = wqmm_tiling(p, block_dim, tiling_overrides)
    plat = WeightQuantPlatformInfo.from_platform(DAV_3510, block_dim)
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        for f in layout_findings(td, plat, dequantBElemBytes=p.x.dtype.itemsize, aElemBytes=p.x.dtype.itemsize):
            h.device.hazards.report(Hazard.LAYOUT_OVERLAP, "host", f"{f.rule}: {f.message}", severity=Severity.WARNING,
                                    rule=f.rule, **dict(f.details))
        gm = h.device.gm
        x_addr = gm.alloc(0, "x", data=contiguous(p.x))
        b_src = p.b_dequant if p.mode is WeightQuantMatmulMode.A_ONLY_MMAD else p.weight
        b_addr = gm.alloc(0, "weight", data=contiguous(b_src))
        scale_addr = gm.alloc(0, "antiquant_scale", data=contiguous(p.scale))
        offset_addr = (gm.alloc(0, "antiquant_offset", data=contiguous(p.offset))
                       if p.offset is not None else None)
        bias_addr = gm.alloc(0, "bias", data=contiguous(p.bias)) if p.bias is not None else None
        c_addr = gm.alloc(p.m * p.n * p.out_dtype.itemsize, "y", zero=True)
        bdq_addr = (gm.alloc(p.k * p.n * p.x.dtype.itemsize, "b_dequant", zero=True)
                    if p.mode is WeightQuantMatmulMode.DEQUANT_ONLY else None)
        params = WeightQuantMatmulParams(
            problemShape=(p.m, p.n, p.k), aGmAddr=x_addr, biasGmAddr=bias_addr, cGmAddr=c_addr, kL1=td.kL1,
            schParams=BlockSchedulerMatmulSwatParams(td.baseM, td.baseN, td.mTailCnt, td.nTailCnt,
                                                     td.mBaseTailSplitCnt, td.nBaseTailSplitCnt, td.mTailMain,
                                                     td.nTailMain),
            mmadTiling=WeightQuantMatmulTiling(td.baseM, td.baseN, td.baseK, td.l0cDB),
            prologueParams=WeightQuantPrologueParams(b_addr, scale_addr, offset_addr, td.nUbSize, td.kUbSize,
                                                     td.hasOffset),
            AType=p.x.dtype, BType=p.weight_dtype, CType=p.out_dtype, transB=p.trans_b, mode=p.mode,
            bDequantGmAddr=bdq_addr)
        res = h.launch(weight_quant_matmul_kernel, td.block_dim, KernelType.MIX_AIC_1_2, params,
                       WeightQuantL1(DAV_3510.l1_size, opts.data))
        c = h.read(c_addr, p.out_dtype, (p.m, p.n))
        b_shape = (p.n, p.k) if p.trans_b else (p.k, p.n)
        bdq = h.read(bdq_addr, p.x.dtype, b_shape) if bdq_addr is not None else None
    return WqmmResult(c, bdq, WqmmLaunchInfo(td.block_dim, td, res.wall_s)), h.hazards
