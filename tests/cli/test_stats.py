"""Statistics derived from synthetic event streams (no MPI)."""

import enum

import pytest

from mc2emu.cli.stats import CaseStats, combine, derive_stats, intersect, length, subtract, union
from mc2emu.runtime import Event, EventKind


class _Role(enum.Enum):
    POST = "post"
    WAIT = "wait"


def ev(kind, t_ns, core="AIC0", obj="", value=None, seq=0, **extra):
    return Event(kind, 0, core, t_ns, seq, obj, value, extra)


def test_interval_algebra():
    assert union([(5, 7), (0, 2), (1, 3), (7, 8), (9, 9)]) == [(0, 3), (5, 8)]
    assert intersect([(0, 3), (5, 8)], [(2, 6)]) == [(2, 3), (5, 6)]
    assert subtract([(0, 10)], [(2, 3), (5, 6), (9, 12)]) == [(0, 2), (3, 5), (6, 9)]
    assert subtract([(0, 2), (4, 6)], []) == [(0, 2), (4, 6)]
    assert length([(0, 3), (5, 8)]) == 6


def test_counts_and_bytes():
    events = [ev(EventKind.MMAD, 10), ev(EventKind.MMAD, 20), ev(EventKind.MMAD, 30), ev(EventKind.FIXPIPE, 31),
              ev(EventKind.PUT, 40, core="AIV0", nbytes=1024), ev(EventKind.PUT, 41, core="AIV0", value=512),
              ev(EventKind.GET, 42, core="AIV0", nbytes="bad"), ev(EventKind.HCCL, 43, core="server", nbytes=100),
              ev(EventKind.SIGNAL, 44, core="AIV0", nbytes=8, role=_Role.POST),
              ev(EventKind.HAZARD, 45), ev(EventKind.WAIT_BEGIN, 50, obj="w"), ev(EventKind.WAIT_END, 80, obj="w"),
              ev(EventKind.WAIT_BEGIN, 90, core="AIV0", obj="x")]  # never ended: not a completed wait
    s = derive_stats(events)
    assert (s.tiles, s.mmads, s.puts, s.hazards) == (1, 3, 2, 1)
    assert s.bytes_moved == 1024 + 512 + 100       # signals are not data; a bad nbytes counts 0
    assert (s.waits, s.wait_ns) == (1, 30)
    assert s.events == len(events)


def test_tiles_fall_back_to_mmads_without_fixpipes():
    assert derive_stats([ev(EventKind.MMAD, 1), ev(EventKind.MMAD, 2)]).tiles == 2


def test_hidden_share_with_durations():
    # comm [0, 100) and [200, 300); compute [50, 250): hidden 50 + 50 of 200
    events = [ev(EventKind.PUT, 100, core="AIV0", dur_ns=100, nbytes=1),
              ev(EventKind.PUT, 300, core="AIV1", t0_ns=200, nbytes=1),
              ev(EventKind.MMAD, 250, dur_ns=200)]
    s = derive_stats(events)
    assert (s.comm_ns, s.hidden_ns) == (200, 100)
    assert s.hidden_share == pytest.approx(0.5)


def test_hidden_share_fallback_without_durations():
    # comm window = first..last put = [100, 500); AIC0 runs [0, 1000) but waits [200, 400): compute
    # inside the window = [100, 200) + [400, 500) = 200 of 400
    events = [ev(EventKind.CORE_BEGIN, 0, obj="k"), ev(EventKind.PUT, 100, core="AIV0"),
              ev(EventKind.WAIT_BEGIN, 200, obj="flag"), ev(EventKind.WAIT_END, 400, obj="flag"),
              ev(EventKind.PUT, 500, core="AIV0"), ev(EventKind.CORE_END, 1000, obj="k"),
              ev(EventKind.CORE_BEGIN, 0, core="AIV0", obj="k"), ev(EventKind.CORE_END, 1000, core="AIV0", obj="k")]
    s = derive_stats(events)
    assert s.comm_ns == 400 and s.hidden_ns == 200
    assert s.hidden_share == pytest.approx(0.5)


def test_no_communication_means_no_share():
    assert derive_stats([ev(EventKind.MMAD, 1)]).hidden_share is None
    assert derive_stats([]) == CaseStats()


def test_combine_sums_and_pools():
    a = CaseStats(tiles=2, puts=3, bytes_moved=10, comm_ns=100, hidden_ns=100, waits=1)
    b = CaseStats(tiles=1, puts=1, bytes_moved=5, comm_ns=300, hidden_ns=0, waits=2)
    c = combine([a, b])
    assert (c.tiles, c.puts, c.bytes_moved, c.waits) == (3, 4, 15, 3)
    assert c.hidden_share == pytest.approx(0.25)


def test_hccl_client_calls_do_not_stretch_the_communication_window():
    # server puts at 100 and 200; the client's Wait at 900 moves no bytes
    events = [ev(EventKind.CORE_BEGIN, 0, obj="k"), ev(EventKind.PUT, 100, core="server", nbytes=8),
              ev(EventKind.PUT, 200, core="server", nbytes=8), ev(EventKind.HCCL, 50, value="Prepare"),
              ev(EventKind.HCCL, 900, value="Wait"), ev(EventKind.HCCL, 250, core="server", value="executed",
                                                          nbytes=0),
              ev(EventKind.CORE_END, 1000, obj="k")]
    s = derive_stats(events)
    assert s.comm_ns == 100 and s.hidden_share == pytest.approx(1.0)
