"""Kernels and calls for the host-harness tests (imported by the tests, and run as a script under mpirun by
the job-output test: `mpirun -n 2 python tests/host/harness_jobs.py deadlock-then-exit`)."""

from __future__ import annotations

import gc
import sys
import threading

import numpy as np

from mc2emu.comm.window import Window
from mc2emu.host import CallOptions, LaunchHarness
from mc2emu.runtime import KernelType, Pipe

WINDOW_BYTES = 4 << 20   # large enough that the failed calls' windows, leaked, would show in the RSS
SHORT_TIMEOUT = 0.5


def unset_flag_kernel(ctx) -> None:
    """Every AIC waits on a flag nobody sets: a deadlock on every rank."""
    ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)


class KernelBug(Exception):
    pass


def failing_kernel(ctx) -> None:
    raise KernelBug(f"rank {ctx.rank} {ctx.label}")


def sum_kernel(ctx, addr, n: int) -> int:
    """AIC 0 writes rank + 1 into n bytes of the window (a result to read back)."""
    if ctx.GetBlockIdx() == 0:
        ctx.gm_write(addr, np.full(n, ctx.rank + 1, dtype=np.uint8))
    return 1


def call(comm, kernel, *args, window: bool = True, timeout: float = SHORT_TIMEOUT, check: bool = True):
    """One harness call with a window of WINDOW_BYTES; returns the read-back of its first 16 bytes."""
    with LaunchHarness("harness_test", CallOptions(check=check, timeout=timeout, comm=comm)) as h:
        win = h.window(WINDOW_BYTES, "harness_test") if window else None
        args = [win.addr(0) if a == "win" else a for a in args]
        h.launch(kernel, 2, KernelType.AIC_ONLY, *args)
        return h.read(win.addr(0), np.uint8, (16,)) if win is not None else None


def live_windows() -> int:
    return sum(1 for o in gc.get_objects() if isinstance(o, Window) and not o.freed)


def progress_threads() -> int:
    """Live MPI progress threads (one per open or left-behind world, `mc2emu.comm.progress_engine`)."""
    return sum(1 for t in threading.enumerate() if t.name.endswith("-mpi-progress"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _deadlock_then_exit() -> None:
    from mpi4py import MPI

    from mc2emu.runtime import DeadlockError

    comm = MPI.COMM_WORLD
    try:
        call(comm, unset_flag_kernel)
    except DeadlockError:
        print(f"rank {comm.Get_rank()}: deadlock reported", flush=True)
    else:
        raise SystemExit("expected a deadlock")


def hccl_server_threads() -> int:
    """Live HCCL server threads (one per open or left-behind world with an `HcclServer`)."""
    return sum(1 for t in threading.enumerate() if t.name.endswith("-HCCL-server"))


def a2a_hcomm_deadlock(comm) -> None:
    """The CLI's deadlock showcase (hcomm, localMatmul 2, CCU: a Wait beyond Commit hangs): raises
    `DeadlockError` on every rank, leaving its world (with an HCCL server) behind."""
    from mc2emu.ops import all_to_all_quant_matmul
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs

    inp = gen_st_inputs(comm.Get_rank(), comm.Get_size(), 32, 128, 64)
    all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="hcomm",
                            local_matmul=2, hccl_server="ccu", timeout=1.0, comm=comm)


def _a2a_deadlock_then_exit() -> None:
    """`a2a_hcomm_deadlock` as a user script."""
    from mpi4py import MPI

    from mc2emu.runtime import DeadlockError

    comm = MPI.COMM_WORLD
    try:
        a2a_hcomm_deadlock(comm)
    except DeadlockError:
        print(f"rank {comm.Get_rank()}: deadlock reported", flush=True)
    else:
        raise SystemExit("expected a deadlock")


if __name__ == "__main__":
    {"deadlock-then-exit": _deadlock_then_exit, "a2a-deadlock-then-exit": _a2a_deadlock_then_exit}[sys.argv[1]]()
