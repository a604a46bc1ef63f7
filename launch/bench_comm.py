"""Benchmark of the comm layer: put_signal round trip and a tiled all-to-all, over MPI.

    mpirun -n 8 python launch/bench_comm.py [--iters N] [--payload BYTES] [--tiles T] [--tile-bytes B]

- Round trip: rank 0 `put_signal`s a payload to rank 1 and waits for rank 1's reply signal; rank 1 waits
  and replies. The other ranks idle in a host barrier. Median and p90 per round trip, in microseconds.
- All-to-all: every rank puts `tiles` x `tile-bytes` to every other rank, one `put_signal` per tile (the
  UDMA pattern), from `--cores` AIV cores (peers dealt round-robin; R - 1 = one core per peer as in the
  apace UDMA kernel), and waits for every tile addressed to it; `--a2a-iters` iterations run inside one
  launch (signal value = iteration). Aggregate GB/s = R (R - 1) tiles tile-bytes / time per iteration,
  slowest rank, including a final host barrier.
"""

from __future__ import annotations

import os

# 8 ranks on 2 cores: threaded BLAS measured 13x slower (MPI-NOTES); set before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from mc2emu.comm import Cmp, CommWorld, Shmem, SignalOp, SignalRead  # noqa: E402
from mc2emu.comm.progress_probe import PROBE_REUSE_S  # noqa: E402
from mc2emu.runtime import Device, KernelType  # noqa: E402
from mc2emu.runtime.core import CoreContext  # noqa: E402

KIB = 1024
# prctl option that sets the calling thread's timer slack (inherited by threads it creates). Linux adds
# up to 50 us of slack to every timed sleep by default, so the wait primitive's 50 us backoff sleeps
# ~136 us (MPI-NOTES).
PR_SET_TIMERSLACK = 29
# Deadline of every wait in the benchmark: generous against a slow 8-rank iteration, finite if it hangs.
BENCH_TIMEOUT_S = 60.0


def round_trip(world: CommWorld, shmem: Shmem, iters: int, payload: int, warmup: int) -> list[float]:
    """Per-iteration round-trip times (s) measured on rank 0 (empty list elsewhere)."""
    dev = world.device
    win = world.window(payload + 2 * 8, "rt")
    sig = win.addr(payload)
    src = dev.gm.alloc(max(payload, 1), "rt_src", data=np.full(max(payload, 1), world.rank, np.uint8))
    times: list[float] = []

    def kernel(ctx: CoreContext) -> None:
        me = world.rank
        for i in range(1, warmup + iters + 1):
            if me == 0:
                t0 = time.perf_counter()
                shmem.put_signal(ctx, win.base, src, payload, sig, i, SignalOp.SET, 1)
                shmem.signal_wait_until(ctx, sig + 8, Cmp.GE, i)
                if i > warmup:
                    times.append(time.perf_counter() - t0)
            elif me == 1:
                shmem.signal_wait_until(ctx, sig, Cmp.GE, i)
                shmem.put_signal(ctx, win.base, src, payload, sig + 8, i, SignalOp.SET, 0)

    dev.launch(kernel, 1, KernelType.AIV_ONLY, name="round_trip")
    world.barrier()
    return times


def all_to_all(world: CommWorld, shmem: Shmem, iters: int, tiles: int, tile_bytes: int, cores: int) -> float:
    """Seconds per all-to-all iteration on this rank."""
    dev = world.device
    ranks, me = world.size, world.rank
    data_bytes = ranks * tiles * tile_bytes
    win = world.window(data_bytes + ranks * tiles * 8, "a2a")
    sigs = win.addr(data_bytes)
    src = dev.gm.alloc(data_bytes, "a2a_src", data=np.full(data_bytes, me, np.uint8))
    peers = [p for p in range(ranks) if p != me]

    def kernel(ctx: CoreContext, first: int, count: int) -> None:
        mine = peers[ctx.GetBlockIdx()::cores]
        for it in range(first, first + count):
            for t in range(tiles):
                for j in mine:
                    shmem.put_signal(ctx, win.addr((me * tiles + t) * tile_bytes),
                                     src + (j * tiles + t) * tile_bytes, tile_bytes, sigs + (me * tiles + t) * 8,
                                     it, SignalOp.SET, j)
            for j in mine:
                for t in range(tiles):
                    shmem.signal_wait_until(ctx, sigs + (j * tiles + t) * 8, Cmp.GE, it)

    dev.launch(kernel, cores, KernelType.AIV_ONLY, 1, 1, name="a2a_warmup")
    world.barrier()
    t0 = time.perf_counter()
    dev.launch(kernel, cores, KernelType.AIV_ONLY, 2, iters, name="a2a")
    world.barrier()
    elapsed = (time.perf_counter() - t0) / iters
    got = dev.gm.view(win.base, np.uint8, (ranks, tiles * tile_bytes))
    bad = [p for p in peers if not (got[p] == p).all()]
    if bad:
        raise RuntimeError(f"rank {me}: all-to-all data from ranks {bad} is wrong")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=2000, help="round trips to time")
    ap.add_argument("--warmup", type=int, default=200, help="round trips before timing")
    ap.add_argument("--payload", type=int, default=64 * KIB, help="round-trip payload bytes")
    ap.add_argument("--a2a-iters", type=int, default=20, help="all-to-all iterations to time")
    ap.add_argument("--tiles", type=int, default=16, help="tiles per peer per all-to-all")
    ap.add_argument("--tile-bytes", type=int, default=64 * KIB, help="bytes per tile")
    ap.add_argument("--cores", type=int, nargs="*", default=[1, 0],
                    help="AIV cores per rank in the all-to-all, one run each (0: R - 1, one per peer)")
    ap.add_argument("--read", choices=[r.value for r in SignalRead], default=SignalRead.LOAD.value,
                    help="how signal waits read the signal word")
    ap.add_argument("--probe-reuse", type=float, default=PROBE_REUSE_S,
                    help="seconds a global-progress reading is reused")
    ap.add_argument("--timer-slack-us", type=float, default=0.0,
                    help="set this process's timer slack (Linux prctl) before the run; 0 keeps the OS default")
    args = ap.parse_args(argv)
    if args.timer_slack_us > 0 and sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, int(args.timer_slack_us * 1000), 0, 0, 0)

    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        sys.stderr.write("bench_comm needs at least 2 ranks: mpirun -n 8 python launch/bench_comm.py\n")
        return 2
    dev = Device(rank=comm.Get_rank(), check=False, timeout=BENCH_TIMEOUT_S)
    world = CommWorld(dev, comm, probe_reuse_s=args.probe_reuse)
    shmem = Shmem(world, read=SignalRead(args.read))
    ranks = world.size

    rt = round_trip(world, shmem, args.iters, args.payload, args.warmup)
    a2a = []
    for n in args.cores:
        cores = n or ranks - 1
        sec = all_to_all(world, shmem, args.a2a_iters, args.tiles, args.tile_bytes, cores)
        a2a.append((cores, comm.allreduce(sec, op=MPI.MAX)))
    world.close()
    if world.rank == 0:
        us = np.array(rt) * 1e6
        moved = ranks * (ranks - 1) * args.tiles * args.tile_bytes
        slack = f"{args.timer_slack_us:g} us" if args.timer_slack_us > 0 else "OS default"
        print(f"ranks {ranks}, signal read {args.read}, probe reuse {args.probe_reuse * 1e3:g} ms, "
              f"timer slack {slack}")
        print(f"put_signal round trip, {args.payload} B payload: median {np.median(us):.1f} us, "
              f"p10 {np.percentile(us, 10):.1f} us, p90 {np.percentile(us, 90):.1f} us ({len(us)} trips)")
        for cores, slowest in a2a:
            print(f"all-to-all {args.tiles} x {args.tile_bytes // KIB} KiB per peer, {cores} cores/rank: "
                  f"{slowest * 1e3:.2f} ms/iter, {moved / slowest / 1e9:.2f} GB/s aggregate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
