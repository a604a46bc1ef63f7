"""Hazard names, hazard reports and the runtime exceptions of mc2emu (their base `Mc2EmuError` and the
bad-input `ConstraintError` live in `mc2emu/arch/errors.py`, below the host tiling; re-exported here).

A hazard is something the real kernel would do wrong on hardware (hang, drop a Set, read stale data).
The emulator reproduces the behaviour and files a `HazardReport` under a stable `Hazard` name that
tests and users match on. Exceptions carry the exit code the CLI uses for them.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mc2emu.arch.errors import EXIT_BAD_INPUT as EXIT_BAD_INPUT
from mc2emu.arch.errors import EXIT_HAZARD as EXIT_HAZARD
from mc2emu.arch.errors import EXIT_MISMATCH as EXIT_MISMATCH
from mc2emu.arch.errors import ConstraintError as ConstraintError
from mc2emu.arch.errors import Mc2EmuError as Mc2EmuError


class Severity(enum.Enum):
    WARNING = "warning"   # documented as reserved / undefined, still ran as the hardware would
    ERROR = "error"       # wrong numbers, hang or lost signal on hardware


class Hazard(enum.Enum):
    # cross-core flags (SPEC §2)
    DEADLOCK = "DEADLOCK"
    FLAG_OVERFLOW = "FLAG_OVERFLOW"
    FLAG_ID_TRUNCATED = "FLAG_ID_TRUNCATED"
    FLAG_MODE_MIXED = "FLAG_MODE_MIXED"
    FLAG_ID_RESERVED = "FLAG_ID_RESERVED"
    PIPE_NOT_ON_CORE = "PIPE_NOT_ON_CORE"
    SYNC_KERNEL_TYPE = "SYNC_KERNEL_TYPE"
    SYNC_ALL_OVERSUBSCRIBED = "SYNC_ALL_OVERSUBSCRIBED"
    UNCONSUMED_FLAG = "UNCONSUMED_FLAG"
    ATOMIC_LEFT_SET = "ATOMIC_LEFT_SET"
    ATOMIC_DTYPE_MISMATCH = "ATOMIC_DTYPE_MISMATCH"   # SetAtomicAdd<T> over a write-out of another dtype
    # memory
    READ_UNWRITTEN = "READ_UNWRITTEN"
    READ_BEFORE_WAIT = "READ_BEFORE_WAIT"
    READ_OVERWRITTEN = "READ_OVERWRITTEN"   # a later put may overwrite the bytes before the read (reuse too early)
    READ_NOT_VISIBLE = "READ_NOT_VISIBLE"   # ordered after the put's completion, yet saw other bytes
    TAIL_COPY_OVERRUN = "TAIL_COPY_OVERRUN"
    # communication
    UNWAITED_SIGNAL = "UNWAITED_SIGNAL"
    PEER_NOT_SERVED = "PEER_NOT_SERVED"   # fewer launch blocks than the peers one AIV block each serves
    HCCL_WAIT_BEYOND_COMMIT = "HCCL_WAIT_BEYOND_COMMIT"
    HCCL_COMMIT_BEYOND_REPEAT = "HCCL_COMMIT_BEYOND_REPEAT"
    HCCL_WAIT_ORDER = "HCCL_WAIT_ORDER"
    HCCL_TOO_MANY_PREPARES = "HCCL_TOO_MANY_PREPARES"
    HCCL_NON_WORKING_BLOCK = "HCCL_NON_WORKING_BLOCK"
    HCCL_WRONG_CORE_TYPE = "HCCL_WRONG_CORE_TYPE"
    HCCL_FINALIZE_WHILE_WAITING = "HCCL_FINALIZE_WHILE_WAITING"
    HCCL_UNWAITED_COMMIT = "HCCL_UNWAITED_COMMIT"
    # compute
    SPLITK_SEQUENCE = "SPLITK_SEQUENCE"
    SCALE_BATCH_OFFSET_MISSING = "SCALE_BATCH_OFFSET_MISSING"
    LOCAL_WITHOUT_ATOMIC = "LOCAL_WITHOUT_ATOMIC"
    BIAS_DOUBLE_ADD = "BIAS_DOUBLE_ADD"
    AIV_RUNS_AIC_KERNEL = "AIV_RUNS_AIC_KERNEL"
    EMPTY_TAIL_EARLY_RETURN = "EMPTY_TAIL_EARLY_RETURN"
    ADDR_LIST_UPDATED_EARLY = "ADDR_LIST_UPDATED_EARLY"
    ADDR_LIST_MUTATED = "ADDR_LIST_MUTATED"
    FRAGMENT_OUT_OF_RANGE = "FRAGMENT_OUT_OF_RANGE"
    MUL_ZERO_KEEPS_NAN = "MUL_ZERO_KEEPS_NAN"   # an accumulator "cleared" by acc * 0 keeps NaN / Inf garbage
    LAYOUT_OVERLAP = "LAYOUT_OVERLAP"   # a tiling whose local-memory buffers overlap or overflow (inferred)
    UB_OVERLAP = "UB_OVERLAP"   # two UB slots of one AIV share bytes (reproduced: one corrupts the other)
    OUTPUT_WRITE_COUNT = "OUTPUT_WRITE_COUNT"  # an output element written twice or never (GroupedMatmul)
    # between launches (back to back on one window set, no host barrier; check/cross_launch.py)
    WRITE_AFTER_READ_ACROSS_LAUNCH = "WRITE_AFTER_READ_ACROSS_LAUNCH"   # launch N+1 puts over a launch-N read
    STALE_READ = "STALE_READ"     # a read in launch N+1 of bytes last written by an earlier launch
    STALE_FLAG = "STALE_FLAG"     # a flag / signal wait satisfiable by a count an earlier launch left
    LOST_SIGNAL = "LOST_SIGNAL"   # a status / signal word reset not ordered against a peer's next set
    LEFT_AT_LOOP_END = "LEFT_AT_LOOP_END"   # flag counts / signal posts nobody consumed by the end of the loop


@dataclass(frozen=True)
class HazardReport:
    hazard: Hazard
    severity: Severity
    rank: int
    core: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"[{self.hazard.value}] rank {self.rank} {self.core}: {self.message}"


class HazardLog:
    """Thread-safe list of reports of one device. `enabled` is the user's check switch: with checks off
    nothing is recorded (deadlocks still raise)."""

    def __init__(self, rank: int, enabled: bool = True,
                 publish: Callable[[HazardReport], None] | None = None) -> None:
        self.rank = rank
        self.enabled = enabled
        self.publish = publish     # the device's: every report is also a `HazardReported` event (trace, CLI)
        self._reports: list[HazardReport] = []
        self._lock = threading.Lock()

    def report(self, hazard: Hazard, core: str, message: str, *, severity: Severity = Severity.ERROR,
               **details: Any) -> HazardReport | None:
        if not self.enabled:
            return None
        rep = HazardReport(hazard, severity, self.rank, core, message, details)
        with self._lock:
            self._reports.append(rep)
        if self.publish is not None:
            self.publish(rep)
        return rep

    def take(self) -> list[HazardReport]:
        with self._lock:
            out, self._reports = self._reports, []
        return out

    def peek(self) -> list[HazardReport]:
        with self._lock:
            return list(self._reports)


class KernelError(Mc2EmuError):
    """A kernel used an API in a way the compiler would reject (e.g. PIPE_ALL on a mode-2 flag)."""


class CapacityError(KernelError):
    """A local buffer (L1, L0A, L0B, L0C, UB) was asked for more than the platform table allows."""


class GmError(KernelError):
    """Out-of-bounds or invalid GM access."""


class FlagOverflowError(Mc2EmuError):
    """A 16th pending Set on one cross-core counter (a hardware error on the device)."""


class LaunchAborted(Mc2EmuError):
    """Raised inside the other cores of a rank after one core failed."""


class DeadlockError(Mc2EmuError):
    """A wait passed its deadline. Carries the wait registry of this rank (and, when the checkers
    aggregated them, of every rank)."""

    def __init__(self, message: str, registry: list[dict[str, Any]] | None = None,
                 report: str | None = None, *, declared_elsewhere: bool = False) -> None:
        super().__init__(message)
        self.registry = registry or []
        self.report = report
        # True when this rank only stopped because another rank declared the deadlock (its report is there).
        self.declared_elsewhere = declared_elsewhere
        # Hazards this rank filed before the hang (set by the operators).
        self.hazards: list[HazardReport] = []


class HazardError(Mc2EmuError):
    """Checks were on and the launch filed error-severity hazards. `output` holds what the kernel
    produced (for inspection, never as a result), `stats` the call's statistics (what `return_stats=True`
    would have returned beside it)."""

    def __init__(self, hazards: list[HazardReport], output: Any = None, stats: Any = None) -> None:
        names = sorted({h.hazard.value for h in hazards})
        lines = "\n  ".join(str(h) for h in hazards[:20])
        more = f"\n  ... {len(hazards) - 20} more" if len(hazards) > 20 else ""
        super().__init__(f"{len(hazards)} hazard(s) {names}:\n  {lines}{more}")
        self.hazards = hazards
        self.output = output
        self.stats = stats

    def names(self) -> set[str]:
        return {h.hazard.value for h in self.hazards}

    @classmethod
    def raise_on_errors(cls, hazards: list[HazardReport], output: Any, *, check: bool, stats: Any = None) -> None:
        """What every operator does at the end of a call: with checks on, error-severity hazards raise
        (carrying the output and the statistics for inspection); warnings never do."""
        errors = [h for h in hazards if h.severity is Severity.ERROR]
        if check and errors:
            raise cls(errors, output=output, stats=stats)


class CoreError(Mc2EmuError):
    """An exception on one core, re-raised by `launch` labelled with rank and core."""

    def __init__(self, rank: int, core: str, original: BaseException) -> None:
        super().__init__(f"rank {rank} {core}: {type(original).__name__}: {original}")
        self.rank = rank
        self.core = core
        self.original = original
        self.exit_code = getattr(original, "exit_code", EXIT_HAZARD)
