"""The communication world of one rank: its MPI communicator, its symmetric windows, host barriers.

Emulates what the HCCL communicator gives an MC2 kernel on the device (SPEC §3): one rank = one NPU; a
window (the comm buffer) per purpose, symmetric across ranks; puts into peer windows are one-sided MPI
RMA (`mc2emu.comm.shmem`), collectives through the HCCL server (`mc2emu.comm.hccl_server`).

Lifetime rules:
- Every collective here (creating a window, `barrier`, `close`) must be called by every rank in the same
  order, from the host thread (never while a launch runs on this rank).
- Windows are created with `MPI.Win.Allocate` only and locked once with `Lock_all(MODE_NOCHECK)` for
  their lifetime (MPI-NOTES "Windows"); their memory is zeroed before any peer can reach it.
- Window memory is adopted into GM as written: a remote put cannot update this rank's written-byte mask,
  so "read of never-written window data" is left to the happens-before checker. A world made with
  `poison_payload=True` (`mc2emu.run_kernel`) fills PAYLOAD windows with the poison pattern in check mode,
  before any peer can reach them; CONTROL windows (signals, status, barrier words) start at zero.
- A host barrier is agreed: every rank leaves it with the same outcome (`HostBarrierFailed` naming the
  ranks that left or timed out otherwise), an arrival `Ibarrier` then an `Iallgather` of each rank's status;
  a rank that fails calls `fail()` so the peers' next barrier ends at once (docs/protocols.md "Host
  barrier"). Host barriers take at least `host_timeout` seconds (the harness passes its host-barrier
  deadline; a kernel's short deadline must not decide the host's ordering).
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from mpi4py import MPI

from mc2emu.comm.errors import CommClosedError, HostBarrierFailed, SymmetryError, WindowError
from mc2emu.comm.progress_engine import PROGRESS_INTERVAL_S, MpiProgress
from mc2emu.comm.progress_probe import PROBE_REUSE_S, PROGRESS_WINDOW_BYTES, GlobalProgressProbe
from mc2emu.comm.window import SIGNAL_BYTES, Window
from mc2emu.runtime.gm import MemRole
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.runtime.waiting import Doorbell

if TYPE_CHECKING:
    from collections.abc import Callable

    from mc2emu.runtime.device import Device
    from mc2emu.runtime.gm import GmAddr

HOST_CORE = "host"


class Agreement(IntEnum):
    """What one rank contributes to a host barrier's agreement round (see the module docstring)."""

    OK = 0          # it passed the arrival phase
    TIMED_OUT = 1   # its arrival wait passed the deadline, or a deadlock declared elsewhere stopped it
    LEFT = 2        # it left the world between barriers (`fail()`: its host code or kernel raised)


class CommWorld:
    """Per-rank communication context. Owns a private duplicate of `comm` (so its collectives never
    match the caller's), a second one for `barrier_all` from core threads, every window, and the global
    progress probe."""

    def __init__(self, device: Device, comm: MPI.Comm | None = None, *,
                 probe_reuse_s: float = PROBE_REUSE_S,
                 progress_interval_s: float = PROGRESS_INTERVAL_S,
                 host_timeout: float | None = None, open_barrier: bool = True,
                 poison_payload: bool = False) -> None:
        """`host_timeout`: the least deadline of the host barriers (None: the device's). `open_barrier`
        False leaves the opening barrier to the caller (`barrier()`), so that a failed one still leaves
        the world (and its progress window) in the caller's hands. `poison_payload`: PAYLOAD windows start
        poisoned when the device checks (CONTROL windows always start at zero)."""
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
        self._abandoned: list[Any] = []   # requests of failed rounds (with their buffers): never freed active
        self._close_hooks: list[Callable[[], None]] = []
        self.closed = False
        # Why this rank left the world (a failed barrier round or `fail()`); no collective on `comm` after.
        self.failed: str | None = None
        self.host_timeout = host_timeout
        self.poison_payload = poison_payload and device.check
        # Peers' passive-target RMA into this rank completes only while it calls into MPI (MPI-4.1
        # §12.7.3): polled waits `poke` it, a thread covers the rest (mc2emu.comm.progress_engine).
        self.mpi_progress = MpiProgress(self.comm, self.rank, progress_interval_s)
        # The first collectives of a new world: every rank that constructs it is here, none can have left.
        probe_win = self._create(PROGRESS_WINDOW_BYTES, "progress", adopt=False, agreed=True)
        self.probe = GlobalProgressProbe(device, probe_win, probe_reuse_s)
        self.probe.install()
        if open_barrier:
            self.barrier()

    # -- windows -------------------------------------------------------------------------------------
    def window(self, nbytes: int, name: str, role: MemRole = MemRole.PAYLOAD, control_bytes: int = 0) -> Window:
        """Create a symmetric window of `nbytes` (collective, same sizes and order on every rank),
        adopted into this rank's GM; `role` says once what it holds (`MemRole`): zero-filled, or poisoned
        when it is PAYLOAD in a `poison_payload` world (`Window.poison`). A PAYLOAD window whose first
        `control_bytes` hold status words (the apace state area before the data area) keeps them real in a
        protocol-only run."""
        win = self._create(int(nbytes), name, adopt=True, role=role, control_bytes=int(control_bytes))
        if role is MemRole.PAYLOAD and self.poison_payload:
            win.poison()
        self.barrier()                  # nobody puts into a window before every rank filled its memory
        return win

    def _create(self, nbytes: int, name: str, *, adopt: bool, agreed: bool = False,
                role: MemRole = MemRole.CONTROL, control_bytes: int = 0) -> Window:
        """`agreed`: every rank is known to be here (else a barrier first: `allgather` and `Allocate` block,
        and a rank that left the world would never join them)."""
        self._check_open()
        if nbytes <= 0:
            raise ConstraintError("window size", f"window '{name}' needs a positive size, got {nbytes}")
        if not agreed:
            self.barrier()
        shapes = self.comm.allgather((name, nbytes))
        if any(s != shapes[0] for s in shapes):
            raise SymmetryError(f"windows must be created with the same name and size in the same order on "
                                f"every rank; got {shapes}")
        # A protocol-only run (`Device.data` False) keeps no payload bytes: the MPI window of a PAYLOAD window is
        # one signal word (nothing is put into it), its GM allocation has the full size and no bytes.
        bare = adopt and role is MemRole.PAYLOAD and not self.device.data
        held = min(nbytes, max(control_bytes, SIGNAL_BYTES)) if bare else nbytes
        win = MPI.Win.Allocate(held, 1, comm=cast(MPI.Intracomm, self.comm))
        if win.Get_attr(MPI.WIN_MODEL) != MPI.WIN_UNIFIED:
            win.Free()
            raise ConstraintError("MPI window memory model", f"window '{name}' reports MPI_WIN_SEPARATE: the "
                                  "comm layer reads its own window by load after Win_sync, which MPI allows only "
                                  "in the unified model (MPI-4.1 §12.4); use an MPI whose windows are unified")
        win.Lock_all(MPI.MODE_NOCHECK)
        mem = np.frombuffer(win.tomemory(), dtype=np.uint8)  # type: ignore[call-overload]  # mpi4py buffer
        mem[:] = 0
        win.Sync()
        base = self.device.gm.adopt(mem if control_bytes or not bare else None, f"win:{name}", kind="window",
                                    written=True, role=role, nbytes=nbytes) if adopt else None
        window = Window(name, win, mem, base, self.rank, self.size, nbytes=nbytes)
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
        """Synchronize all ranks, with the same outcome on every rank (the module docstring's table):
        returns on every rank, or raises `DeadlockError` on every rank, never hangs. The deadline is
        `timeout` seconds without progress anywhere (the device's when None), at least `host_timeout`."""
        self._check_open()
        self._check_not_failed()
        limit = self._host_limit(timeout)
        try:
            self.wait_request(self.comm.Ibarrier(), core=core, obj="host barrier",
                              expected=f"all {self.size} ranks in barrier()",
                              setter="every rank's CommWorld.barrier()", timeout=limit)
        except BaseException as exc:
            self._post_agreement(Agreement.TIMED_OUT, f"its host barrier ended: {type(exc).__name__}")
            raise
        statuses = self._post_agreement(Agreement.OK, None)
        try:
            self.device.waiter.wait_until(Doorbell(), statuses[1].Test, core=core, obj="host barrier agreement",
                                          expected=f"all {self.size} ranks' outcomes of the barrier",
                                          setter="every rank's CommWorld.barrier() or fail()", poll=True,
                                          timeout=limit, stoppable=False)
        except BaseException:
            self.failed = "its host barrier agreement ended without every rank's outcome"
            raise
        self._abandoned = [e for e in self._abandoned if e is not statuses]
        outcome = statuses[2]
        if any(outcome):
            left = [r for r in range(self.size) if outcome[r] == Agreement.LEFT]
            timed = [r for r in range(self.size) if outcome[r] == Agreement.TIMED_OUT]
            parts = ([f"rank(s) {left} left the call (a failure in their host code or kernel)"] if left else []) + \
                    ([f"rank(s) {timed} gave up waiting in it"] if timed else [])
            self.failed = f"the host barrier failed: {'; '.join(parts)}"
            raise HostBarrierFailed(f"rank {self.rank} {core}: host barrier: {'; '.join(parts)}; every rank "
                                    f"leaves the call at this barrier")

    def fail(self, reason: str) -> None:
        """This rank leaves the world between barriers (its host code or kernel raised): post the next
        barrier round as LEFT, never blocking, so every peer's next barrier ends with that verdict. No
        collective on `comm` follows. No-op on a closed or already failed world."""
        if self.closed or self.failed is not None:
            return
        self._abandoned.append(self.comm.Ibarrier())
        self._post_agreement(Agreement.LEFT, reason)

    def _post_agreement(self, status: Agreement, reason: str | None) -> tuple[Any, Any, np.ndarray]:
        """Post this rank's status in the current round's agreement (`Iallgather`); kept with its buffers
        until it completes. A non-OK status marks the world failed."""
        mine = np.array([int(status)], dtype=np.int32)
        everyone = np.full(self.size, -1, dtype=np.int32)
        entry = (mine, self.comm.Iallgather(mine, everyone), everyone)
        self._abandoned.append(entry)
        if reason is not None:
            self.failed = reason
        return entry

    def _host_limit(self, timeout: float | None) -> float | None:
        limit = self.device.waiter.timeout if timeout is None else timeout
        return limit if self.host_timeout is None else max(limit, self.host_timeout)

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
        preceding barrier fails (`barrier_timeout`, else the device's deadline, or a rank left), it fails
        on every rank: `DeadlockError` propagates and nothing is freed; a later `close()` of the failed
        world frees it without a barrier (`release`)."""
        if self.closed:
            return
        if self.failed is not None:
            self.release()
            return
        self.barrier(timeout=barrier_timeout)   # agreed: every rank frees below, or none does
        self._run_close_hooks()
        self.probe.uninstall()
        for w in reversed(self.windows):
            w.free()
        self._abandoned = [r for r in self._abandoned if not _request(r).Test()]
        self.mpi_progress.close()
        self.kernel_comm.Free()
        self.comm.Free()
        self.closed = True

    def release(self) -> None:
        """Free a failed world: its close hooks run (an HCCL server's thread ends), then its windows are
        freed and its progress thread stops (collective over the world's ranks, the same worlds in the same
        order everywhere: `mc2emu.host.harness` frees left-behind worlds so). Its communicators may hold
        requests of failed rounds: they are left to MPI."""
        if self.closed:
            return
        self._run_close_hooks()
        self.probe.uninstall()
        for w in reversed(self.windows):
            w.free()
        self.mpi_progress.close()
        self.closed = True

    def _run_close_hooks(self) -> None:
        """The components built on this world end (last built, first ended), before its windows go."""
        hooks, self._close_hooks = self._close_hooks, []
        for hook in reversed(hooks):
            hook()

    def _check_open(self) -> None:
        if self.closed:
            raise CommClosedError("CommWorld used after close()")

    def _check_not_failed(self) -> None:
        if self.failed is not None:
            raise CommClosedError(f"rank {self.rank}: CommWorld used after this rank left it ({self.failed}); "
                                  f"its windows are freed by the next call")

    def __enter__(self) -> CommWorld:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.close()

    def __repr__(self) -> str:
        return f"<CommWorld rank {self.rank}/{self.size}, {len(self.windows)} windows>"


def _request(entry: Any) -> MPI.Request:
    """The request of an abandoned entry (a bare request, or an agreement round with its buffers)."""
    return entry[1] if isinstance(entry, tuple) else entry
