"""The replay of a stream of launches (`replay(stream=True)`, `mc2emu.predict.loop`) on synthetic records of a
two-rank loop with known costs: rank 0 loads d0 and then posts a signal to rank 1, which waits for it and loads
d1. In stream order a rank's launch k + 1 starts when its launch k ends; with the host barrier (a single call's
replay) every launch starts together. Every expected time is computed here from the model's own figures."""

from __future__ import annotations

import itertools

import pytest

from mc2emu.comm.shmem import Cmp, SignalOp
from mc2emu.predict import CostModel, ReplayError, replay
from mc2emu.predict.loop import chain_loop, format_loop, loop_of
from mc2emu.runtime.comm_events import SignalPost, SignalWait
from mc2emu.runtime.events import (
    CoreBegin,
    CoreEnd,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmRead,
    LaunchBegin,
    LaunchEnd,
)

L = 1e-6   # the signal's latency
MODEL = CostModel().with_overrides(flag_latency_s=0.0, put_issue_s=0.0, put_latency_s=L, barrier_latency_s=2e-6)
_LAUNCH_NS = 1_000_000_000


def _load(nbytes: int) -> dict:
    return dict(buffer="x", lo=0, hi=nbytes, offset=0, shape=(nbytes,), strides=(1,), item=1)


def loop_records(n: int, bytes0: int, bytes1: int) -> dict[int, list]:
    """{rank: records} of `n` launches of the two-rank kernel (module docstring)."""
    out = {}
    for r in (0, 1):
        seq, ids = itertools.count(1), itertools.count(1)
        recs: list = []
        for k in range(n):
            t = itertools.count(k * _LAUNCH_NS + 1)

            def ev(cls, core, t=t, r=r, recs=recs, seq=seq, **fields):
                recs.append(cls(r, core, next(t) + (50 if r == 1 and cls is SignalWait else 0), next(seq), **fields))

            ev(LaunchBegin, "host", launch="loop", block_dim=1, kernel_type="AIV_ONLY", index=k)
            ev(CoreBegin, "AIV0", launch="loop")
            if r == 0:   # load, wait for the load (a flag round on its own core), post to rank 1
                ev(GmRead, "AIV0", **_load(bytes0))
                sid, tok = next(ids), next(ids)
                ev(FlagSet, "AIV0", fid=1, mode=0, pipe="PIPE_MTE2", set_id=sid)
                ev(FlagRaise, "AIV0", target="AIV0", fid=1, count=1, mode=0, mode4=False, token=tok,
                   sources=(("AIV0", sid),))
                ev(FlagConsume, "AIV0", fid=1, count=0, mode=0, token=tok)
                ev(SignalPost, "AIV0", window="sig", offset=0, nbytes=8, src_rank=0, pe=1, op_seq=k, op=SignalOp.SET,
                   signal=k + 1)
            else:        # wait for rank 0's signal, then load
                ev(SignalWait, "AIV0", window="sig", offset=0, nbytes=8, src_rank=1, pe=1, op_seq=k, cmp=Cmp.EQ,
                   expected=k + 1, observed=k + 1)
                ev(GmRead, "AIV0", **_load(bytes1))
            ev(CoreEnd, "AIV0", launch="loop")
            ev(LaunchEnd, "host", launch="loop", block_dim=1, index=k)
        out[r] = recs
    return out


def _d(nbytes: int) -> float:
    return MODEL.mte_s(nbytes, 1)


def test_one_launch_of_a_stream_is_the_single_calls_prediction():
    recs = loop_records(1, 4096, 65536)
    single, stream = replay(recs, MODEL), replay(recs, MODEL, stream=True)
    assert stream.total_s == single.total_s == pytest.approx(_d(4096) + L + _d(65536), rel=1e-12)
    (row,) = loop_of(stream).rows
    assert row.gap_s is None and row.skew_s == 0 and row.device_s == pytest.approx(stream.total_s, rel=1e-12)
    assert sum(stream.critical_by_launch.values()) == pytest.approx(stream.total_s, rel=1e-12)


def test_a_slow_peer_drifts_behind_and_the_fast_rank_runs_ahead():
    """Rank 1's launch is longer than rank 0's: rank 0 begins launch k at k d0 (nothing holds it), rank 1 at
    d0 + L + k d1 (its own previous end): the skew grows by d1 - d0 per launch, and rank 1's waits never wait
    (rank 0's post of launch k landed long before). The host-barrier replay of the same records starts every
    launch together: N (d0 + L + d1) plus a barrier latency per later launch."""
    n, d0, d1 = 5, _d(4096), _d(262144)
    assert d1 > d0
    recs = loop_records(n, 4096, 262144)
    loop = loop_of(replay(recs, MODEL, stream=True))
    assert loop.total_s == pytest.approx(d0 + L + n * d1, rel=1e-12)
    for row in loop.rows:
        k = row.launch
        assert row.per_rank[0] == pytest.approx((k * d0, (k + 1) * d0), rel=1e-12)
        assert row.per_rank[1][1] == pytest.approx(d0 + L + (k + 1) * d1, rel=1e-12)
        assert row.skew_s == pytest.approx(0 if k == 0 else d0 + L + k * (d1 - d0), rel=1e-12, abs=1e-15)
        if k:   # rank 0 is in launch k while rank 1 is still in launch k - 1
            assert row.gap_s == pytest.approx(k * d0 - (d0 + L + k * d1), rel=1e-12)
    assert loop.max_skew_s == loop.rows[-1].skew_s
    barrier = replay(recs, MODEL)
    assert barrier.total_s == pytest.approx(n * (d0 + L + d1) + (n - 1) * MODEL.barrier_latency_s, rel=1e-12)
    assert loop.total_s < barrier.total_s


def test_a_fast_waiter_waits_on_the_peer_still_in_its_previous_launch():
    """Rank 1's launch is shorter: it begins launch k + 1 at once and its wait holds it until rank 0's post
    of launch k + 1: each launch of rank 1 ends L + d1 after rank 0's, the loop is N d0 + L + d1, and the
    critical path runs through rank 0's launches (its parts per launch sum to the loop)."""
    n, d0, d1 = 4, _d(262144), _d(4096)
    p = replay(loop_records(n, 262144, 4096), MODEL, stream=True)
    loop = loop_of(p)
    assert loop.total_s == pytest.approx(n * d0 + L + d1, rel=1e-12)
    for row in loop.rows[1:]:
        assert row.skew_s == pytest.approx(L + d1, rel=1e-12)
        assert row.gap_s == pytest.approx(-(L + d1), rel=1e-12)
        assert row.device_s == pytest.approx(d0, rel=1e-12)   # rank 1 spends d0 in it, mostly waiting
    assert sum(p.critical_by_launch.values()) == pytest.approx(loop.total_s, rel=1e-12)
    assert all(p.critical_by_launch[k] == pytest.approx(d0, rel=1e-12) for k in range(n - 1))
    assert {s.launch for s in p.critical_path if s.cat == "mte2"} == set(range(n))
    text = format_loop(loop)
    assert f"loop: {n} launch(es) on 2 rank(s) in {loop.total_s * 1e6:.2f} us" in text


def test_one_npu_launches_chain():
    single = replay({0: loop_records(1, 4096, 0)[0]}, MODEL)
    loop = chain_loop([single] * 3)
    assert loop.total_s == pytest.approx(3 * single.total_s, rel=1e-12)
    assert [r.begin_s for r in loop.rows] == pytest.approx([0, single.total_s, 2 * single.total_s])
    assert all(r.gap_s in (None, 0.0) for r in loop.rows)


def test_a_rank_missing_a_launch_is_named():
    recs = loop_records(2, 4096, 4096)
    recs[1] = [e for e in recs[1] if not (isinstance(e, LaunchBegin | LaunchEnd) and e.index == 1)]
    with pytest.raises(ReplayError, match=r"launch 1 has no record on rank\(s\) \[1\]"):
        loop_of(replay(recs, MODEL, stream=True))
