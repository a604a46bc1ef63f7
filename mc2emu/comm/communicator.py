"""`Communicator`: an HCCL communicator that outlives operator calls (a model's layer loop on one stream).

Created once per rank group (collective) on an MPI communicator, it owns what HCCL gives the MC2 kernels
on the device and what persists there between launches: one NPU (`Device`: GM, cross-core flag counters
per `FlagCounters`), one symmetric buffer per rank of `buffer_size` bytes (HCCL's communicator buffer,
`HcclGetHcclBuffer`; default `HCCL_BUFFSIZE` read in MB as HCCL does, 200 MB when unset), its persistent
`CommWorld`, and the control objects the kernels keep across launches (TeamBarrier epochs, the HCCL
server), created on their first use and kept until `close()`.

An operator call given `comm=<Communicator>` carves its data window from the buffer (`carve`, at the
offset its host uses; docs/protocols.md "Across launches") and is refused with the inequality when it
does not fit. Its launch follows this rank's previous one in stream order: no host barrier between ranks
(`mc2emu.host.harness`). Collective checks that need every rank to agree (the happens-before check) run
at `sync()` and `close()`, which are host barriers. Zeroing happens once, at creation; poisoning in check
mode covers only the carved bytes of a call. A protocol-only communicator (`data=False`) holds only the
buffer's control prefix (`control_bytes`, the status area the kernels keep at the buffer's base) for real:
a call's status words must lie in it, its payload ranges are sized, never materialized.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from mpi4py import MPI

from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.comm.errors import CommClosedError, WindowError
from mc2emu.comm.window import SIGNAL_BYTES, WINDOW_CARVE_ALIGN, Window
from mc2emu.comm.world import CommWorld
from mc2emu.numerics.int_math import Align
from mc2emu.runtime.device import Device, FlagCounters
from mc2emu.runtime.gm import POISON_BYTE, MemRole
from mc2emu.runtime.hazards import ConstraintError, HazardReport

if TYPE_CHECKING:
    from mc2emu.runtime.gm import GmAddr

T = TypeVar("T")

# HCCL reads HCCL_BUFFSIZE as a whole number of MB (2^20 bytes) and defaults to 200 (CANN envvar reference
# "HCCL_BUFFSIZE", envref_07_0080; ops-transformer mc2_tiling_utils.cpp `defaultWindowSize = 200`).
HCCL_BUFFSIZE_ENV = "HCCL_BUFFSIZE"
HCCL_BUFFSIZE_DEFAULT_MB = 200
MB = 1024 * 1024
# A protocol-only communicator keeps the buffer's first bytes real: the status area per_block keeps at the
# window base (A5_MTE_STATE_WIN_SIZE, 1 MB: mc2emu.apace.comm_resource_builder) at offset 0.
CONTROL_PREFIX_DEFAULT = 1 * MB
# Host barriers of the communicator (creation, `sync`, `close`) wait at least this long: with 8 ranks on
# 2 cores a rank may get no CPU for seconds (as `mc2emu.host.harness.HOST_BARRIER_MIN_S`).
COMMUNICATOR_HOST_TIMEOUT_S = 10.0
# A rank whose call fails tells its peers at once (a notice on the communicator's own duplicate), so that
# their launches stop instead of waiting out their deadlines; the watcher polls for notices this often.
NOTICE_TAG = 0x5C0
NOTICE_POLL_S = 0.05
NOTICE_BYTES = 4096
# A failed rank's close pushes its notices out for at most this long; sends still in flight then stay referenced
# here (an active request freed with its buffer may send freed bytes) until the process ends.
NOTICE_FLUSH_S = 2.0
_NOTICES_IN_FLIGHT: list[Any] = []


def done_within(test: Callable[[], bool], seconds: float, poll: float = NOTICE_POLL_S / 5) -> bool:
    """Poll `test` (an MPI request's Test) until it is true, for at most `seconds`: whether it completed. Host
    code only (no kernel core waits on it): it sleeps `poll` between tests."""
    end, tick = time.monotonic() + seconds, threading.Event()
    while not test():
        if time.monotonic() >= end:
            return False
        tick.wait(poll)
    return True


def hccl_buffsize_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The communicator buffer size HCCL uses: `HCCL_BUFFSIZE` MB (a positive integer), 200 MB unset."""
    env = os.environ if environ is None else environ
    raw = env.get(HCCL_BUFFSIZE_ENV)
    if raw is None or raw == "":
        return HCCL_BUFFSIZE_DEFAULT_MB * MB
    try:
        mb = int(raw)
    except ValueError:
        mb = 0
    if mb < 1:
        raise ConstraintError(HCCL_BUFFSIZE_ENV, f"HCCL_BUFFSIZE is a positive whole number of MB, got {raw!r}")
    return mb * MB


class CarvedWindow:
    """The part [start, start + nbytes) of the communicator buffer one call uses as its data window. Its
    addresses are the buffer's (puts and signals resolve to the buffer's MPI window)."""

    def __init__(self, name: str, buffer: Window, start: int, nbytes: int, *, first: bool = True,
                 control_bytes: int = 0) -> None:
        self.name = name
        self.buffer = buffer
        self.start = start
        self.nbytes = nbytes
        self.first = first   # no earlier call carved these bytes under this name
        self.control_bytes = control_bytes   # its leading status words (never poisoned)
        self.base: GmAddr | None = buffer.addr(start)

    def addr(self, offset: int) -> GmAddr:
        if not 0 <= offset <= self.nbytes:
            raise WindowError(f"offset {offset} is outside window '{self.name}' of {self.nbytes} bytes")
        return self.buffer.addr(self.start + offset)

    def poison(self) -> None:
        """Fill the carved bytes only with the never-written pattern (`Window.poison`), O(nbytes), at the
        first carve of these bytes: later calls find what the earlier launches left, as on the device (and
        a peer's next launch may already be writing them)."""
        if not self.first:
            return
        # the bytes of it that exist (a protocol-only buffer holds its control prefix only), past its status words
        self.buffer.mem[self.start + self.control_bytes: self.start + self.nbytes] = POISON_BYTE
        self.buffer.win.Sync()
        if self.buffer.base is not None:
            self.buffer.base.alloc.poisoned = True


class Communicator:
    """One rank's persistent communicator (module docstring). Collective: construct, `sync` and `close` on
    every rank of `comm` (None: MPI.COMM_WORLD) in the same order."""

    def __init__(self, comm: Any = None, *, buffer_size: int | None = None, check: bool = True,
                 timeout: float | None = None, flag_counters: FlagCounters | str | None = None,
                 platform: PlatformSpec = DAV_3510, compute_slots: int | None = None,
                 window_offsets: Mapping[str, int] | None = None, data: bool = True,
                 control_bytes: int = CONTROL_PREFIX_DEFAULT) -> None:
        self.mpi_comm = MPI.COMM_WORLD if comm is None else comm
        size = hccl_buffsize_bytes() if buffer_size is None else int(buffer_size)
        if size < 1:
            raise ConstraintError("buffer_size", f"the communicator buffer needs a positive size, got {size}")
        self.buffer_size = size
        # Where each data window starts in the buffer, by window name (default 0: the kernels take the HCCL
        # buffer's base as their window, so back-to-back operators share its first bytes).
        self.window_offsets = dict(window_offsets or {})
        if not isinstance(data, bool):
            raise ConstraintError("data", f"data must be True (full run) or False (protocol-only), got {data!r}")
        self.data = data
        # protocol-only: the real bytes at the buffer's base (status words of the calls' windows)
        self.control_bytes = size if data else min(size, max(int(control_bytes), SIGNAL_BYTES))
        self.device = Device(self.mpi_comm.Get_rank(), platform, check=check, timeout=timeout,
                             compute_slots=compute_slots, flag_counters=flag_counters, data=data)
        self.device.numbered_launches = True
        self.timeout = self.device.waiter.timeout   # a call's timeout=None means this one
        self.world = CommWorld(self.device, self.mpi_comm, host_timeout=COMMUNICATOR_HOST_TIMEOUT_S)
        # Zeroed once (CommWorld.window), as comm_channel_builder's aclrtMemset of the HCCL buffer.
        self.buffer = self.world.window(size, "hccl_buffer", MemRole.PAYLOAD,
                                        control_bytes=0 if data else self.control_bytes)
        self.buffer.shared_prefix = not data
        self._controls: dict[Any, Any] = {}
        self._carved: set[tuple[str, int, int]] = set()
        self._sync_hooks: list[Callable[[], Any]] = []
        self._close_hooks: list[Callable[[], None]] = []
        self.calls = 0
        self.failed: str | None = None
        self.peer_failed: str | None = None   # a peer's notice: it left the stream (its reason)
        self.closed = False
        self._notice_comm = self.mpi_comm.Dup()
        self._notices: list[Any] = []
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name=f"r{self.rank}-comm-notices", daemon=True)
        self._watcher.start()

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def size(self) -> int:
        return self.world.size

    # The MPI communicator's spelling: an operator's `comm=` takes either.
    def Get_rank(self) -> int:
        return self.world.rank

    def Get_size(self) -> int:
        return self.world.size

    # -- what a call uses ----------------------------------------------------------------------------------
    def check_usable(self, op: str) -> None:
        if self.closed:
            raise CommClosedError(f"{op}: the Communicator was closed")
        if self.failed is not None:
            raise CommClosedError(f"{op}: the Communicator failed in an earlier call ({self.failed}); close it")
        if self.peer_failed is not None:
            raise CommClosedError(f"{op}: {self.peer_failed}; close the Communicator")

    def carve(self, nbytes: int, name: str, *, op: str, offset: int | None = None,
              control_bytes: int = 0) -> CarvedWindow:
        """The call's data window: `nbytes` at `offset` of the buffer (None: `window_offsets[name]`, else 0),
        its first `control_bytes` status words; refused when it does not fit, or (protocol-only) when its
        status words lie past the buffer's real control prefix."""
        start = Align(int(self.window_offsets.get(name, 0) if offset is None else offset), WINDOW_CARVE_ALIGN)
        need = start + int(nbytes)
        if need > self.buffer_size:
            mb = -(-need // MB)
            raise ConstraintError(
                HCCL_BUFFSIZE_ENV, f"{op}: window '{name}' needs offset {start} + {int(nbytes)} = {need} bytes "
                f"<= the communicator buffer of {self.buffer_size} bytes ({self.buffer_size / MB:g} MB); "
                f"set HCCL_BUFFSIZE >= {mb} (MB) or pass buffer_size >= {need}")
        ctl = int(control_bytes)
        if ctl > 0 and start + ctl > self.control_bytes:   # no status words: nothing to keep real
            raise ConstraintError(
                "control_bytes", f"{op}: window '{name}' keeps {ctl} bytes of status words at offset {start}: "
                f"{start} + {ctl} = {start + ctl} > the {self.control_bytes} real bytes of this protocol-only "
                f"communicator's buffer; create it with control_bytes >= {start + ctl}")
        key = (name, start, int(nbytes))
        first = key not in self._carved
        self._carved.add(key)
        return CarvedWindow(name, self.buffer, start, int(nbytes), first=first, control_bytes=ctl)

    def control(self, key: Any, factory: Callable[[], T]) -> T:
        """The persistent object under `key`, made by `factory` on its first use (collective when the
        factory is: every rank makes its first call of a kind at the same point of its call sequence)."""
        if key not in self._controls:
            self._controls[key] = factory()
        return self._controls[key]

    def on_sync(self, hook: Callable[[], Any]) -> None:
        """Run `hook` (collective) at every `sync()` and at `close()`, after their host barrier."""
        self._sync_hooks.append(hook)

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run `hook` at `close()` (last registered first), before the windows are freed."""
        self._close_hooks.append(hook)

    def fail(self, reason: str, launch: int | None = None) -> None:
        """A call failed on this rank: the communicator is unusable; its world posts the failure so the
        peers' next host barrier (`sync` / `close`) ends with it. `launch`: the first launch this rank did
        not finish (None: its latest, `launch_count - 1`); the notice stops the peers' waits from it on."""
        if self.failed is None:
            self.failed = reason
            self.world.fail(reason)
            first = self.device.launch_count - 1 if launch is None else launch
            note = pickle.dumps((self.rank, reason, first))[:NOTICE_BYTES]
            self._notices += [self._notice_comm.Isend(note, dest=q, tag=NOTICE_TAG)
                              for q in range(self.size) if q != self.rank]

    def _watch(self) -> None:
        """The notice watcher: a peer's notice refuses this rank's next call and stops every wait of its
        launches from the peer's failed one on (they end with a report naming that peer and its call). A
        launch before it runs on: the peer finished it (stream order), its waits are met as on the device.
        Re-asserted each poll: a launch that starts after the notice clears the waiter's verdict."""
        buf = bytearray(NOTICE_BYTES)
        req = self._notice_comm.Irecv(buf, source=MPI.ANY_SOURCE, tag=NOTICE_TAG)
        status = MPI.Status()
        doomed = 0   # the peer's failed launch: waits of this launch and later ones cannot all be met
        while not self._stop.wait(NOTICE_POLL_S):
            if self.peer_failed is None and req.Test(status):
                who, reason, doomed = pickle.loads(bytes(buf[: status.Get_count(MPI.BYTE)]))
                self.peer_failed = f"rank {who} left the stream: {reason}"
            waiter = self.device.waiter
            if (self.peer_failed is not None and self.failed is None and waiter.declared is None
                    and self.device.launch_count - 1 >= doomed):
                waiter.declared = self.peer_failed
                waiter.wake_all()
        if self.peer_failed is None:
            # Completed by a notice to itself, not cancelled: over MPICH's network path (UCX) a cancelled
            # receive could stay posted below MPI and take a later communicator's notice once the freed
            # context id is reused (a peer then never learnt of a failure: measured at 4 ranks, NOLOCAL).
            note = self._notice_comm.Isend(pickle.dumps((self.rank, "closed", 0)), dest=self.rank, tag=NOTICE_TAG)
            if done_within(req.Test, NOTICE_FLUSH_S):
                note.Wait()
            else:   # not matched (see docs/protocols.md): kept, never freed active
                req.Cancel()
                _NOTICES_IN_FLIGHT.append((req, note, buf))

    def _flush_notices(self) -> None:
        """Complete this rank's notice sends (each peer's watcher has its receive posted), within
        NOTICE_FLUSH_S; any still in flight is kept referenced, never freed active."""
        pending, self._notices = self._notices, []
        if not pending:
            return
        if not done_within(lambda: MPI.Request.Testall(pending), NOTICE_FLUSH_S):
            _NOTICES_IN_FLIGHT.append(pending)

    # -- collectives ---------------------------------------------------------------------------------------
    def sync(self, timeout: float | None = None) -> list[HazardReport]:
        """Host barrier (agreed, deadline-guarded), then the global checks of the launches so far; returns
        the hazards they file (and any not yet taken by a call)."""
        self.check_usable("Communicator.sync")
        self.world.barrier(timeout=timeout)
        for hook in self._sync_hooks:
            hook()
        return self.device.hazards.take()

    def close(self, timeout: float | None = None) -> list[HazardReport]:
        """`sync()`, then every control object ends and the windows are freed (collective). A communicator
        that failed here or got a peer's notice is only released (no barrier: the failed rank joins none;
        see `mc2emu.host.harness` for what keeps its windows until exit). Safe to call twice."""
        if self.closed:
            return []
        hazards: list[HazardReport] = []
        try:
            if self.failed is None and self.peer_failed is None:
                hazards = self.sync(timeout)
        except BaseException as exc:
            # The closing barrier failed (on every rank: it is agreed): this rank fails the communicator as
            # a rank whose call raised does, so every rank keeps its world for the agreed free at exit
            # (`mc2emu.host.harness` LEFT_BEHIND) and none frees it alone (a collective free would hang).
            first = "".join(str(exc).splitlines()[:1])
            self.fail(f"Communicator.close: {type(exc).__name__}: {first}")
            raise
        finally:
            self.closed = True
            self._stop.set()
            self._watcher.join()
            self._flush_notices()
            hooks, self._close_hooks = self._close_hooks, []
            for hook in reversed(hooks):
                hook()
        if self.failed is None and self.peer_failed is None:
            self.world.close(barrier_timeout=timeout)
            self._notice_comm.Free()
        return hazards

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
        elif not self.closed:
            self.fail(f"{type(exc).__name__} in the communicator's block")
            self.close()

    def __repr__(self) -> str:
        return (f"<Communicator rank {self.rank}/{self.size}, buffer {self.buffer_size} B, {self.calls} calls"
                f"{'' if self.data else ', protocol-only'}"
                f"{', failed' if self.failed else ''}>")
