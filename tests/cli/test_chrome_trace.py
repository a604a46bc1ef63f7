"""The Chrome trace writer on synthetic events and on a real single-rank launch (no MPI)."""

import enum
import json
import pickle
import threading

import numpy as np
import pytest
from trace_check import check_chrome_trace

from mc2emu.runtime import Device, Hazard, Pipe, Severity
from mc2emu.runtime.comm_events import (
    CrossCore,
    CrossDevice,
    HcclCommit,
    HcclExecuted,
    HcclWait,
    Put,
    SignalPost,
    SignalWait,
)
from mc2emu.runtime.events import (
    Fixpipe,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmRead,
    HazardReported,
    Mmad,
    SyncAllEnd,
    WaitBegin,
    WaitEnd,
)
from mc2emu.trace import DEFAULT_KINDS, ChromeTraceRecorder, merge_traces, write_trace
from mc2emu.trace.chrome_trace import LANE_TID_STRIDE, jsonable, track_tid


class _Op(enum.Enum):
    SET = "set"
    POST = "post"


def ev(cls, t_ns, core="AIC0", rank=0, seq=0, *args, **fields):
    return cls(rank, core, t_ns, seq, *args, **fields)


def wait(cls, t_ns, what, core="AIC0"):
    return ev(cls, t_ns, core, what=what, expected="", setter="")


def mmad(t_ns, core="AIC0", rank=0, t0_ns=0):
    return ev(Mmad, t_ns, core, rank, m=16, n=16, k=64, tile=(0, 0), l0=0, aType="e4m3", unitFlag=3,
              cmatrixInitVal=True, bias=False, t0_ns=t0_ns)


def put(t_ns, core, rank, pe, window="win", t0_ns=0, **server):
    return ev(Put, t_ns, core, rank, window=window, offset=0, nbytes=64, src_rank=rank, pe=pe, op_seq=0,
              t0_ns=t0_ns, **server)


def hccl_wait(t_ns, core, handle, rank=0):
    return ev(HcclWait, t_ns, core, rank, handle=handle, rc=0)


def recs(*events):
    return list(events)


def spans_named(trace, prefix):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith(prefix)]


def test_wait_pairs_become_spans_with_durations():
    trace = merge_traces({0: recs(wait(WaitBegin, 1_000, "flag3"), wait(WaitEnd, 6_000, "flag3"))})
    check_chrome_trace(trace)
    (w,) = spans_named(trace, "wait")
    assert w["name"] == "wait flag3" and w["ts"] == 0.0 and w["dur"] == 5.0
    assert w["pid"] == 0 and w["tid"] == track_tid("AIC0")


def test_unfinished_wait_runs_to_the_last_event_and_is_marked():
    trace = merge_traces({0: recs(wait(WaitBegin, 1_000, "h"), mmad(9_000, core="AIC1"))})
    check_chrome_trace(trace)
    (w,) = spans_named(trace, "wait")
    assert w["args"]["unfinished"] is True and w["dur"] == 8.0


def test_unmatched_end_is_dropped():
    trace = merge_traces({0: recs(ev(SyncAllEnd, 5, soft=False))})
    check_chrome_trace(trace)
    assert not spans_named(trace, "SyncAll")


def test_point_events_use_t0():
    trace = merge_traces({0: recs(mmad(10_000, t0_ns=6_000), put(20_000, "AIV0", 0, 1, t0_ns=12_000),
                                  ev(Fixpipe, 30_000, tensor="c", origin=(0, 0), m=16, n=16, l0cOffset=0,
                                     dtype="bfloat16", atomic=False, unitFlag=3))})
    check_chrome_trace(trace)
    (m,) = spans_named(trace, "mmad")
    (p,) = spans_named(trace, "put")
    (f,) = spans_named(trace, "fixpipe")
    assert m["dur"] == 4.0 and p["dur"] == 8.0 and f["dur"] == 0.0
    assert p["args"]["nbytes"] == 64


def test_flag_raise_flows_to_its_consuming_wait():
    events = [ev(FlagSet, 100, "AIV0", fid=2, mode=2, pipe="PIPE_MTE3", set_id=1),
              ev(FlagRaise, 110, "AIV0", target="AIC0", fid=2, count=1, mode=2, mode4=False, token=1,
                 sources=(("AIV0", 1),)),
              wait(WaitBegin, 50, "wait2"),
              wait(WaitEnd, 120, "wait2"),
              ev(FlagConsume, 130, "AIC0", fid=2, count=0, mode=2, token=1)]
    trace = merge_traces({0: recs(*events)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 1
    s = next(e for e in trace["traceEvents"] if e["ph"] == "s")
    f = next(e for e in trace["traceEvents"] if e["ph"] == "f")
    assert s["tid"] == track_tid("AIV0") and f["tid"] == track_tid("AIC0") and s["id"] == f["id"]
    assert f["bp"] == "e"
    assert any(e["ph"] == "i" and e["name"].startswith("flag_set") for e in trace["traceEvents"])


def test_tokens_are_per_rank():
    r0 = recs(ev(FlagRaise, 10, "AIV0", 0, target="AIC0", fid=0, count=1, mode=2, mode4=False, token=1, sources=()))
    r1 = recs(ev(FlagConsume, 20, "AIC0", 1, fid=0, count=0, mode=2, token=1))
    counts = check_chrome_trace(merge_traces({0: r0, 1: r1}))
    assert counts.get("s", 0) == 0  # a raise on rank 0 never releases a wait on rank 1


def test_signal_post_flows_to_the_peer_wait_across_ranks():
    def post(t_ns, offset):
        return ev(SignalPost, t_ns, "AIV1", 0, window="a2a", offset=offset, nbytes=8, src_rank=0, pe=1, op_seq=0,
                  op=_Op.SET, signal=1)

    early, last, other_slot = post(500, 64), post(1_000, 64), post(1_100, 128)
    waited = ev(SignalWait, 2_000, "AIV0", 1, window="a2a", offset=64, nbytes=8, src_rank=1, pe=1, op_seq=0,
                cmp=_Op.SET, expected=1, observed=1)
    trace = merge_traces({0: recs(early, last, other_slot), 1: recs(waited)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 1
    s = next(e for e in trace["traceEvents"] if e["ph"] == "s")
    f = next(e for e in trace["traceEvents"] if e["ph"] == "f")
    assert (s["pid"], f["pid"]) == (0, 1)
    assert s["ts"] == pytest.approx(0.5, abs=0.01)  # the latest post (t=1000) before the wait, not t=500


def test_clock_offsets_shift_ranks():
    trace = merge_traces({0: recs(mmad(1_000, t0_ns=990)), 1: recs(mmad(1_000, rank=1, t0_ns=990))}, {0: 0, 1: 5_000})
    by_pid = {e["pid"]: e for e in spans_named(trace, "mmad")}
    assert by_pid[1]["ts"] - by_pid[0]["ts"] == pytest.approx(5.0)


def test_overlapping_spans_on_one_label_get_lanes():
    trace = merge_traces({0: recs(mmad(10_000, "server", t0_ns=2_000), mmad(14_000, "server", t0_ns=6_000))})
    check_chrome_trace(trace)
    tids = sorted(e["tid"] for e in spans_named(trace, "mmad"))
    assert tids[1] - tids[0] == LANE_TID_STRIDE
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"server", "server · 2"} <= names


def test_tracks_and_processes_are_named():
    hazard = ev(HazardReported, 6, "AIV1", 3, hazard=Hazard.DEADLOCK, severity=Severity.ERROR, message="m")
    trace = merge_traces({3: recs(mmad(5, "AIC2", 3), hazard)})
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert {"pid": 3, "name": "rank 3"} in [{"pid": e["pid"], "name": e["args"].get("name")} for e in meta]
    threads = {(e["tid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert (track_tid("AIC2"), "AIC2") in threads and (track_tid("AIV1"), "AIV1") in threads
    hz = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert hz and hz[0]["s"] == "t"


def test_track_tids_are_stable():
    assert track_tid("run") == 0 and track_tid("host") == 1
    assert track_tid("AIC0") < track_tid("AIC31") < track_tid("AIV0") < track_tid("server", ["server"])
    assert track_tid("hccl", ["hccl", "server"]) != track_tid("server", ["hccl", "server"])


def test_jsonable_handles_odd_values():
    class Thing:
        def __str__(self):
            return "thing"

    out = jsonable({"e": _Op.POST, "np": np.int64(3), "f": float("nan"), "t": (1, 2), "o": Thing(),
                    "long": list(range(100))})
    json.dumps(out, allow_nan=False)
    assert out["e"] == "POST" and out["np"] == 3 and out["f"] == "nan" and out["o"] == "thing"
    assert len(out["long"]) == 17


def test_records_pickle_and_recorder_filters_kinds():
    def read(t_ns):
        return ev(GmRead, t_ns, "AIC0", 0, 0, "x", lo=0, hi=1, offset=0, shape=(1,), strides=(1,), item=1,
                  alloc=threading.Lock(), data=np.zeros(1, np.uint8))   # live state: neither pickles

    rec = ChromeTraceRecorder()
    rec(read(1))
    rec(mmad(2))
    rec.span(0, "case", 0, 10)
    records = rec.records()
    assert [r.kind for r in records] == ["mmad", "span"]
    assert pickle.loads(pickle.dumps(records)) == records
    with_reads = ChromeTraceRecorder((*DEFAULT_KINDS, GmRead))
    with_reads(read(3))
    (r,) = with_reads.records()
    assert r.alloc is None and r.data is None and pickle.loads(pickle.dumps(r)) == r


def test_real_launch_trace_is_valid(tmp_path):
    def kernel(ctx):
        for t in range(6):
            if ctx.ASCEND_IS_AIV:
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t % 3)
            else:
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, t % 3)
        ctx.SyncAll(False)

    dev = Device(0, timeout=10)
    rec = ChromeTraceRecorder()
    unsubscribe = dev.events.subscribe(rec)
    dev.launch(kernel, 2, "MIX_AIC_1_1")
    unsubscribe()
    path = write_trace(tmp_path / "sub" / "t.json", merge_traces({0: rec.records()}, metadata={"case": "x"}))
    trace = json.loads(path.read_text())
    counts = check_chrome_trace(trace)
    # 6 rounds x 2 blocks of AIV -> AIC raises, each consumed by a wait, plus the SyncAll handshakes
    assert counts["s"] >= 12
    assert spans_named(trace, "kernel") and spans_named(trace, "SyncAll")
    assert trace["otherData"]["case"] == "x"


def test_hccl_server_execution_flows_to_each_cores_wait():
    events = [ev(HcclExecuted, 100, "server", handle=1, repeat=0, op=_Op.SET, session=0),
              ev(HcclExecuted, 300, "server", handle=1, repeat=1, op=_Op.SET, session=0),
              ev(HcclCommit, 50, "AIC0", handle=1, commits=1),
              hccl_wait(150, "AIC0", 1),
              hccl_wait(350, "AIC0", 1),
              hccl_wait(160, "AIC1", 1),
              hccl_wait(170, "AIC1", 2)]  # never executed
    trace = merge_traces({0: recs(*events)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 3
    assert {e["name"] for e in spans_named(trace, "hccl")} >= {"hccl executed handle 1", "hccl WAIT handle 1"}


def test_flows_match_typed_fields_not_display_names():
    """The arrows follow the event class and its typed fields (`handle`, a CrossDevice barrier) alone: a Wait on
    another handle, or another barrier step of the same job, gets no arrow."""
    events = [ev(HcclExecuted, 100, "server", handle=7, repeat=0, op=_Op.SET, session=0),
              hccl_wait(150, "AIC0", 7),
              hccl_wait(160, "AIC1", 8)]
    trace = merge_traces({0: recs(*events)})
    assert check_chrome_trace(trace)["s"] == 1
    a_put = put(1_000, "AIV1", 0, 1, window="signal put")
    other_step = ev(CrossCore, 2_000, "AIV1", 1, job=1, count=1)
    typed = ev(CrossDevice, 3_000, "AIV1", 1, job=1, count=1)
    trace = merge_traces({0: recs(a_put), 1: recs(other_step, typed)})
    flows = [e for e in trace["traceEvents"] if e["ph"] == "f"]
    assert [round(f["ts"], 1) for f in flows] == [2.0]  # the typed barrier (ends 3.0 us, slice mid 2.0 us)


def test_puts_flow_to_the_peers_next_cross_device_barrier_or_hccl_wait():
    udma_put = put(1_000, "AIV1", 0, 1, window="udma_a2a")
    own_put = put(1_000, "AIV0", 0, 0, window="udma_a2a")
    stale = ev(CrossDevice, 500, "AIV1", 1, job=1, count=1)
    barrier = ev(CrossDevice, 2_000, "AIV1", 1, job=1, count=2)
    server_put = put(3_000, "server", 0, 1, window="ws", handle=1, repeat=1, session=0)
    waits = [hccl_wait(t, c, 1, rank=1)
             for t, c in ((2_500, "AIC0"), (4_000, "AIC0"), (2_600, "AIC1"), (3_500, "AIC1"))]
    trace = merge_traces({0: recs(udma_put, own_put, server_put), 1: recs(stale, barrier, *waits)})
    check_chrome_trace(trace)
    by_id = {}
    for e in trace["traceEvents"]:
        if e["ph"] in "sf":
            by_id.setdefault(e["id"], {})[e["ph"]] = e
    pairs = sorted((round(f["s"]["ts"], 1), round(f["f"]["ts"], 1), f["f"]["tid"]) for f in by_id.values())
    # the udma put (t=1.0 us) -> the barrier ending at 2.0 us; the server put of repeat 1 -> AIC1's second
    # Wait (3.5 us), which returned before AIC0's (4.0 us)
    assert pairs == [(0.5, 1.5, track_tid("AIV1")), (2.5, 3.0, track_tid("AIC1"))]
