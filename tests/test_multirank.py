"""Runs the multi-rank tests (`@pytest.mark.mpi`) under mpirun at 2, 4 and 8 ranks, so that one plain
`python -m pytest` runs the whole suite. Each world size is one test here; its output names every
multi-rank test that ran, and a failure shows the tail of the ranks' output.

World sizes and MPI transports are covered on a diagonal: 2 and 8 ranks over MPICH's shared memory, 4
ranks over MPICH's network module (`MPIR_CVAR_NOLOCAL=1`: every rank as if on another host, the path a
cluster takes; docs/mpi-transports.md). The variable is MPICH's own and means nothing to another MPI, so
under Open MPI or a system MPI all three sizes run on that MPI's default path. `MC2EMU_MPI_SIZES=2,4` runs
a subset of the world sizes; the ranks inherit the environment, so `MPIR_CVAR_NOLOCAL=1` set by the caller
puts every size on the network path, and `MPIR_CVAR_NOLOCAL=0` keeps 4 ranks on
shared memory.

Only the test files that hold a multi-rank test are handed to the ranks (a file holds one if it names
`mark.mpi`): every rank collects what it is given, and collecting the serial files 8 times over is waste.
`MC2EMU_MPI_IGNORE=tests/protocol,tests/property` leaves out the files under those paths: CI's Open MPI step
re-runs the suite at 2 ranks over another MPI and skips the files whose subject is not the transport (the
protocol-only record equivalence, the property tests), which the README suite runs at every size."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from mc2emu.launcher import MpiFlavor, find_mpiexec, mpiexec_command, mpiexec_flavor

WORLD_SIZES = (2, 4, 8)
# A hung multi-rank run is a failure of this test, never a hung suite (the tests' own deadlines are
# seconds; this is the backstop).
MPI_RUN_TIMEOUT_S = 900
# One multi-rank test that takes longer than this is hung: its stacks are dumped and the job ends.
PER_TEST_TIMEOUT_S = 240
# The world size whose run takes MPICH's network path unless the caller chose a path.
NETWORK_PATH_SIZE = 4


def mpi_test_files(tests_dir: str) -> list[str]:
    """The test files under `tests_dir` that hold a multi-rank test, sorted (this file excluded)."""
    found = []
    for root, _dirs, files in os.walk(tests_dir):
        for name in files:
            path = os.path.join(root, name)
            if (name.startswith("test_") and name.endswith(".py") and path != os.path.abspath(__file__)
                    and "mark.mpi" in Path(path).read_text(encoding="utf-8")):
                found.append(path)
    ignored = [os.path.abspath(p) for p in os.environ.get("MC2EMU_MPI_IGNORE", "").split(",") if p]
    return sorted(f for f in found
                  if not any(os.path.abspath(f) == p or os.path.abspath(f).startswith(p + os.sep) for p in ignored))


@pytest.mark.parametrize("np_", WORLD_SIZES)
def test_multirank_suite(np_, pytestconfig):
    if os.environ.get("MC2EMU_SKIP_MPI"):
        pytest.skip("MC2EMU_SKIP_MPI is set")
    sizes = os.environ.get("MC2EMU_MPI_SIZES")
    if sizes and str(np_) not in sizes.split(","):
        pytest.skip(f"MC2EMU_MPI_SIZES={sizes}")
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    files = mpi_test_files(tests_dir)
    assert files, f"no multi-rank test file under {tests_dir}"
    cmd, env = mpiexec_command(np_, ["-m", "pytest", "--only-mpi", "-q", "--color=no",
                                     "-o", f"faulthandler_timeout={PER_TEST_TIMEOUT_S}", "-x", *files])
    if np_ == NETWORK_PATH_SIZE and mpiexec_flavor(find_mpiexec()) is MpiFlavor.MPICH:
        env.setdefault("MPIR_CVAR_NOLOCAL", "1")
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MPI_RUN_TIMEOUT_S,
                          check=False)
    out = proc.stdout + proc.stderr
    summaries = pytestconfig.__dict__.setdefault("_mc2emu_mpi_summaries", [])
    path = " (MPICH network path)" if env.get("MPIR_CVAR_NOLOCAL") == "1" else ""
    summaries.append(f"mpirun -n {np_}{path}: {summary_line(out) or 'no summary line'}")
    assert proc.returncode == 0, f"mpirun -n {np_} exited {proc.returncode}:\n{strip_ansi(out)[-12000:]}"


# SGR colour sequences: Open MPI's launcher gives each rank a pseudo-terminal, so pytest colours its output
# there even when the launcher's own output is a pipe ("6 passed\x1b[0m\x1b[32m in 43.47s"); MPICH's does not.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
# pytest's closing counts: "12 passed, 3 skipped, 1 warning in 4.20s" (also "(0:01:25)" after the seconds).
SUMMARY = re.compile(r"\d+ (?:passed|failed|skipped|errors?|deselected)[\w, ]*? in [\d.]+s")


def strip_ansi(text: str) -> str:
    return ANSI_ESCAPE.sub("", text)


def summary_line(out: str) -> str | None:
    """The last rank's closing counts in the ranks' combined output (every rank prints its own closing line;
    they may interleave), or None."""
    counts = SUMMARY.findall(strip_ansi(out))
    return counts[-1] if counts else None


# What the two launchers' ranks print at the end, as captured from 2-rank runs (tests/comm/test_comm_world.py
# under MPICH; a pass-skip-skip file under Open MPI 5.0.11).
MPICH_TAIL = "......" + " " * 67 + "[100%]\n6 passed in 43.47s\n"
OPEN_MPI_TAIL = ("\x1b[32m.\x1b[0m\x1b[33ms\x1b[0m\x1b[33ms\x1b[0m\x1b[32m" + " " * 70 + "[100%]\x1b[0m\n"
                 "MPI vendor: Open MPI 5.0.11\n"
                 "\x1b[32m\x1b[32m\x1b[1m1 passed\x1b[0m, \x1b[33m2 skipped\x1b[0m\x1b[32m in 18.93s\x1b[0m\x1b[0m\n"
                 "\x1b[32m\x1b[32m\x1b[1m1 passed\x1b[0m, \x1b[33m2 skipped\x1b[0m\x1b[32m in 18.66s\x1b[0m\x1b[0m\n")


@pytest.mark.parametrize(("out", "line"), [
    (MPICH_TAIL, "6 passed in 43.47s"),
    (OPEN_MPI_TAIL, "1 passed, 2 skipped in 18.66s"),
    ("3 failed, 5 passed in 9.01s (0:00:09)", "3 failed, 5 passed in 9.01s"),
    ("rank 0: aborting all ranks\n", None),
])
def test_summary_line_reads_both_launchers_output(out, line):
    assert summary_line(out) == line


def test_ignored_paths_leave_out_their_files_and_only_theirs(monkeypatch):
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    monkeypatch.delenv("MC2EMU_MPI_IGNORE", raising=False)   # CI's Open MPI step sets it for the whole run
    every = mpi_test_files(tests_dir)
    monkeypatch.setenv("MC2EMU_MPI_IGNORE", "tests/protocol,tests/property")
    monkeypatch.chdir(os.path.dirname(tests_dir))
    kept = mpi_test_files(tests_dir)
    left = sorted(set(every) - set(kept))
    assert left and all(f"{os.sep}tests{os.sep}protocol{os.sep}" in f or f"{os.sep}tests{os.sep}property{os.sep}" in f
                        for f in left)
    assert [f for f in every if "protocol" not in f and "property" not in f] == kept
