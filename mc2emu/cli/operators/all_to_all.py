"""CLI entry of all_to_all_quant_matmul (SPEC §6): modes, hazard rules, shapes, inputs, golden, compare.

The operator itself is `mc2emu.ops.all_to_all_quant_matmul` (one call per rank, collective); its modes are
`A2AMode` (impl, localMatmul, wait order, HCCL server, bias, communication tiles).

Shape: m = oriM (rows of C per rank), k = Ka (K per rank), n = N.
Inputs: the CANN A2A ST recipe (elements and scales uniform(1, 8), E8M0 truncated): positive data, no
cancellation, as the ST uses (localMatmul 1 adds bf16 partial sums with atomics: with cancellation its
error would exceed the ST tolerance by design). The operator takes E4M3, E5M2 and E2M1 (not E1M2).
Bias (hcomm showcase only): float32 (N,) uniform(-1, 1) (assumption: the op takes a (N,) fp32 bias).
Golden: the operator's `golden_a2a` (the CANN recipe: dequantize, one FP32 matmul, cast to bf16) on every
rank's x1 / x1_scale (one MPI allgather); with bias, its FP32 result + bias, then the bf16 cast.
Compare: the A2A ST rule `allclose(rtol = atol = 1e-2)`; max abs error and max bf16 ULP are reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.cli.options import OperatorOptions, int_choice, option
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
from mc2emu.comm.hccl_task import HcclServerType as HcclServer
from mc2emu.numerics import ElemFormat, a2a_allclose, fixpipe_cast, max_abs_error, ulp_distance
from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a
from mc2emu.ops.all_to_all_quant_matmul_op import A2ALaunchInfo, Impl, LaunchMode
from mc2emu.runtime.hazards import Hazard, HazardError
from mc2emu.tiling.all_to_all_quant_matmul_tiling import KA_ALIGN, MAX_COMM_TURNS, MAX_RANKS


@dataclass(frozen=True)
class A2AMode(OperatorMode):
    """impl, localMatmul, wait order, HCCL server model (hcomm only), bias (hcomm only), communication tiles
    per rank's row block (0: the CANN ST rule)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "impl": Impl, "local_matmul": int, "wait_order": WaitOrder, "hccl_server": HcclServer, "bias": bool,
        "comm_tiles": int}

    impl: Impl = Impl.UDMA
    local_matmul: int = 0
    wait_order: WaitOrder = WaitOrder.MASK
    hccl_server: HcclServer | None = None
    bias: bool = False
    comm_tiles: int = 0

    def label_parts(self) -> list[str]:
        parts = [f"lm{self.local_matmul}", self.wait_order.value]
        if self.hccl_server is not None:
            parts.append(self.hccl_server.value)
        if self.bias:
            parts.append("+bias")
        if self.comm_tiles:
            parts.append(f"{self.comm_tiles}tiles")
        return parts


LOCAL_MATMUL_CHOICES = (0, 1, 2)


@dataclass(frozen=True)
class A2AOptions(OperatorOptions):
    """The all-to-all's own options: its mode options (`--impl` selects, the others override) and the UDMA
    host's launch."""

    impl: Impl | None = option("udma | hcomm: keep the modes of this impl", enum=Impl, mode=True, select=True)
    local_matmul: int | None = option("0 | 1 | 2: override localMatmul",
                                      parse=int_choice(LOCAL_MATMUL_CHOICES, "--local-matmul"), mode=True)
    wait_order: WaitOrder | None = option("mask | in_order: override the wait order", enum=WaitOrder, mode=True)
    hccl_server: HcclServer | None = option("ccu | aicpu: override the HCCL server model (hcomm)", enum=HcclServer,
                                            mode=True)
    launch: LaunchMode = option("UDMA blocks without --block-dim: convenient (usedCoreNum, raised to R and noted) | "
                                "source (usedCoreNum exactly, as the ST host: A2A-5 when below R)",
                                enum=LaunchMode, default=LaunchMode.CONVENIENT)


# Communication tiles per rank's row block. The CANN ST rule (headTileSize = ceil(usedCoreNum / nTiles) *
# baseM) gives a single tile at moderate shapes, where the wait orders cannot differ and nothing overlaps;
# modes with `comm_tiles` pass head_tile_size = align16(ceil(oriM / comm_tiles)) instead (SPEC §6: at most
# 16 rounds). hcomm keeps the ST rule in its valid modes: with several tiles its mask-ordered waits
# through repeat handles read tiles before they arrive (the showcase case).
COMM_TILES = 4
ROW_ALIGN = 16
MULTI_TILE = tuple(range(2, MAX_COMM_TURNS + 1))
# Moderate shapes: the default suite (10 cases at 8 ranks on 2 cores) in under 3 minutes, --quick under 30 s.
DEFAULT_SHAPE = Shape(m=512, k=512, n=1024)
QUICK_SHAPE = Shape(m=32, k=128, n=128)
BIAS_LOW, BIAS_HIGH = -1.0, 1.0

MODES = (
    *(A2AMode(Impl.UDMA, lm, wo, comm_tiles=COMM_TILES) for lm in (0, 1, 2) for wo in WaitOrder),
    *(A2AMode(Impl.HCOMM, lm, wo, HcclServer.CCU) for lm in (0, 1) for wo in WaitOrder),
)
HAZARD_MODES = (
    A2AMode(Impl.HCOMM, 0, WaitOrder.MASK, HcclServer.CCU, comm_tiles=COMM_TILES),
    A2AMode(Impl.HCOMM, 2, WaitOrder.MASK, HcclServer.AICPU),
    A2AMode(Impl.HCOMM, 1, WaitOrder.MASK, HcclServer.CCU, bias=True),
    A2AMode(Impl.HCOMM, 2, WaitOrder.MASK, HcclServer.CCU),
)
RULES = (
    ModeRule({"impl": Impl.HCOMM, "local_matmul": 2, "hccl_server": HcclServer.AICPU},
             Expect(hazards=frozenset({Hazard.HCCL_WAIT_BEYOND_COMMIT}), hang_ok=True),
             "the LOCAL pass of localMatmul 2 waits every handle, the REMOTE pass waits them again: AICPU "
             "returns -1 (and a core still waiting when block 0 finalizes hangs)"),
    ModeRule({"impl": Impl.HCOMM, "local_matmul": 2, "hccl_server": HcclServer.CCU}, Expect(deadlock=True),
             "as above, but a CCU Wait beyond Commit hangs: the deadlock diagnosis must catch it"),
    ModeRule({"impl": Impl.HCOMM, "local_matmul": 1, "bias": True},
             Expect(hazards=frozenset({Hazard.BIAS_DOUBLE_ADD})),
             "hcomm loads the bias at index 0 of both passes and localMatmul 1's REMOTE pass adds atomically "
             "onto the LOCAL pass's C (localMatmul 2 plain-writes over it: bias once)"),
    ModeRule({"impl": Impl.HCOMM, "wait_order": WaitOrder.MASK, "comm_tiles": MULTI_TILE},
             Expect(hazards=frozenset({Hazard.READ_BEFORE_WAIT})),
             "a Wait on a repeat handle proves the next repeat arrived, not the tile the mask asked for"),
    ModeRule({"impl": Impl.HCOMM, "hccl_server": HcclServer.AICPU},
             Expect(hazards=frozenset({Hazard.HCCL_FINALIZE_WHILE_WAITING}), hang_ok=True, optional=True),
             "SyncAll() is a no-op on AIC: block 0 may Finalize while other AICs still Wait; under AICPU "
             "they then hang (timing decides whether a run hangs)"),
)


def make_inputs(case: Case, rank: int, size: int) -> Arrays:
    m, k, n = case.shape.m, case.shape.k, case.shape.n
    arrays = gen_st_inputs(rank, size, m, k, n, seed=case.seed, elem=case.dtype or ElemFormat.E4M3)
    if getattr(case.mode, "bias", False):
        rng = np.random.default_rng([case.seed, rank, n])
        arrays["bias"] = rng.uniform(BIAS_LOW, BIAS_HIGH, size=n).astype(np.float32)
    return arrays


def golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    """Collective: the operator's golden (`golden_a2a`) on every rank's x1 / x1_scale (one MPI allgather each)."""
    x1_all, x1_scale_all = comm.allgather(inputs["x1"]), comm.allgather(inputs["x1_scale"])
    fmt = case.dtype or ElemFormat.E4M3
    rank = comm.Get_rank()
    bias = inputs.get("bias")
    if bias is None:
        return golden_a2a(x1_all, x1_scale_all, inputs["x2"], inputs["x2_scale"], rank, fmt)
    acc = golden_a2a(x1_all, x1_scale_all, inputs["x2"], inputs["x2_scale"], rank, fmt, "float32")
    return fixpipe_cast(acc + bias.astype(np.float32)[None, :], "bfloat16")


def head_tile_size(ori_m: int, tiles: int) -> int:
    """align16(ceil(oriM / tiles)) rows."""
    rows = -(-ori_m // tiles)
    return -(-rows // ROW_ALIGN) * ROW_ALIGN


def execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    """The operator call; a UDMA launch that differs from the tiling's usedCoreNum goes into `ctx.notes`."""
    mode = case.mode
    assert isinstance(mode, A2AMode)
    options = ctx.options if isinstance(ctx.options, A2AOptions) else A2AOptions()
    info: A2ALaunchInfo | None = None
    try:
        c, info = all_to_all_quant_matmul(
            inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], impl=mode.impl,
            local_matmul=mode.local_matmul, wait_order=mode.wait_order,
            hccl_server=mode.hccl_server if mode.hccl_server is not None else HcclServer.CCU, bias=inputs.get("bias"),
            out_dtype="bfloat16", block_dim=ctx.block_dim,
            head_tile_size=head_tile_size(case.shape.m, mode.comm_tiles) if mode.comm_tiles else None,
            check=ctx.check, timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers,
            data=ctx.data, comm=ctx.comm,
            launch=options.launch, return_stats=True)
        return c
    except HazardError as exc:
        info = exc.stats
        raise
    finally:
        if info is not None and info.note:
            ctx.notes.append(info.note)


# `--predict` sweep: localMatmul 0 / 1 / 2 x communication tiles per row block (head tile sizes), UDMA with
# in-order waits (the later source's order); tile counts whose tiling breaks a rule show as refused rows.
PREDICT_LOCAL_MATMUL = (0, 1, 2)
PREDICT_COMM_TILES = (1, 2, 4, 8, 16)


def predict_knobs(shape: Shape, size: int) -> list[Knob]:
    out = []
    for tiles in PREDICT_COMM_TILES:
        if tiles > 1 and head_tile_size(shape.m, tiles) == head_tile_size(shape.m, tiles // 2):
            continue   # the same head tile as the previous count
        for lm in PREDICT_LOCAL_MATMUL:
            out.append(Knob(A2AMode(Impl.UDMA, lm, WaitOrder.IN_ORDER, comm_tiles=tiles),
                            values={"localMatmul": lm, "head tile": head_tile_size(shape.m, tiles)}))
    return out


def compare(out: np.ndarray, ref: np.ndarray | None) -> Comparison:
    if (refused := comparison_refused(out, ref)) is not None:
        return refused
    ref = np.asarray(ref)
    return Comparison(a2a_allclose(out, ref), max_abs_error(out, ref), ulp_distance(out, ref, ml_dtypes.bfloat16))


def validate(case: Case, size: int) -> list[str]:
    out = []
    if case.shape.k % KA_ALIGN:
        out.append(f"A2A-1 Ka % 64 == 0: --k {case.shape.k} (K per rank) is not a multiple of {KA_ALIGN}")
    if size > MAX_RANKS:
        out.append(f"A2A-5 R <= {MAX_RANKS}: {size} ranks")
    return out


SPEC = OperatorSpec(
    name="all_to_all_quant_matmul",
    collective=True,
    summary="MX-quantized matmul fused with an all-to-all of A along M (SPEC §6)",
    mode_type=A2AMode,
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
    input_names=("x1", "x1_scale", "x2", "x2_scale", "bias"),
    validate=validate,
    predict_knobs=predict_knobs,
    options=A2AOptions,
)
