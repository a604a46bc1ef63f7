"""The Chrome trace writer on synthetic events and on a real single-rank launch (no MPI)."""

import enum
import json
import pickle

import numpy as np
import pytest
from trace_check import check_chrome_trace

from mc2emu.runtime import Device, Event, EventKind, Pipe
from mc2emu.trace import ChromeTraceRecorder, TraceRecord, merge_traces, write_trace
from mc2emu.trace.chrome_trace import LANE_TID_STRIDE, jsonable, track_tid


class _Role(enum.Enum):
    POST = "post"
    WAIT = "wait"


def ev(kind, t_ns, core="AIC0", obj="", value=None, rank=0, seq=0, **extra):
    return Event(kind, rank, core, t_ns, seq, obj, value, extra)


def recs(*events):
    return [TraceRecord.of(e) for e in events]


def spans_named(trace, prefix):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"].startswith(prefix)]


def test_wait_pairs_become_spans_with_durations():
    trace = merge_traces({0: recs(ev(EventKind.WAIT_BEGIN, 1_000, obj="flag3"),
                                  ev(EventKind.WAIT_END, 6_000, obj="flag3"))})
    check_chrome_trace(trace)
    (w,) = spans_named(trace, "wait")
    assert w["name"] == "wait flag3" and w["ts"] == 0.0 and w["dur"] == 5.0
    assert w["pid"] == 0 and w["tid"] == track_tid("AIC0")


def test_unfinished_wait_runs_to_the_last_event_and_is_marked():
    trace = merge_traces({0: recs(ev(EventKind.WAIT_BEGIN, 1_000, obj="h"),
                                  ev(EventKind.MMAD, 9_000, core="AIC1"))})
    check_chrome_trace(trace)
    (w,) = spans_named(trace, "wait")
    assert w["args"]["unfinished"] is True and w["dur"] == 8.0


def test_unmatched_end_is_dropped():
    trace = merge_traces({0: recs(ev(EventKind.SYNC_ALL_END, 5, obj="SyncAll"))})
    check_chrome_trace(trace)
    assert not spans_named(trace, "SyncAll")


def test_point_events_use_dur_or_t0():
    trace = merge_traces({0: recs(ev(EventKind.MMAD, 10_000, obj="tile0", dur_ns=4_000),
                                  ev(EventKind.PUT, 20_000, core="AIV0", obj="win", nbytes=64, t0_ns=12_000),
                                  ev(EventKind.FIXPIPE, 30_000, obj="c"))})
    check_chrome_trace(trace)
    (m,) = spans_named(trace, "mmad")
    (p,) = spans_named(trace, "put")
    (f,) = spans_named(trace, "fixpipe")
    assert m["dur"] == 4.0 and p["dur"] == 8.0 and f["dur"] == 0.0
    assert p["args"]["nbytes"] == 64


def test_flag_raise_flows_to_its_consuming_wait():
    events = [ev(EventKind.FLAG_SET, 100, core="AIV0", obj="flag2", value=2, token=1),
              ev(EventKind.FLAG_RAISE, 110, core="AIV0", obj="AIC0.flag2", value=1, token=1, target="AIC0"),
              ev(EventKind.WAIT_BEGIN, 50, core="AIC0", obj="wait2"),
              ev(EventKind.WAIT_END, 120, core="AIC0", obj="wait2"),
              ev(EventKind.FLAG_RAISE, 130, core="AIC0", obj="AIC0.flag2", value=0, token=1, consumed=True)]
    trace = merge_traces({0: recs(*events)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 1
    s = next(e for e in trace["traceEvents"] if e["ph"] == "s")
    f = next(e for e in trace["traceEvents"] if e["ph"] == "f")
    assert s["tid"] == track_tid("AIV0") and f["tid"] == track_tid("AIC0") and s["id"] == f["id"]
    assert f["bp"] == "e"
    assert any(e["ph"] == "i" and e["name"].startswith("flag_set") for e in trace["traceEvents"])


def test_tokens_are_per_rank():
    r0 = recs(ev(EventKind.FLAG_RAISE, 10, core="AIV0", obj="x", token=1, target="AIC0", rank=0))
    r1 = recs(ev(EventKind.FLAG_RAISE, 20, core="AIC0", obj="x", token=1, consumed=True, rank=1))
    counts = check_chrome_trace(merge_traces({0: r0, 1: r1}))
    assert counts.get("s", 0) == 0  # a raise on rank 0 never releases a wait on rank 1


def test_signal_post_flows_to_the_peer_wait_across_ranks():
    post = ev(EventKind.SIGNAL, 1_000, core="AIV1", obj="a2a", value=8, rank=0, pe=1, window="a2a", offset=64,
              role=_Role.POST, nbytes=8)
    early = ev(EventKind.SIGNAL, 500, core="AIV1", obj="a2a", value=8, rank=0, pe=1, window="a2a", offset=64,
               role=_Role.POST, nbytes=8)
    other_slot = ev(EventKind.SIGNAL, 1_100, core="AIV1", obj="a2a", value=8, rank=0, pe=1, window="a2a",
                    offset=128, role=_Role.POST, nbytes=8)
    wait = ev(EventKind.SIGNAL, 2_000, core="AIV0", obj="a2a", value=1, rank=1, pe=1, window="a2a", offset=64,
              role=_Role.WAIT, observed=1)
    trace = merge_traces({0: recs(early, post, other_slot), 1: recs(wait)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 1
    s = next(e for e in trace["traceEvents"] if e["ph"] == "s")
    f = next(e for e in trace["traceEvents"] if e["ph"] == "f")
    assert (s["pid"], f["pid"]) == (0, 1)
    assert s["ts"] == pytest.approx(0.5, abs=0.01)  # the latest post (t=1000) before the wait, not t=500


def test_clock_offsets_shift_ranks():
    trace = merge_traces({0: recs(ev(EventKind.MMAD, 1_000, dur_ns=10)),
                          1: recs(ev(EventKind.MMAD, 1_000, dur_ns=10, rank=1))}, {0: 0, 1: 5_000})
    by_pid = {e["pid"]: e for e in spans_named(trace, "mmad")}
    assert by_pid[1]["ts"] - by_pid[0]["ts"] == pytest.approx(5.0)


def test_explicit_flow_ids_link_any_events():
    trace = merge_traces({0: recs(ev(EventKind.HCCL, 100, core="server", obj="AlltoAll", flow_out="h0:r0"),
                                  ev(EventKind.WAIT_BEGIN, 50, obj="Wait(h0)"),
                                  ev(EventKind.WAIT_END, 150, obj="Wait(h0)", flow_in="h0:r0"))})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 1


def test_overlapping_spans_on_one_label_get_lanes():
    trace = merge_traces({0: recs(ev(EventKind.MMAD, 10_000, core="server", dur_ns=8_000),
                                  ev(EventKind.MMAD, 14_000, core="server", dur_ns=8_000))})
    check_chrome_trace(trace)
    tids = sorted(e["tid"] for e in spans_named(trace, "mmad"))
    assert tids[1] - tids[0] == LANE_TID_STRIDE
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"server", "server · 2"} <= names


def test_tracks_and_processes_are_named():
    trace = merge_traces({3: recs(ev(EventKind.MMAD, 5, core="AIC2", rank=3), ev(EventKind.HAZARD, 6, core="AIV1",
                                                                                 obj="DEADLOCK", rank=3))})
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

    out = jsonable({"e": _Role.POST, "np": np.int64(3), "f": float("nan"), "t": (1, 2), "o": Thing(),
                    "long": list(range(100))})
    json.dumps(out, allow_nan=False)
    assert out["e"] == "POST" and out["np"] == 3 and out["f"] == "nan" and out["o"] == "thing"
    assert len(out["long"]) == 17


def test_records_pickle_and_recorder_filters_kinds():
    rec = ChromeTraceRecorder()
    rec(ev(EventKind.GM_READ, 1, alloc=object()))
    rec(ev(EventKind.MMAD, 2, extra_obj=object()))
    rec.span(0, "case", 0, 10)
    records = rec.records()
    assert [r.kind for r in records] == ["mmad", "span"]
    assert pickle.loads(pickle.dumps(records)) == records


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


class _Call(enum.Enum):
    WAIT = "Wait"
    COMMIT = "Commit"


def test_hccl_server_execution_flows_to_each_cores_wait():
    events = [ev(EventKind.HCCL, 100, core="server", obj="handle 1", value="executed", handle=1, repeat=0),
              ev(EventKind.HCCL, 300, core="server", obj="handle 1", value="executed", handle=1, repeat=1),
              ev(EventKind.HCCL, 50, core="AIC0", obj="handle 1", value=_Call.COMMIT, handle=1),
              ev(EventKind.HCCL, 150, core="AIC0", obj="handle 1", value=_Call.WAIT, handle=1),
              ev(EventKind.HCCL, 350, core="AIC0", obj="handle 1", value=_Call.WAIT, handle=1),
              ev(EventKind.HCCL, 160, core="AIC1", obj="handle 1", value=_Call.WAIT, handle=1),
              ev(EventKind.HCCL, 170, core="AIC1", obj="handle 2", value=_Call.WAIT, handle=2)]  # never executed
    trace = merge_traces({0: recs(*events)})
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] == 3
    assert {e["name"] for e in spans_named(trace, "hccl")} >= {"hccl executed handle 1", "hccl WAIT handle 1"}


def test_flows_match_typed_fields_not_display_names():
    """Display names (`obj`) that say nothing: the arrows follow `handle` / `step` / the event kind alone; a
    name that looks right without the typed field gets no arrow."""
    events = [ev(EventKind.HCCL, 100, core="server", obj="x", value="executed", handle=7, repeat=0),
              ev(EventKind.HCCL, 150, core="AIC0", obj="y", value=_Call.WAIT, handle=7),
              ev(EventKind.HCCL, 160, core="AIC1", obj="handle 7", value=_Call.WAIT, handle=8)]
    trace = merge_traces({0: recs(*events)})
    assert check_chrome_trace(trace)["s"] == 1
    put = ev(EventKind.PUT, 1_000, core="AIV1", obj="signal put", value=64, rank=0, pe=1, nbytes=64)
    named_only = ev(EventKind.BARRIER, 2_000, core="AIV1", obj="TeamBarrier.CrossDevice(1)", rank=1)
    typed = ev(EventKind.BARRIER, 3_000, core="AIV1", obj="b", rank=1, step="CrossDevice", job=1)
    trace = merge_traces({0: recs(put), 1: recs(named_only, typed)})
    flows = [e for e in trace["traceEvents"] if e["ph"] == "f"]
    assert [round(f["ts"], 1) for f in flows] == [2.0]  # the typed barrier (ends 3.0 us, slice mid 2.0 us)


def test_puts_flow_to_the_peers_next_cross_device_barrier_or_hccl_wait():
    udma_put = ev(EventKind.PUT, 1_000, core="AIV1", obj="udma_a2a", value=64, rank=0, pe=1, nbytes=64)
    own_put = ev(EventKind.PUT, 1_000, core="AIV0", obj="udma_a2a", value=64, rank=0, pe=0, nbytes=64)
    cross = {"step": "CrossDevice", "job": 1}
    stale = ev(EventKind.BARRIER, 500, core="AIV1", obj="TeamBarrier.CrossDevice(1)", rank=1, **cross)
    barrier = ev(EventKind.BARRIER, 2_000, core="AIV1", obj="TeamBarrier.CrossDevice(1)", rank=1, **cross)
    server_put = ev(EventKind.PUT, 3_000, core="server", obj="ws", value=64, rank=0, pe=1, nbytes=64, handle=1,
                    repeat=1)
    waits = [ev(EventKind.HCCL, t, core=c, obj="handle 1", value=_Call.WAIT, handle=1, rank=1)
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
