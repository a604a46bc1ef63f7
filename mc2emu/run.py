"""`mpirun -n 8 python -m mc2emu.run` — the main job.

Started without mpirun, it relaunches itself under the installed `mpiexec` with `--np` ranks (default 8).
Until the operator scenarios land, it runs the device self-check: on every rank, a MIX 1:2 launch that
exercises every cross-core flag mode and both SyncAll forms, then a cross-rank agreement on the results.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from mc2emu.launcher import mpiexec_command, under_mpirun
from mc2emu.runtime.hazards import EXIT_BAD_INPUT, EXIT_HAZARD, Mc2EmuError

DEFAULT_NP = 8
SELF_CHECK_ROUNDS = 200


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mc2emu.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--np", type=int, default=DEFAULT_NP, help="ranks when relaunching under mpiexec")
    ap.add_argument("--timeout", type=float, default=30.0, help="wait deadline in seconds")
    ap.add_argument("--block-dim", type=int, default=4, help="blocks of the self-check launch")
    return ap


def _self_check_kernel(ctx, rounds: int) -> int:
    from mc2emu.runtime import Pipe

    done = 0
    for t in range(rounds):
        fid = t % 4
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, fid)          # AIV -> AIC round (both AIVs)
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, fid + 4)     # AIC -> AIV
            ctx.CrossCoreSetFlag(1, Pipe.PIPE_V, 9)              # AIV <-> AIV of the group
            ctx.CrossCoreWaitFlag(1, Pipe.PIPE_V, 9)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, fid)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, fid + 4)
        done += 1
    ctx.SyncAll(True)
    ctx.SyncAll(False)
    return done


def self_check(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from mc2emu.runtime import Device

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=args.timeout)
    t0 = time.perf_counter()
    res = dev.launch(_self_check_kernel, args.block_dim, "MIX_AIC_1_2", SELF_CHECK_ROUNDS)
    wall = time.perf_counter() - t0
    row = (rank, sum(res.returns.values()), len(res.hazards), len(dev.flags.leftovers()), wall)
    rows = comm.gather(row, root=0)
    status = 0
    if rank == 0:
        expected = SELF_CHECK_ROUNDS * args.block_dim * 3
        print(f"mc2emu device self-check: {size} ranks, MIX_AIC_1_2 x {args.block_dim} blocks, "
              f"{SELF_CHECK_ROUNDS} flag rounds per core, SyncAll<true> and <false>")
        print(f"{'rank':>4} {'rounds':>7} {'hazards':>7} {'leftover':>8} {'wall s':>7}  result")
        for r, rounds, hz, left, w in rows:
            ok = rounds == expected and hz == 0 and left == 0
            status |= 0 if ok else EXIT_HAZARD
            print(f"{r:>4} {rounds:>7} {hz:>7} {left:>8} {w:>7.2f}  {'ok' if ok else 'FAIL'}")
    return int(comm.bcast(status, root=0))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.np < 1:
        print("--np must be >= 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not under_mpirun():
        cmd, env = mpiexec_command(args.np, ["-m", "mc2emu.run", *(argv if argv is not None else sys.argv[1:])])
        return subprocess.run(cmd, env=env, check=False).returncode
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    try:
        return self_check(args)
    except Mc2EmuError as exc:
        print(str(exc), file=sys.stderr)
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(exc.exit_code)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
