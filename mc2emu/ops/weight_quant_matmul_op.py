"""`weight_quant_matmul`: the V+C weight-dequant prologue fusion (seed 001) on one emulated NPU (no MPI).

    C = weight_quant_matmul(x, weight, antiquant_scale, antiquant_offset=None, *, bias=None, trans_b=False,
                            out_dtype=None, mode="full", block_dim=None, ..., check=True, timeout=None, ...)

x (M, K) bfloat16 / float16; weight (K, N), or (N, K) when `trans_b`, int8 / float8_e4m3fn / float8_e5m2;
antiquant_scale and antiquant_offset (N,) in x's dtype; bias (N,) float32; out_dtype bfloat16, float16 or
float32 (default: x's dtype). C = x @ B_dequant (+ bias) accumulated in FP32 (L0C), rounded once to
out_dtype; B_dequant = (B + offset) * scale, the Add and the Mul each rounded to x's dtype.

Modes (the seed's isolation modes, to tell a dequant error from a matmul error): "full" (the V+C kernel,
returns C); "a_only_mmad" (B arrives dequantized by the golden, the AIVs only move it into L1; returns C);
"dequant_only" (no MMAD; returns B_dequant in weight's layout, in x's dtype).

The host program is `weight_quant_matmul_host.py`. `tiling_overrides` replaces fields of the computed
`WeightQuantMatmulTilingData` (a hand-written tiling); the kernel then runs what it is given, hazards included.
Enum keywords take the member or its string (`mc2emu.arch.parse_enum`); common keywords:
`mc2emu.host.call_options`; `return_stats=True`: (output, stats). Errors: ConstraintError naming the rule;
with check=True, HazardError (hazards, output) when the launch filed error-severity hazards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import ml_dtypes
import numpy as np

from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.kernel.weight_quant_matmul_kernel import WeightQuantMatmulMode
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse
from mc2emu.numerics import OutDtype
from mc2emu.numerics.errors import MxTypeError
from mc2emu.numerics.payload import Payload, host_array, is_payload
from mc2emu.numerics.weight_dequant import WeightDtype
from mc2emu.ops.weight_quant_matmul_golden import golden_weight_dequant
from mc2emu.ops.weight_quant_matmul_host import WqmmLaunchInfo, WqmmProblem, run_wqmm
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.tiling.weight_quant_tiling_swat import WeightQuantArgs, can_implement

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

X_DTYPES = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))
BIAS_DTYPE = np.dtype(np.float32)  # BlockMmad's BiasType is float (seed pitfall 2)


def _channel_vector(v: Any, n: int, dtype: np.dtype, param: str) -> np.ndarray:
    arr = host_array(v)
    if arr.dtype != dtype:
        raise ConstraintError(f"{param}.dtype", f"{param} must have x's dtype {dtype} (the dequant type), got "
                              f"{arr.dtype}")
    if arr.shape != (n,):
        raise ConstraintError(f"{param}.shape", f"{param} must be per channel, shape ({n},), got {arr.shape}")
    return arr


def validate(x: Any, weight: Any, antiquant_scale: Any, antiquant_offset: Any, bias: Any, trans_b: bool,
             out_dtype: Any, mode: Any, block_dim: int | None) -> WqmmProblem:
    """The operator's input rules, each a ConstraintError naming the rule; the validated problem."""
    refuse(DAV_3510.block_dim_violations(block_dim))
    a = host_array(x)
    if a.dtype not in X_DTYPES:
        raise ConstraintError("x.dtype", f"x must be bfloat16 or float16, got {a.dtype}")
    if a.ndim != 2:
        raise ConstraintError("x.ndim", f"x must be 2-D (M, K), got shape {a.shape}")
    w = host_array(weight)
    try:
        wt = WeightDtype.of(w)
    except MxTypeError as exc:
        raise ConstraintError("weight.dtype", str(exc)) from None
    if w.ndim != 2:
        raise ConstraintError("weight.ndim", f"weight must be 2-D ((K, N), or (N, K) when trans_b), got {w.shape}")
    kw, n = (w.shape[1], w.shape[0]) if trans_b else (w.shape[0], w.shape[1])
    m, k = a.shape
    if kw != k:
        raise ConstraintError("x.k == weight.k", f"x has K = {k}, the weight has K = {kw} (trans_b={trans_b})")
    scale = _channel_vector(antiquant_scale, n, a.dtype, "antiquant_scale")
    offset = None if antiquant_offset is None else _channel_vector(antiquant_offset, n, a.dtype, "antiquant_offset")
    bias_arr = None
    if bias is not None:
        bias_arr = host_array(bias)
        if bias_arr.dtype != BIAS_DTYPE or bias_arr.shape != (n,):
            raise ConstraintError("bias", f"bias must be float32 of shape ({n},) (the BlockMmad's BiasType is "
                                  f"float), got {bias_arr.dtype} {bias_arr.shape}")
    out = a.dtype if out_dtype is None else parse_enum(OutDtype, out_dtype, "out_dtype").dtype
    md = parse_enum(WeightQuantMatmulMode, mode, "mode")
    reasons = can_implement(WeightQuantArgs(int(m), int(n), int(k), bool(trans_b), offset is not None,
                                            bias_arr is not None))
    if reasons:
        raise ConstraintError("can_implement", "; ".join(reasons))
    b_dequant = (golden_weight_dequant(w, scale, offset, trans_b=trans_b)
                 if md is WeightQuantMatmulMode.A_ONLY_MMAD and not is_payload(w) else None)
    if md is WeightQuantMatmulMode.A_ONLY_MMAD and is_payload(w):   # a protocol-only run's shape-only weight
        b_dequant = Payload(w.shape, scale.dtype)  # type: ignore[assignment]
    return WqmmProblem(a, w, wt, scale, offset, bias_arr, out, int(m), int(n), int(k), bool(trans_b), md, b_dequant)


@overload
def weight_quant_matmul(x: Any, weight: Any, antiquant_scale: Any, antiquant_offset: Any = ..., *, bias: Any = ...,
                        trans_b: bool = ..., out_dtype: Any = ..., mode: WeightQuantMatmulMode | str = ...,
                        block_dim: int | None = ..., tiling_overrides: Mapping[str, int] | None = ...,
                        check: bool = ..., timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                        observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                        data: bool = ...,
                        return_stats: Literal[False] = ...) -> np.ndarray: ...
@overload
def weight_quant_matmul(x: Any, weight: Any, antiquant_scale: Any, antiquant_offset: Any = ..., *, bias: Any = ...,
                        trans_b: bool = ..., out_dtype: Any = ..., mode: WeightQuantMatmulMode | str = ...,
                        block_dim: int | None = ..., tiling_overrides: Mapping[str, int] | None = ...,
                        check: bool = ..., timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                        observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                        data: bool = ...,
                        return_stats: Literal[True]) -> tuple[np.ndarray, WqmmLaunchInfo]: ...


def weight_quant_matmul(x: Any, weight: Any, antiquant_scale: Any, antiquant_offset: Any = None, *,
                        bias: Any = None, trans_b: bool = False, out_dtype: Any = None,
                        mode: WeightQuantMatmulMode | str = "full", block_dim: int | None = None,
                        tiling_overrides: Mapping[str, int] | None = None, check: bool = True,
                        timeout: float | None = None, perturb: PerturbPolicy | None = None,
                        observers: Iterable[Observer] = (), faults: FaultPlan | None = None,
                        data: bool = True,
                        return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, WqmmLaunchInfo]:
    """Run the V+C weight-quant matmul kernel on a fresh emulated device (see the module docstring).

    block_dim: AICs to tile for (default: the platform's; the launch uses the tiling's usedCoreNum). The
    common keywords (`check`, `timeout`, `perturb`, `observers`, `faults`) are `mc2emu.host.call_options`'."""
    problem = validate(x, weight, antiquant_scale, antiquant_offset, bias, trans_b, out_dtype, mode, block_dim)
    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults,
                        data=data)
    res, hazards = run_wqmm(problem, opts, block_dim=block_dim, tiling_overrides=tiling_overrides)
    out = res.b_dequant if problem.mode is WeightQuantMatmulMode.DEQUANT_ONLY else res.c
    assert out is not None
    return call_result(out, res.info, hazards, opts, return_stats)
