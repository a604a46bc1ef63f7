"""The one blocking wait primitive of mc2emu.

Every wait in the project (cross-core flags, SyncAll, signals in peer windows, HCCL handles, TeamBarrier
slots) goes through `Waiter.wait_until`. It

- blocks on a `Doorbell` (no spinning: 8 ranks share 2 cores here, and a pure-Python spinner
  is 50-60x slower, MPI-NOTES "Waiting");
- for objects that live in another process (`poll=True`: peer windows) re-tests with a bounded backoff,
  `POLL_BACKOFF_MIN` doubling to `POLL_BACKOFF_MAX` (a long wait further, to a twentieth of its length, at
  most 50 ms: `poll_cap`), still sleeping on the doorbell so that a local ring (abort, a local put) wakes it
  at once;
- has a deadline counted from the last progress anywhere: the rank's own progress counter, and when
  installed the global progress probe of the comm layer (other ranks' counters), so that a slow but live
  peer never trips it while a real hang is reported `timeout` seconds after the last progress;
- registers who waits on what (rank, core, object, expected, current value, who should release it),
  so a report can name every waiter, and raises `DeadlockError` with that registry on deadline.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from mc2emu.runtime.event_bus import EventBus
from mc2emu.runtime.events import WaitBegin, WaitEnd
from mc2emu.runtime.hazards import DeadlockError, LaunchAborted

# Default deadline: seconds without any progress anywhere. A legitimate wait at the benchmark sizes
# always sees progress (mmads, puts, sets) well within this.
DEFAULT_TIMEOUT_S = 30.0
# Local waits re-check the deadline at least this often without a ring (aborts ring at once).
CHECK_INTERVAL_S = 0.25
# How often, as a fraction of the deadline, a wait samples the other ranks' progress counters.
GLOBAL_PROBE_FRACTION = 0.25
# Polled (remote) waits: a 50 us -> 1 ms backoff gives the best throughput on 2 cores (MPI-NOTES).
POLL_BACKOFF_MIN_S = 50e-6
POLL_BACKOFF_MAX_S = 1e-3
# A polled wait that has lasted T sleeps up to T / POLL_LONG_WAIT_DIVISOR between tests (at most
# POLL_BACKOFF_LONG_MAX_S): a long wait costs little CPU and at most ~5 % of its length in latency. At 64 ranks
# on 2 cores, ranks done with their kernel polling the host barrier every 1 ms took the whole host (each test an
# MPI call and a thread wake-up) from the ranks still working, whose kernel then stalled past the deadline.
POLL_LONG_WAIT_DIVISOR = 20
POLL_BACKOFF_LONG_MAX_S = 50e-3
# Polled waits first re-test this many times without sleeping (each test is an MPI call, which yields),
# the "short spin through MPI calls, then backoff" that gave ~11 us round trips in MPI-NOTES.
POLL_SPIN_TRIES = 20


class Doorbell:
    """How a waiter sleeps and how a releaser wakes it: a binary semaphore (a raw lock, the cheapest
    blocking object in CPython: ~18 us round trip against ~40 us for a Condition) guarded by `guard`, the
    lock that protects the state the waiter's predicate reads.

    `arm()` and `ring()` run with `guard` held; `arm` drains a stale ring first, so the bell is released at
    most once per arm and a ring can never be lost between the predicate test and the sleep."""

    __slots__ = ("_bell", "_sleeping", "guard")

    def __init__(self, guard: threading.Lock | None = None) -> None:
        self.guard = guard if guard is not None else threading.Lock()
        self._bell = threading.Lock()
        self._bell.acquire()
        self._sleeping = False

    def arm(self) -> None:
        self._bell.acquire(False)
        self._sleeping = True

    def ring(self) -> None:
        if self._sleeping:
            self._sleeping = False
            self._bell.release()

    def sleep(self, timeout: float) -> None:
        self._bell.acquire(timeout=max(timeout, 0.0))


# The core label of a releaser known only by its rank (a signal any core of that rank may post).
ANY_CORE = "*"


class SignalWord(NamedTuple):
    """What a signal wait compares: `(word & mask) <cmp> value` on the own word `window`+`offset`, in launch
    `launch` (a deadlock report sets it against the releaser's last post to the word)."""

    window: str
    offset: int
    cmp: str          # Cmp.value: ">=", "==", ...
    value: int
    mask: int         # -1: the whole word
    launch: int | None


class WaitRecord:
    """One registered wait, as it appears in a deadlock report. `waits_for` names who can release it as
    (rank, core label) pairs (rank None: this rank) so a cross-rank report can follow the chain."""

    __slots__ = ("core", "current", "expected", "obj", "rank", "setter", "signal", "since", "waits_for", "wid")

    def __init__(self, wid: int, rank: int, core: str, obj: str, expected: str, setter: str, since: float,
                 current: Callable[[], Any] | None, waits_for: tuple[tuple[int | None, str], ...] = (),
                 signal: SignalWord | None = None) -> None:
        self.wid, self.rank, self.core, self.obj = wid, rank, core, obj
        self.expected, self.setter, self.since, self.current = expected, setter, since, current
        self.waits_for = waits_for
        self.signal = signal

    def as_dict(self) -> dict[str, Any]:
        try:
            cur = self.current() if self.current is not None else None
        except Exception as exc:  # a report must never fail because a probe did
            cur = f"<unreadable: {exc}>"
        return {"rank": self.rank, "core": self.core, "obj": self.obj, "expected": self.expected,
                "current": cur, "setter": self.setter,
                "waits_for": [(self.rank if r is None else r, c) for r, c in self.waits_for],
                "waiting_s": round(time.monotonic() - self.since, 3),
                "signal": None if self.signal is None else tuple(self.signal)}


class Progress:
    """A monotonically increasing count of things that happened on this rank. The comm layer may set
    `mirror` to a one-element uint64 array in window memory so that other ranks can read the count."""

    __slots__ = ("count", "last", "mirror")

    def __init__(self) -> None:
        self.count = 0
        self.last = time.monotonic()
        self.mirror: Any = None

    def bump(self) -> None:
        # A racy increment is fine: any change is progress.
        self.count += 1
        self.last = time.monotonic()
        if self.mirror is not None:
            self.mirror[0] = self.count


def poll_cap(waited: float) -> float:
    """The longest sleep between two tests of a polled wait that has lasted `waited` seconds."""
    return min(max(POLL_BACKOFF_MAX_S, waited / POLL_LONG_WAIT_DIVISOR), POLL_BACKOFF_LONG_MAX_S)


class Waiter:
    """Per-device wait primitive, registry and deadline policy."""

    def __init__(self, rank: int, events: EventBus, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.rank = rank
        self.events = events
        self.timeout = timeout
        self.progress = Progress()
        # Installed by the comm layer: returns a value that changes whenever any rank made progress.
        self.global_progress: Callable[[], Any] | None = None
        # Installed by a launch: set when the launch is being torn down.
        self.abort_event: threading.Event | None = None
        # Called when a deadline passes, before raising: may return a cross-rank report string.
        self.on_deadlock: Callable[[WaitRecord], str | None] | None = None
        # Set by the deadlock diagnosis when another rank declared a deadlock: every wait of this rank
        # then ends at its next wake-up with that report instead of waiting out its own deadline.
        self.declared: str | None = None
        self._records: dict[int, tuple[WaitRecord, Doorbell]] = {}
        self._ids = itertools.count(1)

    # -- registry -----------------------------------------------------------------------------------
    def snapshot(self) -> list[dict[str, Any]]:
        records = [r for r, _ in list(self._records.values())]
        return [r.as_dict() for r in records]

    def wake_all(self) -> None:
        """Ring every bell a wait currently sleeps on (abort, teardown)."""
        for _, bell in list(self._records.values()):
            with bell.guard:
                bell.ring()

    # -- the primitive ---------------------------------------------------------------------------------
    def wait_until(self, bell: Doorbell, pred: Callable[[], bool], *, core: str, obj: str,
                   expected: str = "", setter: str = "", current: Callable[[], Any] | None = None,
                   poll: bool = False, timeout: float | None = None,
                   waits_for: tuple[tuple[int | None, str], ...] = (), stoppable: bool = True,
                   signal: SignalWord | None = None) -> None:
        """Block until `pred()` holds. `pred` is evaluated with `bell.guard` held; whoever changes what it
        reads rings the bell under the same guard. `poll=True` also re-tests with backoff, for objects
        another process changes (peer windows). `stoppable=False`: neither a launch abort nor a deadlock
        declared elsewhere ends the wait, only its own deadline (a wait whose outcome every rank must
        learn, such as the agreement round of a host barrier). `signal`: the word a signal wait compares (a
        deadlock report checks it against the releaser's last post)."""
        guard = bell.guard
        with guard:
            if pred():
                return
            bell.arm()
        limit = self.timeout if timeout is None else timeout
        now = time.monotonic()
        rec = WaitRecord(next(self._ids), self.rank, core, obj, expected, setter, now, current, waits_for, signal)
        self._records[rec.wid] = (rec, bell)
        if self.events.active:
            self.events.emit(WaitBegin, core, what=obj, expected=expected, setter=setter)
        progress = self.progress
        seen_local = progress.count
        seen_global: Any = None   # sampled lazily: reading every rank's counter costs MPI calls
        last_progress = last_global = now
        backoff = POLL_BACKOFF_MIN_S
        tries = 0
        abort = self.abort_event if stoppable else None
        try:
            while True:
                if poll:
                    tries += 1
                    if tries > POLL_SPIN_TRIES:
                        bell.sleep(backoff)
                        backoff = min(backoff * 2, poll_cap(now - rec.since))
                else:
                    bell.sleep(min(CHECK_INTERVAL_S, limit - (now - last_progress)))
                with guard:
                    if pred():
                        break
                    bell.arm()
                if abort is not None and abort.is_set():
                    raise LaunchAborted(f"rank {self.rank} {core}: launch aborted while waiting on {obj}")
                if stoppable and self.declared is not None:
                    self._deadline(rec, limit, declared=self.declared)
                now = time.monotonic()
                if progress.count != seen_local:
                    seen_local = progress.count
                    last_progress = max(last_progress, progress.last)
                if self.global_progress is not None and now - last_global >= limit * GLOBAL_PROBE_FRACTION:
                    # Other ranks' progress counts too; sampled a few times per deadline so a hang is
                    # reported within (1 + GLOBAL_PROBE_FRACTION) x timeout of the last progress anywhere.
                    last_global = now
                    g = self.global_progress()
                    if seen_global is not None and g != seen_global:
                        last_progress = now
                    seen_global = g
                if now - last_progress >= limit:
                    self._deadline(rec, limit)
        finally:
            self._records.pop(rec.wid, None)
        progress.bump()
        if self.events.active:
            self.events.emit(WaitEnd, core, what=obj, expected=expected, setter=setter)

    def _deadline(self, rec: WaitRecord, limit: float, declared: str | None = None) -> None:
        registry = self.snapshot()
        if declared is not None:
            raise DeadlockError(f"rank {rec.rank} {rec.core}: stopped while waiting on {rec.obj}: {declared}",
                                registry, declared, declared_elsewhere=True)
        report = self.on_deadlock(rec) if self.on_deadlock is not None else None
        if report is None and self.declared is not None:
            # The diagnosis deferred to another rank's report of the same deadlock (one report per deadlock).
            raise DeadlockError(f"rank {rec.rank} {rec.core}: stopped while waiting on {rec.obj}: {self.declared}",
                                registry, self.declared, declared_elsewhere=True)
        msg = (f"rank {rec.rank} {rec.core}: no progress for {limit:.1f} s while waiting on {rec.obj} "
               f"(expects {rec.expected}; released by {rec.setter or '?'}) — the device would report "
               f"'aicore timeout'.")
        msg += "\n" + (report if report else f"  waiting on rank {self.rank}:\n" + "\n".join(
            "    " + line for line in group_waits(registry)))
        raise DeadlockError(msg, registry, report)


def core_ranges(labels: list[str]) -> str:
    """"AIC0-3, AIC7, AIV2" from core labels."""
    by_kind: dict[str, list[int]] = {}
    other: list[str] = []
    for lab in labels:
        kind, num = lab[:3], lab[3:]
        if num.isdigit():
            by_kind.setdefault(kind, []).append(int(num))
        else:
            other.append(lab)
    parts = []
    for kind, nums in sorted(by_kind.items()):
        nums.sort()
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            parts.append(f"{kind}{start}" if start == prev else f"{kind}{start}-{prev}")
            if n is not None:
                start = prev = n
    return ", ".join([*parts, *other])


def group_waits(registry: list[dict[str, Any]]) -> list[str]:
    """One line per distinct wait: the cores that wait on the same object for the same release."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for w in registry:
        groups.setdefault((w["obj"], str(w["expected"]), w["setter"]), []).append(w)
    lines = []
    for (obj, expected, setter), ws in groups.items():
        cur = {str(w["current"]) for w in ws}
        lines.append(f"{core_ranges([w['core'] for w in ws])} wait on {obj} (expects {expected}, now "
                     f"{'/'.join(sorted(cur))}); released by {setter or '?'}")
    return lines
