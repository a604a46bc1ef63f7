"""Runs the multi-rank tests (`@pytest.mark.mpi`) under mpirun at 2, 4 and 8 ranks, so that one plain
`python -m pytest` runs the whole suite. Each world size is one test here; its output names every
multi-rank test that ran, and a failure shows the tail of the ranks' output.

`mpiexec` and its flags come from the installed MPI (`mc2emu.launcher.mpiexec_command`: MPICH or Open
MPI). `MC2EMU_MPI_SIZES=2,4` runs a subset of the world sizes (CI's inter-node and Open MPI runs); the
ranks inherit the environment, so `MPIR_CVAR_NOLOCAL=1` puts the whole suite on MPICH's network path."""

import os
import re
import subprocess

import pytest

from mc2emu.launcher import mpiexec_command

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
    sizes = os.environ.get("MC2EMU_MPI_SIZES")
    if sizes and str(np_) not in sizes.split(","):
        pytest.skip(f"MC2EMU_MPI_SIZES={sizes}")
    tests_dir = os.path.dirname(__file__)
    cmd, env = mpiexec_command(np_, ["-m", "pytest", "--only-mpi", "-q",
                                     "-o", f"faulthandler_timeout={PER_TEST_TIMEOUT_S}", "-x", tests_dir])
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=MPI_RUN_TIMEOUT_S,
                          check=False)
    out = proc.stdout + proc.stderr
    # every rank prints its own closing line (they may interleave): show one
    counts = re.findall(r"\d+ (?:passed|failed)[\w, ]*? in [\d.]+s", out)
    summaries = pytestconfig.__dict__.setdefault("_mc2emu_mpi_summaries", [])
    summaries.append(f"mpirun -n {np_}: {counts[-1] if counts else 'no summary line'}")
    assert proc.returncode == 0, f"mpirun -n {np_} exited {proc.returncode}:\n{out[-12000:]}"
