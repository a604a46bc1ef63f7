"""`run --scenario layers`: a model's layer loop on one `Communicator`, each layer's output feeding the next.

Two chains, L layers each, every operator call back to back on one persistent communicator (stream order,
no host barrier between the calls):
- TP MLP: x (m, K) -> all_gather_quant_matmul (column-parallel W1: (N1, K) per rank) -> h (R m, N1) ->
  quant_matmul_reduce_scatter (row-parallel W2: (K, N1) per rank) -> y (m, K) = the next layer's x;
- MoE: x (R m, Ka) -> all_to_all_quant_matmul (W_a: (N, R Ka)) -> c (m, N) -> grouped_matmul_mx (E experts,
  W_g: (E, R Ka, N), trans_b) -> y (m, R Ka) -> reshaped (R m, Ka) = the next layer's x.
Between operators the bf16 output is MX-quantized (E4M3 elements, E8M0 scales per 32 along K) by the
goldens' own quantizer (`numerics.quantize.quantize_mx`), so the formats chain. The chained golden runs the
same chain through the operators' goldens. `--seeds S` runs the loop under perturbation seeds perturb,
perturb + 1, ...: every seed's final output must be bitwise equal to the first seed's, and each layer's
output equal the chained golden under the operators' rule (AG / QMRS: <= 1 bf16 ULP). Protocol-only
(`data=False`): the same calls and cross-launch checks on a protocol-only Communicator, each layer fed
zero MX operands of the output's shape; no golden, no comparison (the output says so).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from mc2emu.cli.options import LAYER_CHAINS
from mc2emu.comm.communicator import Communicator
from mc2emu.numerics.compare import ulp_distance
from mc2emu.numerics.quantize import quantize_mx
from mc2emu.numerics.scale_layout import to_ascend_scale_a, to_ascend_scale_b
from mc2emu.ops import (
    all_gather_quant_matmul,
    all_to_all_quant_matmul,
    golden_a2a,
    golden_all_gather_quant_matmul,
    golden_grouped_matmul_mx,
    golden_quant_matmul_reduce_scatter,
    grouped_matmul_mx,
    quant_matmul_reduce_scatter,
)
from mc2emu.runtime.hazards import EXIT_HAZARD, Severity
from mc2emu.runtime.perturb import PerturbPolicy

ELEM = "e4m3"
# The layer loops' shapes: rows per rank m, hidden K (the MLP's), intermediate N1, the MoE's Ka and N, and
# its experts (the group list splits the m rows unevenly, an empty expert included).
MLP_M, MLP_K, MLP_N1 = 32, 128, 128
MOE_M, MOE_KA, MOE_N, MOE_EXPERTS = 32, 64, 128, 4
# Weights: normal(0, WEIGHT_STD) floats, MX-quantized once; inputs normal(0, 1).
WEIGHT_STD = 0.1
# One layer's bf16 output may differ from the chained golden by this many ULP (the AG ST rule).
LAYER_ULP = 1


def mx_rows(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """(elements, Ascend A-layout scales (rows, ceil(K/64), 2)) of x quantized per 32 along its last axis."""
    q = quantize_mx(np.asarray(x), ELEM, axis=-1)
    return q.data, to_ascend_scale_a(q.scale)


def mx_weight_t(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A transposed B operand (N, K): elements and (N, ceil(K/64), 2) scales."""
    q = quantize_mx(w, ELEM, axis=-1)
    return q.data, to_ascend_scale_b(q.scale, trans=True)


def _fed(y: Any, data: bool) -> Any:
    """The bf16 output itself, or (protocol-only: a payload, no values) zeros of its shape to quantize."""
    return y if data else np.zeros(np.shape(y), np.float32)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16)


@dataclass
class Chain:
    """One chain's per-rank weights and first input, and its layer step (emulated or golden)."""

    name: str
    x0: tuple[np.ndarray, np.ndarray]
    step: Callable[[int, tuple[np.ndarray, np.ndarray], Any, PerturbPolicy | None, bool], Any]
    golden: Callable[[int, tuple[np.ndarray, np.ndarray]], np.ndarray]
    feed: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def mlp_chain(world: Any, layers: int, seed: int, timeout: float | None) -> Chain:
    r, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng([seed, r])
    w1 = [mx_weight_t(rng.normal(0, WEIGHT_STD, (MLP_N1, MLP_K)).astype(np.float32)) for _ in range(layers)]
    w2 = [mx_weight_t(rng.normal(0, WEIGHT_STD, (MLP_K, MLP_N1)).astype(np.float32)) for _ in range(layers)]
    w2_all = [world.allgather(w) for w in w2]

    def step(layer: int, x: tuple[np.ndarray, np.ndarray], comm: Any, perturb: PerturbPolicy | None,
             data: bool = True) -> Any:
        h = all_gather_quant_matmul(x[0], x[1], *w1[layer], comm=comm, perturb=perturb, timeout=timeout,
                                    check=comm.device.check, data=data)
        hq = mx_rows(_fed(h, data))
        return quant_matmul_reduce_scatter(hq[0], hq[1], *w2[layer], comm=comm, perturb=perturb, timeout=timeout,
                                           check=comm.device.check, data=data)

    def golden(layer: int, x: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        h = golden_all_gather_quant_matmul(world.allgather(x[0]), world.allgather(x[1]), *w1[layer])
        hq = mx_rows(h)
        return golden_quant_matmul_reduce_scatter(world.allgather(hq[0]), world.allgather(hq[1]),
                                                  [w[0] for w in w2_all[layer]], [w[1] for w in w2_all[layer]], r)

    del size
    return Chain("tp_mlp", mx_rows(rng.normal(0, 1, (MLP_M, MLP_K)).astype(np.float32)), step, golden, mx_rows)


def moe_chain(world: Any, layers: int, seed: int, timeout: float | None) -> Chain:
    r, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng([seed, r, 1])
    wa = [mx_weight_t(rng.normal(0, WEIGHT_STD, (MOE_N, size * MOE_KA)).astype(np.float32)) for _ in range(layers)]
    wg = []
    for _ in range(layers):
        experts = [mx_weight_t(rng.normal(0, WEIGHT_STD, (size * MOE_KA, MOE_N)).astype(np.float32))
                   for _ in range(MOE_EXPERTS)]
        wg.append((np.stack([e[0] for e in experts]), np.stack([e[1] for e in experts])))
    # cumsum group list over the m rows: uneven, the second expert empty
    group_list = np.array([MOE_M // 4, MOE_M // 4, 3 * MOE_M // 4, MOE_M], dtype=np.int64)

    def feed(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mx_rows(np.asarray(y).reshape(size * MOE_M, MOE_KA))

    def step(layer: int, x: tuple[np.ndarray, np.ndarray], comm: Any, perturb: PerturbPolicy | None,
             data: bool = True) -> Any:
        c = all_to_all_quant_matmul(x[0], x[1], *wa[layer], comm=comm, perturb=perturb, timeout=timeout,
                                    check=comm.device.check, data=data)
        cq = mx_rows(_fed(c, data))
        return grouped_matmul_mx(cq[0], cq[1], *wg[layer], group_list, trans_b=True, perturb=perturb,
                                 timeout=timeout, check=comm.device.check, data=data)

    def golden(layer: int, x: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        c = golden_a2a(world.allgather(x[0]), world.allgather(x[1]), *wa[layer], r, ELEM)
        cq = mx_rows(c)
        return golden_grouped_matmul_mx(cq[0], cq[1], *wg[layer], group_list, trans_b=True)

    return Chain("moe", feed(rng.normal(0, 1, (MOE_M, size * MOE_KA)).astype(np.float32)), step, golden, feed)


@dataclass(frozen=True)
class SeedResult:
    chain: str
    seed: int | None
    wall_s: float
    max_ulp: int            # worst layer output vs the chained golden
    same_as_first: bool     # final output bitwise equal to the first seed's


# The chain makers, by the names `LAYER_CHAINS` (mc2emu/cli/options.py) gives with the operators each calls.
MAKERS: dict[str, Callable[[Any, int, int, float | None], Chain]] = {"tp_mlp": mlp_chain, "moe": moe_chain}


def run_layers(world: Any, layers: int, seeds: list[int | None], timeout: float | None, say: Callable[[str], None],
               check: bool = True, window_offsets: dict[str, int] | None = None, data: bool = True,
               chains: Sequence[str] = tuple(LAYER_CHAINS)) -> int:
    """The `chains` for every seed on one Communicator per chain; returns the exit code (0 pass, 1 an output
    not bitwise equal across seeds or off the chained golden, 3 a hazard across the loop). data=False:
    protocol-only (module docstring): the exit code judges the hazards alone."""
    ok, hazardous = True, False
    for make in (MAKERS[name] for name in chains):
        chain = make(world, layers, 0, timeout)
        gold, x = [], chain.x0
        for layer in range(layers if data else 0):
            y = chain.golden(layer, x)
            gold.append(y)
            x = chain.feed(y)
        first: np.ndarray | None = None
        results: list[SeedResult] = []
        hazards = []
        with Communicator(world, check=check, timeout=timeout, window_offsets=window_offsets, data=data) as comm:
            for seed in seeds:
                perturb = PerturbPolicy(seed) if seed is not None else None
                t0 = time.perf_counter()
                x, worst = chain.x0, 0
                for layer in range(layers):
                    y = chain.step(layer, x, comm, perturb, data)
                    if data:
                        worst = max(worst, int(ulp_distance(y, gold[layer], ml_dtypes.bfloat16)))
                    x = chain.feed(_fed(y, data))
                wall = time.perf_counter() - t0
                if data:
                    first = y if first is None else first
                    same = bool(np.array_equal(_bits(y), _bits(first)))
                    everyone = world.allgather((worst, same, wall))
                    res = SeedResult(chain.name, seed, max(w for _, _, w in everyone),
                                     max(u for u, _, _ in everyone), all(s for _, s, _ in everyone))
                    results.append(res)
                    ok &= res.same_as_first and res.max_ulp <= LAYER_ULP
                    say(f"{chain.name} L={layers} R={world.Get_size()} perturb={seed}: wall {res.wall_s:.2f} s, "
                        f"max {res.max_ulp} ULP vs the chained golden, "
                        f"{'bitwise equal to' if res.same_as_first else 'DIFFERS from'} the first seed")
                else:
                    walls_all = world.allgather(wall)
                    results.append(SeedResult(chain.name, seed, max(walls_all), 0, True))
                    say(f"{chain.name} L={layers} R={world.Get_size()} perturb={seed}: wall {max(walls_all):.2f} s, "
                        f"protocol-only: no values, golden and bitwise comparisons off")
                # One seed is one pass of the model: its L layers run back to back with no host barrier; the
                # checks of that pass finish here, behind an agreed barrier, before the next seed's pass (the
                # stream checks hold every launch they span: docs/performance.md).
                hazards += comm.sync()
        names = sorted({h.hazard.value for h in hazards if h.severity is not Severity.WARNING})
        hazardous |= bool(names)
        walls = [r.wall_s for r in results]
        compared = (f"{sum(r.same_as_first for r in results)}/{len(results)} bitwise equal" if data else
                    "protocol-only (outputs not compared)")
        say(f"{chain.name}: {len(results)} seed(s), wall per seed {np.mean(walls):.2f} s (max {max(walls):.2f} s), "
            f"{compared}, "
            f"hazards across the loop: {names or 'none'}")
    return 1 if not ok else (EXIT_HAZARD if hazardous else 0)
