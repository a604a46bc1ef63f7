"""The clock offset that aligns the ranks' time stamps (trace merge, the predictor's cross-rank pairings)."""

from mc2emu.trace import chrome_trace


def test_the_clock_offset_keeps_the_narrowest_bracketed_sample(monkeypatch):
    """A rank preempted between its two clock reads must not shift its stamps: of the bracketed samples the
    narrowest is kept (the predictor pairs signal waits with posts across ranks by these stamps)."""
    # perf_counter_ns / time_ns reads: the first sample is paused 5 ms between its reads, the second is tight.
    counter = iter([1_000, 5_001_000, 10_000_000, 10_000_100] + [20_000_000 + i for i in range(100)])
    wall = iter([1_000_000_000_000, 1_000_009_990_000] + [2_000_000_000_000] * 50)
    monkeypatch.setattr(chrome_trace.time, "perf_counter_ns", lambda: next(counter))
    monkeypatch.setattr(chrome_trace.time, "time_ns", lambda: next(wall))
    monkeypatch.setattr(chrome_trace, "CLOCK_OFFSET_SAMPLES", 2)
    assert chrome_trace.clock_offset_ns() == 1_000_009_990_000 - 10_000_050
