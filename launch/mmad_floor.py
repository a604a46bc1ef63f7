"""The floor under an emulated MX matmul: the emulator's baseK MMAD steps alone, timed beside the golden.

SPEC §4 fixes the emulator's numerics: per (baseM, baseN) tile, K is walked in kL1 chunks of baseK steps, each
step one float32 BLAS matmul added to the tile's float32 L0C (`BlockMmadMx.Iterate` / `Mmad`). The golden makes
one large BLAS call, whose packed panels are reused across the whole output; a step re-packs its operands and
reads them from beyond L2, since a tile's chunks come back only after every other tile of its row or column.
`mmad_steps` runs those steps and nothing else: no core threads, flags, GM reads, fragment gathers, checks or
fixpipe, and the operands decoded once outside the timing and held as the decode memo holds them (one
contiguous float32 array per kL1 chunk of a tile row or column). `bench_ag` and `bench_qmrs` run it on every
rank at once over their output with the launch's tiling and print its ratio to the golden: no emulator with
these numerics can do better on the machine, so a ratio target below it cannot be met by cutting overhead.

Used by the benches (`--no-floor` skips it); `tests/ops/test_mmad_floor.py` checks that the steps give the
emulator's bits.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from mc2emu.blaze.gemm.tile.tile_mmad_mx import b_row_major_same
from mc2emu.launcher import idle_barrier
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.golden import golden_mx_operands
from mc2emu.numerics.int_math import CeilDiv


def chunk_operands(a: np.ndarray, b: np.ndarray, baseM: int, baseN: int, kL1: int
                   ) -> tuple[dict[tuple[int, int], np.ndarray], dict[tuple[int, int], np.ndarray]]:
    """Float32 A (m, k) and B (k, n) cut into contiguous (baseM, kL1) and (kL1, baseN) chunks keyed by (tile row,
    chunk) and (chunk, tile column): the layout the decode memo hands `Iterate`."""
    (m, k), n = a.shape, b.shape[1]
    a_chunks = {(i, c): np.ascontiguousarray(a[i * baseM:(i + 1) * baseM, c * kL1:(c + 1) * kL1])
                for i in range(CeilDiv(m, baseM)) for c in range(CeilDiv(k, kL1))}
    b_chunks = {(c, j): np.ascontiguousarray(b[c * kL1:(c + 1) * kL1, j * baseN:(j + 1) * baseN])
                for c in range(CeilDiv(k, kL1)) for j in range(CeilDiv(n, baseN))}
    return a_chunks, b_chunks


def mmad_steps(a_chunks: dict[tuple[int, int], np.ndarray], b_chunks: dict[tuple[int, int], np.ndarray],
               m: int, n: int, k: int, baseM: int, baseN: int, baseK: int, kL1: int) -> tuple[np.ndarray, int]:
    """C = A @ B in float32 by the emulator's steps, tiles row by row; returns C and the number of steps. Per tile:
    for each kL1 chunk, each baseK step is one BLAS matmul, straight into L0C on the tile's first step and
    otherwise into a step buffer added to L0C (`BlockMmadMx.Mmad` without bias). B is taken as stored
    transposed (the MC2 operators' x2): at the small step shapes where OpenBLAS's bits follow B's layout, the
    step keeps the column-major B, as `BlockMmadMx.Iterate` does (`b_row_major_same`)."""
    c = np.empty((m, n), dtype=np.float32)
    steps = 0
    step: np.ndarray | None = None
    for i in range(CeilDiv(m, baseM)):
        for j in range(CeilDiv(n, baseN)):
            curM, curN = min(baseM, m - i * baseM), min(baseN, n - j * baseN)
            l0c = np.empty((curM, curN), dtype=np.float32)
            if step is None or step.shape != l0c.shape:
                step = np.empty_like(l0c)
            for ch in range(CeilDiv(k, kL1)):
                a_c, b_c = a_chunks[(i, ch)], b_chunks[(ch, j)]
                for lo in range(0, a_c.shape[1], baseK):
                    hi = min(lo + baseK, a_c.shape[1])
                    b_step = b_c[lo:hi, :]
                    if not b_row_major_same(curM, hi - lo, curN, False):
                        b_step = np.asfortranarray(b_step)
                    if ch == 0 and lo == 0:
                        np.matmul(a_c[:, lo:hi], b_step, out=l0c)
                    else:
                        np.matmul(a_c[:, lo:hi], b_step, out=step)
                        l0c += step
                    steps += 1
            c[i * baseM:i * baseM + curM, j * baseN:j * baseN + curN] = l0c
    return c, steps


def step_count(m: int, n: int, k: int, baseM: int, baseN: int, baseK: int, kL1: int) -> int:
    """How many steps `mmad_steps` runs for an (m, k) x (k, n) matmul with that tiling (without running them)."""
    per_tile = sum(CeilDiv(min(kL1, k - c * kL1), baseK) for c in range(CeilDiv(k, kL1)))
    return CeilDiv(m, baseM) * CeilDiv(n, baseN) * per_tile


def run_floor(comm: Any, a: np.ndarray, b: np.ndarray, baseM: int, baseN: int, baseK: int, kL1: int,
              repeat: int, cpu_s: Any) -> tuple[np.ndarray, int, float, float]:
    """`mmad_steps` on every rank at once, `repeat` times (the bench's load: one process per rank, all ranks
    together); returns this rank's C, its step count, the best slowest-rank wall and the best CPU seconds summed
    over the ranks (`cpu_s`: the bench's (CPU, system) clock)."""
    from mpi4py import MPI

    a_chunks, b_chunks = chunk_operands(a, b, baseM, baseN, kL1)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    walls, cpus = [], []
    for _ in range(repeat):
        idle_barrier(comm)
        t0, (c0, _) = time.perf_counter(), cpu_s()
        c, steps = mmad_steps(a_chunks, b_chunks, m, n, k, baseM, baseN, baseK, kL1)
        (c1, _), wall = cpu_s(), time.perf_counter() - t0
        idle_barrier(comm)
        walls.append(comm.allreduce(wall, op=MPI.MAX))
        cpus.append(comm.allreduce(c1 - c0, op=MPI.SUM))
    return c, steps, min(walls), min(cpus)


def _ratio(a: float, b: float) -> str:
    """a / b to two places; "n/a" when b is no time at all (a tiny problem under the clock's resolution)."""
    return f"{a / b:.2f}" if b > 0 else "n/a"


def run_op_floor(comm: Any, mm: Any, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
                 repeat: int, cpu_s: Any) -> tuple[np.ndarray, int, tuple[int, int, int, int], float, float]:
    """`run_floor` of an MC2 operator's matmul deq(x1) @ deq(x2)^T (x2 stored transposed, as the operators take
    it), the operands decoded by the golden, with the launch tiling `mm`'s (baseM, baseN, baseK) and kL1 =
    stepK * baseK; returns C, the step count, those four shapes, the wall and the CPU seconds."""
    base = (mm.baseM, mm.baseN, mm.baseK, mm.stepK * mm.baseK)
    a, b = golden_mx_operands(x1, x1_scale, x2, x2_scale, ElemFormat.parse(x1.dtype), trans_b=True,
                              b_elem=ElemFormat.parse(x2.dtype))
    c, steps, wall, cpu = run_floor(comm, a, b, *base, repeat, cpu_s)
    return c, steps, base, wall, cpu


def floor_lines(steps: int, base: tuple[int, int, int, int], floor: tuple[float, float],
                golden: tuple[float, float], emulator: tuple[float, float], target: float) -> list[str]:
    """The bench's report of the floor: (wall, CPU) of each side, the ratios, and what the target leaves."""
    (fw, fc), (gw, gc), (ew, ec) = floor, golden, emulator
    baseM, baseN, baseK, kL1 = base
    return [
        f"  floor: the emulator's MMAD steps alone ({steps} per rank of {baseM}x{baseK}x{baseN}, kL1 {kL1}; "
        f"no threads, GM, decode or checks)",
        f"    wall {fw:.2f} s, CPU {fc:.2f} s: floor / golden  wall {_ratio(fw, gw)}, CPU {_ratio(fc, gc)}",
        f"    emulator / floor  wall {_ratio(ew, fw)}, CPU {_ratio(ec, fc)}; against this golden the target {target} "
        f"allows the emulator at most {_ratio(target * gc, fc)}x the floor's CPU",
    ]
