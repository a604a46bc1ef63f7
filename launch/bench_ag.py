"""all_gather_quant_matmul: emulator wall time vs the plain numpy golden on the same ranks and inputs.

Run as `mpirun -n R python launch/bench_ag.py --m M --k K --n N` (the issue's cases: R = 4 with
(m, k, n) = (2061, 4096, 2560), and R = 8; target ratio <= 1.5). Both sides run on every rank at once (the
load of R NPUs on this machine); each wall is the slowest rank's. The golden is the CANN recipe: dequantize
the gathered x1 and this rank's x2 to FP32, one FP32 BLAS matmul, cast to bf16 — the physical floor of
the computation. Inputs: the ST recipe (`gen_ag_st_inputs`). The emulator launches the ST host's tiling
(usedCoreNum blocks) unless --block-dim is given.

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
from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs, golden_all_gather_quant_matmul  # noqa: E402
from mc2emu.ops.all_gather_quant_matmul_golden import ag_st_verify  # noqa: E402

TARGET = 1.5   # ratio target of the issue


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=2061, help="rows of x1 per rank")
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=2560)
    ap.add_argument("--wait-order", default="in_order")
    ap.add_argument("--block-dim", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="hazard checkers off (the default runs them, as users do)")
    ap.add_argument("--no-floor", dest="floor", action="store_false",
                    help="skip the floor (the emulator's MMAD steps alone, launch/mmad_floor.py)")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    inp = gen_ag_st_inputs(args.m, args.k, args.n, rank)
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])

    golden_walls, emu_walls, golden_cpus, emu_cpus = [], [], [], []
    for _ in range(args.repeat):
        idle_barrier(comm)
        t0, (c0, s0) = time.perf_counter(), cpu_s()
        ref = golden_all_gather_quant_matmul(x1s, x1ss, inp["x2"], inp["x2_scale"])
        (c1, s1), wall = cpu_s(), time.perf_counter() - t0
        idle_barrier(comm)   # ranks done first sleep here: a blocking reduction would spin against the others
        golden_cpus.append(tuple(comm.allreduce(v, op=MPI.SUM) for v in (c1 - c0, s1 - s0)))
        golden_walls.append(comm.allreduce(wall, op=MPI.MAX))
        idle_barrier(comm)
        t0, (c0, s0) = time.perf_counter(), cpu_s()
        out, stats = all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"],
                                             wait_order=args.wait_order, block_dim=args.block_dim, timeout=300,
                                             check=args.check, return_stats=True)
        (c1, s1), wall = cpu_s(), time.perf_counter() - t0
        idle_barrier(comm)
        emu_cpus.append(tuple(comm.allreduce(v, op=MPI.SUM) for v in (c1 - c0, s1 - s0)))
        emu_walls.append(comm.allreduce(wall, op=MPI.MAX))
    ok, _, _ = ag_st_verify(out, ref)
    oks = comm.allgather(ok)
    ulp = comm.allreduce(bf16_ulp(out, ref), op=MPI.MAX)
    floor = None
    if args.floor:
        c, steps, base, fw, fc = run_op_floor(comm, stats.mm_tiling, np.concatenate(x1s),
                                              np.concatenate(x1ss), inp["x2"], inp["x2_scale"], args.repeat, cpu_s)
        floor_c = golden_cast(c, "bfloat16")
        floor_ok, _, _ = ag_st_verify(floor_c, ref)
        floor_ulp = comm.allreduce(bf16_ulp(floor_c, ref), op=MPI.MAX)
        floor = (steps, base, (fw, fc), all(comm.allgather(floor_ok)), floor_ulp)
    if rank == 0:
        g, e = min(golden_walls), min(emu_walls)
        print(f"all_gather_quant_matmul {args.wait_order} checks {'on' if args.check else 'off'}: "
              f"m={args.m} k={args.k} n={args.n} R={size} on {os.cpu_count()} cores")
        print(f"  numpy golden wall  {g:8.2f} s")
        print(f"  emulator wall      {e:8.2f} s")
        verdict = "met" if e / g <= TARGET else "NOT met"
        print(f"  ratio emulator / golden  {e / g:6.2f}  (target <= {TARGET}: {verdict})")
        (gc, gs), (ec, es) = min(golden_cpus), min(emu_cpus)
        print(f"  CPU seconds, all ranks   golden {gc:.1f}, emulator {ec:.1f}: ratio {ec / gc:.2f} "
              f"(less sensitive to the load than the walls)")
        print(f"    of which system        golden {gs:.1f} ({100 * gs / gc:.0f} %), emulator {es:.1f} "
              f"({100 * es / ec:.0f} %)")
        if note := golden_faults_note(gc, gs):
            print(note)
        print(f"  AG ST verify rule        {'pass' if all(oks) else 'FAIL'} (max bf16 ULP {ulp})")
        if floor is not None:
            steps, base, fwc, floor_ok, floor_ulp = floor
            for line in floor_lines(steps, base, fwc, (g, gc), (e, ec), TARGET):
                print(line)
            print(f"    its C vs the golden, AG ST rule  {'pass' if floor_ok else 'FAIL'} (max bf16 ULP {floor_ulp})")


if __name__ == "__main__":
    main()
