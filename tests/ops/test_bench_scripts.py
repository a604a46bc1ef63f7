"""The MC2 benches end to end at toy shapes (2 ranks, ~1 s each): they run, the emulator's output and the floor's
(`launch/mmad_floor.py`) pass the operator's rule against the golden, and every report line is printed. Timing
is not asserted: the ratios are measured by running the benches themselves (docs/performance.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mc2emu.launcher import mpiexec_command, run_job

if os.environ.get("MC2EMU_SKIP_MPI"):
    pytest.skip("MC2EMU_SKIP_MPI is set", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
HARD_TIMEOUT_S = 120.0


def _run_bench(script: str, *args: str) -> str:
    out, _, returncode = run_job(*mpiexec_command(2, [str(ROOT / "launch" / script), *args]), HARD_TIMEOUT_S)
    if returncode is None:
        pytest.fail(f"{script} did not end in {HARD_TIMEOUT_S} s:\n{out}")
    assert returncode == 0, out
    return out


def test_bench_qmrs_reports_the_emulator_and_the_floor_bit_exact():
    out = _run_bench("bench_qmrs.py", "--m", "256", "--k", "256", "--n", "128")
    assert "bit-exact vs golden      pass" in out, out
    assert "floor: the emulator's MMAD steps alone" in out, out
    assert "emulator / floor" in out, out
    assert "its C_j bit-exact vs the golden's  pass" in out, out


def test_bench_ag_reports_the_emulator_and_the_floor_by_the_st_rule():
    out = _run_bench("bench_ag.py", "--m", "64", "--k", "256", "--n", "128")
    assert "AG ST verify rule        pass" in out, out
    assert "floor: the emulator's MMAD steps alone" in out, out
    assert "its C vs the golden, AG ST rule  pass" in out, out


def test_bench_without_the_floor_prints_none():
    out = _run_bench("bench_qmrs.py", "--m", "256", "--k", "256", "--n", "128", "--no-floor")
    assert "bit-exact vs golden      pass" in out, out
    assert "floor:" not in out, out
