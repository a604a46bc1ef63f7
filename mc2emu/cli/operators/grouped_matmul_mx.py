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
An NZ mode casts the weight to FRACTAL_NZ (`nd_to_nz_codes`; e1m2 runs only there). Kernel (`--gmm-variant`):
"cgmct" (default, GmmCgmctMxKernel), "blaze" (IS_BLAZE), "blaze_sample" (ops-tensor's sample kernel; count lists
only, other modes skipped with the reason; no NZ path here).
Compare: the golden bit-exact or within 1 bf16 ULP. See docs/grouped-matmul-mx.md.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.cli.options import OperatorOptions, OptionError, RunOptions, option, option_name
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
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.nz_format import NZ_FRACTAL_ROWS, NzDtype, nd_to_nz_codes
from mc2emu.numerics.payload import Payload, is_payload
from mc2emu.ops import golden_grouped_matmul_mx, grouped_matmul_mx
from mc2emu.ops.grouped_matmul_mx_tiling_api import (
    format_grouped_matmul_mx_schedule,
    format_grouped_matmul_mx_tiling,
    grouped_matmul_mx_schedule,
    grouped_matmul_mx_tiling,
)
from mc2emu.runtime.hazards import Hazard

DEFAULT_BLOCK_NUM = 32  # DAV_3510 AIC count


class GmmSplit(enum.Enum):
    """The group axis: split-M (ragged rows of x) or split-K (ragged K, x transposed)."""

    M = "M"
    K = "K"


class GroupListType(enum.Enum):
    """The group list's form (the source's groupListType)."""

    COUNT = "count"
    CUMSUM = "cumsum"
    SPARSE = "sparse"


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    try:
        vals = tuple(int(p, 0) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: give M,N,K as three integers") from None
    if len(vals) != 3 or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: give M,N,K as three integers >= 0")
    return vals[0], vals[1], vals[2]


def _group_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(p, 0) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--group-list {text!r}: give per-group sizes, e.g. 25,25,0,50") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"--group-list {text!r}: sizes must be >= 0")
    return vals


@dataclass(frozen=True)
class GmmOptions(OperatorOptions):
    """grouped_matmul_mx's own options: the kernel variant (a mode option, and the schedule's), and the
    host-only plan printouts with their problem (`--print-tiling` / `--print-schedule`, no MPI)."""

    gmm_variant: TailSplitVariant | None = option(
        "grouped_matmul_mx kernel: cgmct (default) | blaze (IS_BLAZE) | blaze_sample; also narrows a run's modes",
        enum=TailSplitVariant, mode=True)
    print_tiling: bool = option("print the host tiling (seed 002 §15 fields), without MPI", switch=True)
    print_schedule: bool = option("print every tile each core runs, without MPI", switch=True)
    shape: tuple[int, int, int] | None = option("M = all rows of x, N, K (total K for split-K)", parse=_shape,
                                                metavar="M,N,K")
    group_list: tuple[int, ...] | None = option("per-group rows (split-M) or K (--split-k); default one group",
                                                parse=_group_list, metavar="G0,G1,..")
    trans_b: bool = option("weight [g, N, K]", switch=True)
    split_k: bool = option("group along K (x [K, M], transA)", switch=True)
    json: bool = option("JSON with the source's field names", switch=True)

    PLAN_ONLY: ClassVar[tuple[str, ...]] = ("shape", "group_list", "trans_b", "split_k", "json")

    def host_only(self) -> bool:
        return self.print_tiling or self.print_schedule

    def validate(self, run: RunOptions, op: str) -> None:
        if self.host_only():
            what = "--print-tiling" if self.print_tiling else "--print-schedule"
            if run.op != op:
                raise OptionError(f"{what}: needs --op {op} (got --op {run.op})")
            if self.shape is None:
                raise OptionError(f"{what}: needs --shape M,N,K")
            return
        given = [option_name(name) for name in self.PLAN_ONLY if getattr(self, name)]
        if given:
            raise OptionError(f"{', '.join(given)}: only with --print-tiling or --print-schedule")


def plan_text(options: GmmOptions, run: RunOptions) -> str:
    """The tiling or the schedule `options` ask for (with `--dtype`, `--block-dim`), as text or JSON; raises
    ConstraintError on a bad shape."""
    assert options.shape is not None  # GmmOptions.validate requires --shape with the print modes
    m, n, k = options.shape
    x_dtype = run.dtype.value if run.dtype is not None else "float8_e4m3fn"
    groups = options.group_list if options.group_list is not None else ((k,) if options.split_k else (m,))
    if options.print_tiling:
        tiling = grouped_matmul_mx_tiling(m, n, k, group_num=len(groups), trans_a=options.split_k,
                                          trans_b=options.trans_b, x_dtype=x_dtype, w_dtype=x_dtype,
                                          group_type="split_k" if options.split_k else "split_m")
        return format_grouped_matmul_mx_tiling(tiling, as_json=options.json)
    block_num = run.block_dim if run.block_dim is not None else DEFAULT_BLOCK_NUM
    variant = options.gmm_variant or TailSplitVariant.CGMCT
    split = GmmSplit.K if options.split_k else GmmSplit.M
    records = grouped_matmul_mx_schedule(groups, n, k, m=m, split=split.value, block_num=block_num,
                                         trans_b=options.trans_b, x_dtype=x_dtype, variant=variant.value)
    return format_grouped_matmul_mx_schedule(records, as_json=options.json)


@dataclass(frozen=True)
class GmmMode(OperatorMode):
    """split M / K, trans_b, the group list form (count, cumsum, sparse), the hazard showcase (a sparse list
    naming group 0 after group 1) and the source kernel (`gmm_variant`)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"split": GmmSplit, "trans_b": bool,
                                                              "group_list_type": GroupListType,
                                                              "group0_late": bool, "gmm_variant": TailSplitVariant,
                                                              "weight_nz": bool}

    split: GmmSplit = GmmSplit.M
    trans_b: bool = False
    group_list_type: GroupListType = GroupListType.COUNT
    group0_late: bool = False
    gmm_variant: TailSplitVariant = TailSplitVariant.CGMCT
    weight_nz: bool = False  # the weight passed in FRACTAL_NZ (weight_format="NZ")

    def with_overrides(self, overrides: Mapping[str, object],
                       selectors: frozenset[str] = frozenset()) -> OperatorMode | None:
        """`--gmm-variant X` runs every mode on kernel X, except that the sample kernel drops the split-M modes
        whose group list it cannot read (cumsum, sparse), and the Blaze kernels the NZ mode (no NZ path here)."""
        mode = super().with_overrides(overrides, selectors)
        if isinstance(mode, GmmMode) and (not mode.sample_reads_its_list() or
                                          (mode.weight_nz and mode.gmm_variant is not TailSplitVariant.CGMCT)):
            return None
        return mode

    def sample_reads_its_list(self) -> bool:
        """False for a split-M mode on the Blaze sample kernel whose group list is not a count list."""
        return not (self.gmm_variant is TailSplitVariant.BLAZE_SAMPLE and self.split is GmmSplit.M
                    and self.group_list_type is not GroupListType.COUNT)

    def label_parts(self) -> list[str]:
        parts = [f"split-{self.split.value}", self.group_list_type.value]
        if self.gmm_variant is not TailSplitVariant.CGMCT:
            parts.append(self.gmm_variant.value)
        if self.trans_b:
            parts.append("transB")
        if self.weight_nz:
            parts.append("nz")
        if self.group0_late:
            parts.append("group0-late")
        return parts


DEFAULT_SHAPE = Shape(m=1024, k=2048, n=1024)
QUICK_SHAPE = Shape(m=96, k=256, n=128)
ST_LOW, ST_HIGH = 1.0, 8.0
E8M0_ONE = 127  # E8M0 code of 2^0
MODES = (GmmMode(), GmmMode(trans_b=True, group_list_type=GroupListType.CUMSUM),
         GmmMode(group_list_type=GroupListType.SPARSE), GmmMode(split=GmmSplit.K),
         GmmMode(group_list_type=GroupListType.SPARSE, gmm_variant=TailSplitVariant.BLAZE),
         GmmMode(gmm_variant=TailSplitVariant.BLAZE_SAMPLE),
         GmmMode(trans_b=True, group_list_type=GroupListType.CUMSUM, weight_nz=True))
HAZARD_MODES = (GmmMode(group_list_type=GroupListType.SPARSE, group0_late=True),)
RULES = (ModeRule({"group0_late": True}, Expect(hazards=frozenset({Hazard.OUTPUT_WRITE_COUNT})),
                  "UpdateOffset returns at groupIdx 0: group 0 keeps group 1's offsets"),)


def _mode(case: Case) -> GmmMode:
    mode = case.mode
    assert isinstance(mode, GmmMode)
    return mode


def group_list_of(case: Case) -> tuple[np.ndarray, int]:
    """The case's group list (int64, the mode's form) and its group count."""
    mode = _mode(case)
    if mode.split is GmmSplit.K:
        k = case.shape.k
        return np.asarray([k // 2, 0, k - k // 2], dtype=np.int64), 3
    m = case.shape.m
    a, c = m * 3 // 8, m // 8
    if mode.group0_late:
        return np.asarray([[1, a], [0, m - a]], dtype=np.int64), 2
    if mode.group_list_type is GroupListType.SPARSE:
        return np.asarray([[0, a], [2, c], [1, 0], [3, m - a - c]], dtype=np.int64), 4
    sizes = np.asarray([a, 0, c, m - a - c], dtype=np.int64)
    return (np.cumsum(sizes) if mode.group_list_type is GroupListType.CUMSUM else sizes), 4


def _codes(rng: np.random.Generator, shape: tuple[int, ...], fmt: ElemFormat) -> np.ndarray:
    vals = rng.uniform(ST_LOW, ST_HIGH, shape) * rng.choice([-1.0, 1.0], shape)
    return encode_elements(vals.astype(np.float32), fmt).view(fmt.storage_dtype)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    m, k, n = case.shape.m, case.shape.k, case.shape.n
    fmt = case.dtype or ElemFormat.E4M3
    mode = _mode(case)
    rng = np.random.default_rng([case.seed, rank])
    gl, g = group_list_of(case)
    if mode.split is GmmSplit.K:
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
    kw: dict[str, Any] = {"group_list_type": mode.group_list_type.value, "trans_b": mode.trans_b}
    if mode.split is GmmSplit.K:
        kw.update(group_type="split_k", group_list_type=GroupListType.COUNT.value)
    if fmt.ml_dtype is None:
        kw.update(x_format=fmt, weight_format=fmt)
    return kw


def _op_kw(case: Case) -> dict[str, Any]:
    """`_kw` for the operator: an NZ mode passes weight_format "NZ" and names the element by weight_dtype."""
    kw = _kw(case)
    if _mode(case).weight_nz:
        kw.update(weight_format="NZ", weight_dtype=case.dtype or ElemFormat.E4M3)
    return kw


def run_ut_shape(m: int, k: int, n: int, groups: int, *, split_k: bool, trans_b: bool, x_fmt: ElemFormat,
                 w_fmt: ElemFormat, weight_nz: bool, bias: bool, out_dtype: str, seed: int = 0) -> Comparison:
    """A tiling UT row's shape through the emulated kernel against the golden (the ND weight): even groups (the
    last takes the rest) in a cumsum list (the UT's groupListType 0), this module's input recipe, an NZ weight
    built from the ND one by `nd_to_nz_codes`. The kernel tiles for the device platform, not the UT stub."""
    rng = np.random.default_rng(seed)
    total = k if split_k else m
    sizes = [total // groups] * (groups - 1) + [total - total // groups * (groups - 1)]
    gl = np.cumsum(sizes).astype(np.int64)
    if split_k:
        rows = k // MXFP_DIVISOR_SIZE + groups
        x, w = _codes(rng, (k, m), x_fmt), _codes(rng, (k, n), w_fmt)
        sx: tuple[int, ...] = (rows, m, 2)
        sw: tuple[int, ...] = (rows, n, 2)
    else:
        pairs = -(-k // MXFP_DIVISOR_SIZE)
        x, w = _codes(rng, (m, k), x_fmt), _codes(rng, (groups, n, k) if trans_b else (groups, k, n), w_fmt)
        sx, sw = (m, pairs, 2), ((groups, n, pairs, 2) if trans_b else (groups, pairs, n, 2))
    x_scale = rng.integers(E8M0_ONE - 1, E8M0_ONE + 2, sx, dtype=np.uint8)
    w_scale = rng.integers(E8M0_ONE - 1, E8M0_ONE + 2, sw, dtype=np.uint8)
    b = rng.uniform(-4, 4, (groups, n)).astype(np.float32) if bias else None
    kw: dict[str, Any] = {"group_list_type": "cumsum", "trans_b": trans_b, "bias": b, "out_dtype": out_dtype,
                          "x_format": x_fmt}
    if split_k:
        kw["group_type"] = "split_k"
    ref = golden_grouped_matmul_mx(x, x_scale, w, w_scale, gl, weight_format=w_fmt, **kw)
    if weight_nz:
        out = grouped_matmul_mx(x, x_scale, nd_to_nz_codes(w, w_fmt.value), w_scale, gl, trans_a=split_k,
                                weight_format="NZ", weight_dtype=w_fmt, **kw)
    else:
        out = grouped_matmul_mx(x, x_scale, w, w_scale, gl, trans_a=split_k, weight_format=w_fmt, **kw)
    return compare(out, ref)


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    return golden_grouped_matmul_mx(inputs["x"], inputs["x_scale"], inputs["weight"], inputs["weight_scale"],
                                    inputs["group_list"], **_kw(case))


def _to_nz(weight: np.ndarray, fmt: str) -> np.ndarray:
    """`nd_to_nz_codes`; for a protocol-only run's shape-only weight, a Payload of the NZ element shape."""
    if not is_payload(weight):
        return nd_to_nz_codes(weight, fmt)
    c0 = NzDtype.parse(fmt).c0
    *batch, rows, cols = weight.shape
    shape = (*batch, CeilDiv(cols, c0), CeilDiv(rows, NZ_FRACTAL_ROWS), NZ_FRACTAL_ROWS, c0)
    return Payload(shape, weight.dtype)  # type: ignore[return-value]


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    """The call; an NZ mode converts the ND weight (the golden's) with `nd_to_nz_codes`, as the format cast."""
    fmt = case.dtype or ElemFormat.E4M3
    weight = _to_nz(inputs["weight"], fmt.value) if _mode(case).weight_nz else inputs["weight"]
    return grouped_matmul_mx(inputs["x"], inputs["x_scale"], weight, inputs["weight_scale"],
                             inputs["group_list"], trans_a=_mode(case).split is GmmSplit.K, block_dim=ctx.block_dim,
                             check=ctx.check, timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers,
                             data=ctx.data, variant=_mode(case).gmm_variant.value, **_op_kw(case))


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
    if fmt.is_fp4 and mode.split is GmmSplit.K:
        return ["FP4 x is split-M only (the source's AnalyzeAttrs)"]
    if fmt is ElemFormat.E1M2 and not mode.weight_nz:
        return ["FLOAT4_E1M2 needs an NZ weight (the source's AnalyzeDtype)"]
    if mode.weight_nz and mode.gmm_variant is not TailSplitVariant.CGMCT:
        return ["an NZ weight runs on the CGMCT kernel only (grouped_matmul_mx refuses variant blaze / blaze_sample)"]
    if mode.weight_nz and fmt is ElemFormat.E5M2:
        return ["an NZ weight is E4M3 x E4M3 or FP4 x FP4 (the source's CheckDtypeForWeightNz)"]
    if not mode.sample_reads_its_list():
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
    dtypes=(ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1, ElemFormat.E1M2),
    input_names=("x", "x_scale", "weight", "weight_scale", "group_list"),
    validate=validate,
    predict_knobs=predict_knobs,
    options=GmmOptions,
    host_print=plan_text,
)
