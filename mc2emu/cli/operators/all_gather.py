"""CLI entry of all_gather_quant_matmul (SPEC §7.1): modes, hazard rules, shapes, inputs, golden, compare.

The operator is `mc2emu.ops.all_gather_quant_matmul` (one call per rank, collective). Shape: m = rows of x1
per rank, k = K, n = N. Inputs: the CANN AG ST recipe (`gen_ag_st_inputs`, seed `--seed` + rank). Golden: the
CANN recipe on the gathered x1. Compare: the AG ST verify rule, bit-exact or <= 1 bf16 ULP everywhere.
Launch: `--block-dim`, else max(8, R) blocks: the reduced default shape then keeps the CANN cases' character
(baseM 256 divides the 512-row tiles; at 32 cores AdjustBasicBlock would shrink baseM).

Modes (`AGMode`): the seed protocol with the two wait orders; the slot ring (`protocol=slot_ring`) with one
slot and with no reuse (slot_num 0), in order only. Hazard showcase (`--hazards`): no flag-0 wait
(UNCONSUMED_FLAG); UpdateAddrList before the wait (ADDR_LIST_UPDATED_EARLY); a block crossing a region
boundary (`blocks=crossing`: the first AIC count in R .. 32 whose tiling gives a baseM that does not divide a
region): FRAGMENT_OUT_OF_RANGE, with `ag_lost_rows` predicting the lost C rows from the tiling, every other
row passing the AG ST rule and every lost row holding the never-written pattern (0xFF with checks on, zeros
with --no-check); the slot ring's AIV without its release wait (`variant=skip_release_wait`): READ_OVERWRITTEN
and UNCONSUMED_FLAG (one round, e.g. --quick, runs clean). Flag id 11 from slot 10 needs commTurn >= 11
(m >= 5121, `--shape`, slot_num 0): FLAG_ID_RESERVED warnings.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant
from mc2emu.apace.comm_policy import WaitOrder
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
    comparison_refused,
)
from mc2emu.numerics import ElemFormat, max_abs_error, ulp_distance
from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.ops.all_gather_quant_matmul_op import AgProtocol
from mc2emu.runtime.gm import POISON_BYTE
from mc2emu.runtime.hazards import Hazard
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_matmul_tiling, make_ag_comm_tiling, max_ranks


class AgBlocks(enum.Enum):
    """How many AICs the launch gets (module docstring)."""

    ST = "st"              # --block-dim, else max(8, R): baseM 256 divides the 512-row tiles
    CROSSING = "crossing"  # the first AIC count whose tiling makes a block cross a region boundary


@dataclass(frozen=True)
class AGMode(OperatorMode):
    """wait order (None: the protocol's own, the slot ring's in-order), the kernel variant (the source, or a
    reproduced hazard), the launch's block count, the window protocol and its slot count."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {"wait_order": WaitOrder, "variant": AgKernelVariant,
                                                             "blocks": AgBlocks, "protocol": AgProtocol,
                                                             "slot_num": int}

    wait_order: WaitOrder | None = WaitOrder.MASK
    variant: AgKernelVariant = AgKernelVariant.SOURCE
    blocks: AgBlocks = AgBlocks.ST
    protocol: AgProtocol = AgProtocol.SEED
    slot_num: int = 0

    def label_parts(self) -> list[str]:
        parts = [self.wait_order.value] if self.wait_order is not None else []
        if self.protocol is not AgProtocol.SEED:
            parts.append(f"{self.protocol.value}={self.slot_num}")
        if self.variant is not AgKernelVariant.SOURCE:
            parts.append(self.variant.value)
        if self.blocks is not AgBlocks.ST:
            parts.append(f"blocks={self.blocks.value}")
        return parts


@dataclass(frozen=True)
class AgOptions(OperatorOptions):
    """The all-gather's own option: the wait order of the seed protocol's modes (the slot ring's have none)."""

    wait_order: WaitOrder | None = option("mask | in_order: override the wait order (selects the seed protocol's "
                                          "modes)", enum=WaitOrder, mode=True)


MIN_BLOCK_DIM = 8
# The AIC count of the 950PR the crossing search goes up to (the tiling's default core count).
MAX_AIC = 32
# One full 512-row tile + a 13-row tail (the CANN m = 2061 character); quick: one 64-row tile.
DEFAULT_SHAPE = Shape(m=525, k=256, n=512)
QUICK_SHAPE = Shape(m=64, k=128, n=128)

# The slot ring: one slot (rounds after the first reuse slot 0), and slot_num 0 (commTurn slots, no reuse).
SLOT_RING_MODES = (AGMode(None, protocol=AgProtocol.SLOT_RING, slot_num=1),
                   AGMode(None, protocol=AgProtocol.SLOT_RING, slot_num=0))
MODES = (*(AGMode(wo) for wo in WaitOrder), *SLOT_RING_MODES)
HAZARD_MODES = (AGMode(WaitOrder.IN_ORDER, AgKernelVariant.SKIP_FLAG0_WAIT),
                AGMode(WaitOrder.MASK, AgKernelVariant.SKIP_FLAG0_WAIT),
                AGMode(WaitOrder.IN_ORDER, AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT),
                AGMode(WaitOrder.IN_ORDER, blocks=AgBlocks.CROSSING),
                AGMode(None, AgKernelVariant.SKIP_RELEASE_WAIT, protocol=AgProtocol.SLOT_RING, slot_num=1))
RULES = (
    ModeRule({"variant": AgKernelVariant.SKIP_FLAG0_WAIT}, Expect(hazards=frozenset({Hazard.UNCONSUMED_FLAG})),
             "the AIV pre-sets flag 0 before its loop; a kernel that never waits it leaves one round per AIC"),
    ModeRule({"variant": AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT},
             Expect(hazards=frozenset({Hazard.ADDR_LIST_UPDATED_EARLY})),
             "the MAIN addresses move to the next round before that round's flag is waited"),
    ModeRule({"blocks": AgBlocks.CROSSING},
             Expect(hazards=frozenset({Hazard.FRAGMENT_OUT_OF_RANGE}), optional=True, compare=True,
                    optional_on="the shape"),
             "a block is resolved by its first row: its rows past that region have no fragment and are lost"),
    ModeRule({"variant": AgKernelVariant.SKIP_RELEASE_WAIT},
             Expect(hazards=frozenset({Hazard.READ_OVERWRITTEN, Hazard.UNCONSUMED_FLAG}), optional=True,
                    optional_on="the shape"),
             "the AIV reuses a slot without the AICs' release: the peers' puts may overwrite a round still read "
             "(a shape of one round never reuses a slot)"),
)


def _region_bounds(m: int, k: int, size: int) -> list[int]:
    """The logical-M starts of the regions after HEAD (every MAIN round, TAIL) and the end of logical M."""
    ct = make_ag_comm_tiling(m, k)
    main = (size - 1) * ct.tileM
    return [ct.headRows + r * main for r in range(ct.tileCnt + 1)] + [ct.total_logical_m(size)]


def crossing_block_dim(shape: Shape, size: int) -> int | None:
    """The first AIC count in [R, 32] whose tiling puts a block across a region boundary (None: no such)."""
    ct = make_ag_comm_tiling(shape.m, shape.k)
    bounds = _region_bounds(shape.m, shape.k, size)[:-1]
    for b in range(size, MAX_AIC + 1):
        mm = ag_matmul_tiling(ct, size, shape.n, ElemFormat.E4M3, aic_num=b)
        if any(x % mm.baseM for x in bounds if x < ct.total_logical_m(size)):
            return b
    return None


def ag_lost_rows(shape: Shape, size: int, rank: int, block_dim: int) -> np.ndarray:
    """The C rows (of R * m, on `rank`) that no block writes at `block_dim` AICs: a block starts every baseM
    logical rows (mTailTile 1, no merged tail: checked) and writes only the rows of the region its first row
    lies in; logical rows map to C rows by the region map (HEAD: own rows; MAIN round r: the other ranks in
    ascending order, tileM rows each; TAIL: every rank's tail, paddedTailM rows of which tailM are real)."""
    m = shape.m
    ct = make_ag_comm_tiling(m, shape.k)
    mm = ag_matmul_tiling(ct, size, shape.n, ElemFormat.E4M3, aic_num=block_dim)
    if mm.mTailTile != 1 or mm.mBaseTailSplitCnt != 1:
        raise ValueError(f"ag_lost_rows: M tail splits (mTailTile {mm.mTailTile}, mBaseTailSplitCnt "
                         f"{mm.mBaseTailSplitCnt}) are not predicted")
    bounds = _region_bounds(m, shape.k, size)
    total = bounds[-1]
    main = (size - 1) * ct.tileM
    tail_start = ct.headRows + ct.tileCnt * main
    others = [q for q in range(size) if q != rank]
    lost = np.zeros(size * m, dtype=bool)
    for m_pos in range(0, total, mm.baseM):
        end = min(m_pos + mm.baseM, total)
        region_end = next(b for b in bounds if b > m_pos)
        for row in range(region_end, end):
            if row < ct.headRows:
                lost[rank * m + row] = True
            elif row < tail_start:
                rel = (row - ct.headRows) % main
                rnd = (row - ct.headRows) // main
                lost[others[rel // ct.tileM] * m + rnd * ct.tileM + rel % ct.tileM] = True
            else:
                frag, r = divmod(row - tail_start, ct.paddedTailM)
                if r < ct.tailM:
                    lost[frag * m + ct.headRows + r] = True
    return lost


class AgGolden(np.ndarray):
    """The golden of a crossing case: the CANN golden, and `lost_rows` (the C rows the source never writes)."""

    lost_rows: np.ndarray


def _block_dim(case: Case, size: int, requested: int | None) -> int:
    mode = case.mode
    assert isinstance(mode, AGMode)
    if mode.blocks is AgBlocks.CROSSING:
        crossing = crossing_block_dim(case.shape, size)
        if crossing is not None:
            return crossing
    return requested if requested is not None else max(MIN_BLOCK_DIM, size)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    return gen_ag_st_inputs(case.shape.m, case.shape.k, case.shape.n, rank, seed_base=case.seed)


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    ref = golden_all_gather_quant_matmul(comm.allgather(inputs["x1"]), comm.allgather(inputs["x1_scale"]),
                                         inputs["x2"], inputs["x2_scale"])
    mode = case.mode
    assert isinstance(mode, AGMode)
    size = comm.Get_size()
    if mode.blocks is AgBlocks.CROSSING and crossing_block_dim(case.shape, size) is not None:
        predicted = ref.view(AgGolden)
        predicted.lost_rows = ag_lost_rows(case.shape, size, comm.Get_rank(), _block_dim(case, size, None))
        return predicted
    return ref


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    mode = case.mode
    assert isinstance(mode, AGMode)
    return all_gather_quant_matmul(
        inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], wait_order=mode.wait_order,
        protocol=mode.protocol, slot_num=mode.slot_num,
        block_dim=_block_dim(case, ctx.size, ctx.block_dim), check=ctx.check,
        timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers, data=ctx.data, comm=ctx.comm,
        kernel_variant=mode.variant)


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    lost = getattr(ref, "lost_rows", None)
    if lost is not None:
        return _compare_crossing(np.asarray(out), np.asarray(ref), lost)
    ref = np.asarray(ref)
    ulp = ulp_distance(out, ref, ml_dtypes.bfloat16)
    return Comparison(ulp <= 1, max_abs_error(out, ref), ulp, note="AG ST rule: bit-exact or <= 1 bf16 ULP")


def _compare_crossing(out: np.ndarray, ref: np.ndarray, lost: np.ndarray) -> Comparison:
    """The predicted damage: the kept rows under the AG ST rule, the lost rows never written."""
    keep = ~lost
    kept = compare(out[keep], ref[keep]) if keep.any() else Comparison(True, 0.0, 0)
    rows = np.ascontiguousarray(out[lost]).view(np.uint8).reshape(int(lost.sum()), -1)
    poisoned, zero = np.all(rows == POISON_BYTE, axis=1), ~rows.any(axis=1)
    written = int(np.count_nonzero(~(poisoned | zero)))
    never = bool(rows.shape[0]) and (bool(poisoned.all()) or bool(zero.all()))
    note = (f"{int(lost.sum())} C row(s) predicted lost (a block crossing a region): "
            + ("all hold the never-written pattern" if never else f"{written} of them written")
            + f"; the other {int(keep.sum())} row(s) {'pass' if kept.ok else 'fail'} the AG ST rule (max "
              f"{kept.max_ulp} ULP)")
    return Comparison(kept.ok and never, kept.max_abs, kept.max_ulp, note=note)


def validate(case: Case, size: int) -> list[str]:
    out = []
    k = case.shape.k
    if k % 32 or (-(-k // 64)) % 2:
        out.append(f"AG-1/AG-2 K % 32 == 0 and ceil(K/64) even: --k {k}")
    mode = case.mode
    assert isinstance(mode, AGMode)
    limit = max_ranks(mode.protocol is AgProtocol.SLOT_RING)  # the seed's cFragAddrs_[8], the slot ring's 16
    if size > limit:
        out.append(f"AG-3 R <= {limit} ({mode.protocol.value} protocol): {size} ranks")
    return out


# `--predict` sweep: the window protocol (the seed's two wait orders; the slot ring with one slot and with
# commTurn slots, i.e. no reuse) x block_dim.
PREDICT_BLOCK_DIMS = (8, 16, 32)
PREDICT_SLOT_NUMS = (1, 0)


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    windows = [(AGMode(wo), f"seed {wo.value}") for wo in WaitOrder]
    windows += [(AGMode(None, protocol=AgProtocol.SLOT_RING, slot_num=s), f"slot_ring {s or 'commTurn'}")
                for s in PREDICT_SLOT_NUMS]
    return [Knob(mode, bd, {"window": name, "block_dim": bd})
            for mode, name in windows for bd in PREDICT_BLOCK_DIMS if bd >= size]


SPEC = OperatorSpec(
    name="all_gather_quant_matmul",
    collective=True,
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
    options=AgOptions,
)
