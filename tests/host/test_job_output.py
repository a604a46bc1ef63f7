"""A job whose calls end in a deadlock ends cleanly: exit code 0 and no MPI library warning (MPICH's UCX
layer prints "destroying inuse region" per window key still held at MPI_Finalize), with the UCX log level
left at its default."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mc2emu.launcher import find_mpiexec

JOBS = Path(__file__).with_name("harness_jobs.py")
RANKS = 2
JOB_TIMEOUT_S = 300


@pytest.mark.parametrize("job", ["deadlock-then-exit", "a2a-deadlock-then-exit"])
def test_deadlock_job_ends_without_mpi_warnings(job):
    if os.environ.get("MC2EMU_SKIP_MPI"):
        pytest.skip("MC2EMU_SKIP_MPI is set")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UCX_")}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([find_mpiexec(), "-n", str(RANKS), sys.executable, str(JOBS), job], env=env,
                          capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count("deadlock reported") == RANKS, out[-4000:]
    noise = [line for line in out.splitlines() if "UCX" in line or "WARN" in line or "inuse" in line]
    assert not noise, "\n".join(noise[:10])
