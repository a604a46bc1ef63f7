"""`grouped_matmul_mx`: the MX GroupedMatmul (aclnnGroupedMatmulV4 on DAV_3510, seeds 002 / 003) on one emulated
NPU (no MPI).

    y = grouped_matmul_mx(x, x_scale, weight, weight_scale, group_list, *, group_type="split_m",
                          group_list_type="cumsum", trans_a=False, trans_b=False, out_dtype="bfloat16", ...)

Shapes (the source's; `golden_grouped_matmul_mx` documents them): split-M x [M, K], x_scale [M, ceil(K/64), 2],
weight [g, K, N] (trans_b: [g, N, K]), weight_scale [g, ceil(K/64), N, 2] (trans_b: [g, N, ceil(K/64), 2]),
y [M, N]; split-K (trans_a=True) x [K, M], x_scale [K/64 + g, M, 2], weight [K, N], weight_scale
[K/64 + g, N, 2], y [g, M, N]. group_list: int64 [g] ("cumsum" / "count") or [g, 2] ("sparse": (group, size)).
weight_format="NZ": the weight in FRACTAL_NZ, [g, ceil(N/C0), ceil(K/16), 16, C0] (trans_b [g, ceil(K/C0),
ceil(N/16), 16, C0]; C0 32 FP8 / 64 FP4; `numerics.nz_format.nd_to_nz_codes`), N read from weight_scale; split-M,
E4M3 x E4M3 or FP4 x FP4 (FLOAT4_E1M2 needs it), the CGMCT kernel. Elements: ml_dtypes arrays (float8_e4m3fn,
float8_e5m2, float4_e2m1fn, one code per byte) or uint8 codes with x_format / weight_dtype (weight_format also
takes the element format of an ND weight); scales float8_e8m0fnu or uint8 codes; bias FP32 [g, N] (FP4 only).
Errors: ConstraintError naming the rule, the tiling's (`TilingGMM`) and the entry's (operand ranks, K / N agreement,
group list sizes >= 0 covering at most M rows (split-M) or K (split-K), sparse indices in [0, g)). Split-K with M
or N 0 returns the empty y untiled (ops-transformer 5778144 `grouped_quant_matmul_tiling.cpp:1107`). Rows of y
past the list's total stay 0. `return_stats=True`: (y, stats); `check=True`: HazardError on an error hazard.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE, SCALE_C0
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE
from mc2emu.numerics.payload import host_array, is_payload
from mc2emu.ops.grouped_matmul_mx_golden import group_entries
from mc2emu.ops.grouped_matmul_mx_host import (
    GmmGroupListType,
    GmmGroupType,
    GmmLaunchInfo,
    GmmProblem,
    GmmWeightFormat,
    run_grouped_matmul_mx,
)
from mc2emu.ops.quant_batch_matmul_mx_golden import infer_format
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.tiling.grouped_matmul_tiling import TilingGMM
from mc2emu.tiling.grouped_matmul_tiling_context import GeDataType, GMMCompileInfo, GmmTilingContext

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

GE_NAMES = {ElemFormat.E4M3: "float8_e4m3fn", ElemFormat.E5M2: "float8_e5m2", ElemFormat.E2M1: "float4_e2m1fn",
            ElemFormat.E1M2: "float4_e1m2"}

def _operand(arr: Any, fmt: ElemFormat | str | None, param: str, ndim: int) -> tuple[np.ndarray, ElemFormat]:
    a = host_array(arr)
    try:
        elem = infer_format(a, None, param) if fmt is None else parse_enum(ElemFormat, fmt, f"{param}_format")
    except (MxValueError, MxTypeError) as exc:
        raise ConstraintError(f"{param}.dtype", f"{exc}; pass uint8 codes with {param}_format") from None
    if a.dtype.itemsize != 1:
        raise ConstraintError(f"{param}.dtype", f"{param} must hold one element code per byte, got {a.dtype}")
    if a.ndim != ndim:
        raise ConstraintError(f"{param}.ndim", f"{param} must be {ndim}-D here, got shape {a.shape}")
    if elem.is_fp4 and a.size and not is_payload(a) and int(a.view(np.uint8).max()) >= 1 << elem.bits:
        raise ConstraintError(param, "FP4 codes must be < 16 (one unpacked code per byte)")
    return a, elem


def _weight_format(weight_format: Any, weight_dtype: Any) -> tuple[bool, Any]:
    """(NZ?, the weight's element format or None to infer it): `weight_format` names the storage (nd / nz /
    fractal_nz) or, as before, the element format of an ND weight; `weight_dtype` names the element format."""
    storage = None
    if isinstance(weight_format, GmmWeightFormat) or (isinstance(weight_format, str) and weight_format.strip().lower()
                                                       in {f.value for f in GmmWeightFormat}):
        storage = parse_enum(GmmWeightFormat, weight_format, "weight_format")
    elif weight_format is not None:
        if weight_dtype is not None and parse_enum(ElemFormat, weight_format, "weight_format") is not \
                parse_enum(ElemFormat, weight_dtype, "weight_dtype"):
            raise ConstraintError("weight_format / weight_dtype", f"weight_format={weight_format!r} names another "
                                  f"element format than weight_dtype={weight_dtype!r}")
        weight_dtype = weight_format
    return storage is not None and storage.is_nz, weight_dtype


def _nz_n(sw: np.ndarray, split_k: bool, trans_b: bool) -> int:
    """N of an NZ weight (its storage pads N): from the scale, (g, ceil(K/64), N, 2) / (g, N, ceil(K/64), 2), or
    split-K (K/64 + g, N, 2)."""
    axis = 1 if split_k or trans_b else 2
    if sw.ndim <= axis:
        raise ConstraintError("weight_scale: N of an NZ weight", f"an NZ weight pads N, so N is read from "
                              f"weight_scale; its shape {sw.shape} has no N axis")
    return int(sw.shape[axis])


def _scale(s: Any, param: str) -> np.ndarray:
    arr = host_array(s)
    if arr.dtype not in (np.dtype(np.uint8), E8M0_DTYPE):
        raise ConstraintError(f"{param}.dtype", f"{param} must be float8_e8m0fnu or uint8 E8M0 codes, got {arr.dtype}")
    return arr


@overload
def grouped_matmul_mx(x: Any, x_scale: Any, weight: Any, weight_scale: Any, group_list: Any, *,
                      group_type: GmmGroupType | str = ..., group_list_type: GmmGroupListType | str = ...,
                      trans_a: bool = ..., trans_b: bool = ..., out_dtype: Any = ..., bias: Any = ...,
                      block_dim: int | None = ..., x_format: ElemFormat | str | None = ...,
                      weight_format: ElemFormat | GmmWeightFormat | str | None = ...,
                      weight_dtype: ElemFormat | str | None = ..., variant: TailSplitVariant | str = ...,
                      check: bool = ..., timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                      observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                      data: bool = ...,
                      return_stats: Literal[False] = ...) -> np.ndarray: ...
@overload
def grouped_matmul_mx(x: Any, x_scale: Any, weight: Any, weight_scale: Any, group_list: Any, *,
                      group_type: GmmGroupType | str = ..., group_list_type: GmmGroupListType | str = ...,
                      trans_a: bool = ..., trans_b: bool = ..., out_dtype: Any = ..., bias: Any = ...,
                      block_dim: int | None = ..., x_format: ElemFormat | str | None = ...,
                      weight_format: ElemFormat | GmmWeightFormat | str | None = ...,
                      weight_dtype: ElemFormat | str | None = ..., variant: TailSplitVariant | str = ...,
                      check: bool = ..., timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                      observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                      data: bool = ...,
                      return_stats: Literal[True]) -> tuple[np.ndarray, GmmLaunchInfo]: ...


def grouped_matmul_mx(x: Any, x_scale: Any, weight: Any, weight_scale: Any, group_list: Any, *,
                      group_type: GmmGroupType | str = "split_m", group_list_type: GmmGroupListType | str = "cumsum",
                      trans_a: bool = False, trans_b: bool = False, out_dtype: Any = "bfloat16", bias: Any = None,
                      block_dim: int | None = None, x_format: ElemFormat | str | None = None,
                      weight_format: ElemFormat | GmmWeightFormat | str | None = None,
                      weight_dtype: ElemFormat | str | None = None, variant: TailSplitVariant | str = "cgmct",
                      check: bool = True, timeout: float | None = None, perturb: PerturbPolicy | None = None,
                      observers: Iterable[Observer] = (), faults: FaultPlan | None = None,
                      data: bool = True,
                      return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, GmmLaunchInfo]:
    """Run the MX GroupedMatmul kernel on a fresh emulated device and return y (see the module docstring).

    block_dim: AICs the tiling may use (default: the platform's 32). variant: which source kernel runs,
    "cgmct" (default: GmmCgmctMxKernel, the non-IS_BLAZE branch of grouped_matmul_apt.cpp), "blaze" (the IS_BLAZE
    branch: ops-tensor kernel_qgmm_mx.h with its BlockMmad block_mmad_qgmm_mx.h and tail alignments; every
    group-list type) or "blaze_sample" (ops-tensor's sample kernel: its tail alignments, CGMCT's BlockMmad, a
    count group list only). The outputs are bitwise equal across variants. The common keywords
    (check, timeout, perturb, observers, faults) are those of `mc2emu.host.call_options`."""
    refuse(DAV_3510.block_dim_violations(block_dim))
    gt = parse_enum(GmmGroupType, group_type, "group_type")
    split_k = gt is GmmGroupType.SPLIT_K
    glt = parse_enum(GmmGroupListType, group_list_type, "group_list_type")
    glt_name = glt.value
    tail_variant = parse_enum(TailSplitVariant, variant, "variant")
    weight_nz, w_elem = _weight_format(weight_format, weight_dtype)
    if weight_nz and tail_variant is not TailSplitVariant.CGMCT:
        raise ConstraintError("weight_format NZ: variant cgmct", f"an NZ weight runs on the CGMCT kernel "
                              f"(grouped_matmul_apt.cpp without IS_BLAZE); variant {tail_variant.value!r} has no NZ "
                              f"copy path here")
    xa, fx = _operand(x, x_format, "x", 2)
    wa, fw = _operand(weight, w_elem, "weight", (2 if split_k else 3) + (2 if weight_nz else 0))
    sx, sw = _scale(x_scale, "x_scale"), _scale(weight_scale, "weight_scale")
    gl = np.asarray(group_list)
    if gl.dtype.kind not in "iu":
        raise ConstraintError("group_list.dtype", f"group_list must hold integers (int64 on the device), got "
                              f"{gl.dtype}")
    out = parse_enum(OutDtype, out_dtype, "out_dtype")
    m, k = (xa.shape[1], xa.shape[0]) if trans_a else xa.shape
    if weight_nz:  # the tiling checks the storage dims against K and N (CheckShapeForWeightNz)
        n = _nz_n(sw, split_k, trans_b)
        kw = k
        origin = (*wa.shape[:-4], *((n, k) if trans_b else (k, n)))
    else:
        kw, n = (wa.shape[-1], wa.shape[-2]) if trans_b else (wa.shape[-2], wa.shape[-1])
        origin = tuple(wa.shape)
    if kw != k:
        raise ConstraintError("x.k == weight.k", f"K of x is {k}, K of weight is {kw} (trans_a={trans_a}, "
                              f"trans_b={trans_b})")
    g = int(gl.shape[0]) if gl.ndim else 0
    bias_arr = None if bias is None else host_array(bias)
    if bias_arr is not None and bias_arr.dtype != np.float32:
        raise ConstraintError("bias.dtype", f"bias must be float32 [g, N], got {bias_arr.dtype}")
    info = GMMCompileInfo.from_platform(aic_num=block_dim)
    ctx = GmmTilingContext(x_shape=tuple(xa.shape), weight_shape=origin, scale_shape=tuple(sw.shape),
                           per_token_scale_shape=tuple(sx.shape), group_list_shape=tuple(gl.shape),
                           bias_shape=None if bias_arr is None else tuple(bias_arr.shape),
                           x_dtype=GeDataType.parse(GE_NAMES[fx]), weight_dtype=GeDataType.parse(GE_NAMES[fw]),
                           y_dtype=GeDataType.parse(out.value),
                           transpose_x=bool(trans_a), transpose_weight=bool(trans_b), group_type=gt.code,
                           group_list_type=glt.code, compile_info=info,
                           weight_format="FRACTAL_NZ" if weight_nz else "ND",
                           weight_storage_shape=tuple(wa.shape) if weight_nz else None)
    if split_k and (m == 0 or n == 0):  # TQ:1107: the framework skips tiling and returns the empty y
        empty = np.zeros((g, m, n), dtype=out.dtype)
        return (empty, GmmLaunchInfo(0, None, 0.0)) if return_stats else empty
    tiling = TilingGMM(ctx)  # every source rule: ConstraintError naming it
    # The tiling's scale checks skip a dimension of 1 (CheckQuantParamsForMXTypeM / K); the kernel reads the full
    # MX layout, so a scale short of it would be read past its end.
    kp = k // MXFP_DIVISOR_SIZE + g if split_k else -(-k // MXFP_DIVISOR_SIZE)
    want_sx = (kp, m, SCALE_C0) if split_k else (m, kp, SCALE_C0)
    want_sw = (kp, n, SCALE_C0) if split_k else (wa.shape[0], *((n, kp) if trans_b else (kp, n)), SCALE_C0)
    for name, arr, want in (("x_scale", sx, want_sx), ("weight_scale", sw, want_sw)):
        if arr.shape != want:
            raise ConstraintError(f"{name}.shape (MX layout)", f"{name} must be {want}, got {arr.shape}")
    entries = group_entries(gl, glt_name)
    sizes = [s for _g, s in entries]
    if any(s < 0 for s in sizes):
        raise ConstraintError("group_list: sizes >= 0", f"group sizes {sizes} (a cumsum list must not decrease)")
    if glt is GmmGroupListType.SPARSE and any(not 0 <= gi < g for gi, _s in entries):
        raise ConstraintError("group_list: sparse group index in [0, g)", f"group indices "
                              f"{[gi for gi, _ in entries]} for {g} group(s)")
    if glt is GmmGroupListType.SPARSE and not split_k and wa.shape[0] < g:
        raise ConstraintError("weight groups", f"weight holds {wa.shape[0]} groups, the list names {g}")
    if split_k and g == 0:  # the kernel indexes the group list's last entry
        raise ConstraintError("group_list: split-K g >= 1", "an empty group list leaves y [0, M, N] no group to "
                              "compute")
    if split_k and sum(sizes) > k:
        raise ConstraintError("group_list: split-K sizes <= K", f"sizes {sizes} sum to {sum(sizes)}, K is {k}")
    if not split_k and sum(sizes) > m:
        raise ConstraintError("group_list: split-M rows <= M", f"sizes {sizes} cover {sum(sizes)} rows, x has {m}")
    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults,
                        data=data)
    problem = GmmProblem(xa, fx, wa, fw, sx, sw, gl, glt_name, split_k, bool(trans_b), int(m), int(n), int(k), g,
                         out, bias_arr, tiling, tail_variant, weight_nz)
    y, hazards, launch_info = run_grouped_matmul_mx(problem, opts)
    return call_result(y, launch_info, hazards, opts, return_stats)
