"""CLI entry of quant_matmul_reduce_scatter (SPEC §7.2, seed 000 §4.6-4.8): modes, hazard rules, shapes, inputs,
golden, compare.

The operator is `mc2emu.ops.quant_matmul_reduce_scatter` (one call per rank, collective).

Shape: m = rows of y per rank (M / R; every rank's x1 has M = R * m rows), k = K, n = N. Inputs: the ST recipe
(`gen_qmrs_st_inputs`, seed `--seed` + rank). Golden: every rank's bf16 C_j (one MPI allgather of the inputs),
summed over ranks 0, 1, ..., R - 1 in FP32, cast RNE. Compare: bit-exact.

Modes (`QmrsMode`): `kernel` "rounds" (the design-spec kernel, rounds of HEAD_M_SIZE rows, block_dim R + 3:
the last R AIVs communicate, three reduce) or "per_block" (the shipped kernel, block_dim R // 2 + 1, run with
its `final_wait` fix so that a plain run is clean). The mode field is `kernel`, not `impl`: the CLI's
`--impl` option is typed to the all-to-all's udma | hcomm. Hazard showcase (`--hazards`): the shipped
kernel as published (UNCONSUMED_FLAG: flag 9), its acc * 0 with stale NaN in UB (MUL_ZERO_KEEPS_NAN), the
rounds kernel's templated wait (READ_BEFORE_WAIT) and rounded tail copy (TAIL_COPY_OVERRUN, at a ragged N).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

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
    comparison_refused,
)
from mc2emu.numerics import ElemFormat, bit_exact, max_abs_error, ulp_distance
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops import gen_qmrs_st_inputs, golden_quant_matmul_reduce_scatter, quant_matmul_reduce_scatter
from mc2emu.ops.quant_matmul_reduce_scatter_op import QmrsImpl
from mc2emu.runtime.hazards import Hazard
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    MAX_RANK_ROUNDS,
    MAX_RANKS,
    MAX_ROUNDS,
    N_ALIGN,
    ROW_ALIGN,
    make_rs_comm_tiling,
    max_rounds,
    max_tile_m,
)


@dataclass(frozen=True)
class QmrsMode(OperatorMode):
    """kernel (rounds | per_block), its variant (the source, a fix or a reproduced hazard) and the rounds
    kernel's head_m (headMSize rows per round, so T = ceil(m / head_m) rounds; None: HEAD_M_SIZE when it
    divides m, else the host's choice; set only by the `--predict` sweep); ragged_n: run at a ragged N
    (`ragged_n_of`) past the design spec's N % 16 (RS-12), the rounded tail copy's showcase."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"kernel": QmrsImpl, "variant": str, "head_m": int,
                                                              "ragged_n": bool}

    kernel: QmrsImpl = QmrsImpl.ROUNDS
    variant: str = "source"
    head_m: int | None = None
    ragged_n: bool = False

    def label_parts(self) -> list[str]:
        parts = [self.kernel.value]
        if self.variant != "source":
            parts.append(self.variant)
        if self.head_m is not None:
            parts.append(f"head{self.head_m}")
        if self.ragged_n:
            parts.append("ragged_n")
        return parts


# Rounds of 16 rows (T = m / 16) and three reduce cores; N % 16 == 0 (the design spec's host check #2, RS-12).
# The tail-copy showcase runs at N - 8 = 40 (80-byte rows, `ragged_n_of`): a 16-row round splits 6 / 5 / 5,
# and 5 rows are 400 bytes, not whole 32-byte blocks.
HEAD_M_SIZE = 16
REDUCE_CORES = 3
DEFAULT_SHAPE = Shape(m=48, k=256, n=48)
QUICK_SHAPE = Shape(m=32, k=128, n=48)
RAGGED_N_STEP = 8

MODES = (QmrsMode(QmrsImpl.ROUNDS), QmrsMode(QmrsImpl.PER_BLOCK, "final_wait"))
HAZARD_MODES = (QmrsMode(QmrsImpl.PER_BLOCK), QmrsMode(QmrsImpl.PER_BLOCK, "ub_stale_nan"),
                QmrsMode(QmrsImpl.ROUNDS, "templated_wait"),
                QmrsMode(QmrsImpl.ROUNDS, "tail_copy_rounded", ragged_n=True))
RULES = (
    ModeRule({"kernel": QmrsImpl.PER_BLOCK, "variant": "source"}, Expect(hazards=frozenset({Hazard.UNCONSUMED_FLAG})),
             "the single-batch path returns before the final CrossCoreWaitFlag(9): one round per AIC"),
    ModeRule({"kernel": QmrsImpl.PER_BLOCK, "variant": "ub_stale_nan"},
             Expect(hazards=frozenset({Hazard.MUL_ZERO_KEEPS_NAN, Hazard.UNCONSUMED_FLAG})),
             "sum * 0.0f keeps the NaN an earlier kernel left in UB"),
    ModeRule({"kernel": QmrsImpl.ROUNDS, "variant": "templated_wait"},
             Expect(hazards=frozenset({Hazard.READ_BEFORE_WAIT})),
             "CrossCoreWaitFlag<0x2, PIPE_MTE2> does not block the scalar pipe: the Commit reads staging early"),
    ModeRule({"kernel": QmrsImpl.ROUNDS, "variant": "tail_copy_rounded"},
             Expect(hazards=frozenset({Hazard.TAIL_COPY_OVERRUN})),
             "a DataCopy rounded up to 32 bytes overruns the next core's rows"),
)


def ragged_n_of(n: int) -> int:
    """The ragged N a `ragged_n` mode runs at: N itself when N % 16 != 0, else N - 8 (rows of 16 B past whole
    32-byte blocks)."""
    return n if n % ROW_ALIGN or n <= RAGGED_N_STEP else n - RAGGED_N_STEP


def _n(case: Case) -> int:
    mode = case.mode
    assert isinstance(mode, QmrsMode)
    return ragged_n_of(case.shape.n) if mode.ragged_n else case.shape.n


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    return gen_qmrs_st_inputs(size * case.shape.m, case.shape.k, _n(case), rank, seed_base=case.seed)


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    al = {key: comm.allgather(v) for key, v in inputs.items()}
    return golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], comm.Get_rank())


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    mode = case.mode
    assert isinstance(mode, QmrsMode)
    rounds = mode.kernel is QmrsImpl.ROUNDS
    default_dim = ctx.size + REDUCE_CORES if rounds else ctx.size // 2 + 1
    return quant_matmul_reduce_scatter(
        inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], impl=mode.kernel,
        head_m_size=mode.head_m if mode.head_m is not None else
        rounds_head_m(case.shape.m, ctx.size, case.shape.n) if rounds else None,
        block_dim=ctx.block_dim if ctx.block_dim is not None else default_dim, check=ctx.check,
        timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers, data=ctx.data, comm=ctx.comm,
        kernel_variant=mode.variant, ragged_n=mode.ragged_n)


def rounds_head_m(m: int, size: int, n: int = 0) -> int | None:
    """Rounds of HEAD_M_SIZE rows, or of as few 16-row blocks more as the round limits need (T <= min(15, 32 / R):
    at R = 16 the default m = 48 runs 32 + 16 rows); None (the host's choice: its head_m search, development.md
    §3.2) when 16 does not divide m or when such a round's chunk breaks RS-6 (tileM * N * 2 <= 512 KiB)."""
    if m % HEAD_M_SIZE:
        return None
    head = max(HEAD_M_SIZE, CeilDiv(CeilDiv(m, max(1, max_rounds(size))), ROW_ALIGN) * ROW_ALIGN)
    return None if n and head > max_tile_m(n) else head


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    ref = np.asarray(ref)
    return Comparison(bit_exact(out, ref), max_abs_error(out, ref), ulp_distance(out, ref, ml_dtypes.bfloat16),
                      note="bit-exact (bf16 terms, FP32 sum over ranks ascending)")


def validate(case: Case, size: int) -> list[str]:
    out = []
    k = case.shape.k
    if k % 32 or (-(-k // 64)) % 2:
        out.append(f"QMRS-2/QMRS-3 K % 32 == 0 and ceil(K/64) even: --k {k}")
    mode = case.mode
    assert isinstance(mode, QmrsMode)
    if mode.kernel is QmrsImpl.ROUNDS and not mode.ragged_n and case.shape.n % N_ALIGN:
        out.append(f"RS-12 N % 16 == 0 (rounds kernel, development.md §3.1 #2): --n {case.shape.n}")
    if mode.kernel is QmrsImpl.ROUNDS and size > MAX_RANK_ROUNDS:   # one round already breaks R * T <= 32
        out.append(f"RS-5 R * T <= {MAX_RANK_ROUNDS} (rounds kernel): {size} ranks")
    if size > MAX_RANKS:
        out.append(f"QMRS-4 R <= {MAX_RANKS} (HCCL_MTE_MAX_RANK_NUM): {size} ranks")
    return out


# `--predict` sweep of the rounds kernel: head_m = m / 1, 2, 4, 8, 16 rows aligned up to 16 (RS-2), distinct,
# within the round limits (RS-4 T <= 15, RS-5 R * T <= 32); beside it the shipped per-block kernel (final_wait).
PREDICT_HEAD_SPLITS = (1, 2, 4, 8, 16)


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    """`--predict`: the rounds kernel's T (via head_m) and the per-block kernel, each at its default block_dim."""
    m = shape.m
    knobs = []
    for head in dict.fromkeys(min(m, CeilDiv(CeilDiv(m, d), ROW_ALIGN) * ROW_ALIGN) for d in PREDICT_HEAD_SPLITS):
        ct = make_rs_comm_tiling(size * m, size, head)
        if ct.commTurn <= MAX_ROUNDS and size * ct.commTurn <= MAX_RANK_ROUNDS:
            knobs.append(Knob(QmrsMode(QmrsImpl.ROUNDS, head_m=head), None,
                              {"kernel": QmrsImpl.ROUNDS.value, "head_m": head, "T": ct.commTurn}))
    knobs.append(Knob(QmrsMode(QmrsImpl.PER_BLOCK, "final_wait"), None, {"kernel": QmrsImpl.PER_BLOCK.value}))
    return knobs


SPEC = OperatorSpec(
    name="quant_matmul_reduce_scatter",
    collective=True,
    summary="MXFP8 matmul, then a reduce-scatter of the products along M (compute-first, SPEC §7.2)",
    mode_type=QmrsMode,
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
