"""Happens-before read check: every kernel read of window data must be ordered after the put that wrote it.

On hardware a missing or early wait shows up as sporadic precision errors: whether the data happened to
arrive decides the numbers. Here the check is made on the synchronization structure, not on timing, so it
reports the same race on every run, whether or not the data arrived in time.

Each core's synchronization log is recorded from the event stream in program order (flag Sets and the Waits
consuming them, puts, quiets, TeamBarrier stores and observations, signal posts and waits, HCCL Waits, GM
reads of windows). At the end of a launch the ranks exchange their logs (collective), vector clocks are
computed over the happens-before graph, and every read of window bytes written by a put or an HCCL repeat
(SPEC §3.2) of this launch is checked: READ_BEFORE_WAIT (the completion or the proving Wait is not before
the read), READ_OVERWRITTEN (reused space: the all-gather slot ring), READ_UNWRITTEN (poisoned windows,
`Window.poison()`), READ_NOT_VISIBLE (the content check: the transport let the guarding signal or quiet
overtake the data, MPI-4.1 §12.7); signals are paired too (UNWAITED_SIGNAL). Reports name rank, core, byte
range, the put or HCCL task and what is missing. The record and verdict tables: docs/protocols.md
"Happens-before read check".
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from collections import defaultdict
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mc2emu.check.happens_before_clocks import CLOCK_DTYPE, _Clocks, gc_paused
from mc2emu.check.happens_before_records import (
    _AcquireRec,
    _CoreLog,
    _Exchange,
    _HcclPutRec,
    _LaunchBeginRec,
    _LaunchEndRec,
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
from mc2emu.check.read_content import ReadContent, _byte_mask, _extent, _PutIndex, _ReadContents, _span
from mc2emu.comm.hccl_server import SERVER_CORE
from mc2emu.comm.hccl_task import HCCL_SUCCESS
from mc2emu.comm.shmem import SignalOp
from mc2emu.runtime.comm_events import BarrierObserve, BarrierStore, HcclWait, Put, Quiet, SignalPost, SignalWait
from mc2emu.runtime.events import Event, FlagConsume, FlagRaise, FlagSet, GmAccess, GmRead, GmWrite
from mc2emu.runtime.gm import POISON_BYTE
from mc2emu.runtime.hazards import Hazard

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mc2emu.runtime.device import Device

# Reports per launch and rank: one race usually shows on many tiles; the first ones say it all.
MAX_REPORTS = 8
WINDOW_PREFIX = "win:"
SERVER_CORES = (SERVER_CORE,)   # puts of the HCCL server: checked by the hcomm policy instead
# The classes `__call__` records (the checker is subscribed to these only: Mmad, Vector, ... never reach it).
RECORDED_KINDS: tuple[type[Event], ...] = (GmRead, GmWrite, HcclWait, FlagSet, FlagRaise, FlagConsume, Put, Quiet,
                                           SignalPost, SignalWait, BarrierStore, BarrierObserve)
# GM accesses are recorded for windows only (reads of other GM cannot race a put; only windows are poisoned).
WINDOW_ACCESSES: dict[type[GmAccess], str] = {GmAccess: WINDOW_PREFIX}


class HappensBeforeChecker:
    """An EventBus observer on one rank plus the collective end-of-launch check."""

    def __init__(self, device: Device, comm: Any, *, stream: bool = False) -> None:
        """`stream`: the checker spans back-to-back launches between two `finish()` calls (a `Communicator`):
        each core's records are kept per launch (`AIC0@3`), and every core of a rank's launch N + 1 starts
        after every core of its launch N ended (stream order: no host barrier between them)."""
        self.device = device
        self.stream = stream
        self._set_keys: dict[tuple[str, int], str] = {}   # stream mode: (core, set_id) -> the log it is in
        self._key_of: dict[int, str] = {}                 # stream mode: id(log) -> its key
        self.comm = comm.Dup()   # its own communicator: its collectives never match a caller's
        self.rank = self.comm.Get_rank()
        self._lock = threading.Lock()
        self._logs: dict[str, _CoreLog] = defaultdict(_CoreLog)
        self._tokens: dict[int, tuple[tuple[str, int], ...]] = {}
        self._windows: dict[str, Any] = {}                       # window name -> its GM allocation
        self._local_writes: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self._local: dict[str, list[tuple[int, int]]] = {}       # the finished launch's local writes
        # Poisoned windows: name -> (bytes written since creation, local writes not folded in yet).
        self._poisoned: dict[str, tuple[np.ndarray, list[tuple]]] = {}
        self._contents = _ReadContents()
        self._unsubscribe = device.events.subscribe(self, RECORDED_KINDS, prefixes=WINDOW_ACCESSES)

    # -- recording -----------------------------------------------------------------------------------
    def __call__(self, e: Event) -> None:
        if isinstance(e, GmRead):
            if not e.buffer.startswith(WINDOW_PREFIX):
                return
            log = self._log(e.core)
            window = e.buffer[len(WINDOW_PREFIX):]
            alloc = e.alloc
            self._windows[window] = alloc
            log.reads.append((len(log.sync), window, e.lo, e.hi, self._contents.of(window, e)))
            if alloc is not None and alloc.poisoned:
                self._cover(window, alloc.nbytes)
            log.exact.append((window, e.offset, e.shape, e.strides, e.item, len(log.hwaits)))
        elif isinstance(e, GmWrite):
            window = e.buffer[len(WINDOW_PREFIX):]
            if e.buffer.startswith(WINDOW_PREFIX):
                with self._lock:
                    self._local_writes[window].append((e.lo, e.hi))
            if e.alloc is not None and e.alloc.poisoned:
                self._cover(window, e.alloc.nbytes).append(("write", e.offset, e.shape, e.strides, e.item))
        elif isinstance(e, HcclWait):
            if e.rc == HCCL_SUCCESS:
                self._log(e.core).hwaits.append((e.handle, int(cast(int, e.waits)), int(cast(int, e.total)),
                                                  e.follows_working))
        elif isinstance(e, FlagSet):
            log = self._log(e.core)
            log.sync.append(_SetRec(e.set_id))
            if self.stream:
                self._set_keys[(e.core, e.set_id)] = self._key_of.get(id(log), e.core)
        elif isinstance(e, FlagConsume):
            self._log(e.core).sync.append(_AcquireRec(e.token))
        elif isinstance(e, FlagRaise):
            sources = e.sources
            if self.stream:   # the Sets' logs are per launch: name each source by its log
                keys = self._set_keys
                sources = tuple((keys.get((c, sid), c), sid) for c, sid in sources)
            with self._lock:
                self._tokens[e.token] = sources
        elif isinstance(e, Put):
            if e.core in SERVER_CORES:
                # An HCCL task's repeat: checked against the reading core's HCCL Waits (not a sync record).
                self._log(e.core).sync.append(_HcclPutRec(e.pe, e.window, e.offset, e.offset + e.nbytes,
                                                           cast(int, e.handle), cast(int, e.repeat)))
                return
            self._log(e.core).sync.append(_PutRec(e.pe, e.window, e.offset, e.offset + e.nbytes))
        elif isinstance(e, Quiet):
            self._log(e.core).sync.append(_QuietRec())
        elif isinstance(e, SignalPost):
            self._log(e.core).sync.append(_PostRec(e.pe, e.window, e.offset, e.op.value, e.signal))
        elif isinstance(e, SignalWait):
            self._log(e.core).sync.append(_SigWaitRec(e.window, e.offset, e.observed))
        elif isinstance(e, BarrierStore):
            self._log(e.core).sync.append(_StoreRec(e.barrier, e.slot, e.value))
        elif isinstance(e, BarrierObserve):
            self._log(e.core).sync.append(_ObserveRec(e.barrier, e.peer, e.slot, e.value))

    def _log(self, core: str) -> _CoreLog:
        """The log `core`'s records go to: in stream mode one per launch, opened by its `_LaunchBeginRec` (the
        HCCL server is one thread across launches: one log)."""
        launch = self.device.current
        if not self.stream or launch is None or core in SERVER_CORES:
            return self._logs[core]
        key = f"{core}@{launch.index}"
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key]
            self._key_of[id(log)] = key
            log.sync.append(_LaunchBeginRec(launch.index))
        return log

    def _cover(self, window: str, nbytes: int) -> list[tuple]:
        """Local writes into a poisoned window (kept across launches: a window lives longer than one)."""
        with self._lock:
            if window not in self._poisoned:
                self._poisoned[window] = (np.zeros(nbytes, dtype=bool), [])
            return self._poisoned[window][1]

    def close(self) -> None:
        self._unsubscribe()
        with contextlib.suppress(Exception):
            self.comm.Free()

    # -- the collective check -----------------------------------------------------------------------------
    def finish(self) -> int:
        """Collective over the ranks of `comm`: check this launch's reads; returns the number of reports.
        Call it only after a deadline-guarded barrier proved every rank finished the launch. The cyclic
        garbage collector is paused meanwhile: the check builds no cycles, and its many small records made
        every generation-2 pass walk the whole log (about a third of the check's time)."""
        with gc_paused():
            return self._finish()

    def _finish(self) -> int:
        if self.stream:
            for key, log in self._logs.items():
                if "@" in key:
                    log.sync.append(_LaunchEndRec())
        logs = {core: log.sync for core, log in self._logs.items()}
        # each rank gets every rank's logs without the puts into other ranks
        everyone = self.comm.alltoall([(part, self._tokens)
                                       for part in logs_for_each_rank(logs, self.comm.Get_size(), self.rank)])
        mine = self._logs
        reads = {core: log.reads for core, log in mine.items() if log.reads}
        self._logs = defaultdict(_CoreLog)
        self._tokens = {}
        self._set_keys, self._key_of = {}, {}
        self._local, self._local_writes = self._local_writes, defaultdict(list)
        self._contents = _ReadContents()
        unwaited = self._unwaited_signals(everyone)
        n = unwaited + self._check_unwritten(everyone, mine) + self._check_hccl(everyone, mine)
        if not reads:
            return n
        return n + self._check(everyone, reads)

    # -- poisoned windows: reads of bytes nobody wrote ---------------------------------------------------
    def _check_unwritten(self, everyone: _Exchange,
                         mine: dict[str, _CoreLog]) -> int:
        if not self._poisoned:
            return 0
        me = self.rank
        puts_in: dict[str, list[tuple[int, int]]] = defaultdict(list)   # one pass over every rank's records
        for logs, _ in everyone:
            for sync in logs.values():
                for rec in sync:
                    if (type(rec) is _PutRec or type(rec) is _HcclPutRec) and rec.pe == me:
                        puts_in[rec.window].append((rec.lo, rec.hi))
        for window, (covered, writes) in self._poisoned.items():
            for _, offset, shape, strides, item in writes:
                _byte_mask(covered, offset, shape, strides, item)[...] = True
            writes.clear()
            for lo, hi in puts_in.get(window, ()):
                covered[lo: hi] = True
        # Host time only: a window every byte of which is covered has no unwritten read, and a core's read of a
        # place it read before (a tile loop re-reads its operand rows) has the answer of that first read.
        full = {window: bool(covered.all()) for window, (covered, _) in self._poisoned.items()}
        reported = 0
        for core, log in sorted(mine.items()):
            seen: set[str] = set()
            asked: set[tuple] = set()
            for window, offset, shape, strides, item, _ in log.exact:
                state = self._poisoned.get(window)
                if state is None or window in seen or full[window]:
                    continue
                place = (window, offset, shape, strides, item)
                if place in asked:
                    continue
                asked.add(place)
                unwritten = ~_byte_mask(state[0], offset, shape, strides, item)
                if not unwritten.any():
                    continue
                seen.add(window)
                lo, hi, count = _extent(unwritten, offset, strides)
                self.device.hazards.report(
                    Hazard.READ_UNWRITTEN, core,
                    f"read of window '{window}' bytes [{lo}, {hi}) includes {count} byte(s) that no put, HCCL "
                    f"task or local write reached since the window was created (poison {POISON_BYTE:#04x}: "
                    f"NaN in the result); e.g. an address wrong for the mode",
                    window=window, lo=lo, hi=hi, count=count)
                reported += 1
                if reported >= MAX_REPORTS:
                    return reported
        return reported

    # -- HCCL tasks: reads against the Waits that prove them ----------------------------------------------
    def _check_hccl(self, everyone: _Exchange, mine: dict[str, _CoreLog]) -> int:
        me = self.rank
        hputs = [(rec.window, rec.lo, rec.hi, rec.handle, rec.repeat, r) for r, (logs, _) in enumerate(everyone)
                 for rec in logs.get(SERVER_CORE, ()) if isinstance(rec, _HcclPutRec) and rec.pe == me]
        if not hputs:
            return 0
        working = next((log.hwaits for core, log in mine.items()
                        if log.hwaits and not log.hwaits[0][3]), [])
        # proved_after[k]: handle -> repeats proved by the working block's first k Waits.
        proved_after: list[dict[int, int]] = [{}]
        for h, waits, _, _ in working:
            nxt = dict(proved_after[-1])
            nxt[h] = max(nxt.get(h, 0), waits)
            proved_after.append(nxt)
        reported = 0
        for core in sorted(mine):
            log = mine[core]
            # proved[i]: handle -> repeats proved by this core's first i successful Waits.
            proved: list[dict[int, int]] = [{}]
            for h, waits, total, follows in log.hwaits:
                nxt = dict(proved[-1])
                if follows:
                    for hh, rr in proved_after[min(total, len(proved_after) - 1)].items():
                        nxt[hh] = max(nxt.get(hh, 0), rr)
                else:
                    nxt[h] = max(nxt.get(h, 0), waits)
                proved.append(nxt)
            seen: set[tuple[int, int]] = set()
            for window, offset, shape, strides, item, pos in log.exact:
                lo, hi = _span(offset, shape, strides, item)
                todo = [p for p in hputs if p[0] == window and p[2] > lo and p[1] < hi
                        and proved[pos].get(p[3], 0) <= p[4] and (p[3], p[4]) not in seen]
                if not todo:
                    continue
                touched = np.zeros(hi, dtype=bool)
                _byte_mask(touched, offset, shape, strides, item)[...] = True
                for _, plo, phi, h, r, src in todo:
                    if (h, r) in seen or not touched[plo:phi].any():
                        continue
                    seen.add((h, r))
                    waited = sum(1 for w in log.hwaits[:pos] if w[0] == h and not w[3])
                    missing = (f"the Wait proving it is the {r + 1}-th Wait on handle {h}; {core} had waited "
                               f"handle {h} {waited} time(s) before this read" if not any(w[3] for w in log.hwaits)
                               else f"{core} is a CCU non-working core: its Waits prove what the working "
                                    f"block's first Waits proved, and none of the {pos} before this read covers "
                                    f"repeat {r} of handle {h}")
                    self.device.hazards.report(
                        Hazard.READ_BEFORE_WAIT, core,
                        f"read of window '{window}' bytes [{max(lo, plo)}, {min(hi, phi)}) before the HCCL Wait "
                        f"that orders it: they are written by HCCL task handle {h} repeat {r} (the put from "
                        f"rank {src}'s server); {missing} (the data may or may not have arrived: on hardware, "
                        f"sporadic wrong numbers)",
                        window=window, lo=max(lo, plo), hi=min(hi, phi), handle=h, repeat=r, put_rank=src,
                        put_core=SERVER_CORE)
                    reported += 1
                    if reported >= MAX_REPORTS:
                        return reported
        return reported

    def _written_once(self, puts: list[tuple]) -> set[tuple[str, int, int]]:
        """(window, lo, hi) of the puts into this rank whose bytes no other put of the launch and no local
        write overlaps: their bytes are still in the window at the end of the launch."""
        by_window: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for pwin, plo, phi, *_ in puts:
            by_window[pwin].append((plo, phi))
        once = set()
        for pwin, spans in by_window.items():
            spans.sort()
            local = self._local.get(pwin, [])
            for i, (plo, phi) in enumerate(spans):
                if (i > 0 and spans[i - 1][1] > plo) or (i + 1 < len(spans) and spans[i + 1][0] < phi):
                    continue
                if any(lo < phi and hi > plo for lo, hi in local):
                    continue
                once.add((pwin, plo, phi))
        return once

    def _check_content(self, core: str, window: str, plo: int, phi: int, pr: int, pcore: str,
                       got: ReadContent, verdicts: dict[tuple[int, int, int], tuple[int, int, int, int]]) -> int:
        """The bytes a read returned inside put [plo, phi) against the window's (final) bytes there. Reads that
        returned the same bytes at the same place share one `ReadContent`, so their verdict is computed once
        (`verdicts`) and reported for each reading core."""
        alloc = self._windows.get(window)
        if alloc is None:
            return 0
        key = (id(got), plo, phi)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = got.compare(alloc.buf, plo, phi)
        diff, count, lo, hi = verdict
        if not diff:
            return 0
        self.device.hazards.report(
            Hazard.READ_NOT_VISIBLE, core,
            f"read of window '{window}' bytes [{lo}, {hi}) is ordered "
            f"after the completion of the put from rank {pr} {pcore} that writes them, yet {diff} of "
            f"{count} bytes differ from what that put wrote: the put was not visible when the "
            f"signal / quiet guarding it was seen (the MPI transport broke RMA ordering or completion)",
            window=window, lo=plo, hi=phi, put_rank=pr, put_core=pcore, differing=diff)
        return 1

    def _unwaited_signals(self, everyone: _Exchange) -> int:
        """Pairing at launch end: every signal posted to this rank must be waited up to its final value."""
        me = self.rank
        posted: dict[tuple[str, int], list[tuple[str, int, int, str]]] = defaultdict(list)
        for r, (logs, _) in enumerate(everyone):
            for core, sync in logs.items():
                for rec in sync:
                    if isinstance(rec, _PostRec) and rec.pe == me:
                        posted[(rec.window, rec.offset)].append((rec.op, rec.signal, r, core))
        seen: dict[tuple[str, int], int] = {}
        for sync in everyone[me][0].values():
            for rec in sync:
                if isinstance(rec, _SigWaitRec):
                    seen[(rec.window, rec.offset)] = max(seen.get((rec.window, rec.offset), -1), rec.observed)
        n = 0
        for (window, off), ps in posted.items():
            adds = sum(v for op, v, _, _ in ps if op == SignalOp.ADD.value)
            sets = [v for op, v, _, _ in ps if op == SignalOp.SET.value]
            final = max([*sets, 0]) + adds if sets else adds
            got = seen.get((window, off))
            if got is None or got < final:
                senders = sorted({f"rank {r} {c}" for _, _, r, c in ps})
                self.device.hazards.report(
                    Hazard.UNWAITED_SIGNAL, "launch",
                    f"signal '{window}'+{off:#x}: {len(ps)} post(s) from {', '.join(senders)} reach {final}, "
                    + ("never waited on" if got is None else f"but the waits only saw {got}")
                    + " at launch end (a skipped drain?)", window=window, offset=off, posted=final, waited=got)
                n += 1
        return n

    def _check(self, everyone: _Exchange, reads: dict[str, list]) -> int:
        entities = [(r, core) for r, (logs, _) in enumerate(everyone) for core in sorted(logs)]
        # Sync edges: event (r, core, pos) <- list of source events.
        set_pos: dict[tuple[int, str, int], int] = {}
        stores: dict[tuple[int, str, int, int], tuple[int, str, int]] = {}
        for r, (logs, _) in enumerate(everyone):
            for core, sync in logs.items():
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _SetRec):
                        set_pos[(r, core, rec.set_id)] = pos
                    elif isinstance(rec, _StoreRec):
                        stores[(r, rec.barrier, rec.slot, rec.value)] = (r, core, pos)
        posts: dict[tuple[int, str, int], list[tuple[tuple[int, str, int], str, int]]] = defaultdict(list)
        for r, (logs, _) in enumerate(everyone):
            for core, sync in logs.items():
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _PostRec):
                        posts[(rec.pe, rec.window, rec.offset)].append(((r, core, pos), rec.op, rec.signal))
        preds: dict[tuple[int, str, int], Sequence[tuple[int, str, int]]] = {}
        # A round's sources arrive as one tuple shared by all its targets (cross_core._partial; the exchange
        # keeps the sharing): its source events are resolved once per (rank, tuple), into one tuple that every
        # target's acquisition shares and _Clocks joins once.
        round_nodes: dict[tuple[int, int], tuple[tuple[int, str, int], ...]] = {}
        for r, (logs, tokens) in enumerate(everyone):
            for core, sync in logs.items():
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _AcquireRec):
                        srcs = tokens.get(rec.token, ())
                        nodes = round_nodes.get((r, id(srcs)))
                        if nodes is None:
                            nodes = round_nodes[(r, id(srcs))] = tuple(
                                (r, src_core, sp) for src_core, sid in srcs
                                if (sp := set_pos.get((r, src_core, sid))) is not None)
                        if nodes:
                            preds[(r, core, pos)] = nodes
                    elif isinstance(rec, _SigWaitRec):
                        # Every post to the slot may have contributed to the value seen (conservative: a race
                        # between posts is not reported, a wait is never wrongly unordered).
                        posted_here = [node for node, _, _ in posts.get((r, rec.window, rec.offset), ())]
                        if self.stream:   # posts of the same launch (another launch's: the cross-launch check)
                            posted_here = [n for n in posted_here if _launch_key(n[1]) == _launch_key(core)]
                        if posted_here:
                            preds[(r, core, pos)] = posted_here
                    elif isinstance(rec, _ObserveRec):
                        src = stores.get((rec.peer, rec.barrier, rec.slot, rec.value))
                        if src is not None:
                            preds[(r, core, pos)] = [src]
        if self.stream:
            _stream_order(everyone, preds)
        me = self.rank
        # The components read below: the cores that put into this rank and this rank's reading cores (a clock
        # over every (rank, core) grows as merges x R x cores on each rank).
        tracked = {(r, core) for r, (logs, _) in enumerate(everyone) for core, sync in logs.items()
                   if any(isinstance(rec, _PutRec) and rec.pe == me for rec in sync)}
        tracked.update((me, core) for core in reads)
        clocks = _Clocks(entities, {(r, core): len(sync) for r, (logs, _) in enumerate(everyone)
                                    for core, sync in logs.items()}, preds,
                         tracked=[ent for ent in entities if ent in tracked],
                         chains=launch_chains(entities) if self.stream else ())
        # Puts into this rank, with the position of their completing quiet.
        puts = []
        for r, (logs, _) in enumerate(everyone):
            for core, sync in logs.items():
                # A put completes at the core's next quiet, or at its next signal post to the same rank
                # (put_signal: the data lands before the signal changes).
                done_at = [p for p, rec in enumerate(sync)
                           if isinstance(rec, _QuietRec) or (isinstance(rec, _PostRec) and rec.pe == me)]
                for pos, rec in enumerate(sync):
                    if isinstance(rec, _PutRec) and rec.pe == me:
                        i = bisect.bisect_right(done_at, pos)
                        puts.append((rec.window, rec.lo, rec.hi, r, core, pos,
                                     done_at[i] if i < len(done_at) else None))
        reported = 0
        seen: set[tuple] = set()
        once = self._written_once(puts)
        index_puts = _PutIndex(puts)
        verdicts: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}
        zero = np.zeros(clocks.n, dtype=CLOCK_DTYPE)
        vc, vc_of = zero, None
        for core, rlist in reads.items():
            ent = (me, core)
            reader_tracked = clocks.slot(ent) is not None
            for sync_pos, window, lo, hi, got in rlist:
                if (ent, sync_pos) != vc_of:   # a core's reads between two sync events share one clock
                    vc = clocks.at(ent, sync_pos - 1) if 0 < sync_pos <= clocks.swept(ent) else zero
                    vc_of = (ent, sync_pos)
                before: list[tuple] = []
                pending: list[tuple[tuple, bool]] = []
                for put in index_puts.overlapping(window, lo, hi):
                    pwin, plo, phi, pr, pcore, ppos, quiet = put
                    done = clocks.stamp((pr, pcore), quiet) if quiet is not None else None
                    if done is not None and vc[done[0]] >= done[1]:
                        before.append(put)
                        if got is not None and (pwin, plo, phi) in once:
                            reported += self._check_content(core, window, plo, phi, pr, pcore, got, verdicts)
                            if reported >= MAX_REPORTS:
                                return reported
                        continue
                    after = (reader_tracked and ppos < clocks.swept((pr, pcore))
                             and clocks.happens_before(ent, sync_pos, (pr, pcore), ppos))
                    pending.append((put, after))
                for (_pwin, plo, phi, pr, pcore, _ppos, quiet), after in pending:
                    a, b = max(lo, plo), min(hi, phi)
                    prior = [q for q in before if q[1] < b and q[2] > a]
                    if after and prior:
                        continue   # a later reuse of bytes this read saw, ordered after the read (its release)
                    if prior and self.stream and _launch_key(pcore) != _launch_key(core):
                        continue   # another launch's reuse: the cross-launch check names it (WRITE_AFTER_READ_...)
                    key = (core, pr, pcore, bool(prior))
                    if key in seen:
                        continue
                    seen.add(key)
                    place = self._place(window, a)
                    if prior:
                        q = prior[-1]
                        self.device.hazards.report(
                            Hazard.READ_OVERWRITTEN, core,
                            f"read of window '{window}' bytes [{a}, {b}){place} is ordered after the put from rank "
                            f"{q[3]} {q[4]} that it reads, but the put from rank {pr} {pcore} that writes the same "
                            f"bytes again is not ordered after this read: the bytes may be overwritten before "
                            f"{core} has read them (window space reused before its reader released it; on hardware, "
                            f"sporadic wrong numbers)",
                            window=window, lo=a, hi=b, put_rank=pr, put_core=pcore, prior_rank=q[3],
                            prior_core=q[4], place=place.strip(" ()"))
                    else:
                        missing = ("the put is never completed by a quiet or a signal" if quiet is None else
                                   f"no wait of {core} is ordered after the completion of that put (rank {pr} "
                                   f"{pcore}'s event #{quiet}: its quiet or signal)")
                        self.device.hazards.report(
                            Hazard.READ_BEFORE_WAIT, core,
                            f"read of window '{window}' bytes [{a}, {b}){place} is not ordered after the put from "
                            f"rank {pr} {pcore} that writes them: {missing} (the data may or may not have arrived: "
                            f"on hardware, sporadic wrong numbers)",
                            window=window, lo=a, hi=b, put_rank=pr, put_core=pcore)
                    reported += 1
                    if reported >= MAX_REPORTS:
                        return reported
        return reported

    def _place(self, window: str, offset: int) -> str:
        """` (<protocol place>)` of a window byte when the window's owner describes its layout, else ''."""
        describe = getattr(self._windows.get(window), "describe", None)
        text = describe(offset) if describe is not None else ""
        return f" ({text})" if text else ""


def _launch_key(core: str) -> str:
    """The launch part of a stream-mode log key (`AIC0@3` -> "3"; "" for a log kept across launches)."""
    return core.rpartition("@")[2] if "@" in core else ""


def _stream_order(everyone: _Exchange, preds: dict[tuple[int, str, int], Sequence[tuple[int, str, int]]]) -> None:
    """Stream order on each rank: a core's `_LaunchBeginRec` of launch L follows the `_LaunchEndRec` of every
    core of the rank's latest earlier launch (transitively, of all earlier ones)."""
    for r, (logs, _) in enumerate(everyone):
        ends: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for key, sync in logs.items():
            if sync and isinstance(sync[0], _LaunchBeginRec) and isinstance(sync[-1], _LaunchEndRec):
                ends[sync[0].launch].append((r, key, len(sync) - 1))
        launches = sorted(ends)
        for before, after in itertools.pairwise(launches):
            srcs = tuple(ends[before])
            for _, key, _ in ends[after]:
                preds[(r, key, 0)] = srcs
