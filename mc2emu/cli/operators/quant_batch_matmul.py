"""CLI entry of quant_batch_matmul_mx (QBMM MX, seed 004): one emulated NPU per call, no communication.

Under mpirun every rank runs its own instance on its own data (seed + rank), so the case shows the
single-NPU kernel at the same world size as the MC2 operators.

Shape: m x k x n of one matmul (x2 stored transposed, the official transB = true instantiation).
Inputs: the recipe of `launch/bench_qbmm.py` (CANN ST style): elements uniform(1, 8) encoded to the format
(saturating, so E1M2 holds its max), scales 2^0 / 2^1; bias float32 (n,) uniform(-1, 1).
Modes: plain, + bias, a batch of 2 (the multi-batch path) in the later kernel revision that advances the
scale addresses per batch; hazard showcase: the batch of 2 in the default (SPEC) revision, whose
AddBatchOffset leaves the scales at batch 0 (SCALE_BATCH_OFFSET_MISSING), and the compile-time atomic policy
on the multi-batch path, which never calls SetAtomicNone in the source (SPEC §5): ATOMIC_LEFT_SET; its
SetAtomicAdd<float> over this bf16 C adds float words over bf16 data: ATOMIC_DTYPE_MISMATCH (runtime/gm.py).
Compare: the golden (decode, one FP32 matmul, + bias, cast) bit-exact or within 1 bf16 ULP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import QbmmMxRevision
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
from mc2emu.numerics import (
    ElemFormat,
    ag_compare,
    encode_elements,
    gen_ag_scales,
    max_abs_error,
    to_ascend_scale_a,
    to_ascend_scale_b,
    ulp_distance,
)
from mc2emu.numerics.constants import MX_GROUP_SIZE
from mc2emu.ops import golden_quant_batch_matmul_mx, quant_batch_matmul_mx
from mc2emu.runtime.hazards import Hazard


@dataclass(frozen=True)
class QbmmMode(OperatorMode):
    """bias, the compile-time atomic policy, the leading batch of x1, the kernel_qbmm_mx.h revision (None:
    the operator's default)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"bias": bool, "atomic": bool, "batch": int,
                                                              "revision": QbmmMxRevision}

    bias: bool = False
    atomic: bool = False
    batch: int = 1
    revision: QbmmMxRevision | None = None

    def label_parts(self) -> list[str]:
        parts = []
        if self.bias:
            parts.append("+bias")
        if self.revision is not None:
            parts.append(f"rev {self.revision.value}")
        if self.atomic:
            parts.append("atomic")
        if self.batch != 1:
            parts.append(f"batch{self.batch}")
        return parts


DEFAULT_SHAPE = Shape(m=512, k=1024, n=1024)
QUICK_SHAPE = Shape(m=64, k=128, n=128)
ST_LOW, ST_HIGH = 1.0, 8.0
BIAS_LOW, BIAS_HIGH = -1.0, 1.0
MULTI_BATCH = 2

FIXED_REVISION = QbmmMxRevision.CC21C0D6   # kernel_qbmm_mx.h revision with per-batch scale offsets, SetAtomicNone

MODES = (QbmmMode(), QbmmMode(bias=True), QbmmMode(batch=MULTI_BATCH, revision=FIXED_REVISION))
HAZARD_MODES = (QbmmMode(batch=MULTI_BATCH), QbmmMode(atomic=True, batch=MULTI_BATCH))
RULES = (
    ModeRule({"atomic": True, "batch": MULTI_BATCH, "revision": None},
             Expect(hazards=frozenset({Hazard.ATOMIC_LEFT_SET, Hazard.ATOMIC_DTYPE_MISMATCH})),
             "the multi-batch path never calls SetAtomicNone; SetAtomicAdd<float> over the bf16 C adds float words "
             "over bf16 data"),
    ModeRule({"batch": MULTI_BATCH, "revision": None}, Expect(hazards=frozenset({Hazard.SCALE_BATCH_OFFSET_MISSING})),
             "AddBatchOffset does not advance the scale addresses"),
)


def _codes(rng: np.random.Generator, shape: tuple[int, ...], fmt: ElemFormat) -> np.ndarray:
    return encode_elements(rng.uniform(ST_LOW, ST_HIGH, shape).astype(np.float32), fmt).view(fmt.storage_dtype)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    m, k, n = case.shape.m, case.shape.k, case.shape.n
    fmt = case.dtype or ElemFormat.E4M3
    rng = np.random.default_rng([case.seed, rank])
    nb = -(-k // MX_GROUP_SIZE)
    mode = case.mode
    assert isinstance(mode, QbmmMode)
    lead = (mode.batch,) if mode.batch != 1 else ()
    x1 = _codes(rng, (*lead, m, k), fmt)
    x1_scale = np.stack([to_ascend_scale_a(gen_ag_scales((m, nb), rng)) for _ in range(mode.batch)])
    arrays = {"x1": x1, "x1_scale": x1_scale if lead else x1_scale[0], "x2": _codes(rng, (n, k), fmt),
              "x2_scale": to_ascend_scale_b(gen_ag_scales((n, nb), rng), trans=True)}
    if mode.bias:
        arrays["bias"] = rng.uniform(BIAS_LOW, BIAS_HIGH, n).astype(np.float32)
    return arrays


def _formats(case: Case) -> dict[str, Any]:
    fmt = case.dtype or ElemFormat.E4M3
    return {} if fmt.ml_dtype is not None else {"x1_format": fmt, "x2_format": fmt}


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    return golden_quant_batch_matmul_mx(inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"],
                                        bias=inputs.get("bias"), trans_b=True, out_dtype="bfloat16",
                                        **_formats(case))


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    mode = case.mode
    assert isinstance(mode, QbmmMode)
    revision = mode.revision if mode.revision is not None else QbmmMxRevision.R106B970C
    return quant_batch_matmul_mx(inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"],
                                 bias=inputs.get("bias"), trans_b=True, out_dtype="bfloat16", atomic=mode.atomic,
                                 block_dim=ctx.block_dim, revision=revision, check=ctx.check, timeout=ctx.timeout,
                                 perturb=ctx.perturb, observers=ctx.observers, data=ctx.data, **_formats(case))


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    """`--predict` sweep: block_dim (`BLOCK_DIM_SWEEP`, up to the AIC count) of the plain mode."""
    return block_dim_knobs(QbmmMode())


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    ref = np.asarray(ref)
    o = np.asarray(out).astype(ml_dtypes.bfloat16)
    r = ref.astype(ml_dtypes.bfloat16)
    return Comparison(ag_compare(o, r), max_abs_error(out, ref), ulp_distance(o, r))


SPEC = OperatorSpec(
    name="quant_batch_matmul_mx",
    summary="QBMM MX: Blaze GemmUniversal MX matmul on one NPU per rank (seed 004)",
    mode_type=QbmmMode,
    make_inputs=make_inputs,
    golden=golden,
    execute=execute,
    compare=compare,
    modes=MODES,
    hazard_modes=HAZARD_MODES,
    rules=RULES,
    default_shape=DEFAULT_SHAPE,
    quick_shape=QUICK_SHAPE,
    dtypes=(ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1, ElemFormat.E1M2),
    input_names=("x1", "x1_scale", "x2", "x2_scale", "bias"),
    predict_knobs=predict_knobs,
)
