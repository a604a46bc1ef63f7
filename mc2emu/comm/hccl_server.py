"""The HCCL server of one rank: the AICPU / CCU that executes what the AI-core clients commit.

Emulates SPEC §3.2's server side. One thread per rank reads the clients' mailbox in order and, for each
`Commit(h)` of the working block, executes the next repeat of task h with real data movement:
- AlltoAll / AllGather: one `Put` per rank (the own block too) into the peer's `recv` window range,
  `Flush_all`, then a completion signal per rank (`Accumulate` REPLACE of `tag(session, r + 1)` into slot
  (h, me) of the peer's HCCL window), `Flush_all`. A client's Wait reads its own slots.
- ReduceScatter / AllReduce: `Put`s into the peer's staging area (HCCL window, reserved at Prepare,
  [repeat][src][block]), the same signals, then the server waits until every rank's block has landed and
  reduces in rank order into `recv` (assumption: float32 accumulation, or int64 for integers, one rounding
  at the end; HCCL's device reduction order is not public).

Every rank executes the same commits in the same order (SPMD), so a server waiting for contributions never
waits on a server that waits on it. The idle server blocks on its mailbox (`queue.SimpleQueue.get`): the
AICPU's message loop, owed nothing, so it has no deadline and is not in the wait registry; every wait that
something is owed to goes through the wait primitive. The server model (`HcclServerType`) is read when a
launch's first `Hccl.Init()` opens its session.
"""

from __future__ import annotations

import enum
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
from mpi4py import MPI

from mc2emu.arch.platform import CoreType
from mc2emu.comm.hccl_session import HcclSession, tag
from mc2emu.comm.hccl_task import HCCL_MAX_HANDLE_ID, HcclReduceOp, HcclServerType, HcclTask
from mc2emu.numerics.payload import Payload, is_payload
from mc2emu.runtime.comm_events import HcclExecuted, Put
from mc2emu.runtime.gm import MemRole
from mc2emu.runtime.hazards import ConstraintError, Hazard
from mc2emu.runtime.waiting import Doorbell

if TYPE_CHECKING:
    from mc2emu.comm.world import CommWorld
    from mc2emu.runtime.core import CoreContext

# Label of the server in events, hazards and the wait registry.
SERVER_CORE = "HCCL-server"
# Reduce staging per session parity. A fast rank can be at most one session ahead of a slow one that
# still reduces (its next Wait needs the slow rank's next contributions), so two halves never collide.
# The apace MC2 kernels only AlltoAll / AllGather (no staging); 1 MiB keeps window creation cheap
# (it is zeroed on every rank) and a larger reduce asks for more with `staging_bytes`.
DEFAULT_STAGING_BYTES = 1 << 20
# Sessions alternate between this many staging halves (see DEFAULT_STAGING_BYTES).
STAGING_HALVES = 2
# Reduce ops accumulate floats in float32 (assumption, see the module docstring) and integers in int64.
_REDUCE_FLOAT = np.dtype(np.float32)
_REDUCE_INT = np.dtype(np.int64)


class _MsgKind(enum.Enum):
    COMMIT = "commit"
    FINALIZE = "finalize"
    STOP = "stop"


@dataclass(frozen=True)
class _Msg:
    kind: _MsgKind
    session: HcclSession | None = None
    handle: int = -1


class HcclServer:
    """Per-rank HCCL server thread plus its window (completion slots and reduce staging). Creating it is
    collective; it closes with its `CommWorld` (or earlier with `close()`)."""

    def __init__(self, world: CommWorld, *, model: HcclServerType = HcclServerType.CCU,
                 staging_bytes: int = DEFAULT_STAGING_BYTES) -> None:
        if not isinstance(model, HcclServerType):
            raise ConstraintError("HCCL server model", f"model must be an HcclServerType, got {model!r}")
        self.world = world
        self.device = world.device
        self.rank = world.rank
        self.ranks = world.size
        self.model = model
        self.staging_bytes = int(staging_bytes)
        self.slot_bytes = HCCL_MAX_HANDLE_ID * self.ranks * 8
        self.window = world.window(self.slot_bytes + STAGING_HALVES * self.staging_bytes, "hccl",
                                   MemRole.CONTROL)   # completion slots and the server's own reduce staging
        self._mailbox: queue.SimpleQueue[_Msg] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._session: HcclSession | None = None
        self._sessions = 0
        self._bell = Doorbell()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"r{self.rank}-{SERVER_CORE}", daemon=True)
        self._thread.start()
        world.on_close(self.close)

    # -- sessions (client side) ----------------------------------------------------------------------
    def session(self, ctx: CoreContext) -> HcclSession:
        """The session of `ctx`'s launch, opened by its first `Hccl.Init()`."""
        with self._lock:
            s = self._session
            if s is not None and s.launch is ctx.launch and not s.ended:
                return s
            if s is not None:
                self._end(s)
            self._sessions += 1
            half = self._sessions % STAGING_HALVES
            s = HcclSession(self._sessions, ctx.launch, self.model, self.ranks, self.rank, self.window,
                            self.slot_bytes + half * self.staging_bytes, self.staging_bytes,
                            poke=self.world.mpi_progress.poke)
            # The session belongs to one core type, fixed when it opens so that it never depends on which
            # core Prepares first: the AICs when the launch runs any (the MC2 kernels drive HCCL from the
            # AIC; an AIV of an AIC-only kernel launched mixed is the intruder), else the AIVs. Assumption:
            # what the device does when both types message the server is not public.
            s.core_type = CoreType.AIC if ctx.launch.kernel_type.runs_aic else CoreType.AIV
            self._session = s
            return s

    def reserve_staging(self, session: HcclSession, task: HcclTask) -> int | None:
        """Staging for a reduce task (called in Prepare order by the working block: symmetric)."""
        need = task.staging_bytes(self.ranks)
        if not need:
            return None
        with session.lock:
            start = session.staging_top
            if start + need > session.staging_end:
                raise ConstraintError(
                    "HCCL staging", f"handle {task.handle} ({task.op.value}) needs {need} bytes of reduce "
                    f"staging, {session.staging_end - start} of {self.staging_bytes} are left: create the "
                    f"HcclServer with a larger staging_bytes")
            session.staging_top = start + need
        return start

    def submit_commit(self, session: HcclSession, handle: int) -> None:
        self._mailbox.put(_Msg(_MsgKind.COMMIT, session, handle))

    def submit_finalize(self, session: HcclSession) -> None:
        self._mailbox.put(_Msg(_MsgKind.FINALIZE, session))

    # -- host side --------------------------------------------------------------------------------------
    def end_session(self) -> None:
        """Close the current session after its launch: files the end-of-session hazards (commits never
        waited by a core that did not Finalize, messages of non-working blocks never sent)."""
        with self._lock:
            s = self._session
            if s is not None:
                self._end(s)

    def close(self) -> None:
        """Stop the server thread (idempotent; called by `CommWorld.close()` and, for a failed call's world,
        `CommWorld.release()`). A reduce still waiting for peers' blocks (they left the call) ends unreduced."""
        if self._closed:
            return
        self._closed = True
        self.end_session()
        self._mailbox.put(_Msg(_MsgKind.STOP))
        with self._bell.guard:
            self._bell.ring()
        self._thread.join()

    def _end(self, s: HcclSession) -> None:
        if s.ended:
            return
        s.ended = True
        hazards = self.device.hazards
        clients = list(s.clients.values())
        working = next((c for c in clients if c.working and c.core_type is s.core_type), None)
        for c in clients:
            if not c.finalized:
                c.report_unwaited(hazards)
            if c.working or c.core_type is not s.core_type:
                continue
            if working is None:
                if c.prepares:
                    hazards.report(Hazard.HCCL_NON_WORKING_BLOCK, c.label,
                                   f"{c.prepares} Prepare(s) on {c.label} but block 0 of "
                                   f"{c.core_type.value} never called Init: only the working block sends "
                                   f"messages, so no task reached the server")
                continue
            for h, lh in enumerate(c.handles):
                sent = working.handles[h].commits if h < len(working.handles) else 0
                if lh.commits > sent:
                    hazards.report(Hazard.HCCL_NON_WORKING_BLOCK, c.label,
                                   f"{c.label} committed handle {h} {lh.commits} time(s), the working block "
                                   f"{working.label} only {sent}: commits of non-working blocks are never "
                                   f"sent to the server", handle=h)

    # -- the server thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            msg = self._mailbox.get()
            if msg.kind is _MsgKind.STOP:
                return
            s = msg.session
            if s is None:
                continue
            try:
                if msg.kind is _MsgKind.COMMIT and s.failure is None:
                    self._execute(s, msg.handle)
            except BaseException as exc:   # reported to the session's clients, never lost in the thread
                s.fail(exc)
            if msg.kind is _MsgKind.FINALIZE:
                with s.lock:
                    s.finalize_acked = True
                s.ring_all()

    def _execute(self, s: HcclSession, h: int) -> None:
        task = s.tasks[h]
        r = s.sent.get(h, 0)
        world, gm, me, ranks = self.world, self.device.gm, self.rank, self.ranks
        rep = task.repeat_offset(r)
        nbytes = task.block_bytes
        if task.op.reduces:
            dst_win = self.window
            dst_off = cast(int, task.staging) + (r * ranks + me) * nbytes
        else:
            dst_win, recv_off = world.window_of(task.recv, task.recv_span(ranks), "HCCL recv buffer")
            dst_off = recv_off + me * task.block_pitch + rep
        check = self.device.check or self.device.events.active
        for k in range(1, ranks + 1):
            j = (me + k) % ranks               # peers first, the own block last
            src = task.send + rep + (j * task.block_pitch if task.op.per_peer_blocks else 0)
            if nbytes:
                real = src.alloc.real(src.offset, src.offset + nbytes)
                data = (gm.read(src, np.uint8, (nbytes,), core=SERVER_CORE) if check or not real
                        else gm.view(src, np.uint8, (nbytes,)))
                if dst_win.real(dst_off, nbytes) and not is_payload(data):   # protocol-only: no bytes to move
                    dst_win.win.Put(data, j, dst_off)
                    dst_win.win.Flush(j)
            if self.device.events.active:
                self.device.events.emit(Put, SERVER_CORE, window=dst_win.name, offset=dst_off, nbytes=nbytes,
                                        src_rank=me, pe=j, op_seq=0, handle=h, repeat=r, session=s.number)
        signal = np.array([tag(s.number, r + 1)], dtype=np.uint64)
        slot = s.slot_offset(h, me)
        for j in range(ranks):
            self.window.win.Accumulate([signal, 1, MPI.UINT64_T], j, (slot, 1, MPI.UINT64_T), MPI.REPLACE)
        self.window.win.Flush_all()
        with s.lock:
            s.sent[h] = r + 1
        self.device.waiter.progress.bump()
        if self.device.events.active:
            self.device.events.emit(HcclExecuted, SERVER_CORE, handle=h, repeat=r, op=task.op, session=s.number)
        if task.op.reduces:
            self._reduce(s, task, r)
        s.ring_all()

    def _reduce(self, s: HcclSession, task: HcclTask, r: int) -> None:
        h = task.handle
        self.device.waiter.wait_until(
            self._bell, lambda: self._closed or s.contributions_landed(h, r + 1), core=SERVER_CORE,
            obj=f"HCCL {task.op.value} handle {h} repeat {r}: blocks of every rank", expected=f"{self.ranks}",
            setter="the HCCL server of every rank (their working block's Commit)", poll=True)
        if self._closed:
            return
        self.world.sync_windows()
        nbytes = task.block_bytes
        acc_dtype = _REDUCE_INT if task.dtype.kind in "iub" else _REDUCE_FLOAT
        acc: np.ndarray | None = None
        if not self.device.data:   # protocol-only: the blocks were not moved, the sum is payload
            acc = Payload((nbytes // task.dtype.itemsize,), acc_dtype)  # type: ignore[assignment]
        staging, reduce_op = cast(int, task.staging), cast(HcclReduceOp, task.reduce_op)  # set for reducing ops
        for src in range(self.ranks if acc is None else 0):
            start = staging + (r * self.ranks + src) * nbytes
            block = self.window.mem[start: start + nbytes].view(task.dtype).astype(acc_dtype)
            acc = block if acc is None else reduce_op.combine(acc, block)
        if acc is not None:
            self.device.gm.write(task.recv + task.repeat_offset(r), acc.astype(task.dtype), core=SERVER_CORE)
        with s.lock:
            s.reduced[h] = r + 1
