"""CLI entry of grouped_matmul_mx (GroupedMatmulV4 MX, seeds 002 / 003): one emulated NPU per rank, no
communication, plus the host-only plan printouts (`--print-tiling`, `--print-schedule`).

    python -m mc2emu.run --op grouped_matmul_mx [--quick] [--hazards]
    python -m mc2emu.run --op grouped_matmul_mx --print-tiling --shape 600,700,4096 [--trans-b] [--json]
    python -m mc2emu.run --op grouped_matmul_mx --print-schedule --shape 100,700,4096 --group-list 25,25,25,25

The printouts run without MPI. Under mpirun every rank runs its own call on its own data (seed + rank).
Shape m x k x n: M = all rows of x (split-M) or of each group's y (split-K), K = the total K, N.
Groups (ragged, with an empty one): split-M rows M*3/8, 0, M/8, the rest (count list; cumsum with trans_b;
a sparse list whose empty entry stops the kernel, which still runs the last); split-K K extents K/2, 0, the
rest (a K == 0 group, zero-filled by the AIVs). Inputs: elements uniform(1, 8) with random signs, E8M0
scales 2^-1 .. 2^1. Hazard showcase: a sparse list naming group 0 after group 1 -- UpdateOffset returns at
groupIdx 0 and keeps group 1's offsets, so group 0 overwrites group 1's rows (OUTPUT_WRITE_COUNT).
Kernel variant (`--gmm-variant`): "cgmct" (default, GmmCgmctMxKernel), "blaze" (the IS_BLAZE kernel),
"blaze_sample" (ops-tensor's sample kernel; count lists only, other modes skipped with the reason).
Compare: the golden bit-exact or within 1 bf16 ULP. See docs/grouped-matmul-mx.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import ml_dtypes
import numpy as np

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
from mc2emu.numerics import ElemFormat, ag_compare, encode_elements, max_abs_error, ulp_distance
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE
from mc2emu.ops import golden_grouped_matmul_mx, grouped_matmul_mx
from mc2emu.ops.grouped_matmul_mx_tiling_api import (
    format_grouped_matmul_mx_schedule,
    format_grouped_matmul_mx_tiling,
    grouped_matmul_mx_schedule,
    grouped_matmul_mx_tiling,
)
from mc2emu.runtime.hazards import Hazard

if TYPE_CHECKING:
    from mc2emu.cli.options import RunOptions

DEFAULT_BLOCK_NUM = 32  # DAV_3510 AIC count


def plan_text(opts: RunOptions) -> str:
    """The tiling or the schedule `opts` asks for, as text or JSON; raises ConstraintError on a bad shape."""
    assert opts.shape is not None  # parse_options requires --shape with the print modes
    m, n, k = opts.shape
    x_dtype = opts.dtype.value if opts.dtype is not None else "float8_e4m3fn"
    groups = opts.group_list if opts.group_list is not None else ((k,) if opts.split_k else (m,))
    if opts.print_tiling:
        tiling = grouped_matmul_mx_tiling(m, n, k, group_num=len(groups), trans_a=opts.split_k,
                                          trans_b=opts.trans_b, x_dtype=x_dtype, w_dtype=x_dtype,
                                          group_type="split_k" if opts.split_k else "split_m")
        return format_grouped_matmul_mx_tiling(tiling, as_json=opts.json)
    block_num = opts.block_dim if opts.block_dim is not None else DEFAULT_BLOCK_NUM
    variant = opts.gmm_variant or "cgmct"
    if opts.split_k:
        records = grouped_matmul_mx_schedule(groups, n, k, m=m, split="K", block_num=block_num,
                                             trans_b=opts.trans_b, x_dtype=x_dtype, variant=variant)
    else:
        records = grouped_matmul_mx_schedule(groups, n, k, m=m, split="M", block_num=block_num,
                                             trans_b=opts.trans_b, x_dtype=x_dtype, variant=variant)
    return format_grouped_matmul_mx_schedule(records, as_json=opts.json)


@dataclass(frozen=True)
class GmmMode(OperatorMode):
    """split "M" / "K", trans_b, the group list form ("count", "cumsum", "sparse"), the hazard showcase
    (a sparse list naming group 0 after group 1) and the source kernel (`gmm_variant`)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"split": str, "trans_b": bool, "group_list_type": str,
                                                              "group0_late": bool, "gmm_variant": str}

    split: str = "M"
    trans_b: bool = False
    group_list_type: str = "count"
    group0_late: bool = False
    gmm_variant: str = "cgmct"

    def with_overrides(self, overrides: Mapping[str, object]) -> OperatorMode | None:
        """`--gmm-variant X` runs every mode on kernel X, except that the sample kernel drops the split-M modes
        whose group list it cannot read (cumsum, sparse)."""
        mode = super().with_overrides(overrides)
        if isinstance(mode, GmmMode) and mode.gmm_variant == "blaze_sample" and mode.split == "M" \
                and mode.group_list_type != "count":
            return None
        return mode

    def label_parts(self) -> list[str]:
        parts = [f"split-{self.split}", self.group_list_type]
        if self.gmm_variant != "cgmct":
            parts.append(self.gmm_variant)
        if self.trans_b:
            parts.append("transB")
        if self.group0_late:
            parts.append("group0-late")
        return parts


DEFAULT_SHAPE = Shape(m=1024, k=2048, n=1024)
QUICK_SHAPE = Shape(m=96, k=256, n=128)
ST_LOW, ST_HIGH = 1.0, 8.0
E8M0_ONE = 127  # E8M0 code of 2^0
MODES = (GmmMode(), GmmMode(trans_b=True, group_list_type="cumsum"), GmmMode(group_list_type="sparse"),
         GmmMode(split="K"), GmmMode(group_list_type="sparse", gmm_variant="blaze"),
         GmmMode(gmm_variant="blaze_sample"))
HAZARD_MODES = (GmmMode(group_list_type="sparse", group0_late=True),)
RULES = (ModeRule({"group0_late": True}, Expect(hazards=frozenset({Hazard.OUTPUT_WRITE_COUNT})),
                  "UpdateOffset returns at groupIdx 0: group 0 keeps group 1's offsets"),)


def _mode(case: Case) -> GmmMode:
    mode = case.mode
    assert isinstance(mode, GmmMode)
    return mode


def group_list_of(case: Case) -> tuple[np.ndarray, int]:
    """The case's group list (int64, the mode's form) and its group count."""
    mode = _mode(case)
    if mode.split == "K":
        k = case.shape.k
        return np.asarray([k // 2, 0, k - k // 2], dtype=np.int64), 3
    m = case.shape.m
    a, c = m * 3 // 8, m // 8
    if mode.group0_late:
        return np.asarray([[1, a], [0, m - a]], dtype=np.int64), 2
    if mode.group_list_type == "sparse":
        return np.asarray([[0, a], [2, c], [1, 0], [3, m - a - c]], dtype=np.int64), 4
    sizes = np.asarray([a, 0, c, m - a - c], dtype=np.int64)
    return (np.cumsum(sizes) if mode.group_list_type == "cumsum" else sizes), 4


def _codes(rng: np.random.Generator, shape: tuple[int, ...], fmt: ElemFormat) -> np.ndarray:
    vals = rng.uniform(ST_LOW, ST_HIGH, shape) * rng.choice([-1.0, 1.0], shape)
    return encode_elements(vals.astype(np.float32), fmt).view(fmt.storage_dtype)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    m, k, n = case.shape.m, case.shape.k, case.shape.n
    fmt = case.dtype or ElemFormat.E4M3
    mode = _mode(case)
    rng = np.random.default_rng([case.seed, rank])
    gl, g = group_list_of(case)
    if mode.split == "K":
        rows = k // MXFP_DIVISOR_SIZE + g
        x, w = _codes(rng, (k, m), fmt), _codes(rng, (k, n), fmt)
        sx: tuple[int, ...] = (rows, m, 2)
        sw: tuple[int, ...] = (rows, n, 2)
    else:
        pairs = -(-k // MXFP_DIVISOR_SIZE)
        x = _codes(rng, (m, k), fmt)
        w = _codes(rng, (g, n, k) if mode.trans_b else (g, k, n), fmt)
        sx, sw = (m, pairs, 2), ((g, n, pairs, 2) if mode.trans_b else (g, pairs, n, 2))
    return {"x": x, "x_scale": rng.integers(E8M0_ONE - 1, E8M0_ONE + 2, sx, dtype=np.uint8), "weight": w,
            "weight_scale": rng.integers(E8M0_ONE - 1, E8M0_ONE + 2, sw, dtype=np.uint8), "group_list": gl}


def _kw(case: Case) -> dict[str, Any]:
    mode = _mode(case)
    fmt = case.dtype or ElemFormat.E4M3
    kw: dict[str, Any] = {"group_list_type": mode.group_list_type, "trans_b": mode.trans_b}
    if mode.split == "K":
        kw.update(group_type="split_k", group_list_type="count")
    if fmt.ml_dtype is None:
        kw.update(x_format=fmt, w_format=fmt)
    return kw


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    return golden_grouped_matmul_mx(inputs["x"], inputs["x_scale"], inputs["weight"], inputs["weight_scale"],
                                    inputs["group_list"], **_kw(case))


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    return grouped_matmul_mx(inputs["x"], inputs["x_scale"], inputs["weight"], inputs["weight_scale"],
                             inputs["group_list"], trans_a=_mode(case).split == "K", block_dim=ctx.block_dim,
                             check=ctx.check, timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers,
                             variant=_mode(case).gmm_variant, **_kw(case))


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    ref = np.asarray(ref)
    o = np.asarray(out).astype(ml_dtypes.bfloat16)
    r = ref.astype(ml_dtypes.bfloat16)
    return Comparison(ag_compare(o, r), max_abs_error(out, ref), ulp_distance(o, r))


def validate(case: Case, size: int) -> list[str]:
    fmt = case.dtype or ElemFormat.E4M3
    mode = _mode(case)
    if fmt.is_fp4 and mode.split == "K":
        return ["FP4 x is split-M only (the source's AnalyzeAttrs)"]
    if mode.gmm_variant == "blaze_sample" and mode.split == "M" and mode.group_list_type != "count":
        return ["the Blaze sample kernel reads a count group list only"]
    return []


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    """`--predict` sweep: block_dim (`BLOCK_DIM_SWEEP`: the blockNum the scheduler spreads the groups' tiles
    over, at most the 32 AICs) of the default split-M count-list mode (ragged groups, one empty)."""
    return block_dim_knobs(GmmMode())


SPEC = OperatorSpec(
    name="grouped_matmul_mx",
    summary="GroupedMatmul MX: the MoE grouped matmul (GmmCgmctMxKernel, split-M / split-K) on one NPU per rank "
            "(seeds 002 / 003)",
    mode_type=GmmMode,
    make_inputs=make_inputs,
    golden=golden,
    execute=execute,
    compare=compare,
    modes=MODES,
    hazard_modes=HAZARD_MODES,
    rules=RULES,
    default_shape=DEFAULT_SHAPE,
    quick_shape=QUICK_SHAPE,
    dtypes=(ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1),
    input_names=("x", "x_scale", "weight", "weight_scale", "group_list"),
    validate=validate,
    predict_knobs=predict_knobs,
)
