"""Runs the multi-rank tests (`@pytest.mark.mpi`) under mpirun at 2, 4 and 8 ranks, so that one plain
`python -m pytest` runs the whole suite. Each world size is one test here; its output names every
multi-rank test that ran, and a failure shows the tail of the ranks' output."""

import os
import re
import subprocess
import sys

import pytest

from mc2emu.launcher import find_mpiexec

WORLD_SIZES = (2, 4, 8)
# A hung multi-rank run is a failure of this test, never a hung suite (the tests' own deadlines are
# seconds; this is the backstop).
MPI_RUN_TIMEOUT_S = 900
# One multi-rank test that takes longer than this is hung: its stacks are dumped and the job ends.
PER_TEST_TIMEOUT_S = 240


@pytest.mark.parametrize("np_", WORLD_SIZES)
def test_multirank_suite(np_, pytestconfig):
    if os.environ.get("MC2EMU_SKIP_MPI"):
        pytest.skip("MC2EMU_SKIP_MPI is set")
    mpiexec = find_mpiexec()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    tests_dir = os.path.dirname(__file__)
    cmd = [mpiexec, "-n", str(np_), sys.executable, "-m", "pytest", "--only-mpi", "-q",
           "-o", f"faulthandler_timeout={PER_TEST_TIMEOUT_S}", "-x", tests_dir]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MPI_RUN_TIMEOUT_S,
                          check=False)
    out = proc.stdout + proc.stderr
    # every rank prints its own closing line (they may interleave): show one
    counts = re.findall(r"\d+ (?:passed|failed)[\w, ]*? in [\d.]+s", out)
    summaries = pytestconfig.__dict__.setdefault("_mc2emu_mpi_summaries", [])
    summaries.append(f"mpirun -n {np_}: {counts[-1] if counts else 'no summary line'}")
    assert proc.returncode == 0, f"mpirun -n {np_} exited {proc.returncode}:\n{out[-12000:]}"
