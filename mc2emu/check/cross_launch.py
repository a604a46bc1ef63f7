"""Cross-launch check: the hazards that live between back-to-back launches on windows that outlive them.

A model calls one MC2 kernel per layer on a stream, with no barrier between ranks: what launch N leaves in
a window, a signal word or a flag counter is what launch N+1 starts from, on its own rank and on its peers.
`CrossLaunchChecker` observes one rank's event stream over any number of launches (each event carries the
launch it ran in: `device.current.index`), and `finish()` (collective, once after the loop) builds vector
clocks over every launch of every rank (`_Clocks`): program order, flag rounds, signal posts to waits of the
same launch, TeamBarrier stores to observations, and stream order (every core of launch N+1 of a rank starts
after every core of its launch N ended; `host_barrier()` adds a host barrier the harness really has).
Reports, each naming both launches, the rank, the core, the window and the byte range:
WRITE_AFTER_READ_ACROSS_LAUNCH (a put of launch N+1 into bytes a read of launch N is not ordered before),
STALE_READ (a read of payload bytes last written by an earlier launch, not rewritten before it in its own),
STALE_FLAG (a CrossCoreWaitFlag consuming a round Set in an earlier launch; a signal wait that counts left by
earlier launches, not cleared by a reset ordered before it, already satisfy), LOST_SIGNAL (a local reset of
a signal / status word not ordered against a post to it: the post can land first and be erased) and
LEFT_AT_LOOP_END (flag rounds and signal posts no wait consumed by the end of the loop). CONTROL windows
(`MemRole.CONTROL`: counters, status words) are exempt from the two payload rules. HCCL server puts are
two-sided collectives: they cover bytes for STALE_READ and are not checked for WRITE_AFTER_READ.
Protocol-level reading of every collective kernel: docs/hazards.md "Between launches".
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from mc2emu.check.happens_before_clocks import _Clocks, gc_paused
from mc2emu.check.happens_before_records import (
    _AcquireRec,
    _HcclPutRec,
    _ObserveRec,
    _PostRec,
    _PutRec,
    _QuietRec,
    _SetRec,
    _SigWaitRec,
    _StoreRec,
    launch_chains,
    logs_for_each_rank,
)
from mc2emu.check.read_content import _byte_mask, _PutIndex
from mc2emu.comm.hccl_server import SERVER_CORE
from mc2emu.comm.shmem import Cmp, SignalOp
from mc2emu.runtime.comm_events import BarrierObserve, BarrierStore, Put, Quiet, SignalPost, SignalWait
from mc2emu.runtime.events import (
    Event,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmAccess,
    GmRead,
    GmWrite,
    LaunchBegin,
    LaunchEnd,
)
from mc2emu.runtime.gm import MemRole
from mc2emu.runtime.hazards import Hazard

# Reports per hazard name and rank: a protocol fault shows on every tile and launch; the first ones say it all.
MAX_REPORTS = 8
WINDOW_PREFIX = "win:"
STREAM = "stream"   # the per-rank entity of stream order: launch ends and host barriers
HOST_CORE = "host"
RECORDED_KINDS: tuple[type[Event], ...] = (GmRead, GmWrite, FlagSet, FlagRaise, FlagConsume, Put, Quiet,
                                           SignalPost, SignalWait, BarrierStore, BarrierObserve, LaunchBegin,
                                           LaunchEnd)
WINDOW_ACCESSES: dict[type[GmAccess], str] = {GmAccess: WINDOW_PREFIX}


class _BeginRec(NamedTuple):
    """A core's first record in a launch: after the rank's stream position at the launch's start."""

    launch: int


class _EndRec(NamedTuple):
    """A core's last record in a launch (everything it did happens before the launch's end)."""


class _JoinRec(NamedTuple):
    """Stream: launch `launch` ended on this rank (every core's end happens before)."""

    launch: int


class _HostArriveRec(NamedTuple):
    n: int


class _HostDepartRec(NamedTuple):
    """Stream: the n-th host barrier returned (after every rank's arrival at it)."""

    n: int


@dataclass
class _XLog:
    """One core's records in one launch: program-ordered sync records, and its window reads and writes with
    the position of the next sync record (`pos`) and an order among them (`side`)."""

    launch: int
    core: str
    sync: list[Any] = field(default_factory=list)
    # (pos, side, window, offset, shape, strides, item, lo, hi)
    reads: list[tuple] = field(default_factory=list)
    writes: list[tuple] = field(default_factory=list)
    waits: dict[int, tuple[Cmp, int]] = field(default_factory=dict)   # sync pos of a signal wait -> cmp, value


def _key(core: str, launch: int) -> str:
    return f"{core}@{launch}"


def _launch_of(key: str) -> int:
    return int(key.rsplit("@", 1)[1])


def _core_of(key: str) -> str:
    return key.rsplit("@", 1)[0]


def _clip_mask(lo: int, hi: int, offset: int, shape: tuple, strides: tuple, item: int) -> np.ndarray:
    """The bytes of a strided access inside [lo, hi), as a bool array over [lo, hi)."""
    if not shape or any(n == 0 for n in shape):
        return np.zeros(hi - lo, dtype=bool)
    end = offset + sum((n - 1) * st for n, st in zip(shape, strides, strict=True)) + item
    a, b = min(lo, offset), max(hi, end)
    buf = np.zeros(b - a, dtype=bool)
    _byte_mask(buf, offset - a, shape, strides, item)[...] = True
    return buf[lo - a: hi - a]


class CrossLaunchChecker:
    """An EventBus observer on one rank over a loop of launches, plus the collective check at its end."""

    def __init__(self, device: Any, comm: Any) -> None:
        self.device = device
        self.comm = comm.Dup()   # its own communicator: its collectives never match a caller's
        self.rank = self.comm.Get_rank()
        self._lock = threading.Lock()
        self._reset()
        self._unsubscribe = device.events.subscribe(self, RECORDED_KINDS, prefixes=WINDOW_ACCESSES)

    def _reset(self) -> None:
        self._logs: dict[str, _XLog] = {}
        self._stream: list[Any] = []
        self._begin_at: dict[int, int] = {}          # launch -> stream length when it began
        self._tokens: dict[int, tuple[tuple[str, int], ...]] = {}
        self._raised: dict[int, tuple[str, int, int]] = {}   # token -> (target, flag id, launch)
        self._consumed: set[int] = set()
        self._roles: dict[str, MemRole] = {}
        self._barriers = 0

    # -- recording -----------------------------------------------------------------------------------
    def _log(self, core: str) -> _XLog | None:
        cur = self.device.current
        if cur is None or core == HOST_CORE:
            return None
        key = _key(core, cur.index)
        log = self._logs.get(key)
        if log is None:
            with self._lock:
                log = self._logs.get(key)
                if log is None:
                    log = self._logs[key] = _XLog(cur.index, core, [_BeginRec(cur.index)])
        return log

    def __call__(self, e: Event) -> None:
        if isinstance(e, LaunchBegin):
            self._begin_at[e.index] = len(self._stream)
            return
        if isinstance(e, LaunchEnd):
            self._stream.append(_JoinRec(e.index))
            return
        log = self._log(e.core)
        if log is None:
            return
        if isinstance(e, GmAccess):
            window = e.buffer[len(WINDOW_PREFIX):]
            role = getattr(e.alloc, "role", None)
            if role is not None:
                self._roles[window] = role
            side = (len(log.sync), len(log.reads) + len(log.writes),
                    window, e.offset, e.shape, e.strides, e.item, e.lo, e.hi)
            (log.reads if isinstance(e, GmRead) else log.writes).append(side)
        elif isinstance(e, FlagSet):
            log.sync.append(_SetRec(e.set_id))
        elif isinstance(e, FlagConsume):
            log.sync.append(_AcquireRec(e.token))
            if e.token is not None:
                with self._lock:
                    self._consumed.add(e.token)
        elif isinstance(e, FlagRaise):
            with self._lock:
                self._tokens[e.token] = e.sources
                self._raised[e.token] = (e.target, e.fid, log.launch)
        elif isinstance(e, Put):
            if e.core == SERVER_CORE:
                log.sync.append(_HcclPutRec(e.pe, e.window, e.offset, e.offset + e.nbytes,
                                            int(e.handle or 0), int(e.repeat or 0)))
            else:
                log.sync.append(_PutRec(e.pe, e.window, e.offset, e.offset + e.nbytes))
        elif isinstance(e, Quiet):
            log.sync.append(_QuietRec())
        elif isinstance(e, SignalPost):
            log.sync.append(_PostRec(e.pe, e.window, e.offset, e.op.value, e.signal))
        elif isinstance(e, SignalWait):
            log.waits[len(log.sync)] = (Cmp(e.cmp), e.expected)
            log.sync.append(_SigWaitRec(e.window, e.offset, e.observed))
        elif isinstance(e, BarrierStore):
            log.sync.append(_StoreRec(e.barrier, e.slot, e.value))
        elif isinstance(e, BarrierObserve):
            log.sync.append(_ObserveRec(e.barrier, e.peer, e.slot, e.value))

    def host_barrier(self) -> None:
        """Record a host barrier over every rank that the harness ran between launches (call it on every rank
        right after the barrier): everything before it on any rank happens before everything after it."""
        self._stream.append(_HostArriveRec(self._barriers))
        self._stream.append(_HostDepartRec(self._barriers))
        self._barriers += 1

    def close(self) -> None:
        self._unsubscribe()
        with contextlib.suppress(Exception):
            self.comm.Free()

    # -- the collective check -------------------------------------------------------------------------
    def finish(self) -> int:
        """Collective over the ranks of `comm`, after a deadline-guarded barrier proved every rank finished its
        last launch: check the loop recorded since the last `finish`; returns the number of reports."""
        with gc_paused():
            return self._finish()

    def _finish(self) -> int:
        for log in self._logs.values():
            log.sync.append(_EndRec())
        mine = self._logs
        logs = {key: log.sync for key, log in mine.items()}
        # each rank gets every rank's logs without the puts into other ranks
        everyone = self.comm.alltoall([(part, self._stream, self._begin_at, self._tokens)
                                       for part in logs_for_each_rank(logs, self.comm.Get_size(), self.rank)])
        raised, consumed, roles = self._raised, self._consumed, self._roles
        self._reset()
        g = _Graph(everyone)
        n = self._stale_flags(g, mine, everyone[self.rank][3], raised)
        n += self._signals(g, mine)
        n += self._payload(g, mine, roles)
        n += self._left_flags(raised, consumed, everyone[self.rank][3], g)
        return n

    # -- the rules ----------------------------------------------------------------------------------------
    def _report(self, counts: dict[Hazard, int], hazard: Hazard, core: str, message: str, **details: Any) -> int:
        if counts[hazard] >= MAX_REPORTS:
            return 0
        counts[hazard] += 1
        self.device.hazards.report(hazard, core, message, **details)
        return 1

    def _stale_flags(self, g: _Graph, mine: dict[str, _XLog], tokens: dict, raised: dict) -> int:
        """A CrossCoreWaitFlag of launch L that took a round made of Sets of an earlier launch."""
        counts: dict[Hazard, int] = defaultdict(int)
        n = 0
        seen: set[tuple[str, int]] = set()
        for _key, log in sorted(mine.items()):
            for rec in log.sync:
                if not isinstance(rec, _AcquireRec) or rec.token is None:
                    continue
                srcs = tokens.get(rec.token, ())
                old = sorted({_launch_of(k) for core, sid in srcs
                              if (k := g.set_key[self.rank].get(sid)) is not None and _launch_of(k) < log.launch})
                if not old:
                    continue
                _target, fid, _ = raised.get(rec.token, (log.core, -1, log.launch))
                if (log.core, fid) in seen:
                    continue
                seen.add((log.core, fid))
                setters = ", ".join(sorted({core for core, _ in srcs}))
                n += self._report(
                    counts, Hazard.STALE_FLAG, log.core,
                    f"launch {log.launch}: CrossCoreWaitFlag of flag {fid} on {log.core} took a round Set by "
                    f"{setters} in launch {', '.join(map(str, old))}: a count left by an earlier launch (the "
                    f"counters persist across launches) passes this launch's wait before its own Set",
                    launch=log.launch, set_launch=old[-1], flag=fid)
        return n

    def _signals(self, g: _Graph, mine: dict[str, _XLog]) -> int:
        """Signal words of this rank: waits satisfiable by earlier launches' counts (STALE_FLAG), resets not
        ordered against a post (LOST_SIGNAL), posts no wait consumed (LEFT_AT_LOOP_END)."""
        me = self.rank
        counts: dict[Hazard, int] = defaultdict(int)
        n = 0
        posts = g.posts_to(me)                      # (window, offset) -> [(node, op, signal, launch)]
        if not posts:
            return 0
        waits: dict[tuple[str, int], list[tuple[tuple, int, _XLog, int]]] = defaultdict(list)
        for key, log in mine.items():
            for pos, rec in enumerate(log.sync):
                if isinstance(rec, _SigWaitRec):
                    waits[(rec.window, rec.offset)].append(((me, key), pos, log, rec.observed))
        resets: dict[tuple[str, int], list[tuple[tuple, int, int, _XLog]]] = defaultdict(list)
        for key, log in mine.items():
            for pos, side, window, *_rest, lo, hi in log.writes:
                for (pw, off) in posts:
                    if pw == window and lo < off + 8 and off < hi:
                        resets[(pw, off)].append(((me, key), pos, side, log))
        lost_seen: set[tuple] = set()
        for word, plist in sorted(posts.items()):
            window, off = word
            # STALE_FLAG: counts of earlier launches, not cleared by a reset ordered before the wait.
            for ent, q, log, observed in waits.get(word, ()):
                cmp, expected = log.waits[q]
                before = [(ex, sx) for ex, sx, _, _ in resets.get(word, ()) if g.side_before(ex, sx, ent, q)]
                left = [(node, op, sig, pl) for node, op, sig, pl in plist if pl < log.launch
                        and not any(g.before(node, ex, sx - 1) for ex, sx in before)]
                if not left:
                    continue
                sets = [sig for _, op, sig, _ in left if op == SignalOp.SET.value]
                value = (max(sets) if sets else 0) + sum(sig for _, op, sig, _ in left if op == SignalOp.ADD.value)
                if cmp.holds(value, expected):
                    launches = sorted({pl for *_, pl in left})
                    n += self._report(
                        counts, Hazard.STALE_FLAG, log.core,
                        f"launch {log.launch}: signal wait of {log.core} on '{window}'+{off:#x} "
                        f"({cmp.value} {expected}) is already satisfied by what launch(es) "
                        f"{', '.join(map(str, launches))} left there ({len(left)} post(s) from "
                        f"{', '.join(sorted({f'rank {nd[0]} {_core_of(nd[1])}' for nd, *_ in left}))}, value "
                        f"{value}) and no reset ordered before the wait cleared: it can pass before this launch's "
                        f"post (observed {observed})",
                        launch=log.launch, set_launch=launches[-1], window=window, lo=off, hi=off + 8)
            # LOST_SIGNAL: a reset neither before nor after a post of the word.
            for ex, sx, _, xlog in resets.get(word, ()):
                for node, _, _, pl in plist:
                    if g.before(node, ex, sx - 1) or g.side_before(ex, sx, node[:2], node[2]):
                        continue
                    tag = (xlog.core, word, node[0], pl, xlog.launch)
                    if tag in lost_seen:
                        continue
                    lost_seen.add(tag)
                    n += self._report(
                        counts, Hazard.LOST_SIGNAL, xlog.core,
                        f"launch {xlog.launch}: {xlog.core}'s reset of '{window}'+{off:#x} is not ordered "
                        f"against the post of rank {node[0]} {_core_of(node[1])} in launch {pl}: the post can "
                        f"land before the reset and be erased (the next wait on the word then hangs)",
                        launch=xlog.launch, post_launch=pl, post_rank=node[0], post_core=_core_of(node[1]),
                        window=window, lo=off, hi=off + 8)
            # LEFT_AT_LOOP_END: posts no wait (or reset) on the word is ordered after.
            consumers = [(ent, q) for ent, q, _, _ in waits.get(word, ())]
            erasers = [(ex, sx) for ex, sx, _, _ in resets.get(word, ())]
            left_posts = [(node, pl) for node, _, _, pl in plist
                          if not any(g.before(node, ent, q) for ent, q in consumers)
                          and not any(g.before(node, ex, sx - 1) for ex, sx in erasers)]
            if left_posts:
                launches = sorted({pl for _, pl in left_posts})
                n += self._report(
                    counts, Hazard.LEFT_AT_LOOP_END, "loop",
                    f"signal '{window}'+{off:#x}: {len(left_posts)} post(s) of launch(es) "
                    f"{', '.join(map(str, launches))} from "
                    f"{', '.join(sorted({f'rank {nd[0]} {_core_of(nd[1])}' for nd, _ in left_posts}))} are "
                    f"ordered before no wait or reset of the word by the end of the loop: the next launch "
                    f"starts from them", window=window, lo=off, hi=off + 8, launches=launches,
                    count=len(left_posts))
        return n

    def _payload(self, g: _Graph, mine: dict[str, _XLog], roles: dict[str, MemRole]) -> int:
        """Reads of payload windows against the puts and local writes of other launches."""
        me = self.rank
        counts: dict[Hazard, int] = defaultdict(int)
        n = 0
        writes = g.puts_to(me)   # (window, lo, hi, node, done_pos, launch, server)
        for key, log in mine.items():
            for pos, side, window, offset, shape, strides, item, lo, hi in log.writes:
                writes.append((window, lo, hi, ((me, key), pos, side), None, log.launch, "local", offset, shape,
                               strides, item))
        if not writes:
            return 0
        index = _PutIndex(writes)
        war_seen: set[tuple] = set()
        stale_seen: set[tuple] = set()
        for key, log in sorted(mine.items()):
            ent = (me, key)
            for pos, side, window, offset, shape, strides, item, lo, hi in log.reads:
                if roles.get(window) is MemRole.CONTROL or hi <= lo:
                    continue
                hits = index.overlapping(window, lo, hi)
                if not hits:
                    continue
                rmask = _clip_mask(lo, hi, offset, shape, strides, item)
                prev = np.zeros(hi - lo, dtype=bool)
                cur = np.zeros(hi - lo, dtype=bool)
                last_launch: dict[int, np.ndarray] = {}
                unordered_cur = []
                for w in hits:
                    _wwin, wlo, whi, node, done, wl, kind = w[:7]
                    a, b = max(lo, wlo), min(hi, whi)
                    if kind == "local":
                        wm = _clip_mask(lo, hi, *w[7:11])
                    else:
                        wm = np.zeros(hi - lo, dtype=bool)
                        wm[a - lo: b - lo] = True
                    if not (wm & rmask).any():
                        continue
                    if wl > log.launch and kind == "put" and not g.side_before(ent, pos, node[:2], node[2]):
                        tag = (log.core, log.launch, node[0], node[1])
                        if tag not in war_seen:
                            war_seen.add(tag)
                            n += self._report(
                                counts, Hazard.WRITE_AFTER_READ_ACROSS_LAUNCH, log.core,
                                f"launch {log.launch}: {log.core}'s read of window '{window}' bytes [{a}, {b}) is "
                                f"not ordered before the put of rank {node[0]} {_core_of(node[1])} in launch {wl} "
                                f"that writes them again: with no barrier between the launches the peer's next "
                                f"launch can overwrite bytes this launch is still reading",
                                launch=log.launch, put_launch=wl, put_rank=node[0], put_core=_core_of(node[1]),
                                window=window, lo=a, hi=b)
                        continue
                    if wl < log.launch:
                        prev |= wm
                        last_launch.setdefault(wl, np.zeros(hi - lo, dtype=bool))
                        last_launch[wl] |= wm
                    elif wl == log.launch:
                        if self._covers(g, ent, pos, side, node, done, kind):
                            cur |= wm
                        else:   # the writer (rank, core key): a put's node is (rank, key, pos)
                            unordered_cur.append((node[0] if kind == "local" else node[:2], wm))
                stale = rmask & prev & ~cur
                if not stale.any():
                    continue
                idx = np.nonzero(stale)[0]
                a, b = lo + int(idx[0]), lo + int(idx[-1]) + 1
                old = max(wl for wl, m in last_launch.items() if (m & stale).any())
                tag = (log.core, window, old, log.launch)
                if tag in stale_seen:
                    continue
                stale_seen.add(tag)
                racing = [wr for wr, m in unordered_cur if (m & stale).any()]
                also = (f"; a write of launch {log.launch} by rank {racing[0][0]} {_core_of(racing[0][1])} "
                        f"reaches them but is not ordered before the read" if racing else
                        f"; no write of launch {log.launch} reaches them")
                n += self._report(
                    counts, Hazard.STALE_READ, log.core,
                    f"launch {log.launch}: {log.core}'s read of window '{window}' bytes [{a}, {b}) "
                    f"({int(stale.sum())} byte(s)) returns what launch {old} wrote there{also}",
                    launch=log.launch, written_launch=old, window=window, lo=a, hi=b, count=int(stale.sum()))
        return n

    @staticmethod
    def _covers(g: _Graph, ent: tuple, pos: int, side: int, node: tuple, done: int | None, kind: str) -> bool:
        """A write of the reading launch is ordered before the read at (ent, pos, side)."""
        if kind == "server":
            return True   # the HCCL Waits that order it are the happens-before checker's
        if kind == "local":
            wen, wpos, wside = node
            if wen == ent:
                return (wpos, wside) < (pos, side)
            return g.side_before(wen, wpos, ent, pos - 1)
        return done is not None and g.before((node[0], node[1], done), ent, pos - 1)

    def _left_flags(self, raised: dict, consumed: set[int], tokens: dict, g: _Graph) -> int:
        """Flag rounds raised and never consumed by the end of the loop (when counters persist)."""
        if not self.device.platform.flags_persist_across_launches:
            return 0
        counts: dict[Hazard, int] = defaultdict(int)
        left: dict[tuple[str, int], list[int]] = defaultdict(list)
        for token, (target, fid, launch) in raised.items():
            if token not in consumed:
                left[(target, fid)].append(launch)
        n = 0
        for (target, fid), launches in sorted(left.items()):
            n += self._report(
                counts, Hazard.LEFT_AT_LOOP_END, target,
                f"flag {fid} of {target}: {len(launches)} round(s) raised in launch(es) "
                f"{', '.join(map(str, sorted(set(launches))))} are never consumed by the end of the loop: the "
                f"counter carries them into the next launch", flag=fid, count=len(launches),
                launches=sorted(set(launches)))
        return n


class _Graph:
    """The happens-before graph of a loop over every rank, and its vector clocks."""

    def __init__(self, everyone: list) -> None:
        self.everyone = everyone
        entities: list[tuple[int, str]] = []
        lengths: dict[tuple[int, str], int] = {}
        preds: dict[tuple[int, str, int], list[tuple[int, str, int]]] = {}
        self.set_key: list[dict[int, str]] = []
        posts: dict[tuple[int, str, int, int], list[tuple[int, str, int]]] = defaultdict(list)
        stores: dict[tuple[int, str, int, int], tuple[int, str, int]] = {}
        arrive: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for r, (logs, stream, begin_at, _tokens) in enumerate(everyone):
            set_key: dict[int, str] = {}
            set_pos: dict[int, int] = {}
            ends: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
            for key, sync in logs.items():
                ent = (r, key)
                entities.append(ent)
                lengths[ent] = len(sync)
                launch = _launch_of(key)
                ends[launch].append((r, key, len(sync) - 1))
                start = begin_at.get(launch, 0)
                if start > 0:
                    preds[(r, key, 0)] = [(r, STREAM, start - 1)]
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _SetRec):
                        set_key[rec.set_id] = key
                        set_pos[rec.set_id] = pos
                    elif isinstance(rec, _PostRec):
                        posts[(rec.pe, rec.window, rec.offset, launch)].append((r, key, pos))
                    elif isinstance(rec, _StoreRec):
                        stores[(r, rec.barrier, rec.slot, rec.value)] = (r, key, pos)
            self.set_key.append(set_key)
            entities.append((r, STREAM))
            lengths[(r, STREAM)] = len(stream)
            for pos, rec in enumerate(stream):
                if isinstance(rec, _JoinRec) and ends.get(rec.launch):
                    preds[(r, STREAM, pos)] = ends[rec.launch]
                elif isinstance(rec, _HostArriveRec):
                    arrive[rec.n].append((r, STREAM, pos))
            for key, sync in logs.items():
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _AcquireRec):
                        nodes = [(r, set_key[sid], set_pos[sid]) for _, sid in _tokens.get(rec.token, ())
                                 if sid in set_key]
                        if nodes:
                            preds[(r, key, pos)] = nodes
        for r, (logs, stream, _, _) in enumerate(everyone):
            for pos, rec in enumerate(stream):
                if isinstance(rec, _HostDepartRec):
                    preds[(r, STREAM, pos)] = arrive[rec.n]
            for key, sync in logs.items():
                launch = _launch_of(key)
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _SigWaitRec):
                        # The posts of the same launch to the word (conservative, as the read check's).
                        src = posts.get((r, rec.window, rec.offset, launch))
                        if src:
                            preds[(r, key, pos)] = src
                    elif isinstance(rec, _ObserveRec):
                        store = stores.get((rec.peer, rec.barrier, rec.slot, rec.value))
                        if store is not None:
                            preds[(r, key, pos)] = [store]
        # A core's logs of successive launches on one rank follow one another (stream order through the rank's
        # STREAM joins): one clock component per (rank, core), not per launch (clocks grew as launches^2).
        self.clocks = _Clocks(entities, lengths, preds, chains=launch_chains(entities))

    def before(self, a: tuple, b_ent: tuple, b_pos: int) -> bool:
        """Record a = (rank, key, pos) happens before (or is) record b_pos of entity b_ent."""
        a_ent, a_pos = a[:2], a[2]
        if b_pos < 0:
            return False
        if a_ent == b_ent:
            return a_pos <= b_pos
        if b_pos >= self.clocks.swept(b_ent):
            return False
        return self.clocks.happens_before(a_ent, a_pos, b_ent, b_pos)

    def side_before(self, a_ent: tuple, a_pos: int, b_ent: tuple, b_pos: int) -> bool:
        """A read or write of a_ent just before its record a_pos happens before record b_pos of b_ent."""
        return self.before((*a_ent, a_pos), b_ent, b_pos)

    def posts_to(self, me: int) -> dict[tuple[str, int], list[tuple[tuple, str, int, int]]]:
        out: dict[tuple[str, int], list[tuple[tuple, str, int, int]]] = defaultdict(list)
        for r, (logs, _, _, _) in enumerate(self.everyone):
            for key, sync in logs.items():
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _PostRec) and rec.pe == me:
                        out[(rec.window, rec.offset)].append(((r, key, pos), rec.op, rec.signal, _launch_of(key)))
        return out

    def puts_to(self, me: int) -> list[tuple]:
        """(window, lo, hi, (rank, key, pos), completion pos, launch, kind) of the puts into rank `me`; a put
        completes at its core's next quiet or next signal post to `me`."""
        out: list[tuple] = []
        for r, (logs, _, _, _) in enumerate(self.everyone):
            for key, sync in logs.items():
                launch = _launch_of(key)
                done: int | None = None
                for pos in range(len(sync) - 1, -1, -1):
                    rec = sync[pos]
                    if isinstance(rec, _QuietRec) or (isinstance(rec, _PostRec) and rec.pe == me):
                        done = pos
                    elif isinstance(rec, _PutRec) and rec.pe == me:
                        out.append((rec.window, rec.lo, rec.hi, (r, key, pos), done, launch, "put"))
                    elif isinstance(rec, _HcclPutRec) and rec.pe == me:
                        out.append((rec.window, rec.lo, rec.hi, (r, key, pos), None, launch, "server"))
        return out
