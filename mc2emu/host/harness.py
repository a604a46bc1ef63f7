"""The host harness: run one kernel launch on this rank (the host program of an apace / Blaze ST).

Every operator's host code is "tile, allocate, launch, read back" inside `with LaunchHarness(KERNEL_NAME,
opts) as h:` (`opts`: the call's `CallOptions`; `h.device.gm`, `h.window`, `h.launch`, `h.read`; `h.hazards`
after success); everything around that lives here, once ("comm" = only for calls with an `opts.comm`):
1. enter: free the windows an earlier call on this communicator left behind (comm); the `Device` (compute slots:
   `host.compute_slots`); the observers; `CommWorld`, deadlock diagnosis, happens-before checker (comm);
2. launch: a host barrier (comm); the `launch` fault; the launch and its wall time;
3. exit on success: a barrier; the happens-before check; the windows freed (comm); the call's hazards;
4. exit on a deadlock: the hazards filed before the hang go on the `DeadlockError`; the windows are left
   behind (a collective free would hang); the diagnosis lingers so the peers' reports include this rank;
5. exit on any other failure: the windows are left behind; 6. always: diagnosis, checker, observers closed.

Every rank leaves a call the same way: host barriers are agreed and a failing rank posts its failure into the
next one (`CommWorld.fail`). Windows left behind are freed at the start of the next call on that communicator
or at interpreter exit behind an agreed, deadline-guarded barrier. The checkers are attached here, not in an
operator (`mc2emu.ops` never imports `mc2emu.check`). On a persistent `Communicator` (docs/protocols.md
"Across launches") none of 1-6: no host barrier; its device, world, buffer (windows carved) and checkers.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.check.cross_launch import CrossLaunchChecker
from mc2emu.check.deadlock import COLLECT_S, DeadlockDiagnosis
from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.check.write_count import WriteCountChecker
from mc2emu.comm.communicator import HCCL_BUFFSIZE_ENV, MB, Communicator, done_within, hccl_buffsize_bytes
from mc2emu.comm.errors import HostBarrierFailed
from mc2emu.comm.hccl_server import HcclServer
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.comm.team_barrier import TeamBarrier
from mc2emu.comm.world import CommWorld
from mc2emu.host.call_options import CallOptions
from mc2emu.host.compute_slots import default_slots
from mc2emu.numerics.payload import is_payload
from mc2emu.runtime.device import Device, LaunchResult
from mc2emu.runtime.faults import FaultHook
from mc2emu.runtime.gm import MemRole, copy_out
from mc2emu.runtime.hazards import ConstraintError, DeadlockError, HazardReport
from mc2emu.runtime.kernel_type import KernelType

if TYPE_CHECKING:
    from mc2emu.comm.communicator import CarvedWindow
    from mc2emu.comm.window import Window
    from mc2emu.runtime.gm import GmAddr

# The `launch` fault hook: the host launches an AIC-only kernel as this mixed type.
FAULTED_LAUNCH_TYPE = KernelType.MIX_AIC_1_1
# At interpreter exit, how long the ranks wait for each other before freeing left-behind windows; a rank
# that does not arrive (killed, aborted, stuck) leaves them to the MPI library.
EXIT_AGREEMENT_S = 10.0
EXIT_POLL_S = 0.01


@dataclass(frozen=True)
class HarnessLaunch:
    """One launch through the harness: the device's result and the launch's wall time."""

    result: LaunchResult
    kernel_type: KernelType
    wall_s: float

    @property
    def returns(self) -> dict[str, Any]:
        return self.result.returns


class _LeftBehind:
    """Worlds whose windows a failed call could not free, per base communicator (MPI handle), freed by the
    next call on that communicator or at interpreter exit. One instance per process: it tracks MPI
    resources, which are per process.

    Each world is kept under its call number on `base` (`next_call`: every rank makes the same calls on
    `base` in the same order, so call n is the same call everywhere). The agreed host barriers
    (`mc2emu.comm.world`) make every rank keep the same calls; should ranks still disagree, only the calls
    kept by every rank are freed (Win_free is collective: freeing different worlds on two ranks hangs both),
    in call order, and the rest stay until a later free or the exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worlds: dict[int, tuple[Any, dict[int, CommWorld]]] = {}
        self._calls: dict[int, int] = {}
        self._exit_hook = False

    def next_call(self, base: Any) -> int:
        """The number of the call starting now on `base` (0, 1, ... per base communicator)."""
        with self._lock:
            n = self._calls.get(base.py2f(), 0)
            self._calls[base.py2f()] = n + 1
        return n

    def keep(self, base: Any, call: int, world: CommWorld, reason: str) -> None:
        world.left_reason = reason   # type: ignore[attr-defined]
        with self._lock:
            self._worlds.setdefault(base.py2f(), (base, {}))[1][call] = world
            if not self._exit_hook:
                # Registered after mpi4py's own: runs before MPI finalizes.
                atexit.register(self.free_at_exit)
                self._exit_hook = True

    def count(self, base: Any) -> int:
        with self._lock:
            entry = self._worlds.get(base.py2f())
        return len(entry[1]) if entry else 0

    def calls(self, base: Any) -> list[int]:
        """The call numbers whose worlds this rank keeps on `base`."""
        with self._lock:
            entry = self._worlds.get(base.py2f())
        return sorted(entry[1]) if entry else []

    def free(self, base: Any) -> None:
        """Collective on `base` (blocking: every rank is at the start of the same call): every rank frees
        the worlds of the calls that every rank kept, in call order."""
        with self._lock:
            entry = self._worlds.pop(base.py2f(), None)
        mine = entry[1] if entry else {}
        kept = [set(calls) for calls in base.allgather(sorted(mine))]
        common = sorted(set.intersection(*kept))
        for call in common:
            mine.pop(call).release()
        if mine:
            with self._lock:
                self._worlds[base.py2f()] = (base, mine)

    def free_at_exit(self) -> None:
        from mpi4py import MPI

        if MPI.Is_finalized():
            return
        with self._lock:
            entries, self._worlds = list(self._worlds.values()), {}
        for base, worlds in entries:
            with contextlib.suppress(Exception):
                # Agreed as a host barrier is: a rank that gives up on the arrival still posts its verdict,
                # so no rank frees unless every rank does (and keeps the same calls).
                mine = np.array([1, len(worlds), hash(tuple(sorted(worlds))) & 0x7FFFFFFF], dtype=np.int64)
                if not _exit_wait(base.Ibarrier()):
                    mine[0] = 0
                everyone = np.zeros((base.Get_size(), 3), dtype=np.int64)
                if _exit_wait(base.Iallgather(mine, everyone)) and (everyone == mine).all():
                    for call in sorted(worlds):
                        worlds[call].release()


def _exit_wait(req: Any) -> bool:
    """Wait for an MPI request at interpreter exit, at most EXIT_AGREEMENT_S (no device: no kernel waits)."""
    return done_within(req.Test, EXIT_AGREEMENT_S, EXIT_POLL_S)


LEFT_BEHIND = _LeftBehind()


def left_behind_windows(comm: Any) -> int:
    """How many failed calls on `comm` still hold windows (freed by the next call on `comm`)."""
    return LEFT_BEHIND.count(comm)


# Host barriers (launch start and end) order the host's setup and teardown, not the kernel protocol under
# test: ranks leave a deadlocked call up to COLLECT_S apart (the diagnosis lingers to answer late requests)
# and with 8 ranks on 2 cores a rank may get no CPU for seconds. A short kernel deadline given by a caller
# (tests use 0.5-2 s) must not turn a late peer into a reported host-barrier deadlock.
HOST_BARRIER_MIN_S = 10.0


def host_barrier_timeout(timeout: float | None) -> float | None:
    """The deadline of the harness's host barriers: the call's, at least HOST_BARRIER_MIN_S (None: the
    device's default deadline)."""
    return None if timeout is None else max(timeout, HOST_BARRIER_MIN_S)


class LaunchHarness:
    """One kernel launch on this rank with its device, observers, checkers and (when `comm` is given)
    communication world; a context manager whose exit is the teardown (see the module docstring)."""

    def __init__(self, name: str, opts: CallOptions, *, rank: int | None = None,
                 platform: PlatformSpec = DAV_3510, poison_payload: bool = False) -> None:
        """`poison_payload`: PAYLOAD windows start poisoned in check mode (`CommWorld`; `mc2emu.run_kernel`)."""
        self.name = name
        self.opts = opts
        self.stream: Communicator | None = opts.comm if isinstance(opts.comm, Communicator) else None
        self.base = comm = opts.comm
        self.call = -1
        self._write_counts: list[WriteCountChecker] = []
        self.hazards: list[HazardReport] = []
        self._handed_over = False
        self._launched = False
        if self.stream is not None:
            self._open_stream(self.stream)
            return
        if comm is not None:
            LEFT_BEHIND.free(comm)
            self.call = LEFT_BEHIND.next_call(comm)
            rank = comm.Get_rank()
        self.device = Device(rank or 0, platform, check=opts.check, timeout=opts.timeout, perturb=opts.perturb,
                             faults=opts.faults, compute_slots=default_slots(), data=opts.data)
        self._unsubscribe = [self.device.events.subscribe(o) for o in opts.observers]
        self.world: CommWorld | None = None
        self._diag: DeadlockDiagnosis | None = None
        self._hb: HappensBeforeChecker | None = None
        try:
            if comm is not None:
                # Every blocking collective of the set-up first (each duplicates `comm`: every rank makes
                # them), then the opening barrier, agreed: a failure from here on is every rank's.
                self.world = CommWorld(self.device, comm, host_timeout=HOST_BARRIER_MIN_S, open_barrier=False,
                                       poison_payload=poison_payload)
                self._diag = DeadlockDiagnosis(self.device, comm)
                self._diag.attach()
                if opts.check:
                    self._hb = HappensBeforeChecker(self.device, comm)
                self.world.barrier(timeout=host_barrier_timeout(opts.timeout))
        except BaseException as exc:
            self._leave(exc, "opening the call")
            self._close_observers(deadlocked=False)
            raise

    def _open_stream(self, s: Communicator) -> None:
        """A call on a persistent `Communicator`: its device, world and checkers, no host barrier (stream
        order: this launch starts after this rank's previous one ended, whatever the peers do)."""
        s.check_usable(self.name)
        dev = self.device = s.device
        if bool(self.opts.check) != dev.check:
            raise ConstraintError("check", f"{self.name}: check={self.opts.check} on a Communicator created "
                                  f"with check={dev.check} (its checkers span the calls)")
        if self.opts.data != dev.data:
            raise ConstraintError("data", f"{self.name}: data={self.opts.data} on a Communicator created with "
                                  f"data={dev.data} (its buffer holds the payload or only its control prefix)")
        dev.perturb, dev.faults = self.opts.perturb, self.opts.faults
        dev.waiter.timeout = s.timeout if self.opts.timeout is None else self.opts.timeout
        self.world = s.world
        self._unsubscribe = [dev.events.subscribe(o) for o in self.opts.observers]
        # Persistent: created at the first call (collective: every rank's first call), kept until close().
        self._diag = s.control("deadlock_diagnosis", lambda: _stream_diagnosis(s))
        self._hb = s.control("happens_before", lambda: _stream_checker(s)) if dev.check else None
        self._gm_mark = len(dev.gm.allocations)
        s.calls += 1

    @property
    def rank(self) -> int:
        return self.device.rank

    # -- what the operator's host code uses -----------------------------------------------------------------
    def window(self, nbytes: int, name: str, role: MemRole = MemRole.PAYLOAD, control_bytes: int = 0) -> Window:
        """A symmetric window of `nbytes` (collective), adopted into this rank's GM; `role`: what it holds
        (`control_bytes`: a PAYLOAD window's leading status words, `CommWorld.window`)."""
        if self.world is None:
            raise RuntimeError(f"{self.name}: a window needs a communicating harness (comm=...)")
        return self.world.window(nbytes, name, role, control_bytes)

    def data_window(self, nbytes: int, name: str, control_bytes: int = 0) -> Window | CarvedWindow:
        """The call's data window (PAYLOAD): on a `Communicator`, carved from its buffer at the window's offset
        (0 unless `window_offsets` moves it: the kernels' window base is the HCCL buffer's; refused when it does
        not fit: HCCL_BUFFSIZE), else a new window of `nbytes` (`control_bytes`: its leading status words, real
        in a protocol-only run; on a protocol-only Communicator they must lie in its buffer's control prefix)."""
        if self.stream is not None:
            return self.stream.carve(nbytes, name, op=self.name, control_bytes=control_bytes)
        cap = hccl_buffsize_bytes()   # the device's HCCL buffer, whatever the host gives this call
        if nbytes > cap:
            raise ConstraintError(
                HCCL_BUFFSIZE_ENV, f"{self.name}: window '{name}' needs {int(nbytes)} bytes > the communicator "
                f"buffer of {cap} bytes (HCCL_BUFFSIZE {cap // MB} MB; the data window is HCCL's buffer, "
                f"HcclGetHcclBuffer); set HCCL_BUFFSIZE >= {-(-int(nbytes) // MB)} (MB)")
        return self.window(nbytes, name, MemRole.PAYLOAD, control_bytes)

    def team_barrier(self, jobs: int, name: str = "team_barrier") -> TeamBarrier:
        """The apace TeamBarrier (its own CONTROL window): on a `Communicator` one per (name, jobs), kept
        across calls (its epochs persist, as the barrier buffer registered once per context does)."""
        world = self.world
        if world is None:
            raise RuntimeError(f"{self.name}: a TeamBarrier needs a communicating harness (comm=...)")
        if self.stream is not None:
            return self.stream.control(("team_barrier", name, jobs), lambda: TeamBarrier(world, jobs, name))
        return TeamBarrier(world, jobs, name)

    def hccl_server(self, model: HcclServerType) -> HcclServer:
        """The HCCL server: on a `Communicator` one per model, kept across calls (its state persists)."""
        world = self.world
        if world is None:
            raise RuntimeError(f"{self.name}: an HCCL server needs a communicating harness (comm=...)")
        if self.stream is not None:
            return self.stream.control(("hccl_server", model), lambda: HcclServer(world, model=model))
        return HcclServer(world, model=model)

    def launch(self, kernel: Callable[..., Any], block_dim: int, kernel_type: KernelType, *args: Any) -> HarnessLaunch:
        """Launch `kernel` (after a host barrier when communicating: every rank has set up its windows)."""
        if self._handed_over:
            raise RuntimeError(f"{self.name}: a launch after `read` (the read-back hands GM over: it is the "
                               f"call's last step)")
        faults = self.opts.faults
        aic_only = kernel_type is KernelType.AIC_ONLY
        if aic_only and faults is not None and faults.fires(FaultHook.LAUNCH, self.rank, "host"):
            kernel_type = FAULTED_LAUNCH_TYPE   # fault injection: the AIC-only kernel launched mixed
        if self.world is not None and self.stream is None:
            self.world.barrier(timeout=host_barrier_timeout(self.opts.timeout))
        t0 = time.perf_counter()
        self._launched = True
        res = self.device.launch(kernel, block_dim, kernel_type, *args, name=self.name)
        return HarnessLaunch(res, kernel_type, time.perf_counter() - t0)

    def expect_writes(self, addr: GmAddr, dtype: Any, shape: tuple[int, ...], expected: np.ndarray) -> None:
        """With checks on: count the launch's writes to this output per element; at the end of the call an
        element written other than `expected` times (0 or 1 each) files OUTPUT_WRITE_COUNT."""
        if self.opts.check:
            self._write_counts.append(WriteCountChecker(self.device, addr, dtype, shape, expected))

    def read(self, addr: GmAddr, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """The output at `addr` after the call's last launch (the read-back D2H copy): the bytes of that GM,
        C-contiguous. GM this rank allocated is handed over as it is, without a host copy: nothing writes it
        after the last launch, and the device drops it when the call ends, so the array becomes its only
        owner. A window's bytes are copied (its MPI memory is freed when the call ends)."""
        view = self.device.gm.view(addr, dtype, shape)
        if is_payload(view):
            return view   # a protocol-only run: the output's shape and dtype, no values
        if addr.alloc.kind == "gm" and view.flags.c_contiguous:
            self._handed_over = True
            return view
        return copy_out(view)

    # -- teardown ---------------------------------------------------------------------------------------------
    def __enter__(self) -> LaunchHarness:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        deadlocked = _hung(exc)
        try:
            if exc is None:
                try:
                    self._finish()
                except BaseException as late:
                    deadlocked = _hung(late)
                    self._leave(late, "at the end of the call")
                    raise
            else:
                self._leave(exc, "in the call")
        finally:
            self._close_observers(deadlocked=deadlocked)

    def _finish(self) -> None:
        if self.stream is not None:
            for wc in self._write_counts:
                wc.finish()
            self.hazards = self.device.hazards.take()
            return
        if self.world is not None:
            barrier_timeout = host_barrier_timeout(self.opts.timeout)
            self.world.barrier(timeout=barrier_timeout)   # deadline-guarded: every rank finished the launch
            if self._hb is not None:
                self._hb.finish()
            self.world.close(barrier_timeout=barrier_timeout)
        for wc in self._write_counts:
            wc.finish()
        self.hazards = self.device.hazards.take()

    def _leave(self, exc: BaseException, where: str) -> None:
        """The one place that decides what a failed call leaves: its windows wait for the next call (a
        collective free now could hang: after a deadlock the peers are stuck too; after another failure
        they sit in a deadline-guarded wait); a deadlock carries the hazards filed before the hang."""
        if self.stream is not None and isinstance(exc, ConstraintError) and not self._launched:
            pass   # refused before its launch (e.g. HCCL_BUFFSIZE): nothing ran, the communicator stays usable
        elif self.stream is not None:
            what = "a deadlock" if isinstance(exc, DeadlockError) else type(exc).__name__
            launch = self.device.launch_count - (1 if self._launched else 0)   # this call's launch
            self.stream.fail(f"{what} {where} (call {self.stream.calls - 1}, launch {launch})", launch=launch)
        elif self.world is not None and not self.world.closed:
            what = "a deadlock" if isinstance(exc, DeadlockError) else type(exc).__name__
            self.world.fail(f"{what} {where}")    # the peers' next host barrier ends with this verdict
            LEFT_BEHIND.keep(self.base, self.call, self.world, f"{what} {where}")
        if isinstance(exc, DeadlockError):
            exc.hazards = self.device.hazards.take()

    def _close_observers(self, *, deadlocked: bool) -> None:
        if self.stream is not None:   # the diagnosis and the checker live on with the communicator
            gm = self.device.gm
            gm.allocations[self._gm_mark:] = [a for a in gm.allocations[self._gm_mark:] if a.kind != "gm"]
            for wc in self._write_counts:
                wc.close()
            for u in self._unsubscribe:
                u()
            return
        if self._diag is not None:
            self._diag.close(linger=COLLECT_S if deadlocked else 0.0)
        if self._hb is not None:
            self._hb.close()
        for wc in self._write_counts:
            wc.close()
        for u in self._unsubscribe:
            u()


# A failed Communicator's world is kept in LEFT_BEHIND under -1, -2, ... (the n-th failed one of this process;
# per-call calls count from 0): every rank fails the same communicators in the same order.
_STREAM_FAILURES = itertools.count(1)


def _stream_diagnosis(s: Communicator) -> DeadlockDiagnosis:
    diag = DeadlockDiagnosis(s.device, s.mpi_comm)
    diag.attach()

    def close() -> None:
        failed = s.failed or s.peer_failed
        diag.close(linger=COLLECT_S if failed else 0.0)
        if failed:   # a collective free could hang: freed at exit behind an agreed barrier (LEFT_BEHIND)
            LEFT_BEHIND.keep(s.mpi_comm, -next(_STREAM_FAILURES), s.world, failed)

    s.on_close(close)
    return diag


def _stream_checker(s: Communicator) -> HappensBeforeChecker:
    """The checkers spanning the calls on `s`, finished at every `sync()` / `close()`: the happens-before
    checker in stream mode (the launches between two syncs ordered by stream order only) and the cross-launch
    checker (the hazards between launches: WRITE_AFTER_READ_ACROSS_LAUNCH, STALE_READ, STALE_FLAG, ...)."""
    hb = HappensBeforeChecker(s.device, s.mpi_comm, stream=True)
    xl = CrossLaunchChecker(s.device, s.mpi_comm)
    s.on_sync(hb.finish)
    s.on_sync(xl.finish)
    s.on_close(hb.close)
    s.on_close(xl.close)
    return hb


def _hung(exc: BaseException | None) -> bool:
    """A wait of this rank passed its deadline (its diagnosis then lingers for the peers' reports); a host
    barrier that failed by agreement (`HostBarrierFailed`) hung nowhere."""
    return isinstance(exc, DeadlockError) and not isinstance(exc, HostBarrierFailed)
