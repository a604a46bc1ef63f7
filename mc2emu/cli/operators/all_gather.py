"""CLI entry of all_gather_quant_matmul (SPEC §7.1): modes, hazard rules, shapes, inputs, golden, compare.

The operator is `mc2emu.ops.all_gather_quant_matmul` (one call per rank, collective).

Shape: m = rows of x1 per rank, k = K, n = N. Inputs: the CANN AG ST recipe (`gen_ag_st_inputs`, seed
`--seed` + rank; the ST's own is 42 + rank). Golden: the CANN recipe on the gathered x1 (one MPI allgather).
Compare: the AG ST verify rule, bit-exact or <= 1 bf16 ULP everywhere.

Launch: `--block-dim`, else max(8, R) blocks. The CANN cases (m >= 2048, n >= 2560) fill 32 cores with
baseM 256, which divides the 512-row tiles; the reduced default shape keeps that character at 8 blocks
(at 32 cores AdjustBasicBlock would shrink baseM and blocks would straddle regions).

Modes (`AGMode`): the two wait orders. Hazard showcase (`--hazards`): the kernel without its flag-0 wait
(UNCONSUMED_FLAG) and with UpdateAddrList before the wait (ADDR_LIST_UPDATED_EARLY); the mode's `variant`
names the reproduced kernel variant (`AgKernelVariant`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant
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
)
from mc2emu.numerics import ElemFormat, bf16_ulp_distance
from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.runtime.hazards import Hazard
from mc2emu.tiling.all_gather_quant_matmul_tiling import MAX_RANKS
from mc2emu.tiling.all_to_all_quant_matmul_tiling import WaitOrder


@dataclass(frozen=True)
class AGMode(OperatorMode):
    """wait order, and the kernel variant (the source, or a reproduced hazard)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"wait_order": WaitOrder, "variant": AgKernelVariant}

    wait_order: WaitOrder = WaitOrder.MASK
    variant: AgKernelVariant = AgKernelVariant.SOURCE

    def label_parts(self) -> list[str]:
        parts = [self.wait_order.value]
        if self.variant is not AgKernelVariant.SOURCE:
            parts.append(self.variant.value)
        return parts


MIN_BLOCK_DIM = 8
# One full 512-row tile + a 13-row tail (the CANN m = 2061 character); quick: one 64-row tile.
DEFAULT_SHAPE = Shape(m=525, k=256, n=512)
QUICK_SHAPE = Shape(m=64, k=128, n=128)

MODES = tuple(AGMode(wo) for wo in WaitOrder)
HAZARD_MODES = (AGMode(WaitOrder.IN_ORDER, AgKernelVariant.SKIP_FLAG0_WAIT),
                AGMode(WaitOrder.MASK, AgKernelVariant.SKIP_FLAG0_WAIT),
                AGMode(WaitOrder.IN_ORDER, AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT))
RULES = (
    ModeRule({"variant": AgKernelVariant.SKIP_FLAG0_WAIT}, Expect(hazards=frozenset({Hazard.UNCONSUMED_FLAG})),
             "the AIV pre-sets flag 0 before its loop; a kernel that never waits it leaves one round per AIC"),
    ModeRule({"variant": AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT},
             Expect(hazards=frozenset({Hazard.ADDR_LIST_UPDATED_EARLY})),
             "the MAIN addresses move to the next round before that round's flag is waited"),
)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    return gen_ag_st_inputs(case.shape.m, case.shape.k, case.shape.n, rank, seed_base=case.seed)


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    return golden_all_gather_quant_matmul(comm.allgather(inputs["x1"]), comm.allgather(inputs["x1_scale"]),
                                          inputs["x2"], inputs["x2_scale"])


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    mode = case.mode
    assert isinstance(mode, AGMode)
    return all_gather_quant_matmul(
        inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], wait_order=mode.wait_order,
        block_dim=ctx.block_dim if ctx.block_dim is not None else max(MIN_BLOCK_DIM, ctx.size), check=ctx.check,
        timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers, comm=ctx.comm,
        kernel_variant=mode.variant)


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if ref is None:
        return Comparison(False, note="no golden")
    out = np.asarray(out)
    if out.shape != ref.shape:
        return Comparison(False, note=f"output shape {out.shape}, golden {ref.shape}")
    diff = np.abs(out.astype(np.float32) - ref.astype(np.float32))
    max_abs = float(np.nanmax(diff)) if diff.size and not np.all(np.isnan(diff)) else 0.0
    ulp = bf16_ulp_distance(out.astype(ml_dtypes.bfloat16), ref.astype(ml_dtypes.bfloat16)) if out.size else 0
    return Comparison(ulp <= 1, max_abs, ulp, note="AG ST rule: bit-exact or <= 1 bf16 ULP")


def validate(case: Case, size: int) -> list[str]:
    out = []
    k = case.shape.k
    if k % 32 or (-(-k // 64)) % 2:
        out.append(f"AG-1/AG-2 K % 32 == 0 and ceil(K/64) even: --k {k}")
    if size > MAX_RANKS:
        out.append(f"AG-3 R <= {MAX_RANKS}: {size} ranks")
    return out


# `--predict` sweep: wait order x block_dim (the seed protocol; the slot ring is not emulated yet).
PREDICT_BLOCK_DIMS = (8, 16, 32)


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    return [Knob(AGMode(wo), bd, {"wait": wo.value, "block_dim": bd})
            for wo in WaitOrder for bd in PREDICT_BLOCK_DIMS if bd >= size]


SPEC = OperatorSpec(
    name="all_gather_quant_matmul",
    summary="MXFP8 matmul fused with an all-gather of A along M (SPEC §7.1, FragmentTensor kernel)",
    mode_type=AGMode,
    make_inputs=make_inputs,
    golden=golden,
    execute=execute,
    compare=compare,
    modes=MODES,
    hazard_modes=HAZARD_MODES,
    rules=RULES,
    default_shape=DEFAULT_SHAPE,
    quick_shape=QUICK_SHAPE,
    dtypes=(ElemFormat.E4M3,),
    input_names=("x1", "x1_scale", "x2", "x2_scale"),
    validate=validate,
    predict_knobs=predict_knobs,
)
