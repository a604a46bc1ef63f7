"""Cross-core flag latency: AIV -> AIC Set -> Wait wakeup and the AIV <-> AIC ping-pong round trip.

Run as `mpirun -n 8 python launch/bench_flags.py`: every rank runs the same ping-pong on its own emulated
device at the same time, which is the load the emulator sees with 8 NPUs on this 2-core machine. Rank 0
prints the medians over all ranks, and the single-rank figure measured alone for comparison.
"""

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mc2emu.launcher import idle_barrier  # noqa: E402
from mc2emu.runtime import Device, Pipe  # noqa: E402

TARGET_ROUND_TRIP_US = 50.0


def ping_pong(ctx, n, t_set, t_woken, t_rt):
    if ctx.ASCEND_IS_AIV:
        for i in range(n):
            t0 = time.perf_counter()
            t_set[i] = t0
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)
            t_rt[i] = time.perf_counter() - t0
    else:
        for i in range(n):
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
            t_woken[i] = time.perf_counter()
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 1)


def measure(n):
    dev = Device(timeout=60)
    t_set, t_woken, t_rt = np.zeros(n), np.zeros(n), np.zeros(n)
    dev.launch(ping_pong, 1, "MIX_AIC_1_1", n, t_set, t_woken, t_rt)
    return (t_woken - t_set) * 1e6, t_rt * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--iterations", type=int, default=3000)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    alone = None
    if rank == 0:
        _, rt_alone = measure(args.iterations)
        alone = float(np.median(rt_alone))
    idle_barrier(comm)
    wake, rt = measure(args.iterations)
    wakes = comm.gather(wake, root=0)
    rts = comm.gather(rt, root=0)
    if rank == 0:
        wake_all, rt_all = np.concatenate(wakes), np.concatenate(rts)
        med = float(np.median(rt_all))
        print(f"cross-core flags, {size} ranks on {os.cpu_count()} cores, {args.iterations} ping-pongs per rank")
        wake_med, wake_p90 = np.median(wake_all), np.percentile(wake_all, 90)
        print(f"  AIV->AIC Set->Wait wakeup   median {wake_med:8.1f} us   p90 {wake_p90:8.1f} us")
        print(f"  AIV<->AIC round trip        median {med:8.1f} us   p90 {np.percentile(rt_all, 90):8.1f} us")
        print(f"  round trip, one rank alone  median {alone:8.1f} us")
        verdict = "met" if med <= TARGET_ROUND_TRIP_US else "NOT met"
        print(f"  target median round trip <= {TARGET_ROUND_TRIP_US:.0f} us: {verdict}"
              f" (ratio {med / TARGET_ROUND_TRIP_US:.2f})")


if __name__ == "__main__":
    main()
