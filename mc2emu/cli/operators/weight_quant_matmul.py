"""CLI entry of weight_quant_matmul (seed 001, the V+C weight-dequant prologue fusion): one emulated NPU per
call, no communication; under mpirun every rank runs its own instance on its own data (seed + rank).

Shape: m x k x n (x (m, k), weight (k, n), or (n, k) with trans_b). Inputs: x standard normal in bf16; the
weight int8 uniform over [-128, 127] or fp8 from 4 * standard normal (saturating casts of finite values);
antiquant_scale uniform(1, 9) / 512 and offset 3 * standard normal, both bf16; bias float32 uniform(-1, 1).
Modes: the weight dtypes with trans_b / offset / bias, and the isolation modes of the seed's precision
diagnosis: `isolate` = full (V+C), a_only_mmad (B given already dequantized by the golden; the MMAD path
alone), dequant_only (the AIVs' B_dequant written to GM, no MMAD; compared bit for bit with the golden's).
Hazard showcase: a hand-written tiling (nBaseTailSplitCnt 2, nTailMain = the merged N edge) whose last N
tile is empty: the kernel's early `return` skips the AIV Cleanup and the AIC's last "L1 free" Sets stay
pending (EMPTY_TAIL_EARLY_RETURN, UNCONSUMED_FLAG).
Compare: B_dequant bit-exact; C per element within one ULP of its dtype or within one ULP of the largest
|golden| (the golden's matmul is one FP32 BLAS call, the kernel accumulates per baseK step: outputs that
cancel to near zero differ by many ULPs of their own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.blaze.gemm.kernel.weight_quant_matmul_kernel import WeightQuantMatmulMode as Isolate
from mc2emu.cli.options import OperatorOptions, option
from mc2emu.cli.scenarios import (
    Arrays,
    Case,
    Comparison,
    ExecContext,
    Expect,
    Knob,
    ModeRule,
    OperatorMode,
    OperatorSpec,
    Shape,
    block_dim_knobs,
    comparison_refused,
)
from mc2emu.numerics import WeightDtype, max_abs_error, ulp_distances
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops import golden_weight_dequant, golden_weight_quant_matmul, weight_quant_matmul
from mc2emu.runtime.hazards import Hazard

X_DTYPE = np.dtype(ml_dtypes.bfloat16)
SCALE_LOW, SCALE_HIGH, SCALE_DIV = 1.0, 9.0, 512.0
FP8_SPREAD = 4.0
OFFSET_SPREAD = 3.0
BIAS_LOW, BIAS_HIGH = -1.0, 1.0
EMPTY_TAIL_BASE_N = 32  # the hazard tiling's baseN (a hand-written tiling, not WeightQuantTilingSwat's)
MAX_ULP = 1


@dataclass(frozen=True)
class WqmmMode(OperatorMode):
    """weight dtype, trans_b, offset, bias, the isolation mode, and the empty-tail hazard tiling."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"weight": WeightDtype, "trans_b": bool,
                                                              "offset": bool, "bias": bool, "isolate": Isolate,
                                                              "empty_tail": bool}

    weight: WeightDtype = WeightDtype.INT8
    trans_b: bool = False
    offset: bool = False
    bias: bool = False
    isolate: Isolate = Isolate.FULL
    empty_tail: bool = False

    def label_parts(self) -> list[str]:
        parts = [self.weight.value.replace("float8_", "")]
        if self.trans_b:
            parts.append("transB")
        if self.offset:
            parts.append("+offset")
        if self.bias:
            parts.append("+bias")
        if self.isolate is not Isolate.FULL:
            parts.append(self.isolate.value)
        if self.empty_tail:
            parts.append("empty-tail")
        return parts


@dataclass(frozen=True)
class WqmmOptions(OperatorOptions):
    """weight_quant_matmul's own option: the isolation mode of the seed's precision diagnosis."""

    isolate: Isolate | None = option("full | a_only_mmad | dequant_only: the seed's isolation modes (override the "
                                     "modes' isolation)", enum=Isolate, mode=True)


DEFAULT_SHAPE = Shape(m=128, k=1024, n=1024)
QUICK_SHAPE = Shape(m=64, k=256, n=256)

MODES = (WqmmMode(), WqmmMode(trans_b=True, offset=True, bias=True),
         WqmmMode(weight=WeightDtype.FLOAT8_E4M3FN, offset=True),
         WqmmMode(weight=WeightDtype.FLOAT8_E5M2, trans_b=True, bias=True),
         WqmmMode(isolate=Isolate.A_ONLY_MMAD, offset=True),
         WqmmMode(isolate=Isolate.DEQUANT_ONLY, offset=True, trans_b=True))
HAZARD_MODES = (WqmmMode(empty_tail=True),)
RULES = (
    ModeRule({"empty_tail": True, "isolate": (Isolate.FULL, Isolate.A_ONLY_MMAD)},
             Expect(hazards=frozenset({Hazard.UNCONSUMED_FLAG})),
             "the AIV's early return on an empty N extent skips Cleanup (EMPTY_TAIL_EARLY_RETURN, a warning, "
             "names the tile)"),
)


def _mode(case: Case) -> WqmmMode:
    mode = case.mode
    if not isinstance(mode, WqmmMode):
        raise TypeError(f"weight_quant_matmul takes a WqmmMode, got {type(mode).__name__}")
    return mode


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    m, k, n = case.shape.m, case.shape.k, case.shape.n
    mode = _mode(case)
    rng = np.random.default_rng([case.seed, rank])
    wshape = (n, k) if mode.trans_b else (k, n)
    if mode.weight is WeightDtype.INT8:
        w = rng.integers(-128, 128, wshape).astype(np.int8)
    else:
        w = (rng.standard_normal(wshape) * FP8_SPREAD).astype(np.dtype(mode.weight.value))
    arrays = {"x": rng.standard_normal((m, k)).astype(X_DTYPE), "weight": w,
              "antiquant_scale": (rng.uniform(SCALE_LOW, SCALE_HIGH, n) / SCALE_DIV).astype(X_DTYPE)}
    if mode.offset:
        arrays["antiquant_offset"] = (rng.standard_normal(n) * OFFSET_SPREAD).astype(X_DTYPE)
    if mode.bias:
        arrays["bias"] = rng.uniform(BIAS_LOW, BIAS_HIGH, n).astype(np.float32)
    return arrays


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    mode = _mode(case)
    if mode.isolate is Isolate.DEQUANT_ONLY:
        return golden_weight_dequant(inputs["weight"], inputs["antiquant_scale"], inputs.get("antiquant_offset"),
                                     trans_b=mode.trans_b)
    return golden_weight_quant_matmul(inputs["x"], inputs["weight"], inputs["antiquant_scale"],
                                      inputs.get("antiquant_offset"), bias=inputs.get("bias"), trans_b=mode.trans_b)


def empty_tail_tiling(n: int) -> dict[str, int]:
    """The hazard's hand-written tiling fields: baseN 32, the last two N tiles merged with nTailMain equal to
    the whole merged edge, so the last tile has 0 columns."""
    n_cnt = CeilDiv(n, EMPTY_TAIL_BASE_N)
    return {"baseN": EMPTY_TAIL_BASE_N, "nBaseTailSplitCnt": 2,
            "nTailMain": n - (n_cnt - 2) * EMPTY_TAIL_BASE_N}


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    mode = _mode(case)
    overrides = empty_tail_tiling(case.shape.n) if mode.empty_tail else None
    return weight_quant_matmul(inputs["x"], inputs["weight"], inputs["antiquant_scale"],
                               inputs.get("antiquant_offset"), bias=inputs.get("bias"), trans_b=mode.trans_b,
                               mode=mode.isolate, block_dim=ctx.block_dim, check=ctx.check, timeout=ctx.timeout,
                               tiling_overrides=overrides, perturb=ctx.perturb, observers=ctx.observers, data=ctx.data)


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    """B_dequant bit for bit; C per element within one ULP of its dtype, or within one ULP of the largest
    |golden| (the kernel sums K in L0C per baseK step, the golden in one BLAS call: on outputs that cancel
    to near zero the two FP32 sums differ by a few units of the largest terms, many ULPs of the small result)."""
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    ref = np.asarray(ref)
    o = np.asarray(out)
    if o.dtype != ref.dtype:
        return Comparison(False, note=f"output dtype {o.dtype}, golden {ref.dtype}")
    diff = np.abs(o.astype(np.float32) - ref.astype(np.float32))
    max_abs = max_abs_error(o, ref)
    if o.dtype.itemsize != 2:
        return Comparison(bool(np.array_equal(o, ref)), max_abs)
    ulps = ulp_distances(o, ref)
    ulp = int(np.max(ulps, initial=0))
    if ref.dtype == X_DTYPE and ulp == 0:
        return Comparison(True, max_abs, ulp)
    mbits = 7 if ref.dtype == X_DTYPE else 10
    big = float(np.max(np.abs(ref.astype(np.float32)), initial=0.0))
    scale_ulp = 2.0 ** (np.floor(np.log2(big)) - mbits) if big > 0 else 0.0
    ok = bool(np.all((ulps <= MAX_ULP) | (diff <= scale_ulp)))
    return Comparison(ok, max_abs, ulp, note="" if ok else f"beyond 1 ULP and {scale_ulp:g} absolute")


def validate(case: Case, size: int) -> list[str]:
    mode = _mode(case)
    reasons = []
    if mode.empty_tail and CeilDiv(case.shape.n, EMPTY_TAIL_BASE_N) < 2:
        reasons.append(f"the empty-tail tiling needs n > {EMPTY_TAIL_BASE_N}")
    return reasons


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    """`--predict` sweep: block_dim (`BLOCK_DIM_SWEEP`: the AICs WeightQuantTilingSwat may use, each with its two
    dequantizing AIVs) of the plain int8 mode."""
    return block_dim_knobs(WqmmMode())


SPEC = OperatorSpec(
    name="weight_quant_matmul",
    summary="weight-quant matmul: AIVs dequantize int8 / fp8 weights into L1, the AIC runs the MMADs (seed 001)",
    mode_type=WqmmMode,
    make_inputs=make_inputs,
    golden=golden,
    execute=execute,
    compare=compare,
    modes=MODES,
    hazard_modes=HAZARD_MODES,
    rules=RULES,
    default_shape=DEFAULT_SHAPE,
    quick_shape=QUICK_SHAPE,
    input_names=("x", "weight", "antiquant_scale", "antiquant_offset", "bias"),
    validate=validate,
    predict_knobs=predict_knobs,
    options=WqmmOptions,
)
