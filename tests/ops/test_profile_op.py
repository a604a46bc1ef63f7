"""launch/profile_op.py's wrappers: a profiled function's thread CPU and calls, summed over threads, with a
call nested in a call of the same function counted once (serial: no MPI)."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def profile_op():
    sys.path.insert(0, str(ROOT / "launch"))
    spec = importlib.util.spec_from_file_location("profile_op", ROOT / "launch" / "profile_op.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(ROOT / "launch"))


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_nested_calls_count_once_and_threads_add_up(profile_op):
    prof = profile_op.Profile()

    def work(depth: int) -> int:
        _busy(0.01)
        return depth if depth == 0 else timed(depth - 1)

    timed = prof.wrap("work", work)
    assert timed(2) == 0                      # three nested calls: one outer call counted
    assert prof.calls["work"] == 1 and 0.025 <= prof.cpu["work"] < 0.2
    threads = [threading.Thread(target=timed, args=(0,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert prof.calls["work"] == 5 and 0.065 <= prof.cpu["work"] < 0.5


def test_install_reaches_every_profiled_function(profile_op, monkeypatch):
    prof = profile_op.Profile()
    originals = []
    for module, path in profile_op.PROFILED:       # every target exists where the list says
        owner, attr = profile_op.resolve(module, path)
        originals.append((owner, attr, getattr(owner, attr)))
        monkeypatch.setattr(owner, attr, getattr(owner, attr))   # undone after the test
    prof.install()
    for owner, attr, original in originals:
        assert getattr(owner, attr).__wrapped__ is original, attr


def test_report_gives_per_rank_means_and_the_step_counts(profile_op):
    rows = [{"cpu": 2.0, "sys": 0.2, "main": 0.1, "vcsw": 10, "minflt": 100,
             "fn_cpu": {"BlockMmadMx.Mmad": 1.0, "x": 0.5}, "fn_calls": {"BlockMmadMx.Mmad": 8, "x": 1}},
            {"cpu": 4.0, "sys": 0.4, "main": 0.3, "vcsw": 30, "minflt": 300,
             "fn_cpu": {"BlockMmadMx.Mmad": 3.0}, "fn_calls": {"BlockMmadMx.Mmad": 8}}]
    lines = profile_op.report(rows, 8)
    assert lines[0].startswith("per rank (mean of 2): CPU 3.000 s (system 0.300), main thread 0.200 s, 20 ")
    mmad = next(line for line in lines if line.endswith("BlockMmadMx.Mmad"))
    assert mmad.split()[:4] == ["2.000", "66.7%", "8", "250000.0"]
    x = next(line for line in lines if line.endswith(" x"))
    assert x.split()[:3] == ["0.250", "8.3%", "0"]   # 0.5 calls per rank, printed to whole calls
    assert lines.index(mmad) < lines.index(x)        # the largest first
    assert lines[-1] == "MMAD steps per rank: 8 (the floor's tiling of the same output: 8)"
    rows[0]["hazards"] = {"UNCONSUMED_FLAG": 2}
    rows[1]["hazards"] = {"UNCONSUMED_FLAG": 3, "X": 1}
    assert profile_op.report(rows, 8)[-1] == "hazards reported (all ranks): UNCONSUMED_FLAG x5, X x1"
