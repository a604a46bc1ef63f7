"""Finding `mpiexec` and (re)launching a module under it.

The MPICH and Open MPI wheels put `mpiexec` in the environment's `bin` (the venv, `~/.local/bin`, or the
interpreter's prefix); `importlib.metadata` finds it from the installed files, so `python -m mc2emu.run`
works on a fresh machine without mpirun on PATH (MPI-NOTES "Launching").
"""

from __future__ import annotations

import contextlib
import enum
import functools
import importlib.metadata
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Environment every rank the project launches gets: 8 ranks on 2 cores with threaded BLAS run 13x slower
# than single-threaded.
RANK_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class MpiexecNotFound(RuntimeError):
    pass


def find_mpiexec() -> str:
    candidates = [Path(sys.executable).parent / "mpiexec"]
    for dist in ("mpich", "openmpi", "impi-rt"):
        try:
            files = importlib.metadata.distribution(dist).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in files:
            if f.name == "mpiexec":
                candidates.append(Path(f.locate()).resolve())
    for c in candidates:
        if c.exists() and os.access(c, os.X_OK):
            return str(c)
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found:
        return found
    raise MpiexecNotFound("no mpiexec found: install the MPI wheel (pip install mpich) or a system MPI")


class MpiFlavor(enum.Enum):
    """Which MPI an `mpiexec` belongs to (they need different flags)."""

    MPICH = "mpich"          # hydra: MPICH, Intel MPI, MVAPICH
    OPEN_MPI = "openmpi"     # prterun / orterun
    UNKNOWN = "unknown"


@functools.lru_cache(maxsize=8)
def mpiexec_flavor(exe: str) -> MpiFlavor:
    """Ask `exe --version` (both wheels' launchers answer in well under a second): the file name or path
    says nothing (a venv's `bin/mpiexec` is Open MPI's or MPICH's alike)."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return MpiFlavor.UNKNOWN
    text = (out.stdout + out.stderr).lower()
    if "open mpi" in text or "open-mpi" in text or "openrte" in text or "prrte" in text:
        return MpiFlavor.OPEN_MPI
    if "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        return MpiFlavor.MPICH
    return MpiFlavor.UNKNOWN


def mpiexec_command(np_: int, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `argv` (a Python argv tail) on `np_` ranks with the installed
    MPI's own `mpiexec`. Open MPI refuses more ranks than cores without `--oversubscribe`, refuses root
    without the two ALLOW variables, and prints an error per window from its UCX one-sided component
    when no UCX device fits (MPI-NOTES "Launching"); settings the user made in the environment win.
    No progress setting is needed: every rank drives its own (mc2emu.comm.progress_engine)."""
    exe = find_mpiexec()
    cmd = [exe, "-n", str(np_)]
    env = dict(os.environ, **RANK_ENV)
    if mpiexec_flavor(exe) is MpiFlavor.OPEN_MPI:
        cmd.insert(1, "--oversubscribe")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        env.setdefault("OMPI_MCA_osc", "^ucx")
    return [*cmd, sys.executable, *argv], env


# How often a running job's process tree is recorded (so orphans of a dying mpiexec are still known).
TREE_POLL_S = 0.5
# SIGTERM, then SIGKILL after this grace.
KILL_GRACE_S = 2.0


def _stat(pid: int | str) -> list[str] | None:
    """The fields of `/proc/<pid>/stat` after the command name (state first); None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> int | None:
    """The start time (clock ticks after boot) of a live process; None when gone or a zombie."""
    fields = _stat(pid)
    try:
        return None if fields is None or fields[0] in ("Z", "X") else int(fields[19])
    except (ValueError, IndexError):
        return None


def process_tree(pid: int) -> set[tuple[int, int]]:
    """(pid, start time) of `pid` and its live descendants (hydra puts each rank in a session of its own, and
    Open MPI's daemon starts them outside mpiexec's process group, so a process group does not reach them)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields is None:
            continue
        try:
            ppid = int(fields[1])
        except (ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        st = _start_time(p)
        if st is not None:
            out.add((p, st))
        todo.extend(children.get(p, []))
    return out


def end_processes(known: set[tuple[int, int]]) -> None:
    """SIGTERM, then SIGKILL, the recorded processes that still run (same pid and start time: never a
    process that merely reuses a pid)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p, st in known if _start_time(p) == st]
        if not alive:
            return
        for p in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        while time.monotonic() < deadline and any(_start_time(p) == st for p, st in known):
            time.sleep(0.05)   # host teardown: polls other processes' exit (no kernel core waits here)


def run_job(cmd: list[str], env: dict[str, str], timeout: float, *,
            merge_stderr: bool = True) -> tuple[str, str, int | None]:
    """Run an `mpiexec_command` job: (stdout, stderr, exit code). With `merge_stderr` stderr is in stdout
    (and "" is returned for it). A job still running after `timeout` s is ended and its exit code is None.
    Every process of the job (its tree, recorded while it runs) left after it ended is ended too: only the
    processes this job started."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE, text=True,
                            start_new_session=True)
    known: set[tuple[int, int]] = set()
    rc: int | None = None
    out = err = ""
    try:
        while True:
            known |= process_tree(proc.pid)
            try:
                out, err = proc.communicate(timeout=TREE_POLL_S)
                rc = proc.returncode
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() - t0 > timeout:
                    break
    finally:
        end_processes(known)   # the hung job, or ranks a finished mpiexec left behind
        if rc is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                out, err = proc.communicate(timeout=KILL_GRACE_S)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out or "", err or "", rc


def under_mpirun() -> bool:
    """True when this process was started by an MPI launcher (hydra or ORTE/PRRTE)."""
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE",
                                         "HYDRA_CONTROL_FD", "PMI_FD"))


# Host-side barrier polling: MPICH's blocking Barrier busy-polls and would take the cores from the ranks
# still computing; a test every 0.1 ms growing to 5 ms costs nothing and adds at most 5 ms.
IDLE_POLL_MIN_S = 1e-4
IDLE_POLL_MAX_S = 5e-3


def idle_barrier(comm: Any) -> None:
    """A rank barrier for host code that sleeps while it waits (Ibarrier + a backoff poll). Host code only:
    the emulated cores wait through the wait primitive, with a deadline."""
    req = comm.Ibarrier()
    delay = IDLE_POLL_MIN_S
    while not req.Test():
        time.sleep(delay)
        delay = min(2 * delay, IDLE_POLL_MAX_S)
