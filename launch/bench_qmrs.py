"""quant_matmul_reduce_scatter: emulator wall time vs the plain numpy golden on the same ranks and inputs.

Run as `mpirun -n R python launch/bench_qmrs.py --m M --k K --n N [--impl rounds|per_block]` (the issue's
cases: R = 4 and 8 with (M, K, N) = (4096, 4096, 2048); target ratio <= 1.5). Both sides run on every rank
at once (the load of R NPUs on this machine); each wall is the slowest rank's. The golden is the plain numpy
recipe of one rank: dequantize its x1 and x2 to FP32, one FP32 BLAS matmul, cast to bf16 (C_j), one MPI
alltoall of the M segments, the FP32 sum over ranks ascending and the bf16 cast — the physical floor of the
computation and the exchange. Also printed: the CPU seconds of both sides (`getrusage`, user + system, of every
rank process, all its threads, summed over the ranks), a ratio that the machine's other load disturbs less than
the walls do, and the system share of each. Inputs: the ST recipe (`gen_qmrs_st_inputs`); the output is
checked bit for bit against that golden.

Then the floor (`mmad_floor.py`; `--no-floor` skips it): the emulator's MMAD steps alone, with the launch's
tiling, on every rank at once. No emulator with SPEC §4's per-step numerics can beat it on this machine; the
bench prints it against the golden and the emulator against it, and checks its output against the golden.
"""

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from bench_common import bf16_ulp, cpu_s, golden_faults_note  # noqa: E402
from mmad_floor import floor_lines, run_op_floor  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mc2emu.launcher import idle_barrier  # noqa: E402
from mc2emu.numerics.golden import golden_cast  # noqa: E402
from mc2emu.ops import gen_qmrs_st_inputs, quant_matmul_reduce_scatter  # noqa: E402
from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_qmrs_partial, golden_reduce_scatter  # noqa: E402
from mc2emu.runtime import HazardError  # noqa: E402

TARGET = 1.5   # ratio target of the issue


def numpy_golden(comm, inp):
    """One rank's share: its own C_j, the alltoall of segments, the ascending FP32 sum; returns (y, C_j)."""
    R, rank = comm.Get_size(), comm.Get_rank()
    c = golden_qmrs_partial(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    seg = c.shape[0] // R
    got = comm.alltoall([np.ascontiguousarray(c[r * seg:(r + 1) * seg]) for r in range(R)])
    parts = [np.zeros_like(c) for _ in range(R)]
    for j in range(R):
        parts[j][rank * seg:(rank + 1) * seg] = got[j]
    return golden_reduce_scatter(parts, rank), c


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=4096, help="rows of every rank's x1 (M); y has M / R rows")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--impl", default="rounds", help="rounds | per_block")
    ap.add_argument("--head-m-size", type=int, default=None)
    ap.add_argument("--block-dim", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="hazard checkers off (the default runs them, as users do)")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the floor (the emulator's MMAD steps alone, launch/mmad_floor.py)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    inp = gen_qmrs_st_inputs(args.m, args.k, args.n, rank)
    golden_walls, emu_walls, golden_cpus, emu_cpus = [], [], [], []
    for _ in range(args.repeat):
        idle_barrier(comm)
        t0, (c0, s0) = time.perf_counter(), cpu_s()
        ref, c_j = numpy_golden(comm, inp)
        (c1, s1), wall = cpu_s(), time.perf_counter() - t0
        idle_barrier(comm)   # ranks done first sleep here: a blocking reduction would spin against the others
        golden_walls.append(comm.allreduce(wall, op=MPI.MAX))
        golden_cpus.append(tuple(comm.allreduce(v, op=MPI.SUM) for v in (c1 - c0, s1 - s0)))
        idle_barrier(comm)
        t0, (c0, s0) = time.perf_counter(), cpu_s()
        kw = {"kernel_variant": "final_wait"} if args.impl == "per_block" else {"head_m_size": args.head_m_size}
        try:
            out, stats = quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"],
                                                     impl=args.impl, block_dim=args.block_dim, timeout=600,
                                                     check=args.check, return_stats=True, **kw)
        except HazardError as exc:
            out, stats = exc.output, exc.stats
            print(f"rank {rank}: {exc}", flush=True)
        (c1, s1), wall = cpu_s(), time.perf_counter() - t0
        idle_barrier(comm)
        emu_walls.append(comm.allreduce(wall, op=MPI.MAX))
        emu_cpus.append(tuple(comm.allreduce(v, op=MPI.SUM) for v in (c1 - c0, s1 - s0)))
    bad = comm.allreduce(int((out.view(np.uint16) != ref.view(np.uint16)).sum()), op=MPI.SUM)
    ulp = comm.allreduce(bf16_ulp(out, ref), op=MPI.MAX)
    floor = None
    if args.floor:
        c, steps, base, fw, fc = run_op_floor(comm, stats.round_tilings[0], inp["x1"], inp["x1_scale"],
                                              inp["x2"], inp["x2_scale"], args.repeat, cpu_s)
        floor_bad = comm.allreduce(int((golden_cast(c, "bfloat16").view(np.uint16) != c_j.view(np.uint16)).sum()),
                                   op=MPI.SUM)
        floor = (steps, base, (fw, fc), floor_bad)
    if rank == 0:
        g, e = min(golden_walls), min(emu_walls)
        print(f"quant_matmul_reduce_scatter {args.impl} checks {'on' if args.check else 'off'}: "
              f"M={args.m} K={args.k} N={args.n} R={size} on {os.cpu_count()} cores")
        print(f"  numpy golden wall  {g:8.2f} s")
        print(f"  emulator wall      {e:8.2f} s")
        verdict = "met" if e / g <= TARGET else "NOT met"
        print(f"  ratio emulator / golden  {e / g:6.2f}  (target <= {TARGET}: {verdict})")
        (gc, gs), (ec, es) = min(golden_cpus), min(emu_cpus)
        print(f"  CPU s (all ranks)  golden {gc:.2f}  emulator {ec:.2f}  ratio {ec / gc:6.2f}")
        print(f"    of which system  golden {gs:.2f} ({100 * gs / gc:.0f} %)  "
              f"emulator {es:.2f} ({100 * es / ec:.0f} %)")
        if note := golden_faults_note(gc, gs):
            print(note)
        verdict = "pass" if bad == 0 else f"FAIL ({bad} elements differ, max bf16 ULP {ulp})"
        print(f"  bit-exact vs golden      {verdict}")
        if floor is not None:
            steps, base, fwc, floor_bad = floor
            for line in floor_lines(steps, base, fwc, (g, gc), (e, ec), TARGET):
                print(line)
            print(f"    its C_j bit-exact vs the golden's  {'pass' if floor_bad == 0 else f'FAIL ({floor_bad})'}")


if __name__ == "__main__":
    main()
