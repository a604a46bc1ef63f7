"""Virtual-time replay: the recorded events of every rank as a dependency graph, timed by a `CostModel`.

Every recorded event that costs time or orders others becomes a node with a modelled duration; its start is
the latest end of its predecessors (plus an edge latency): the core's issue frontier and its pipes (MTE2,
MMAD, FIXPIPE, MTE3, with L1 double buffering), flag rounds, puts queued FIFO on the source's egress and the
target's ingress link, quiet / signal / TeamBarrier edges, joins (CrossCore, soft SyncAll, barrier_all, the
host barrier of a launch) and HCCL repeats before the Waits that prove them. The table of each node's
predecessors: docs/predict.md "The replay".

Assumptions of the replay (see docs/predict.md): waits block the whole core (not only their pipe); L1->L0
(MTE1) moves are hidden under the cube (L0 ping-pong) and are not recorded; hard SyncAll is replayed
through the flags it is made of; a put's source read is the UDMA engine's, not the core's MTE2 (a GM
read immediately followed on the same core by a put of the same size is folded into the put).

`stream=True` (a `Communicator`'s launches, no host barrier between them): only the first launch is joined
across ranks, a rank's launch N + 1 starts when its launch N ends (ranks drift; `mc2emu.predict.loop`).

Every queue order is the recorded one, so the graph is fixed and times are a max-plus function of the
durations: shortening any duration (more bandwidth) never delays any node, lengthening (more bytes) never
advances one. A cycle (records that contradict each other) is a `ReplayError` naming a node in it.
"""

from __future__ import annotations

import itertools
import re
from array import array
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mc2emu.predict.analysis import (
    Cat,
    CoreUse,
    PathStep,
    ReplayError,
    Span,
    evaluate,
    length_of,
    overlap_of,
    union_of,
)
from mc2emu.predict.cost_model import DEFAULT_COST_MODEL, CostModel
from mc2emu.runtime.comm_events import (
    BarrierAll,
    BarrierObserve,
    BarrierStore,
    CrossCore,
    Get,
    HcclCommit,
    HcclEvent,
    HcclInit,
    HcclPrepare,
    HcclWait,
    Put,
    Quiet,
    SignalPost,
    SignalWait,
)
from mc2emu.runtime.events import (
    CoreBegin,
    CoreEnd,
    Event,
    Fixpipe,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmRead,
    GmWrite,
    LaunchBegin,
    LaunchEnd,
    Mmad,
    SyncAllEnd,
)

# L1 buffers the MTE2 loads of an AIC rotate through (the apace / Blaze tilings' nBufferNum = 2).
L1_BUFFER_DEPTH = 2
HCCL_SUCCESS = 0   # mc2emu.comm.hccl_task.HCCL_SUCCESS
# The HCCL working block: block 0 of the calling core type (label "AIC0" / "AIV0").
_WORKING = re.compile(r"^(AIC|AIV)0$")
_PIPE_PREFIX = "PIPE_"
_DIGITS = re.compile(r"\d+$")


@dataclass
class _Core:
    frontier: int = -1
    pipes: dict[str, int] = field(default_factory=dict)
    outstanding: list[int] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    cnt: int = 0
    groups_done: list[int] = field(default_factory=list)
    in_load_group: bool = False
    last_mmad: int = -1
    session: Any = None
    soft_syncs: int = 0


@dataclass(frozen=True)
class LaunchSpan:
    """One launch of one rank in the replay: its number on that rank's stream and its modelled times
    (seconds from the first launch begin)."""

    rank: int
    launch: int
    begin_s: float
    end_s: float


@dataclass
class Prediction:
    """What the replay predicts. Times in seconds of virtual device time, from the first launch begin."""

    total_s: float
    per_rank_s: dict[int, float]
    critical_path: list[PathStep]
    critical_by_cat: dict[str, float]
    comm_s: float            # per rank union of its outgoing transfers, summed over ranks
    hidden_s: float          # of which some cube of the same rank computed at the same time
    exposed_s: float
    cores: list[CoreUse]
    nodes: int
    events: int
    model: CostModel
    node_counts: dict[str, int] = field(default_factory=dict)
    # Every launch of every rank (one per rank for a single call; N per rank for a stream of N launches),
    # and the critical path's time by launch number.
    launches: list[LaunchSpan] = field(default_factory=list)
    critical_by_launch: dict[int, float] = field(default_factory=dict)
    # With `timeline=True`: every node's modelled times, and the records in the order `Span.rec` indexes.
    timeline: list[Span] = field(default_factory=list, repr=False)
    records: list[Event] = field(default_factory=list, repr=False)

    @property
    def hidden_share(self) -> float | None:
        return None if self.comm_s <= 0 else min(1.0, self.hidden_s / self.comm_s)

    @property
    def cube_utilisation(self) -> float:
        """Mean cube utilisation over the AICs that ran."""
        aics = [c.utilisation for c in self.cores if c.core.startswith("AIC")]
        return sum(aics) / len(aics) if aics else 0.0

    def summary(self) -> str:
        hs = self.hidden_share
        return (f"predicted {self.total_s * 1e6:.2f} us; comm {self.comm_s * 1e6:.2f} us "
                f"({'-' if hs is None else f'{hs:.0%}'} hidden); cube utilisation {self.cube_utilisation:.0%}; "
                f"critical path " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in
                                               sorted(self.critical_by_cat.items(), key=lambda kv: -kv[1]) if v > 0))


class _Template(str):
    """What a node is, made from its record only when read (the critical path, the timeline, an error):
    `self.format(r=record)`. At 16 ranks a replay holds ~17 M nodes; a string per node was ~1 GB."""


_LOAD = _Template("load {r.buffer} {r.nbytes} B")
_STORE = _Template("store {r.buffer} {r.nbytes} B")
_MMAD = _Template("mmad {r.m}x{r.n}x{r.k}")
_FIXPIPE = _Template("fixpipe {r.m}x{r.n}")
_SET = _Template("set {r.subject}")
_WAIT = _Template("wait {r.subject}")
_RAISE = _Template("raise {r.subject}")
_SUBJECT = _Template("{r.subject}")
_KERNEL = _Template("kernel {r.launch}")
_KERNEL_END = _Template("kernel end {r.launch}")
_ISSUE = _Template("{r.kind} issue -> {r.pe}")
_LOCAL_COPY = _Template("local copy {r.nbytes} B")
_LINK_OUT = _Template("{r.kind} {r.rank}->{r.pe} {r.nbytes} B")   # a put: this rank to its peer
_LINK_IN = _Template("{r.kind} {r.pe}->{r.rank} {r.nbytes} B")    # a get: the peer to this rank
_SIGNAL_WAIT = _Template("signal wait {r.window}")
_SIGNAL_POST = _Template("signal post {r.window}")
_HCCL = _Template("hccl {r.call} {r.subject}")
_HCCL_WAIT = _Template("hccl wait {r.subject}")


class _Graph:
    """Nodes in parallel lists; `pending` edges are resolved by key once every rank is built. Compact, since a
    production-shape replay holds tens of millions of nodes: durations and record indices in typed arrays, a
    node's predecessors as node numbers with their edge latencies apart (`lat[v]`: None while all are 0), what
    a node is as a string or a label made from its record when read (`label`)."""

    def __init__(self, records: Sequence[Event] = ()) -> None:
        self.dur = array("d")
        self.preds: list[list[int]] = []
        self.lat: list[list[float] | None] = []
        self.cat: list[str] = []
        self.rank: list[int] = []
        self.core: list[str] = []
        self.what: list[str] = []
        self.rec = array("q")
        self.records = records
        self.keyed: dict[tuple, list[int]] = defaultdict(list)
        self.pending: list[tuple[int, tuple, float]] = []
        self.joins: dict[tuple, int] = {}
        self.launch: list[int] = []   # per node: the launch (its rank's launch number) it was built in
        self.cur_launch = 0

    def add(self, dur: float, cat: str, rank: int, core: str, what: str, rec: int = -1,
            preds: Iterable[tuple[int, float]] = ()) -> int:
        n = len(self.dur)
        self.dur.append(dur)
        self.preds.append([])
        self.lat.append(None)
        self.cat.append(cat)
        self.rank.append(rank)
        self.core.append(core)
        self.what.append(what)
        self.rec.append(rec)
        self.launch.append(self.cur_launch)
        for p, w in preds:
            self.edge(p, n, w)
        return n

    def edge(self, src: int, dst: int, w: float = 0.0) -> None:
        if src < 0:
            return
        ps, lat = self.preds[dst], self.lat[dst]
        if w and lat is None:
            lat = self.lat[dst] = [0.0] * len(ps)
        ps.append(src)
        if lat is not None:
            lat.append(w)

    def label(self, v: int) -> str:
        """What node v is."""
        w = self.what[v]
        return w.format(r=self.records[self.rec[v]]) if isinstance(w, _Template) else w

    def join(self, key: tuple, latency: float, rank: int, what: str) -> int:
        j = self.joins.get(key)
        if j is None:
            j = self.joins[key] = self.add(latency, Cat.SYNC, rank, "join", what)
        return j


def _pipe(name: Any) -> str:
    s = str(name or "S")
    return s[len(_PIPE_PREFIX):] if s.startswith(_PIPE_PREFIX) else s


def _fold_put_reads(recs: Sequence[Event]) -> set[int]:
    """Indices (into `recs`, one core's records in order) of GM reads that are a put's source."""
    out = set()
    for i in range(len(recs) - 1):
        r, nxt = recs[i], recs[i + 1]
        if isinstance(r, GmRead) and isinstance(nxt, Put | Get) and r.nbytes == nxt.nbytes:
            out.add(i)
    return out


class _Builder:
    def __init__(self, model: CostModel, stream: bool = False) -> None:
        self.m = model
        self.stream = stream
        self.records: list[Event] = []
        self.g = _Graph(self.records)
        self.wall: list[int] = []
        self.egress_last: dict[int, int] = {}
        self.ingress: dict[int, list[tuple[int, int]]] = defaultdict(list)   # dst -> (wall, node)
        self.posts: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        self.sig_waits: list[tuple[int, tuple, int]] = []
        self.launches: list[tuple[int, int, int, int]] = []   # (rank, begin node, end node, launch number)
        self.n_events = 0
        self.active: dict[str, int] = {}

    # -- one rank -----------------------------------------------------------------------------------------
    def rank(self, rank: int, offset_ns: int, recs: Sequence[Event]) -> None:
        m, g = self.m, self.g
        ordered = sorted(recs, key=lambda r: r.seq)
        by_core: dict[str, list[int]] = defaultdict(list)
        for i, r in enumerate(ordered):
            by_core[r.core].append(i)
        folded: set[int] = set()
        for idxs in by_core.values():
            core_recs = [ordered[i] for i in idxs]
            folded |= {idxs[j] for j in _fold_put_reads(core_recs)}
        cores: dict[str, _Core] = defaultdict(_Core)
        # cores of each type that ran on this rank share its GM bandwidth (the cost model's assumption)
        self.active = {t: sum(1 for c in by_core if c.startswith(t)) for t in ("AIC", "AIV")}
        act_aic, act_aiv = self.active["AIC"] or None, self.active["AIV"] or None
        launch_begin = -1
        launch_no = 0
        g.cur_launch = 0
        prev_launch_end = -1
        core_ends: list[int] = []
        balls = 0
        base = len(self.records)
        self.records.extend(ordered)
        # A stamp is read before the event takes its seq, and a thread can lose the GIL in between: at 16 ranks
        # on 2 cores a put stamped 63 ms before an earlier-seq put of another core of its rank was seen. The
        # egress queue follows seq, ingress and signal pairing follow the stamps: the two orders must agree
        # (else a cycle), so a stamp is raised to the latest stamp before it in seq order (still a time the
        # event's emit covered: every earlier seq was stamped before its seq was taken).
        self.wall.extend(itertools.accumulate((r.t_ns + offset_ns for r in ordered), max))
        for i, r in enumerate(ordered):
            core = r.core
            ri = base + i
            self.n_events += 1
            if core == "host":
                if isinstance(r, LaunchBegin):
                    g.cur_launch = launch_no
                    if self.stream and prev_launch_end >= 0:   # stream order: after this rank's previous launch
                        after = prev_launch_end
                    else:                                      # the host barrier before the launch
                        after = g.join(("launch", launch_no), m.barrier_latency_s, rank, "launch barrier")
                        g.edge(prev_launch_end, after)
                    launch_begin = g.add(0.0, Cat.MARK, rank, core, f"launch {r.launch}", ri, [(after, 0.0)])
                    launch_no += 1
                    core_ends = []
                elif isinstance(r, LaunchEnd):
                    end = g.add(0.0, Cat.MARK, rank, core, f"launch end {r.launch}", ri,
                                [(launch_begin, 0.0)] + [(e, 0.0) for e in core_ends])
                    self.launches.append((rank, launch_begin, end, launch_no - 1))
                    prev_launch_end = end
                continue
            if i in folded:
                continue
            c = cores[core]
            add = g.add
            if isinstance(r, GmRead):
                nb = r.nbytes
                preds = [(c.frontier, 0.0), (c.pipes.get("MTE2", -1), 0.0)]
                if core.startswith("AIC"):
                    if not c.in_load_group:
                        if c.last_mmad >= 0:
                            c.groups_done.append(c.last_mmad)
                            del c.groups_done[:-L1_BUFFER_DEPTH]
                        c.in_load_group = True
                    if len(c.groups_done) >= L1_BUFFER_DEPTH:
                        preds.append((c.groups_done[-L1_BUFFER_DEPTH], 0.0))
                n = add(m.mte_s(nb, act_aic if core.startswith("AIC") else act_aiv), Cat.MTE2, rank, core,
                        _LOAD, ri, preds)
                c.pipes["MTE2"] = n
            elif isinstance(r, GmWrite):
                if core.startswith("AIC"):
                    continue   # the fixpipe's own store (its Fixpipe event carries the cost)
                nb = r.nbytes
                n = add(m.mte_s(nb, act_aiv), Cat.MTE3, rank, core, _STORE, ri,
                        [(c.frontier, 0.0), (c.pipes.get("MTE3", -1), 0.0), (c.pipes.get("MTE2", -1), 0.0)])
                c.pipes["MTE3"] = n
            elif isinstance(r, Mmad):
                mm, nn, kk = r.m, r.n, r.k
                n = add(m.mmad_s(mm, nn, kk, r.aType), Cat.MMAD, rank, core, _MMAD, ri,
                        [(c.frontier, 0.0), (c.pipes.get("M", -1), 0.0), (c.pipes.get("MTE2", -1), 0.0)])
                c.pipes["M"] = n
                c.last_mmad = n
                c.in_load_group = False
            elif isinstance(r, Fixpipe):
                mm, nn = r.m, r.n
                n = add(m.fixpipe_s(mm, nn, r.dtype, act_aic), Cat.FIXPIPE, rank, core, _FIXPIPE, ri,
                        [(c.frontier, 0.0), (c.pipes.get("FIX", -1), 0.0), (c.pipes.get("M", -1), 0.0)])
                c.pipes["FIX"] = n
            elif isinstance(r, FlagSet):
                p = _pipe(r.pipe)
                n = add(0.0, Cat.SYNC, rank, core, _SET, ri,
                        [(c.frontier, 0.0), (c.pipes.get(p, -1), 0.0)])
                g.keyed[("set", rank, r.set_id)].append(n)
            elif isinstance(r, FlagConsume):
                n = add(0.0, Cat.WAIT, rank, core, _WAIT, ri, [(c.frontier, 0.0)])
                if r.token is not None:
                    g.pending.append((n, ("tok", rank, r.token), 0.0))
                c.frontier = n
                continue
            elif isinstance(r, FlagRaise):
                n = add(m.flag_latency_s, Cat.SYNC, rank, core, _RAISE, ri)
                for src in r.sources:
                    g.pending.append((n, ("set", rank, src[1]), 0.0))
                g.keyed[("tok", rank, r.token)].append(n)
                continue
            elif isinstance(r, SyncAllEnd) and r.soft:
                c.soft_syncs += 1
                j = g.join(("soft", rank, _DIGITS.sub("", core), c.soft_syncs), m.barrier_latency_s, rank,
                           "soft SyncAll")
                g.edge(c.frontier, j)
                c.frontier = add(0.0, Cat.WAIT, rank, core, "SyncAll(soft)", ri, [(j, 0.0)])
            elif isinstance(r, Put | Get):
                self._put(rank, c, core, r, ri)
            elif isinstance(r, Quiet):
                n = add(0.0, Cat.WAIT, rank, core, "quiet", ri,
                        [(c.frontier, 0.0)] + [(t, m.put_latency_s) for t in c.outstanding])
                c.outstanding = []
                c.frontier = n
            elif isinstance(r, SignalPost | SignalWait):
                self._signal(rank, c, core, r, ri)
            elif isinstance(r, BarrierStore):
                c.cnt = r.value
                n = add(0.0, Cat.SYNC, rank, core, _SUBJECT, ri, [(c.frontier, 0.0)])
                g.keyed[("tb", rank, r.barrier, r.slot, c.cnt)].append(n)
                c.frontier = n
            elif isinstance(r, BarrierObserve):
                n = add(0.0, Cat.WAIT, rank, core, _SUBJECT, ri, [(c.frontier, 0.0)])
                g.pending.append((n, ("tb", r.peer, r.barrier, r.slot, c.cnt), m.put_latency_s))
                c.frontier = n
            elif isinstance(r, CrossCore):
                j = g.join(("crosscore", rank, r.count), m.barrier_latency_s, rank, r.subject)
                g.edge(c.frontier, j)
                c.frontier = add(0.0, Cat.WAIT, rank, core, _SUBJECT, ri, [(j, 0.0)])
            elif isinstance(r, BarrierAll):
                balls += 1
                j = g.join(("barrier_all", balls), m.barrier_latency_s, rank, "barrier_all")
                g.edge(c.frontier, j)
                for t in c.outstanding:
                    g.edge(t, j, m.put_latency_s)
                c.outstanding = []
                c.frontier = add(0.0, Cat.WAIT, rank, core, _SUBJECT, ri, [(j, 0.0)])
            elif isinstance(r, HcclEvent):
                self._hccl(rank, c, core, r, ri)
            elif isinstance(r, CoreBegin):
                c.frontier = add(0.0, Cat.MARK, rank, core, _KERNEL, ri, [(launch_begin, 0.0)])
                c.pipes = {}
                c.groups_done = []
                c.in_load_group = False
                c.last_mmad = -1
                c.nodes = []
            elif isinstance(r, CoreEnd):
                n = add(0.0, Cat.MARK, rank, core, _KERNEL_END, ri,
                        [(c.frontier, 0.0)] + [(p, 0.0) for p in c.pipes.values()]
                        + [(t, m.put_latency_s) for t in c.outstanding])
                c.outstanding = []
                core_ends.append(n)
                c.frontier = n

    def _put(self, rank: int, c: _Core, core: str, r: Put | Get, ri: int) -> None:
        m, g = self.m, self.g
        nb = r.nbytes
        pe = r.pe
        issue = g.add(m.put_issue_s, Cat.ISSUE, rank, core, _ISSUE, ri, [(c.frontier, 0.0)])
        if isinstance(r, Put) and r.handle is not None and r.repeat is not None:
            g.pending.append((issue, ("commit", rank, r.session, r.handle, r.repeat + 1), m.hccl_commit_latency_s))
        c.frontier = issue
        src, dst = (pe, rank) if isinstance(r, Get) else (rank, pe)
        if pe == rank:
            t = g.add(m.local_copy_s(nb, self.active.get("AIV") or None), Cat.MTE2, rank, core, _LOCAL_COPY, ri,
                      [(issue, 0.0)])
        else:
            t = g.add(m.link_s(nb), Cat.LINK, rank, core, _LINK_IN if isinstance(r, Get) else _LINK_OUT, ri,
                      [(issue, 0.0), (self.egress_last.get(src, -1), 0.0)])
            self.egress_last[src] = t
            self.ingress[dst].append((self.wall[ri], t))
        if isinstance(r, Put) and r.handle is not None and r.repeat is not None:
            g.keyed[("hput", pe, r.session, r.handle, r.repeat)].append(t)
        else:
            c.outstanding.append(t)

    def _signal(self, rank: int, c: _Core, core: str, r: SignalPost | SignalWait, ri: int) -> None:
        m, g = self.m, self.g
        if isinstance(r, SignalWait):
            n = g.add(0.0, Cat.WAIT, rank, core, _SIGNAL_WAIT, ri, [(c.frontier, 0.0)])
            self.sig_waits.append((self.wall[ri], (rank, r.window, r.offset), n))
        else:
            n = g.add(m.put_issue_s, Cat.ISSUE, rank, core, _SIGNAL_POST, ri,
                      [(c.frontier, 0.0)] + [(t, m.put_latency_s) for t in c.outstanding])
            self.posts[(r.pe, r.window, r.offset)].append((self.wall[ri], n))
        c.frontier = n

    def _hccl(self, rank: int, c: _Core, core: str, r: HcclEvent, ri: int) -> None:
        m, g = self.m, self.g
        if core.startswith("AIC") or core.startswith("AIV"):
            if isinstance(r, HcclInit | HcclPrepare | HcclWait) and r.session is not None:
                c.session = r.session
            n = g.add(m.hccl_call_s, Cat.ISSUE, rank, core, _HCCL, ri, [(c.frontier, 0.0)])
            if isinstance(r, HcclCommit) and _WORKING.match(core):
                g.keyed[("commit", rank, c.session, r.handle, r.commits)].append(n)
            elif isinstance(r, HcclWait) and r.rc == HCCL_SUCCESS and r.waits is not None:
                n = g.add(0.0, Cat.WAIT, rank, core, _HCCL_WAIT, ri, [(n, 0.0)])
                if r.follows_working:
                    g.pending.append((n, ("hwait", rank, c.session, r.total), 0.0))
                else:
                    g.pending.append((n, ("hput", rank, c.session, r.handle, r.waits - 1), m.put_latency_s))
                    if _WORKING.match(core):
                        g.keyed[("hwait", rank, c.session, r.total)].append(n)
            c.frontier = n

    # -- cross-rank edges, then timing ---------------------------------------------------------------------
    def finish(self) -> None:
        g = self.g
        for lst in self.ingress.values():
            lst.sort()
            for (_, a), (_, b) in itertools.pairwise(lst):
                g.edge(a, b)
        for lst in self.posts.values():
            lst.sort()
        for t, (pe, window, offset), n in self.sig_waits:
            best = -1
            for tp, p in self.posts.get((pe, window, offset), ()):
                if tp > t:
                    break
                best = p
            g.edge(best, n, self.m.put_latency_s)
        for n, key, w in g.pending:
            for src in g.keyed.get(key, ()):
                g.edge(src, n, w)


def replay(per_rank: Mapping[int, tuple[int, Sequence[Event]] | Sequence[Event]],
           model: CostModel = DEFAULT_COST_MODEL, *, timeline: bool = False, stream: bool = False) -> Prediction:
    """Predict the device time of the recorded run. `per_rank[r]` is rank r's records, or (its clock offset
    in ns, its records) as `mc2emu.predict.records.gather_records` returns them. `timeline=True` keeps
    every node's modelled times (for the virtual-time trace). `stream=True`: the records are a stream's
    launches (a `Communicator`'s): no host barrier between a rank's launches (module docstring)."""
    if not per_rank:
        raise ReplayError("no records to replay")
    b = _Builder(model, stream)
    for rank in sorted(per_rank):
        item = per_rank[rank]
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
            offset, recs = item
        else:
            offset, recs = 0, item
        b.rank(rank, offset, recs)
    b.finish()
    g = b.g
    if not b.launches:
        raise ReplayError("the records hold no launch (LAUNCH_BEGIN / LAUNCH_END of the host)")
    start, end, crit = evaluate(g)
    t0 = min(start[bg] for _, bg, _, _ in b.launches)
    t_end = max(end[e] for _, _, e, _ in b.launches)
    per_rank_s: dict[int, float] = defaultdict(float)
    for rank, _, e, _ in b.launches:
        per_rank_s[rank] = max(per_rank_s[rank], end[e] - t0)
    spans = [LaunchSpan(rank, no, start[bg] - t0, end[e] - t0) for rank, bg, e, no in b.launches]
    # critical path: back from the last launch end
    last = max((e for _, _, e, _ in b.launches), key=lambda e: end[e])
    path: list[PathStep] = []
    by_cat: dict[str, float] = defaultdict(float)
    by_launch: dict[int, float] = defaultdict(float)
    v = last
    while v >= 0:
        p = crit[v]
        w = 0.0
        if p >= 0:
            w = max(0.0, start[v] - end[p])
        path.append(PathStep(g.rank[v], g.core[v], g.label(v), g.cat[v], start[v] - t0, end[v] - t0, w,
                             g.launch[v]))
        # the launch barrier before the kernel time starts is not part of it
        spent = max(0.0, end[v] - max(start[v], t0))
        by_cat[g.cat[v]] += spent
        by_launch[g.launch[v]] += spent + w
        if w > 0:
            by_cat["latency"] += w
        v = p
    path.reverse()
    # overlap of communication with compute, per rank
    comm_iv: dict[int, list[tuple[float, float]]] = defaultdict(list)
    cube_iv: dict[int, list[tuple[float, float]]] = defaultdict(list)
    busy: dict[tuple[int, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for v in range(len(g.dur)):
        cat = g.cat[v]
        if cat == Cat.LINK:
            comm_iv[g.rank[v]].append((start[v], end[v]))
        elif cat == Cat.MMAD:
            cube_iv[g.rank[v]].append((start[v], end[v]))
        if cat in Cat.COMPUTE or cat in (Cat.LINK, Cat.ISSUE):
            busy[(g.rank[v], g.core[v])][cat] += g.dur[v]
    comm = hidden = 0.0
    for rank, iv in comm_iv.items():
        u = union_of(iv)
        comm += length_of(u)
        hidden += overlap_of(u, union_of(cube_iv.get(rank, [])))
    total = t_end - t0
    cores = []
    for (rank, core), cats in sorted(busy.items()):
        main = cats.get(Cat.MMAD, 0.0) if core.startswith("AIC") else cats.get(Cat.MTE2, 0.0) + cats.get(Cat.MTE3, 0.0)
        cores.append(CoreUse(rank, core, dict(cats), main / total if total > 0 else 0.0))
    tl = [Span(g.rec[v], g.rank[v], g.core[v], g.cat[v], g.label(v), start[v] - t0, end[v] - t0)
          for v in range(len(g.dur))] if timeline else []
    counts: dict[str, int] = defaultdict(int)
    for cat in g.cat:
        counts[cat] += 1
    return Prediction(total, dict(per_rank_s), path, dict(by_cat), comm, hidden, comm - hidden, cores, len(g.dur),
                      b.n_events, model, dict(counts), launches=spans, critical_by_launch=dict(by_launch), timeline=tl,
                      records=b.records if timeline else [])
