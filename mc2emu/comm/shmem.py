"""SHMEM-like one-sided primitives over MPI RMA: what the UDMA/URMA engine does for an MC2 kernel.

Emulates the put / get / signal / quiet / barrier interface of SPEC §3.1 (the shmem library the apace UDMA
kernels call), callable from any core thread of a launch (MPI_THREAD_MULTIPLE). Per-call MPI mapping and
guarantees: docs/protocols.md "Puts and signals". Correct under the MPI unified memory model (every window
is MPI_WIN_UNIFIED, in one passive-target epoch, `Lock_all(MODE_NOCHECK)`, for its whole life):
- `put_nbi` is `Put` from the source GM bytes (zero copy) then `Flush(pe)`: complete at the target on return.
  Every RMA call here is flushed before it returns, so `quiet` makes no MPI call (a `Flush_all` per window
  cost ~20 % of a per_block rank's CPU at 16 ranks).
- `put_signal` is `Put` -> `Flush(pe)` -> `Accumulate(uint64, REPLACE | SUM)` -> `Flush(pe)`: MPI does not
  order a Put against a later Accumulate (MPI-4.1 §12.7), the Flush does. Signals are always accumulates
  (atomic with respect to each other), never a plain Put.
- `signal_wait_until` reads the own window with `Win_sync` + an aligned 8-byte load (`SignalRead.LOAD`:
  single-copy atomic on x86-64 / AArch64); `SignalRead.FETCH` confirms with `Fetch_and_op(NO_OP)`, exact by
  MPI's letter but much slower under load. Then `Win_sync` on every window, so the guarded data is visible.
- A local store to the own window becomes visible to remote `Get`s after `Win_sync`; publishers call it.
- `barrier_all`: `Flush_all`, an `Ibarrier` on a communicator of its own (through the wait primitive), then
  `Win_sync` on every window. Remote waits re-test with bounded backoff (`poll=True`).
Check mode: every operation emits an event (src_rank, pe, window, offset, nbytes, seq) for the happens-before
checker. Protocol-only run (`data=False`): a put into window bytes that do not exist moves nothing, same events.
"""

from __future__ import annotations

import enum
import operator
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from mc2emu.comm.errors import WindowError
from mc2emu.comm.window import SIGNAL_BYTES
from mc2emu.numerics.payload import Payload, is_payload, refuse
from mc2emu.runtime.comm_events import BarrierAll, Get, Put, Quiet, SignalPost, SignalWait
from mc2emu.runtime.events import FaultFired
from mc2emu.runtime.faults import FaultHook
from mc2emu.runtime.hazards import GmError, KernelError
from mc2emu.runtime.waiting import ANY_CORE, Doorbell, SignalWord

if TYPE_CHECKING:
    from mc2emu.comm.window import Window
    from mc2emu.comm.world import CommWorld
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

# Signal values are 64-bit unsigned, as in shmem (`uint64_t` signal objects).
SIGNAL_DTYPE = np.dtype(np.uint64)
SIGNAL_MAX = (1 << 64) - 1


class SignalOp(enum.Enum):
    """How `put_signal` updates the signal word (shmem SHMEM_SIGNAL_SET / SHMEM_SIGNAL_ADD)."""

    SET = "set"
    ADD = "add"

    @property
    def mpi_op(self) -> MPI.Op:
        return MPI.REPLACE if self is SignalOp.SET else MPI.SUM


class Cmp(enum.Enum):
    """Comparison of `signal_wait_until` (shmem SHMEM_CMP_*)."""

    EQ = "=="
    NE = "!="
    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def holds(self, current: int, value: int) -> bool:
        return _CMP_FUNCS[self](current, value)


_CMP_FUNCS: dict[Cmp, Callable[[int, int], bool]] = {
    Cmp.EQ: operator.eq, Cmp.NE: operator.ne, Cmp.GT: operator.gt,
    Cmp.GE: operator.ge, Cmp.LT: operator.lt, Cmp.LE: operator.le,
}


class SignalRead(enum.Enum):
    """How `signal_wait_until` reads the own signal word.

    LOAD: `Win_sync` + an aligned 8-byte load. MPI allows a load of the own window in the unified model;
    an aligned 64-bit load is single-copy atomic on x86-64 and AArch64, so it returns a value some
    accumulate wrote, never a torn one. FETCH: `Fetch_and_op(NO_OP)` + `Flush_local`, exact by the letter of
    MPI, 20-50x slower under load (8 ranks contend for MPICH's window lock): a load satisfying
    the comparison is confirmed by one fetch."""

    LOAD = "load"
    FETCH = "fetch"


# MPI vector types of strided puts, by (rows, row bytes, stride): made and committed once per process (MPI frees
# them at finalize).
_ROW_TYPES: dict[tuple[int, int, int], Any] = {}
_ROW_TYPES_LOCK = threading.Lock()


def _row_type(count: int, rowBytes: int, stride: int) -> Any:
    key = (count, rowBytes, stride)
    dt = _ROW_TYPES.get(key)
    if dt is None:
        with _ROW_TYPES_LOCK:
            dt = _ROW_TYPES.get(key)
            if dt is None:
                dt = _ROW_TYPES[key] = MPI.BYTE.Create_vector(count, rowBytes, stride).Commit()
    return dt


def _origin(data: np.ndarray) -> np.ndarray:
    """The bytes of a core-local buffer as uint8 (a Payload of the same byte shape when it holds payload)."""
    if is_payload(data):
        shape = tuple(data.shape)
        return Payload((*shape[:-1], shape[-1] * data.dtype.itemsize) if shape else (data.dtype.itemsize,),
                       np.uint8)  # type: ignore[return-value]
    return np.ascontiguousarray(data).view(np.uint8)


def _moves_bytes(window: Window, off: int, origin: np.ndarray) -> bool:
    """Whether a put of `origin` to byte `off` of `window` moves bytes: not into bytes a protocol-only run does
    not hold; payload bytes into bytes that exist (CONTROL) are refused, except into a protocol-only
    communicator's buffer prefix (`Window.shared_prefix`), where they move nothing."""
    if not window.real(off, origin.nbytes):
        return False
    if is_payload(origin):
        if window.shared_prefix:
            return False
        raise refuse(f"bytes put into window '{window.name}', which holds control bytes")
    return True


class Shmem:
    """The SHMEM-like interface of one rank, bound to its `CommWorld`."""

    def __init__(self, world: CommWorld, *, read: SignalRead = SignalRead.LOAD) -> None:
        if not isinstance(read, SignalRead):
            raise KernelError(f"read must be a SignalRead, got {read!r}")
        self.world = world
        self.device = world.device
        self.rank = world.rank
        self.size = world.size
        self.read = read
        self._seq: dict[str, int] = {}
        # The doorbells signal waits sleep on; a signal to the own rank rings them.
        self._bells: dict[str, Doorbell] = {}
        self._bells_lock = threading.Lock()
        self._barrier_lock = threading.Lock()
        self._late_puts: list[tuple[Window, int, np.ndarray, int]] = []   # the LATE_PUT_DATA fault only

    # -- helpers ---------------------------------------------------------------------------------------
    def _check_pe(self, pe: int) -> None:
        if not 0 <= pe < self.size:
            raise WindowError(f"pe {pe} is not a rank of this world (size {self.size})")

    def _next_seq(self, label: str) -> int:
        seq = self._seq.get(label, 0) + 1
        self._seq[label] = seq
        return seq

    def _signal_slot(self, sig_addr: GmAddr) -> tuple[Window, int]:
        window, off = self.world.window_of(sig_addr, SIGNAL_BYTES, "signal address")
        if off % SIGNAL_BYTES:
            raise WindowError(f"signal address {sig_addr!r} is not {SIGNAL_BYTES}-byte aligned")
        return window, off

    def _source(self, ctx: CoreContext, src: GmAddr, nbytes: int) -> np.ndarray:
        """The bytes a put reads: checked and copied in check mode (bounds, never-written bytes, `GmRead`
        event), else a bounds-checked zero-copy slice (`GlobalMemory.view` costs ~10 us per call here,
        as much as the put itself)."""
        device = self.device
        alloc, off = src.alloc, src.offset
        if device.check or device.events.active or not alloc.real(off, off + nbytes):
            return device.gm.read(src, np.uint8, (nbytes,), core=ctx.label)
        if off < 0 or off + nbytes > alloc.nbytes:
            raise GmError(f"rank {self.rank}: put source bytes [{off}, {off + nbytes}) are outside GM allocation "
                          f"'{alloc.name}' of {alloc.nbytes} bytes")
        return alloc.buf[off: off + nbytes]  # type: ignore[index]  # real: checked above

    @staticmethod
    def _check_signal(signal: int, sig_op: SignalOp) -> None:
        if not 0 <= signal <= SIGNAL_MAX:
            raise KernelError(f"signal value {signal} does not fit the uint64 signal word")
        if not isinstance(sig_op, SignalOp):
            raise KernelError(f"sig_op must be a SignalOp, got {sig_op!r}")

    def _bell(self, label: str) -> Doorbell:
        bell = self._bells.get(label)
        if bell is None:
            with self._bells_lock:
                bell = self._bells.setdefault(label, Doorbell())
        return bell

    def _ring_local(self) -> None:
        for bell in list(self._bells.values()):
            with bell.guard:
                bell.ring()

    def _put_event(self, ctx: CoreContext, window: Window, offset: int, nbytes: int, pe: int, t0_ns: int = 0) -> None:
        """Publish one PUT (only called when the bus is active; `ctx.emit` also counts progress)."""
        ctx.emit(Put, window=window.name, offset=offset, nbytes=nbytes, src_rank=self.rank, pe=pe,
                 op_seq=self._next_seq(ctx.label), t0_ns=t0_ns)

    def _post_event(self, ctx: CoreContext, window: Window, offset: int, pe: int, sig_op: SignalOp,
                    signal: int) -> None:
        ctx.emit(SignalPost, window=window.name, offset=offset, nbytes=SIGNAL_BYTES, src_rank=self.rank, pe=pe,
                 op_seq=self._next_seq(ctx.label), op=sig_op, signal=signal)

    # -- puts and gets ---------------------------------------------------------------------------------
    def put_nbi(self, ctx: CoreContext, dst: GmAddr, src: GmAddr, nbytes: int, pe: int) -> None:
        """Copy `nbytes` from local `src` (any GM) to the symmetric `dst` on rank `pe`. Data is read from
        `src` during the call; it is complete at the target at the latest after `quiet`."""
        self._check_pe(pe)
        nbytes = int(nbytes)
        window, off = self.world.window_of(dst, nbytes, "put destination")
        ctx.checkpoint("put")
        t0 = time.perf_counter_ns()
        self._put(ctx, window, off, src, nbytes, pe)
        if self.device.events.active:
            self._put_event(ctx, window, off, nbytes, pe, t0)
        else:
            self.device.waiter.progress.bump()

    def put_local_nbi(self, ctx: CoreContext, dst: GmAddr, data: np.ndarray, pe: int) -> None:
        """Copy the bytes of a core-local buffer (`data`, e.g. UB) to the symmetric `dst` on rank `pe`: the
        UBMEM path, where an AIV's MTE3 copy writes a peer's window straight from UB. Completion as
        `put_nbi` (at the latest after `quiet`)."""
        self._check_pe(pe)
        origin = _origin(data).reshape(-1)
        nbytes = int(origin.size)
        window, off = self.world.window_of(dst, nbytes, "put destination")
        ctx.checkpoint("put")
        t0 = time.perf_counter_ns()
        if nbytes and _moves_bytes(window, off, origin):
            window.win.Put(origin, pe, off)
            window.win.Flush(pe)     # `origin` stays alive until the put completes (MPI-4.1 §12.3)
        if self.device.events.active:
            self._put_event(ctx, window, off, nbytes, pe, t0)
        else:
            self.device.waiter.progress.bump()

    def put_local_rows_nbi(self, ctx: CoreContext, dst: GmAddr, rows: np.ndarray, stride: int, pe: int) -> None:
        """Copy the rows of a 2-D core-local buffer (`rows`, e.g. UB) to rows `stride` bytes apart from the
        symmetric `dst` on rank `pe`: one strided MTE3 copy (`DataCopyParams` blockCount = rows, dstStride), as
        one MPI put with a vector target type. The same bytes, completion and events as a `put_local_nbi` per
        row (one PUT event per row, so every put's byte range stays exact); one checkpoint for the copy."""
        self._check_pe(pe)
        origin = _origin(rows)
        count, rowBytes = (int(n) for n in origin.shape)
        stride = int(stride)
        if count <= 1 or stride == rowBytes:
            self.put_local_nbi(ctx, dst, origin, pe)
            return
        if stride < rowBytes:
            raise WindowError(f"strided put of rows of {rowBytes} bytes at a stride of {stride} bytes: rows overlap")
        window, off = self.world.window_of(dst, (count - 1) * stride + rowBytes, "put destination")
        ctx.checkpoint("put")
        t0 = time.perf_counter_ns()
        if rowBytes and _moves_bytes(window, off, origin):
            window.win.Put(origin.reshape(-1), pe, (off, 1, _row_type(count, rowBytes, stride)))
            window.win.Flush(pe)     # `origin` stays alive until the put completes (MPI-4.1 §12.3)
        if self.device.events.active:
            for i in range(count):
                self._put_event(ctx, window, off + i * stride, rowBytes, pe, t0)
        else:
            self.device.waiter.progress.bump()

    def _put(self, ctx: CoreContext, window: Window, off: int, src: GmAddr, nbytes: int, pe: int) -> None:
        if nbytes:
            win = window.win
            origin = self._source(ctx, src, nbytes)
            if not _moves_bytes(window, off, origin):
                return
            win.Put(origin, pe, off)
            # `origin` must stay alive until the put completes (MPI-4.1 §12.3: the origin buffer may be
            # read until the operation completes at the origin); a temporary freed right after `Put`
            # sends reused heap bytes over MPICH's network path.
            win.Flush(pe)

    def get_nbi(self, ctx: CoreContext, dst: GmAddr, src: GmAddr, nbytes: int, pe: int) -> None:
        """Copy `nbytes` from the symmetric `src` on rank `pe` into local `dst` (any GM)."""
        self._check_pe(pe)
        nbytes = int(nbytes)
        window, off = self.world.window_of(src, nbytes, "get source")
        ctx.checkpoint("put")
        if nbytes and not window.real(off, nbytes):
            self.device.gm.write(dst, Payload((nbytes,), np.uint8), core=ctx.label)  # type: ignore[arg-type]   # protocol-only: no bytes
        elif nbytes:
            tmp = np.empty(nbytes, dtype=np.uint8)
            window.win.Get(tmp, pe, off)
            window.win.Flush(pe)
            self.device.gm.write(dst, tmp, core=ctx.label)
        if self.device.events.active:
            ctx.emit(Get, window=window.name, offset=off, nbytes=nbytes, src_rank=self.rank, pe=pe,
                     op_seq=self._next_seq(ctx.label))
        else:
            self.device.waiter.progress.bump()

    def put_signal(self, ctx: CoreContext, dst: GmAddr, src: GmAddr, nbytes: int, sig_addr: GmAddr,
                   signal: int, sig_op: SignalOp, pe: int) -> None:
        """`put_nbi` then update the signal word at `sig_addr` on rank `pe` (SET or ADD `signal`). The data
        is complete at the target before the signal changes."""
        self._check_pe(pe)
        nbytes, signal = int(nbytes), int(signal)
        window, off = self.world.window_of(dst, nbytes, "put destination")
        swin, soff = self._signal_slot(sig_addr)
        self._check_signal(signal, sig_op)
        ctx.checkpoint("put")
        faults = self.device.faults
        if faults is not None and nbytes and faults.fires(FaultHook.PUT_SIGNAL, self.rank, ctx.label):
            # Fault injection: a transport that lets the signal overtake the data (the bytes land at the
            # next barrier_all, after every rank passed it): the content check must report the read.
            ctx.emit(FaultFired, fault=faults.fault, at=nbytes)
            self._late_puts.append((window, off, self._source(ctx, src, nbytes).copy(), pe))
        else:
            self._put(ctx, window, off, src, nbytes, pe)
        active = self.device.events.active
        if active:
            self._put_event(ctx, window, off, nbytes, pe)
        ctx.checkpoint("signal")
        self._signal(swin, soff, signal, sig_op, pe)
        self._posted(ctx, swin, soff, sig_op, signal, pe)
        if active:
            self._post_event(ctx, swin, soff, pe, sig_op, signal)
        else:
            self.device.waiter.progress.bump()

    def signal_op(self, ctx: CoreContext, sig_addr: GmAddr, signal: int, sig_op: SignalOp, pe: int) -> None:
        """Update the signal word at the symmetric `sig_addr` on rank `pe` (shmem_signal_op). Orders after
        every put this core issued before it (puts are complete when `put_nbi` returns)."""
        self._check_pe(pe)
        signal = int(signal)
        window, off = self._signal_slot(sig_addr)
        self._check_signal(signal, sig_op)
        ctx.checkpoint("signal")
        self._signal(window, off, signal, sig_op, pe)
        self._posted(ctx, window, off, sig_op, signal, pe)
        if self.device.events.active:
            self._post_event(ctx, window, off, pe, sig_op, signal)
        else:
            self.device.waiter.progress.bump()

    def _posted(self, ctx: CoreContext, window: Window, off: int, sig_op: SignalOp, signal: int, pe: int) -> None:
        """Register a completed post as this rank's last to the word (`Device.signal_posts`)."""
        launch = self.device.current
        self.device.signal_posts[(pe, window.name, off)] = (None if launch is None else launch.index, ctx.label,
                                                            sig_op.name, signal)

    def _signal(self, window: Window, off: int, signal: int, sig_op: SignalOp, pe: int) -> None:
        win = window.win
        origin = np.array([signal], dtype=SIGNAL_DTYPE)     # alive until the Flush completes the accumulate
        win.Accumulate([origin, 1, MPI.UINT64_T], pe, (off, 1, MPI.UINT64_T), sig_op.mpi_op)
        win.Flush(pe)
        if pe == self.rank:
            self._ring_local()

    def quiet(self, ctx: CoreContext) -> None:
        """Complete every put and get this core issued (shmem_quiet): they already are (each is flushed to its
        target before it returns), so no MPI call; the event orders them for the checker."""
        if self.device.events.active:
            ctx.emit(Quiet, src_rank=self.rank, op_seq=self._next_seq(ctx.label))
        else:
            self.device.waiter.progress.bump()

    fence = quiet

    # -- signal waits ---------------------------------------------------------------------------------------
    def signal_read(self, sig_addr: GmAddr) -> int:
        """The exact current value of the own signal word (Fetch_and_op NO_OP on the own rank)."""
        window, off = self._signal_slot(sig_addr)
        return self._fetch(window, off)

    def _fetch(self, window: Window, off: int) -> int:
        result = np.zeros(1, dtype=SIGNAL_DTYPE)
        origin = np.zeros(1, dtype=SIGNAL_DTYPE)         # alive until Flush_local (MPI-4.1 §12.3)
        window.win.Fetch_and_op(origin, result, self.rank, off, MPI.NO_OP)
        window.win.Flush_local(self.rank)
        return int(result[0])

    def signal_wait_until(self, ctx: CoreContext, sig_addr: GmAddr, cmp: Cmp, value: int, *,
                          from_pe: int | None = None, mask: int | None = None) -> int:
        """Block until `signal <cmp> value` holds for the own signal word at `sig_addr`; return the value
        that satisfied it. Afterwards the data the signal guards is visible to this core's loads.
        `from_pe`: the rank whose put_signal / signal_op releases the wait (the signal slot's owner in the
        caller's protocol); a deadlock report then names it and follows its state. `mask`: compare only these
        bits of the word (a kernel polling a 32-bit value that shares the slot with bytes it never reads)."""
        if not isinstance(cmp, Cmp):
            raise KernelError(f"cmp must be a Cmp, got {cmp!r}")
        if from_pe is not None:
            self._check_pe(from_pe)
        window, off = self._signal_slot(sig_addr)
        idx = off // SIGNAL_BYTES
        value = int(value)
        cmp_holds = _CMP_FUNCS[cmp]
        bits = -1 if mask is None else int(mask)

        def holds(seen: int, want: int) -> bool:
            return cmp_holds(seen & bits, want)

        sync = window.win.Sync
        words = window.u64
        fetch = self.read is SignalRead.FETCH
        observed = [0]
        poke = self.world.mpi_progress.poke

        def pred() -> bool:
            poke()                  # peers' signals into this window complete only with our progress
            sync()
            seen = int(words[idx])
            if not holds(seen, value):
                return False
            if fetch:
                seen = self._fetch(window, off)
            observed[0] = seen
            return holds(seen, value)

        ctx.checkpoint("wait")
        if not pred():
            self.device.waiter.wait_until(
                self._bell(ctx.label), pred, core=ctx.label,
                obj=f"signal {window.name}+{off:#x} on rank {self.rank}", expected=f"{cmp.value} {value}",
                setter=("put_signal / signal_op from a peer" if from_pe is None else
                        f"put_signal / signal_op from rank {from_pe}"),
                current=lambda: int(words[idx]), poll=True,
                waits_for=() if from_pe is None else ((from_pe, ANY_CORE),),
                signal=SignalWord(window.name, off, cmp.value, value, bits,
                                  None if self.device.current is None else self.device.current.index))
        self.world.sync_windows()
        if self.device.events.active:
            ctx.emit(SignalWait, window=window.name, offset=off, nbytes=SIGNAL_BYTES, src_rank=self.rank,
                     pe=self.rank, op_seq=self._next_seq(ctx.label), cmp=cmp, expected=value, observed=observed[0])
        else:
            self.device.waiter.progress.bump()
        return observed[0]

    # -- barrier ---------------------------------------------------------------------------------------------
    def barrier_all(self, ctx: CoreContext) -> None:
        """Complete this rank's puts, then synchronize all ranks (shmem_barrier_all). Called by one core
        thread per rank."""
        if not self._barrier_lock.acquire(blocking=False):
            raise KernelError(f"rank {self.rank} {ctx.label}: barrier_all entered by a second core while "
                              f"another core of this rank is in it (one core per rank calls it)")
        try:
            ctx.checkpoint("sync_all")
            for window in self.world.windows:
                if not window.freed:
                    window.win.Flush_all()
            self.world.wait_request(self.world.kernel_comm.Ibarrier(), core=ctx.label, obj="barrier_all",
                                    expected=f"all {self.size} ranks in barrier_all",
                                    setter="one core of every rank")
            late, self._late_puts = self._late_puts, []
            for window, off, data, pe in late:      # LATE_PUT_DATA fault: the data after everyone's reads
                window.win.Put(data, pe, off)
                window.win.Flush(pe)
            self.world.sync_windows()
        finally:
            self._barrier_lock.release()
        if self.device.events.active:
            ctx.emit(BarrierAll, src_rank=self.rank, op_seq=self._next_seq(ctx.label))
        else:
            self.device.waiter.progress.bump()
