"""The launcher finds the `mpiexec` of the MPI that mpi4py uses and gives it the flags that MPI needs."""

import os
import subprocess
import sys
import time
from pathlib import Path

from mc2emu.launcher import MpiFlavor, find_mpiexec, mpiexec_command, mpiexec_flavor, run_job


def _library_of_mpi4py() -> str:
    # A subprocess: importing mpi4py.MPI here would initialize MPI in the test process.
    return subprocess.run([sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"],
                          capture_output=True, text=True, timeout=120, check=True).stdout


def test_mpiexec_belongs_to_the_mpi_of_mpi4py_and_gets_its_flags():
    lib = _library_of_mpi4py()
    want = MpiFlavor.OPEN_MPI if "Open MPI" in lib else MpiFlavor.MPICH
    exe = find_mpiexec()
    assert mpiexec_flavor(exe) is want, (exe, lib[:80])
    cmd, env = mpiexec_command(4, ["-c", "pass"])
    assert cmd[0] == exe and cmd[-3:] == [sys.executable, "-c", "pass"]
    assert ("--oversubscribe" in cmd) == (want is MpiFlavor.OPEN_MPI)
    assert env["OPENBLAS_NUM_THREADS"] == "1"
    if want is MpiFlavor.OPEN_MPI:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and "OMPI_MCA_osc" in env


def _processes_running(marker: str) -> list[int]:
    """Pids whose command line contains `marker` (this test's jobs only)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                continue   # ended meanwhile
    return pids


def test_run_job_returns_the_output_and_ends_a_hung_job_with_every_rank():
    out, err, returncode = run_job(*mpiexec_command(2, ["-c", "print('rank up')"]), 120)
    assert returncode == 0 and err == "" and out.count("rank up") == 2, out
    marker = f"run-job-test-{os.getpid()}"
    blocked = f"import threading  # {marker}\nthreading.Event().wait()"
    t0 = time.monotonic()
    out, _, returncode = run_job(*mpiexec_command(2, ["-c", blocked]), 5)
    assert returncode is None, out
    assert time.monotonic() - t0 < 60
    assert _processes_running(marker) == []
