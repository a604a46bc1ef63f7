"""Run a user's own kernel with every check, on the harness the operators use: `run_kernel` / `KernelRun`.

`KernelRun` is the set-up context (`with KernelRun(comm=...) as run:`): `run.alloc` / `run.window` declare once
what each buffer holds (`MemRole`), `run.launch` launches, `run.read` reads an output back; leaving the block
is the teardown. `run_kernel(kernel, *args, block_dim=, kernel_type=, setup=...)` is the one-call form. Every
run gets, as the operators do (`mc2emu.host.harness`):
- deadlock diagnosis across ranks: a hang on any rank becomes one report and a `DeadlockError` on every rank;
- the happens-before checker, finished behind an agreed barrier (READ_BEFORE_WAIT, READ_OVERWRITTEN,
  UNWAITED_SIGNAL, HCCL Wait proofs), the device's flag and pairing checks (UNCONSUMED_FLAG, PIPE_NOT_ON_CORE, ...);
- never-written data poisoned and reported: PAYLOAD GM and PAYLOAD windows start as POISON_BYTE in check mode
  (a read of bytes nobody wrote is READ_UNWRITTEN); CONTROL buffers (signals, status, barrier words) start at 0;
- the trace when asked (`trace=PATH`: one merged Chrome trace on rank 0, or one file per rank after a failure);
- teardown on success, deadlock or error, the same way on every rank.
With `check=True` error-severity hazards raise `HazardError` at the end (its `output` is the `KernelResult`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.arch.errors import ConstraintError
from mc2emu.host.call_options import Observer, call_options
from mc2emu.host.collective import world_comm
from mc2emu.host.harness import HarnessLaunch, LaunchHarness
from mc2emu.runtime.gm import MemRole, copy_out
from mc2emu.runtime.hazards import HazardError, HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.trace.chrome_trace import ChromeTraceRecorder, clock_offset_ns, merge_traces, write_trace

if TYPE_CHECKING:
    from mc2emu.comm.window import Window
    from mc2emu.comm.world import CommWorld
    from mc2emu.runtime.device import Device
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.runtime.perturb import PerturbPolicy

DEFAULT_NAME = "user_kernel"


@dataclass(frozen=True)
class KernelResult:
    """What a run left on this rank: each core's return value of the last launch (`"AIC0"`, `"AIV1"`, ...),
    the hazards filed, the launches' wall time, and the trace file written (None: not asked, or not rank 0)."""

    returns: dict[str, Any]
    hazards: tuple[HazardReport, ...]
    launches: int
    wall_s: float
    trace: Path | None = None

    def names(self) -> set[str]:
        """The names of the hazards filed on this rank (`Hazard.value`: "READ_UNWRITTEN", ...)."""
        return {h.hazard.value for h in self.hazards}


@dataclass
class _Launches:
    count: int = 0
    wall_s: float = 0.0
    returns: dict[str, Any] = field(default_factory=dict)


class KernelRun:
    """The set-up context of one run (module docstring). Collective: every rank of `comm` (None:
    MPI.COMM_WORLD) enters it, creates the same windows in the same order, launches and leaves it."""

    def __init__(self, *, comm: Any = None, check: bool = True, timeout: float | None = None,
                 perturb: PerturbPolicy | None = None, faults: FaultPlan | None = None,
                 observers: Iterable[Observer] = (), trace: str | Path | None = None,
                 name: str = DEFAULT_NAME) -> None:
        self._recorder = ChromeTraceRecorder() if trace is not None else None
        obs: tuple[Observer, ...] = tuple(observers)
        if self._recorder is not None:
            obs = (*obs, self._recorder)
        self.opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=obs, faults=faults,
                                 comm=world_comm(comm))
        self.name = name
        self.trace_path = None if trace is None else Path(trace)
        self._harness: LaunchHarness | None = None
        self._launches = _Launches()
        self._result: KernelResult | None = None

    # -- set-up -------------------------------------------------------------------------------------------
    @property
    def harness(self) -> LaunchHarness:
        if self._harness is None:
            raise ConstraintError("KernelRun", "use KernelRun inside its `with` block")
        return self._harness

    @property
    def device(self) -> Device:
        return self.harness.device

    @property
    def world(self) -> CommWorld:
        """This rank's communication world (for `Shmem(run.world)`, `TeamBarrier(run.world, jobs)`, ...)."""
        world = self.harness.world
        assert world is not None   # a KernelRun always communicates (comm None is MPI.COMM_WORLD)
        return world

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def size(self) -> int:
        return self.world.size

    def alloc(self, nbytes: int, name: str, *, data: np.ndarray | None = None,
              role: MemRole = MemRole.PAYLOAD) -> GmAddr:
        """GM of this rank: `data`'s bytes when given; bytes nobody wrote are poisoned in check mode
        (PAYLOAD, reported on read: READ_UNWRITTEN) or zero (CONTROL)."""
        return self.device.gm.alloc(nbytes, name, data=data, zero=role is MemRole.CONTROL, role=role)

    def window(self, nbytes: int, name: str, *, role: MemRole = MemRole.PAYLOAD) -> Window:
        """A symmetric window (collective): PAYLOAD starts poisoned in check mode, CONTROL at zero."""
        return self.harness.window(nbytes, name, role)

    # -- launch and read-back -----------------------------------------------------------------------------
    def launch(self, kernel: Callable[..., Any], *args: Any, block_dim: int,
               kernel_type: KernelType | str) -> HarnessLaunch:
        """Launch `kernel(ctx, *args)` on `block_dim` blocks of `kernel_type` (after a host barrier)."""
        launch = self.harness.launch(kernel, block_dim, KernelType.parse(kernel_type), *args)
        self._launches.count += 1
        self._launches.wall_s += launch.wall_s
        self._launches.returns = dict(launch.returns)
        return launch

    def read(self, addr: GmAddr, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A copy of the bytes at `addr` (GM or a window of this rank) as `dtype`, `shape`."""
        return copy_out(self.device.gm.view(addr, dtype, shape))

    @property
    def result(self) -> KernelResult:
        """The run's result, after the `with` block ended without an exception."""
        if self._result is None:
            raise ConstraintError("KernelRun.result", "the result exists once the `with` block ended without error")
        return self._result

    # -- teardown -----------------------------------------------------------------------------------------
    def __enter__(self) -> KernelRun:
        self._harness = LaunchHarness(self.name, self.opts, poison_payload=True)
        self._harness.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        harness = self.harness
        try:
            harness.__exit__(exc_type, exc, tb)
        except BaseException:
            self._write_rank_trace()
            raise
        if exc is not None:
            self._write_rank_trace()
            return
        path = self._write_merged_trace()
        self._result = KernelResult(self._launches.returns, tuple(harness.hazards), self._launches.count,
                                    self._launches.wall_s, path)
        HazardError.raise_on_errors(list(harness.hazards), self._result, check=self.opts.check)

    def _write_merged_trace(self) -> Path | None:
        """Collective on success (every rank left the call the same way): rank 0 writes the merged trace."""
        if self._recorder is None or self.trace_path is None:
            return None
        comm = self.opts.comm
        gathered = comm.gather((comm.Get_rank(), clock_offset_ns(), self._recorder.records()), root=0)
        if gathered is None:
            return None
        trace = merge_traces({r: recs for r, _, recs in gathered}, {r: off for r, off, _ in gathered},
                             metadata={"ranks": comm.Get_size(), "kernel": self.name})
        return write_trace(self.trace_path, trace)

    def _write_rank_trace(self) -> None:
        """After a failure no collective is safe: each rank writes its own trace (`PATH.rank<r>.json`)."""
        if self._recorder is None or self.trace_path is None:
            return
        rank = self.opts.comm.Get_rank()
        path = self.trace_path.with_name(f"{self.trace_path.stem}.rank{rank}{self.trace_path.suffix or '.json'}")
        write_trace(path, merge_traces({rank: self._recorder.records()}, metadata={"ranks": 1, "rank": rank}))


def run_kernel(kernel: Callable[..., Any], *args: Any, block_dim: int, kernel_type: KernelType | str,
               setup: Callable[[KernelRun], tuple[Any, ...]] | None = None, comm: Any = None, check: bool = True,
               timeout: float | None = None, perturb: PerturbPolicy | None = None, faults: FaultPlan | None = None,
               observers: Iterable[Observer] = (), trace: str | Path | None = None,
               name: str = DEFAULT_NAME) -> KernelResult:
    """Run `kernel(ctx, *setup(run), *args)` once with every check (module docstring); collective over `comm`
    (None: MPI.COMM_WORLD). `setup(run)` allocates the run's GM and windows (`run.alloc`, `run.window`) and
    returns the kernel's leading arguments. Returns this rank's `KernelResult`; with `check=True` an
    error-severity hazard raises `HazardError`, a hang `DeadlockError` (on every rank)."""
    with KernelRun(comm=comm, check=check, timeout=timeout, perturb=perturb, faults=faults, observers=observers,
                   trace=trace, name=name) as run:
        lead = tuple(setup(run)) if setup is not None else ()
        run.launch(kernel, *lead, *args, block_dim=block_dim, kernel_type=kernel_type)
    return run.result
