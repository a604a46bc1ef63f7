"""The communication world of one rank: its MPI communicator, its symmetric windows, host barriers.

Emulates what the HCCL communicator gives an MC2 kernel on the device (SPEC §3): one rank = one NPU; a
window (the comm buffer) per purpose, symmetric across ranks; puts into peer windows are one-sided MPI
RMA (`mc2emu.comm.shmem`), collectives through the HCCL server (`mc2emu.comm.hccl_server`).

    world = CommWorld(device)                      # collective; comm defaults to a Dup of COMM_WORLD
    win = world.window(nbytes, "a2a")              # collective; `win.base` is a GmAddr in device.gm
    ...launch kernels...
    world.barrier()                                # never blocks forever: deadline of the wait primitive
    world.close()                                  # collective: frees windows (call on every rank)

Lifetime rules:
- Every collective here (creating a window, `barrier`, `close`) must be called by every rank in the same
  order, from the host thread (never while a launch runs on this rank).
- Windows are created with `MPI.Win.Allocate` only and locked once with `Lock_all(MODE_NOCHECK)` for
  their lifetime (MPI-NOTES "Windows"); their memory is zeroed before any peer can reach it.
- Window memory is adopted into GM as written (zero-filled): a remote put cannot update this rank's
  written-byte mask, so "read of never-written window data" is left to the happens-before checker, which
  sees every put as an event.
- A host barrier that passes its deadline raises `DeadlockError` and leaves its request pending; it is
  kept (freeing an active collective request is erroneous in MPI) and completes when the other ranks
  arrive, so a test that recovers by calling `barrier()` on every rank stays matched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from mpi4py import MPI

from mc2emu.comm.errors import CommClosedError, SymmetryError, WindowError
from mc2emu.comm.progress_engine import PROGRESS_INTERVAL_S, MpiProgress
from mc2emu.comm.progress_probe import PROBE_REUSE_S, PROGRESS_WINDOW_BYTES, GlobalProgressProbe
from mc2emu.comm.window import Window
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.runtime.waiting import Doorbell

if TYPE_CHECKING:
    from collections.abc import Callable

    from mc2emu.runtime.device import Device
    from mc2emu.runtime.gm import GmAddr

HOST_CORE = "host"


class CommWorld:
    """Per-rank communication context. Owns a private duplicate of `comm` (so its collectives never
    match the caller's), a second one for `barrier_all` from core threads, every window, and the global
    progress probe."""

    def __init__(self, device: Device, comm: MPI.Comm | None = None, *,
                 probe_reuse_s: float = PROBE_REUSE_S,
                 progress_interval_s: float = PROGRESS_INTERVAL_S) -> None:
        base = MPI.COMM_WORLD if comm is None else comm
        if device.rank != base.Get_rank():
            raise ConstraintError("device.rank", f"Device(rank={device.rank}) runs on MPI rank "
                                  f"{base.Get_rank()}: construct it with rank=comm.Get_rank()")
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise ConstraintError("MPI thread level", "core threads issue RMA concurrently: MPI must be "
                                  "initialized with MPI_THREAD_MULTIPLE (mpi4py's default)")
        self.device = device
        self.comm = base.Dup()
        self.kernel_comm = self.comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.windows: list[Window] = []
        self._by_alloc: dict[int, Window] = {}
        self._abandoned: list[MPI.Request] = []
        self._close_hooks: list[Callable[[], None]] = []
        self.closed = False
        # Peers' passive-target RMA into this rank completes only while it calls into MPI (MPI-4.1
        # §12.7.3): polled waits `poke` it, a thread covers the rest (mc2emu.comm.progress_engine).
        self.mpi_progress = MpiProgress(self.comm, self.rank, progress_interval_s)
        probe_win = self._create(PROGRESS_WINDOW_BYTES, "progress", adopt=False)
        self.probe = GlobalProgressProbe(device, probe_win, probe_reuse_s)
        self.probe.install()
        self.barrier()

    # -- windows -------------------------------------------------------------------------------------
    def window(self, nbytes: int, name: str) -> Window:
        """Create a symmetric window of `nbytes` (collective, same sizes and order on every rank),
        zero-filled and adopted into this rank's GM."""
        win = self._create(int(nbytes), name, adopt=True)
        self.barrier()                  # nobody puts into a window before every rank zeroed its memory
        return win

    def _create(self, nbytes: int, name: str, *, adopt: bool) -> Window:
        self._check_open()
        if nbytes <= 0:
            raise ConstraintError("window size", f"window '{name}' needs a positive size, got {nbytes}")
        shapes = self.comm.allgather((name, nbytes))
        if any(s != shapes[0] for s in shapes):
            raise SymmetryError(f"windows must be created with the same name and size in the same order on "
                                f"every rank; got {shapes}")
        win = MPI.Win.Allocate(nbytes, 1, comm=cast(MPI.Intracomm, self.comm))
        if win.Get_attr(MPI.WIN_MODEL) != MPI.WIN_UNIFIED:
            win.Free()
            raise ConstraintError("MPI window memory model", f"window '{name}' reports MPI_WIN_SEPARATE: the "
                                  "comm layer reads its own window by load after Win_sync, which MPI allows only "
                                  "in the unified model (MPI-4.1 §12.4); use an MPI whose windows are unified")
        win.Lock_all(MPI.MODE_NOCHECK)
        mem = np.frombuffer(win.tomemory(), dtype=np.uint8)  # type: ignore[call-overload]  # mpi4py buffer
        mem[:] = 0
        win.Sync()
        base = self.device.gm.adopt(mem, f"win:{name}", kind="window", written=True) if adopt else None
        window = Window(name, win, mem, base, self.rank, self.size)
        self.windows.append(window)
        if base is not None:
            self._by_alloc[base.alloc.aid] = window
        return window

    def window_of(self, addr: GmAddr, nbytes: int = 0, what: str = "address") -> tuple[Window, int]:
        """The window holding [addr, addr + nbytes) and the offset of `addr` in it."""
        window = self._by_alloc.get(addr.alloc.aid)
        if window is None:
            raise WindowError(f"{what} {addr!r} is not in a symmetric window (allocation "
                              f"'{addr.alloc.name}' is plain GM); destinations of puts and signals must be "
                              f"window addresses")
        return window, window.offset_of(addr, nbytes, what)

    def sync_windows(self) -> None:
        """`MPI_Win_sync` on every window kernels read as GM: a memory barrier between what RMA wrote and
        the loads that follow (the progress window is only read through MPI)."""
        for w in self.windows:
            if w.base is not None and not w.freed:
                w.win.Sync()

    # -- host collectives --------------------------------------------------------------------------------
    def barrier(self, core: str = HOST_CORE, timeout: float | None = None) -> None:
        """Synchronize all ranks; raises `DeadlockError` after the wait deadline (the device's, or
        `timeout` seconds without progress anywhere) instead of hanging."""
        self._check_open()
        self.wait_request(self.comm.Ibarrier(), core=core, obj="host barrier",
                          expected=f"all {self.size} ranks in barrier()",
                          setter="every rank's CommWorld.barrier()", timeout=timeout)

    def wait_request(self, req: MPI.Request, *, core: str, obj: str, expected: str, setter: str,
                     timeout: float | None = None) -> None:
        """Complete a nonblocking MPI request through the wait primitive (`poll=True`: another process
        completes it). On failure the request is kept alive, never freed while active."""
        try:
            self.device.waiter.wait_until(Doorbell(), req.Test, core=core, obj=obj, expected=expected,
                                          setter=setter, poll=True, timeout=timeout)
        except BaseException:
            self._abandoned.append(req)
            raise

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run `hook` at `close()` before the windows are freed (components built on this world)."""
        self._close_hooks.append(hook)

    def close(self, barrier_timeout: float | None = None) -> None:
        """Free every window (collective: call on every rank at op end). Safe to call twice. If the
        preceding barrier passes its deadline (`barrier_timeout`, else the device's), `DeadlockError`
        propagates and nothing is freed (freeing is collective and would hang)."""
        if self.closed:
            return
        self.barrier(timeout=barrier_timeout)
        hooks, self._close_hooks = self._close_hooks, []
        for hook in reversed(hooks):
            hook()
        self.probe.uninstall()
        for w in reversed(self.windows):
            w.free()
        self._abandoned = [r for r in self._abandoned if not r.Test()]
        self.mpi_progress.close()
        self.kernel_comm.Free()
        self.comm.Free()
        self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise CommClosedError("CommWorld used after close()")

    def __enter__(self) -> CommWorld:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()

    def __repr__(self) -> str:
        return f"<CommWorld rank {self.rank}/{self.size}, {len(self.windows)} windows>"
