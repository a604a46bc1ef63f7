"""Cross-rank deadlock diagnosis: what the device reports as "aicore timeout 507014", explained.

When a wait on any rank passes its deadline, that rank asks every other rank for its wait registry and
core states, without relying on the stuck threads: each rank runs a small `DeadlockDiagnosis` service
thread on a communicator of its own that answers such requests. The requester builds one report that
says, per rank and core, what it waits on, who should release it, and whether that releaser is itself
waiting (following the chain to a cycle) or has finished without signalling. The request also tells
every rank that a deadlock was declared: their waits stop at once with the same verdict, so every rank
ends within seconds of the first deadline instead of each waiting out its own.

One report per deadlock, also when ranks are starved of CPU: the declaring thread first answers every
request that already reached its rank (a starved service thread must not turn a late rank into a second
declarer); replies say whether the rank is idle, collecting or has reported; a declarer defers to any rank
that reported, else the lowest collecting declarer it knows reports. No rank waits on another beyond
`COLLECT_S`: a rank that does not answer (killed, starved) is listed as unresponsive. State table and the
remaining window: docs/protocols.md "Cross-rank deadlock diagnosis".
"""

from __future__ import annotations

import contextlib
import enum
import pickle
import threading
import time
from typing import TYPE_CHECKING, Any

from mc2emu.comm.shmem import Cmp, SignalOp
from mc2emu.runtime.waiting import ANY_CORE, WaitRecord, core_ranges, group_waits

if TYPE_CHECKING:
    from mc2emu.runtime.device import Device

TAG_REQ = 7101
TAG_REP = 7102
# Replies of round e (`reset()` starts a new one on every rank) use tag TAG_REP + 2 (e % REP_ROUNDS): a
# late reply of an earlier round can never be taken for a current one.
REP_ROUNDS = 1000
# How long the requester collects answers: enough for 8 busy ranks on 2 cores to schedule their services.
COLLECT_S = 3.0
# The service thread's poll interval for requests (an idle sleep on an Event, not a spin).
SERVICE_POLL_S = 0.01
# Reply buffer for one snapshot (pickled registry of up to a few hundred waits).
MAX_SNAPSHOT_BYTES = 1 << 20
# Request buffer: a pickled (rank, core, object, round).
MAX_REQUEST_BYTES = 256


class DiagnosisState(enum.Enum):
    """Where a rank stands in the current round, as its replies say (protocol step 2)."""

    IDLE = "idle"                # not declaring: a request stopped its waits (or none came yet)
    COLLECTING = "collecting"    # declared, collecting the other ranks' snapshots
    DEFERRED = "deferred"        # declared, then left the report to another declarer
    REPORTED = "reported"        # declared and wrote the round's report


class DeadlockDiagnosis:
    """One rank's diagnosis service. Create it on every rank (collective: it duplicates `comm`), install it
    with `attach()`, and `close()` it on every rank at the end."""

    def __init__(self, device: Device, comm: Any) -> None:
        from mpi4py import MPI

        self.device = device
        self.comm = comm.Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._report: str | None = None
        # This rank's state against the replies it sends (never held while waiting for anything).
        self._state_lock = threading.Lock()
        self._state = DiagnosisState.IDLE
        self._declared_by: int | None = None
        self._defers_to: int | None = None
        self._rivals: set[int] = set()
        self._round = 0
        self._sends: list[Any] = []
        # The one posted receive for requests; answered by the service thread, and by a declaring thread
        # before it declares and while it collects (whichever of them gets the CPU first).
        self._req_lock = threading.Lock()
        self._req_buf = bytearray(MAX_REQUEST_BYTES)
        self._req: Any = self.comm.Irecv(self._req_buf, source=MPI.ANY_SOURCE, tag=TAG_REQ)
        self._thread = threading.Thread(target=self._serve, name=f"r{self.rank}-diag", daemon=True)
        self._thread.start()

    def attach(self) -> None:
        self.device.waiter.on_deadlock = self.on_deadlock

    # -- snapshots -----------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        dev = self.device
        launch = dev.current
        return {"rank": self.rank, "registry": dev.waiter.snapshot(),
                "cores": dict(launch.core_state) if launch is not None else {},
                "launch": _launch_label(dev) if launch is not None else None,
                "posts": dict(dev.signal_posts)}

    # -- answering requests (step 2) ---------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.wait(SERVICE_POLL_S):
            self.answer_requests()

    def answer_requests(self) -> None:
        """Answer every request that has reached this rank (from any thread; one at a time)."""
        from mpi4py import MPI

        with self._req_lock:
            status = MPI.Status()
            while self._req is not None and self._req.Test(status):
                msg = bytes(self._req_buf[: status.Get_count(MPI.BYTE)])
                self._req = self.comm.Irecv(self._req_buf, source=MPI.ANY_SOURCE, tag=TAG_REQ)
                self._answer(pickle.loads(msg), status.Get_source())

    def _answer(self, who: tuple[Any, ...], source: int) -> None:
        if who[3] != self._round:
            return                                 # a request of an earlier round: its requester gave up
        snap = self.snapshot()                     # before the waits stop and leave the registry
        with self._state_lock:
            state, defers_to = self._state, self._defers_to
            if state is DiagnosisState.IDLE:
                if self._declared_by is None:
                    self._declared_by = int(who[0])
            else:
                self._rivals.add(int(who[0]))      # a concurrent declarer, even if its reply is late
        if state is DiagnosisState.IDLE:
            # Every wait of this rank stops with the requester's verdict (they would only time out later).
            self.device.waiter.declared = (f"rank {who[0]} declared a deadlock ({who[1]} waiting on "
                                           f"{who[2]}); see rank {who[0]}'s report")
            self.device.waiter.wake_all()
        data = pickle.dumps({**snap, "state": state.value, "defers_to": defers_to})[:MAX_SNAPSHOT_BYTES]
        # Never block here: a requester that gave up would leave a blocking Send hanging.
        self._sends.append(self.comm.Isend(data, dest=source, tag=self._rep_tag()))

    # -- requester (steps 0, 1, 3) ---------------------------------------------------------------------------
    def on_deadlock(self, rec: WaitRecord) -> str | None:
        from mpi4py import MPI

        with self._lock:
            if self._report is not None:
                return self._report
            self.answer_requests()                 # step 0: a request that reached this rank comes first
            with self._state_lock:
                if (self._state is not DiagnosisState.IDLE or self._declared_by is not None
                        or self.device.waiter.declared is not None):
                    return None                    # another rank declared (or won) first
                self._state = DiagnosisState.COLLECTING
            snaps: dict[int, dict[str, Any] | None] = {self.rank: self.snapshot()}
            msg = pickle.dumps((self.rank, rec.core, rec.obj, self._round))
            # Kept until `close`: a rank that reaches its own deadline late still finds the request.
            self._sends += [self.comm.Isend(msg, dest=q, tag=TAG_REQ) for q in range(self.size) if q != self.rank]
            bufs = {q: bytearray(MAX_SNAPSHOT_BYTES) for q in range(self.size) if q != self.rank}
            recvs = {q: self.comm.Irecv(bufs[q], source=q, tag=self._rep_tag()) for q in bufs}
            statuses = {q: MPI.Status() for q in bufs}
            deadline = time.monotonic() + COLLECT_S
            pending = set(recvs)
            while True:
                for q in list(pending):
                    if recvs[q].Test(statuses[q]):
                        snaps[q] = pickle.loads(bytes(bufs[q][: statuses[q].Get_count(MPI.BYTE)]))
                        pending.discard(q)
                self.answer_requests()             # this rank's service thread may be the one starved
                if not pending or time.monotonic() >= deadline:
                    break                          # (a reply that came while this thread slept was taken)
                self._stop.wait(SERVICE_POLL_S)
            for q in pending:
                snaps[q] = None
                recvs[q].Cancel()
            with self._state_lock:                 # step 3, against any reply the service sends meanwhile
                reporter = self._decide(snaps)
                self._state = DiagnosisState.REPORTED if reporter == self.rank else DiagnosisState.DEFERRED
                self._defers_to = None if reporter == self.rank else reporter
            if reporter != self.rank:
                self.device.waiter.declared = (f"rank {reporter} declared the same deadlock at the same time; "
                                               f"see rank {reporter}'s report")
                return None
            self._report = build_report(rec, snaps, self.device.waiter.timeout)
            return self._report

    def _decide(self, snaps: dict[int, dict[str, Any] | None]) -> int:
        """The rank that reports this round: one that already reported, else the lowest declarer still
        collecting that this rank knows of (from replies, deferrals named in them, and requests)."""
        answered = {q: s for q, s in snaps.items() if s is not None and q != self.rank}
        reported = [q for q, s in answered.items() if s.get("state") == DiagnosisState.REPORTED.value]
        if reported:
            return min(reported)
        collecting = {q for q, s in answered.items() if s.get("state") == DiagnosisState.COLLECTING.value}
        collecting |= {int(s["defers_to"]) for s in answered.values() if s.get("defers_to") is not None}
        return min([self.rank, *collecting, *self._rivals])

    def reset(self) -> None:
        with self._lock, self._state_lock:
            self._report = None
            self._state = DiagnosisState.IDLE
            self._declared_by = None
            self._defers_to = None
            self._rivals = set()
            self._round += 1
            self.device.waiter.declared = None

    def _rep_tag(self) -> int:
        return TAG_REP + 2 * (self._round % REP_ROUNDS)

    def close(self, linger: float = 0.0) -> None:
        """Stop the service. After a deadlock, `linger` keeps it answering the other ranks' requests a
        little longer, so their reports include this rank and a late declarer learns who reported."""
        if linger > 0:
            self._stop.wait(linger)
        self._stop.set()
        self._thread.join(timeout=2.0)
        with self._req_lock:
            req, self._req = self._req, None
        # Cancelled requests (the posted receive, sends nobody received) may refuse to be freed, as may a
        # comm holding them; the process is ending anyway then.
        with contextlib.suppress(Exception):
            if req is not None:
                req.Cancel()
                req.Wait()
        for s in self._sends:
            with contextlib.suppress(Exception):
                if not s.Test():
                    s.Cancel()
        with contextlib.suppress(Exception):
            self.comm.Free()


def build_report(rec: WaitRecord, snaps: dict[int, dict[str, Any] | None], timeout: float) -> str:
    """The cross-rank report: every wait (grouped by object), its releasers' states, and the chains."""
    waiting: dict[tuple[int, str], dict[str, Any]] = {}
    cores: dict[tuple[int, str], str] = {}
    for r, snap in snaps.items():
        if snap is None:
            continue
        for w in snap["registry"]:
            waiting[(r, w["core"])] = w
        for label, state in snap["cores"].items():
            cores[(r, label)] = state
    lines = [f"DEADLOCK report of rank {rec.rank} ({rec.core} waited {timeout:.1f} s on {rec.obj} with no progress "
             f"anywhere):"]
    for r in sorted(snaps):
        snap = snaps[r]
        if snap is None:
            lines.append(f"  rank {r}: no answer within {COLLECT_S:.0f} s (killed, or stuck outside the emulator)")
            continue
        regs = snap["registry"]
        idle = sorted(c for c, st in snap["cores"].items() if st == "finished")
        lines.append(f"  rank {r} ({snap['launch'] or 'no launch'}): {len(regs)} core(s) waiting"
                     + (f"; finished: {core_ranges(idle)}" if idle else ""))
        for line in group_waits(regs):
            lines.append(f"    {line}")
        releasers: dict[tuple[int, str], str] = {}
        for w in regs:
            for tr, tc in w.get("waits_for", []):
                releasers[(tr, tc)] = _state(tr, tc, waiting, cores, snaps)
        by_state: dict[str, list[str]] = {}
        for (tr, tc), st in sorted(releasers.items()):
            by_state.setdefault(f"rank {tr}" + "\0" + st, []).append(tc)
        for key, labels in by_state.items():
            where, st = key.split("\0")
            who = "(any core)" if labels == [ANY_CORE] else core_ranges([c for c in labels if c != ANY_CORE])
            lines.append(f"      releaser {where} {who}: {st}")
    cycle = _find_cycle(waiting)
    if cycle:
        lines.append("  cycle: " + " -> ".join(f"rank {r} {c}" for r, c in cycle))
    lines[1:1] = lost_signals(waiting, snaps)   # the cause, when known, right under the headline
    return "\n".join(lines)


def lost_signals(waiting: dict[tuple[int, str], dict[str, Any]], snaps: dict[int, dict[str, Any] | None]) -> list[str]:
    """LOST_SIGNAL lines: a signal wait of launch L whose releaser's last post to the word, a SET of launch L
    that satisfies the wait, completed, and yet the word does not satisfy it: a store on the waiting rank
    overwrote the post after it landed (the source's reset of an earlier launch racing the peer's next post:
    docs/hazards.md "Between launches"). An ADD cannot be judged from its last post alone: not inferred."""
    out = []
    for (r, core), w in sorted(waiting.items()):
        sig, current = w.get("signal"), w.get("current")
        if sig is None or not isinstance(current, int):
            continue
        window, offset, cmp, value, mask, launch = sig
        holds = Cmp(cmp).holds
        for pr, _ in w.get("waits_for", []):
            snap = snaps.get(pr)
            post = None if snap is None else snap.get("posts", {}).get((r, window, offset))
            if post is None:
                continue
            plaunch, pcore, op, posted = post
            if op != SignalOp.SET.name or plaunch != launch or not holds(posted & mask, value) or \
                    holds(current & mask, value):
                continue
            out.append(f"  LOST_SIGNAL: rank {r} {core} waits (launch {launch}) for signal {window}+{offset:#x} "
                       f"{cmp} {value:#x}; rank {pr} {pcore} SET it to {posted:#x} in launch {plaunch} and that post "
                       f"completed, yet the word reads {current:#x}: a store on rank {r} overwrote the post after it "
                       f"landed (a reset of an earlier launch racing the peer's next post: the wait can never pass)")
    return out


def _state(rank: int, core: str, waiting: dict, cores: dict, snaps: dict) -> str:
    if snaps.get(rank) is None:
        return "rank did not answer"
    if core == ANY_CORE:                       # a signal any core of `rank` may post
        waits = sorted({w["obj"] for (r, _), w in waiting.items() if r == rank})
        states = {st for (r, _), st in cores.items() if r == rank}
        if waits:
            return f"its cores are themselves waiting on {'; '.join(waits)}"
        if states and states <= {"finished"}:
            return "every core finished without signalling"
        return "not waiting (running or between launches)" if states else "not in a launch"
    if (rank, core) in waiting:
        return f"itself waiting on {waiting[(rank, core)]['obj']}"
    state = cores.get((rank, core))
    if state == "finished":
        return "finished without signalling"
    if state is None:
        return "not part of the launch"
    return state


def _find_cycle(waiting: dict[tuple[int, str], dict[str, Any]]) -> list[tuple[int, str]] | None:
    for start in waiting:
        path, seen = [start], {start}
        node = start
        while True:
            nxt = next((t for t in _releasers(waiting[node], waiting) if t in waiting), None)
            if nxt is None:
                break
            if nxt in seen:
                return [*path[path.index(nxt):], nxt]
            path.append(nxt)
            seen.add(nxt)
            node = nxt
    return None


def _releasers(w: dict[str, Any], waiting: dict[tuple[int, str], dict[str, Any]]) -> list[tuple[int, str]]:
    """The (rank, core) pairs that can release wait `w`; a rank-only releaser stands for its waiting cores."""
    out: list[tuple[int, str]] = []
    for r, c in w.get("waits_for", []):
        if c == ANY_CORE:
            out += sorted(k for k in waiting if k[0] == r)
        else:
            out.append((r, c))
    return out


def _launch_label(dev: Device) -> str:
    """The current launch's name; on a device running a stream of launches (a `Communicator`), with its
    index, so a report shows which peer is still in an earlier launch."""
    name = dev.current.name if dev.current is not None else "no launch"
    return f"{name}, launch {dev.launch_count - 1}" if dev.numbered_launches else name
