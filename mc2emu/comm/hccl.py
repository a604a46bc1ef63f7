"""AscendC `Hccl`: the HCCL device client an MC2 kernel drives from its AI cores.

Emulates SPEC §3.2 (asc-devkit "HCCL使用说明": the AI core only writes messages; an AICPU or CCU server
executes them). Kernel code reads like the Ascend C source: `Hccl(ctx, server)`, `Init()`,
`AlltoAll(..., repeat, commit=True)` / `AllGather` / `ReduceScatter` / `AllReduce`, `Commit(h)`,
`Wait(h)` (0, or -1 under the AICPU model), `Finalize()`.

Rules, counted per calling core, and what each server model does when one is broken (docs/protocols.md
"HCCL client and server"; with checks on every break is also filed under its `Hazard` name):
HCCL_TOO_MANY_PREPARES (at most 63), HCCL_COMMIT_BEYOND_REPEAT, HCCL_WAIT_BEYOND_COMMIT (AICPU -1, CCU
hangs), HCCL_WAIT_ORDER, HCCL_WRONG_CORE_TYPE, HCCL_NON_WORKING_BLOCK, HCCL_FINALIZE_WHILE_WAITING,
HCCL_UNWAITED_COMMIT.

A Wait(h) waits for the NEXT committed repeat of h, never a chosen one: AICPU (any core) and the CCU working
block, until h's finish counter on this rank (`HcclSession.finished`) exceeds this core's Waits on h; a CCU
non-working core, until the working block has completed more Waits in total than this core. Only block 0
of the calling core type ("the working block") sends Prepare and Commit messages; the other blocks count
locally. `Prepare<commit=true>` commits every repeat at once. A hang is caught by the wait deadline
(`DeadlockError`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, cast

import numpy as np

from mc2emu.arch.platform import CoreType
from mc2emu.comm.hccl_task import (
    HCCL_FAILED,
    HCCL_MAX_HANDLE_ID,
    HCCL_MAX_REPEAT,
    HCCL_SUCCESS,
    INVALID_HANDLE_ID,
    HcclCMDType,
    HcclReduceOp,
    HcclServerType,
    HcclTask,
    hccl_dtype,
)
from mc2emu.runtime.comm_events import HcclCommit, HcclEvent, HcclFinalize, HcclInit, HcclPrepare, HcclQuery, HcclWait
from mc2emu.runtime.hazards import ConstraintError, Hazard, HazardLog, KernelError

P = ParamSpec("P")

if TYPE_CHECKING:
    from mc2emu.comm.hccl_server import HcclServer
    from mc2emu.comm.hccl_session import HcclSession
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.runtime.waiting import Doorbell


class HcclCall(enum.Enum):
    """A client API call (the HCCL events are one class per call: `HcclInit`, `HcclWait`, ...)."""

    INIT = "Init"
    PREPARE = "Prepare"
    COMMIT = "Commit"
    WAIT = "Wait"
    QUERY = "Query"
    FINALIZE = "Finalize"


@dataclass
class _Handle:
    """One handle as this core counts it."""

    handle: int
    op: HcclCMDType
    repeat: int
    commits: int = 0
    waits: int = 0


class Hccl:
    """One core's HCCL client. Construct one per core per launch, call `Init()` first."""

    def __init__(self, ctx: CoreContext, server: HcclServer) -> None:
        self.ctx = ctx
        self.server = server
        self.device = ctx.device
        self.label = ctx.label
        self.core_type = ctx.core_type
        self.working = ctx.GetBlockIdx() == 0
        self.session: HcclSession | None = None
        self.handles: list[_Handle] = []
        self.total_waits = 0
        self.finalized = False
        self._unwaited_reported = False
        self._bell: Doorbell | None = None

    @property
    def prepares(self) -> int:
        return len(self.handles)

    # -- plumbing ------------------------------------------------------------------------------------
    def _require(self) -> HcclSession:
        if self.session is None:
            raise KernelError(f"rank {self.ctx.rank} {self.label}: Hccl used before Init()")
        return self.session

    def _report(self, hazard: Hazard, message: str, **details: Any) -> None:
        self.device.hazards.report(hazard, self.label, f"HCCL: {message}", **details)

    def _emit(self, cls: Callable[Concatenate[int, str, int, int, P], HcclEvent], /, *args: P.args,
              **fields: P.kwargs) -> None:
        if self.device.events.active:
            self.ctx.emit(cls, *args, **fields)
        else:
            self.device.waiter.progress.bump()

    def _owner_ok(self, s: HcclSession, call: HcclCall) -> bool:
        if s.core_type is None or s.core_type is self.core_type:
            return True
        self._report(Hazard.HCCL_WRONG_CORE_TYPE,
                     f"{call.value} on {self.label} ({self.core_type.value}) but this session's tasks were "
                     f"prepared on {s.core_type.value} cores: Wait, Commit and Finalize must run on the core "
                     f"type that called Prepare")
        return False

    def _lookup(self, s: HcclSession, handle: int, call: HcclCall) -> _Handle | None:
        if handle == INVALID_HANDLE_ID:
            return None
        if 0 <= handle < len(self.handles):
            return self.handles[handle]
        if s.core_type is not None and s.core_type is not self.core_type:
            self._owner_ok(s, call)
            return None
        raise KernelError(f"rank {self.ctx.rank} {self.label}: {call.value}({handle}) on a handle this core "
                          f"never prepared (it prepared {len(self.handles)})")

    # -- Init / Finalize -----------------------------------------------------------------------------
    def Init(self) -> None:
        """`Hccl::Init`: join this launch's HCCL session."""
        if self.session is not None:
            raise KernelError(f"rank {self.ctx.rank} {self.label}: Hccl.Init() called twice")
        s = self.server.session(self.ctx)
        with s.lock:
            if self.label in s.clients:
                raise KernelError(f"rank {self.ctx.rank} {self.label}: a second Hccl client on one core in "
                                  f"one launch (one HCCL context per core)")
            s.clients[self.label] = self
        self._bell = s.new_bell()
        self.session = s
        self._emit(HcclInit, handle=INVALID_HANDLE_ID, session=s.number)

    def Finalize(self, reset: bool = True) -> None:
        """`Hccl::Finalize<reset>`: the working block tells the server no more tasks follow and waits
        until it executed every committed repeat; with the AICPU model and `reset` the finish counters
        are reset, so a later Wait of any core hangs."""
        s = self._require()
        if not self._owner_ok(s, HcclCall.FINALIZE) or self.finalized:
            return
        self.finalized = True
        self.report_unwaited(self.device.hazards)
        if self.working:
            self._report_finalize_race(s, reset)
            self.server.submit_finalize(s)
            self.device.waiter.wait_until(
                cast("Doorbell", self._bell), lambda: s.check_failure() or s.finalize_acked, core=self.label,
                obj="HCCL Finalize", expected="server executed every committed repeat",
                setter="the HCCL server thread of this rank")
            with s.lock:
                s.finalized = True
                if s.model is HcclServerType.AICPU and reset:
                    s.reset = True
            s.ring_all()
        self._emit(HcclFinalize, handle=INVALID_HANDLE_ID, reset=reset)

    def report_unwaited(self, hazards: HazardLog) -> None:
        """File HCCL_UNWAITED_COMMIT for every handle this core committed more often than it waited."""
        if self._unwaited_reported:
            return
        self._unwaited_reported = True
        for lh in self.handles:
            if lh.commits > lh.waits:
                hazards.report(Hazard.HCCL_UNWAITED_COMMIT, self.label,
                               f"HCCL: handle {lh.handle} ({lh.op.value}) committed {lh.commits} time(s), "
                               f"waited {lh.waits}: a skipped drain (the server may still write into recv)",
                               handle=lh.handle)

    def _report_finalize_race(self, s: HcclSession, reset: bool) -> None:
        """At the working block's Finalize: AICPU with reset, every core of the session that completed
        fewer Waits than block 0 will hang on its next Wait; CCU, a core now inside an unsatisfied Wait
        can no longer be released (block 0 completes no more Waits)."""
        with s.lock:
            others = [c for c in s.clients.values() if c is not self and c.core_type is self.core_type]
            waiting = dict(s.waiting)
        if s.model is HcclServerType.AICPU and reset:
            victims = sorted(c.label for c in others if not c.finalized and c.total_waits < self.total_waits)
            why = "the reset finish counters make their remaining Waits hang"
        else:
            victims = sorted(label for label, pred in waiting.items() if label != self.label and not pred())
            why = "no further Wait of block 0 can release them"
        if victims:
            for label in victims:
                s.finalize_reported.add(label)
            self._report(Hazard.HCCL_FINALIZE_WHILE_WAITING,
                         f"working block {self.label} finalizes while {', '.join(victims)} still have Waits "
                         f"to complete: {why} (nothing orders their Waits before this Finalize)",
                         waiting=victims)

    # -- Prepare ---------------------------------------------------------------------------------------
    def AlltoAll(self, sendBuf: GmAddr, recvBuf: GmAddr, dataCount: int, dataType: Any, strideCount: int = 0,
                 repeat: int = 1, commit: bool = False) -> int:
        """`AlltoAll<commit>(sendBuf, recvBuf, dataCount, dataType, strideCount, repeat)`; `recvBuf` must be
        a window address (peers write into it)."""
        return self._prepare(HcclCMDType.ALL_TO_ALL, sendBuf, recvBuf, dataCount, dataType, strideCount,
                             repeat, None, commit)

    def AllGather(self, sendBuf: GmAddr, recvBuf: GmAddr, sendCount: int, dataType: Any, strideCount: int = 0,
                  repeat: int = 1, commit: bool = False) -> int:
        """`AllGather<commit>(sendBuf, recvBuf, sendCount, dataType, strideCount, repeat)`; `recvBuf` in a
        window."""
        return self._prepare(HcclCMDType.ALL_GATHER, sendBuf, recvBuf, sendCount, dataType, strideCount,
                             repeat, None, commit)

    def ReduceScatter(self, sendBuf: GmAddr, recvBuf: GmAddr, recvCount: int, dataType: Any, op: HcclReduceOp,
                      strideCount: int = 0, repeat: int = 1, commit: bool = False) -> int:
        """`ReduceScatter<commit>(sendBuf, recvBuf, recvCount, dataType, op, strideCount, repeat)`."""
        return self._prepare(HcclCMDType.REDUCE_SCATTER, sendBuf, recvBuf, recvCount, dataType, strideCount,
                             repeat, op, commit)

    def AllReduce(self, sendBuf: GmAddr, recvBuf: GmAddr, count: int, dataType: Any, op: HcclReduceOp,
                  repeat: int = 1, commit: bool = False) -> int:
        """`AllReduce<commit>(sendBuf, recvBuf, count, dataType, op, repeat)`."""
        return self._prepare(HcclCMDType.ALL_REDUCE, sendBuf, recvBuf, count, dataType, 0, repeat, op, commit)

    def _prepare(self, op: HcclCMDType, send: GmAddr, recv: GmAddr, count: int, dtype: Any, stride: int,
                 repeat: int, reduce_op: HcclReduceOp | None, commit: bool) -> int:
        s = self._require()
        for name, value, low in (("count", count, 0), ("strideCount", stride, 0), ("repeat", repeat, 1)):
            if int(value) != value or value < low:
                raise ConstraintError(f"HCCL {op.value} {name}", f"{name} must be an integer >= {low}, got "
                                      f"{value!r}")
        if repeat > HCCL_MAX_REPEAT:
            raise ConstraintError(f"HCCL {op.value} repeat <= {HCCL_MAX_REPEAT}",
                                  f"repeat {repeat} does not fit the uint8_t repeat of Prepare (<= "
                                  f"{HCCL_MAX_REPEAT}): the device would wrap it to {int(repeat) % 256}")
        if op.reduces and not isinstance(reduce_op, HcclReduceOp):
            raise ConstraintError(f"HCCL {op.value} op", f"op must be an HcclReduceOp, got {reduce_op!r}")
        dt = hccl_dtype(dtype)
        if stride and stride < count:
            raise ConstraintError(f"HCCL {op.value} strideCount",
                                  f"strideCount {stride} < count {count}: rank blocks would overlap")
        with s.lock:
            owner = s.core_type is self.core_type
        if not owner:
            owner_type = cast(CoreType, s.core_type)  # set: a session's first Prepare records it
            self._report(Hazard.HCCL_WRONG_CORE_TYPE,
                         f"{op.value} Prepare on {self.label} ({self.core_type.value}) while this session's "
                         f"tasks come from {owner_type.value} cores: on the device both would message the "
                         f"server; here this core's tasks are never sent")
        if len(self.handles) >= HCCL_MAX_HANDLE_ID:
            self._report(Hazard.HCCL_TOO_MANY_PREPARES,
                         f"Prepare #{len(self.handles) + 1} on {self.label}: at most {HCCL_MAX_HANDLE_ID} "
                         f"per core per session; returns INVALID_HANDLE_ID")
            return INVALID_HANDLE_ID
        h = len(self.handles)
        self.handles.append(_Handle(h, op, int(repeat)))
        if self.working and owner:
            self._send_task(s, HcclTask(h, op, send, recv, int(count), dt, int(stride), int(repeat), reduce_op))
        self._emit(HcclPrepare, handle=h, op=op, count=int(count), repeat=int(repeat), session=s.number)
        if commit:
            for _ in range(int(repeat)):
                self.Commit(h)
        return h

    def _send_task(self, s: HcclSession, task: HcclTask) -> None:
        ranks = self.server.ranks
        gm = self.device.gm
        gm.view(task.send, np.uint8, (task.send_span(ranks),))          # bounds of everything sent
        if task.op.reduces:
            gm.view(task.recv, np.uint8, (task.recv_span(ranks),))
            task = replace(task, staging=self.server.reserve_staging(s, task))
        else:
            self.server.world.window_of(task.recv, task.recv_span(ranks), f"HCCL {task.op.value} recvBuf")
        with s.lock:
            s.tasks[task.handle] = task

    # -- Commit / Wait / Query ---------------------------------------------------------------------------
    def Commit(self, handleId: int) -> None:
        """`Hccl::Commit(handleId)`: release the next repeat of the task to the server."""
        s = self._require()
        lh = self._lookup(s, handleId, HcclCall.COMMIT)
        if lh is None or not self._owner_ok(s, HcclCall.COMMIT):
            return
        if lh.commits >= lh.repeat:
            self._report(Hazard.HCCL_COMMIT_BEYOND_REPEAT,
                         f"Commit #{lh.commits + 1} of handle {lh.handle} ({lh.op.value}) on {self.label} "
                         f"exceeds its repeat {lh.repeat}; the extra Commit is dropped", handle=lh.handle)
            return
        self.ctx.checkpoint("signal")
        lh.commits += 1
        if self.working:
            self.server.submit_commit(s, lh.handle)
        self._emit(HcclCommit, handle=lh.handle, commits=lh.commits)

    def Wait(self, handleId: int) -> int:
        """`Hccl::Wait(handleId)`: block until the next committed repeat of the task is finished. Returns
        0, or -1 where the AICPU model reports an error."""
        s = self._require()
        self.ctx.checkpoint("wait")
        lh = self._lookup(s, handleId, HcclCall.WAIT)
        if lh is None or not self._owner_ok(s, HcclCall.WAIT):
            return HCCL_FAILED
        h = lh.handle
        early = [g.handle for g in self.handles[:h] if g.commits > g.waits]
        if early:
            self._report(Hazard.HCCL_WAIT_ORDER,
                         f"Wait({h}) on {self.label} while earlier-prepared handle(s) {early} still have "
                         f"committed, unwaited repeats: Waits must follow Prepare order", handle=h, earlier=early)
        if lh.waits >= lh.commits:
            self._report(Hazard.HCCL_WAIT_BEYOND_COMMIT,
                         f"Wait #{lh.waits + 1} of handle {h} ({lh.op.value}) on {self.label} with only "
                         f"{lh.commits} Commit(s)" + (": returns -1" if s.model is HcclServerType.AICPU
                                                      else ": the CCU never completes it (hang)"), handle=h)
            if s.model is HcclServerType.AICPU:
                self._emit(HcclWait, handle=h, rc=HCCL_FAILED)
                return HCCL_FAILED
            self._block(s, lambda: s.check_failure() or False, obj=f"HCCL handle {h} repeat {lh.waits} "
                        f"(never committed)", expected="a Commit that cannot come", poll=False)
        target = lh.waits + 1
        if s.model is HcclServerType.CCU and not self.working:
            mine = self.total_waits

            def pred() -> bool:
                s.check_failure()
                return s.working_waits > mine
            obj, expected, poll = (f"HCCL handle {h} (CCU: working block's Waits)",
                                   f"working block completed > {mine} Waits", False)
            current: Any = lambda: s.working_waits  # noqa: E731
        else:
            def pred() -> bool:
                return s.finished(h, at_least=target) >= target
            obj, expected, poll = (f"HCCL handle {h} ({lh.op.value}) repeat {target - 1}",
                                   f"finished repeats >= {target}", not lh.op.reduces)

            def current() -> Any:
                if s.reset:
                    return (f"0: HCCL session {s.number} was finalized by the working block "
                            f"(AICPU Finalize<true> reset its finish counters)")
                return s.finished(h)
        if s.finalized and not self.working and self.label not in s.finalize_reported and (
                s.reset or not pred()):
            s.finalize_reported.add(self.label)
            self._report(Hazard.HCCL_FINALIZE_WHILE_WAITING,
                         f"Wait({h}) on {self.label} after the working block's Finalize: "
                         + ("the finish counters were reset, it hangs" if s.reset
                            else "block 0 completes no more Waits, it hangs"), handle=h)
        self._block(s, pred, obj=obj, expected=expected, poll=poll, current=current)
        lh.waits += 1
        self.total_waits += 1
        if self.working:
            with s.lock:
                s.working_waits += 1
            s.ring_all()
        # What this Wait proves (the happens-before checker): AICPU, or the CCU working block, repeats
        # < waits of h finished on this rank; a CCU non-working core, whatever the working block's first
        # `total` Waits proved.
        self._emit(HcclWait, handle=h, rc=HCCL_SUCCESS, waits=lh.waits, total=self.total_waits,
                   follows_working=s.model is HcclServerType.CCU and not self.working, session=s.number)
        return HCCL_SUCCESS

    def _block(self, s: HcclSession, pred: Any, *, obj: str, expected: str, poll: bool,
               current: Any = None) -> None:
        if pred():
            return
        with s.lock:
            s.waiting[self.label] = pred
        try:
            self.device.waiter.wait_until(cast("Doorbell", self._bell), pred, core=self.label, obj=obj,
                                          expected=expected,
                                          setter="the HCCL server (Commits of the working block on every rank)",
                                          current=current, poll=poll)
        finally:
            with s.lock:
                s.waiting.pop(self.label, None)

    def Query(self, handleId: int) -> int:
        """`Hccl::Query(handleId)`: repeats of the task finished so far (-1 on a refused call)."""
        s = self._require()
        lh = self._lookup(s, handleId, HcclCall.QUERY)
        if lh is None or not self._owner_ok(s, HcclCall.QUERY):
            return HCCL_FAILED
        done = s.finished(lh.handle)
        self._emit(HcclQuery, handle=lh.handle, done=done)
        return done
