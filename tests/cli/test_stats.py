"""Statistics derived from synthetic event streams (no MPI)."""

import enum

import pytest

from mc2emu.cli.stats import CaseStats, combine, derive_stats, intersect, length, subtract, union
from mc2emu.runtime import Hazard, Severity
from mc2emu.runtime.comm_events import Get, HcclExecuted, HcclPrepare, HcclWait, Put, SignalPost
from mc2emu.runtime.events import CoreBegin, CoreEnd, Fixpipe, HazardReported, Mmad, WaitBegin, WaitEnd


class _Op(enum.Enum):
    SET = "set"


def ev(cls, t_ns, core="AIC0", seq=0, **fields):
    return cls(0, core, t_ns, seq, **fields)


def mmad(t_ns, t0_ns=0):
    return ev(Mmad, t_ns, m=16, n=16, k=64, tile=(0, 0), l0=0, aType="e4m3", unitFlag=3, cmatrixInitVal=True,
              bias=False, t0_ns=t0_ns)


def put(t_ns, core="AIV0", nbytes=0, t0_ns=0, cls=Put):
    return ev(cls, t_ns, core, window="win", offset=0, nbytes=nbytes, src_rank=0, pe=1, op_seq=0, t0_ns=t0_ns)


def wait(cls, t_ns, what, core="AIC0"):
    return ev(cls, t_ns, core, what=what, expected="", setter="")


def kernel(cls, t_ns, core="AIC0"):
    return ev(cls, t_ns, core, launch="k")


def test_interval_algebra():
    assert union([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]
    assert intersect([(0, 3), (5, 8)], [(2, 6)]) == [(2, 3), (5, 6)]
    assert subtract([(0, 10)], [(2, 3), (5, 6), (9, 12)]) == [(0, 2), (3, 5), (6, 9)]
    assert subtract([(0, 2), (4, 6)], []) == [(0, 2), (4, 6)]
    assert length([(0, 3), (5, 8)]) == 6


def test_counts_and_bytes():
    events = [mmad(10), mmad(20), mmad(30),
              ev(Fixpipe, 31, tensor="c", origin=(0, 0), m=16, n=16, l0cOffset=0, dtype="bfloat16", atomic=False,
                 unitFlag=3),
              put(40, nbytes=1024), put(41, nbytes=512), put(42, nbytes=100, cls=Get),
              ev(HcclExecuted, 43, "server", handle=1, repeat=0, op=_Op.SET, session=0),
              ev(SignalPost, 44, "AIV0", window="win", offset=0, nbytes=8, src_rank=0, pe=1, op_seq=0, op=_Op.SET,
                 signal=1),
              ev(HazardReported, 45, hazard=Hazard.DEADLOCK, severity=Severity.ERROR, message="m"),
              wait(WaitBegin, 50, "w"), wait(WaitEnd, 80, "w"),
              wait(WaitBegin, 90, "x", core="AIV0")]  # never ended: not a completed wait
    s = derive_stats(events)
    assert (s.tiles, s.mmads, s.puts, s.hazards) == (1, 3, 2, 1)
    assert s.bytes_moved == 1024 + 512 + 100       # puts and gets; signals are not data, HCCL calls move none
    assert (s.waits, s.wait_ns) == (1, 30)
    assert s.events == len(events)


def test_tiles_fall_back_to_mmads_without_fixpipes():
    assert derive_stats([mmad(1), mmad(2)]).tiles == 2


def test_hidden_share_with_durations():
    # comm [1000, 1100) and [1200, 1300); compute [1050, 1250): hidden 50 + 50 of 200
    events = [put(1100, "AIV0", nbytes=1, t0_ns=1000),
              put(1300, "AIV1", nbytes=1, t0_ns=1200),
              mmad(1250, t0_ns=1050)]
    s = derive_stats(events)
    assert (s.comm_ns, s.hidden_ns) == (200, 100)
    assert s.hidden_share == pytest.approx(0.5)


def test_hidden_share_fallback_without_durations():
    # comm window = first..last put = [100, 500); AIC0 runs [0, 1000) but waits [200, 400): compute
    # inside the window = [100, 200) + [400, 500) = 200 of 400
    events = [kernel(CoreBegin, 0), put(100), wait(WaitBegin, 200, "flag"), wait(WaitEnd, 400, "flag"),
              put(500), kernel(CoreEnd, 1000), kernel(CoreBegin, 0, "AIV0"), kernel(CoreEnd, 1000, "AIV0")]
    s = derive_stats(events)
    assert s.comm_ns == 400 and s.hidden_ns == 200
    assert s.hidden_share == pytest.approx(0.5)


def test_no_communication_means_no_share():
    assert derive_stats([mmad(1)]).hidden_share is None
    assert derive_stats([]) == CaseStats()


def test_combine_sums_and_pools():
    a = CaseStats(tiles=2, puts=3, bytes_moved=10, comm_ns=100, hidden_ns=100, waits=1)
    b = CaseStats(tiles=1, puts=1, bytes_moved=5, comm_ns=300, hidden_ns=0, waits=2)
    c = combine([a, b])
    assert (c.tiles, c.puts, c.bytes_moved, c.waits) == (3, 4, 15, 3)
    assert c.hidden_share == pytest.approx(0.25)


def test_hccl_client_calls_do_not_stretch_the_communication_window():
    # server puts at 100 and 200; the client's Wait at 900 moves no bytes
    events = [kernel(CoreBegin, 0), put(100, "server", nbytes=8), put(200, "server", nbytes=8),
              ev(HcclPrepare, 50, handle=1, op=_Op.SET, count=8, repeat=1, session=0),
              ev(HcclWait, 900, handle=1, rc=0, waits=1, total=1, session=0),
              ev(HcclExecuted, 250, "server", handle=1, repeat=0, op=_Op.SET, session=0),
              kernel(CoreEnd, 1000)]
    s = derive_stats(events)
    assert s.comm_ns == 100 and s.hidden_share == pytest.approx(1.0)
