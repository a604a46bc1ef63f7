"""One emulated NPU (one MPI rank): GM, flag state, waits, events, hazards, and kernel launches.

`Device.launch(kernel, block_dim, kernel_type, *args)` runs `kernel(ctx, *args)` on one thread per core:
`block_dim` AICs when the kernel type runs AICs, and `block_dim * ratio` AIVs when it runs AIVs. An
exception on any core aborts the launch on every core of this rank (their waits wake and raise
`LaunchAborted`) and is re-raised by `launch` labelled with rank and core. At launch end the pairing
checks run: unconsumed flag counts, atomic mode left set, reserved flag ids next to hard SyncAll.
Launches are numbered per device (`Launch.index`, also on LaunchBegin / LaunchEnd): an observer names the
launch of any event by `device.current.index` (the cross-launch checks).

The device is not a god object: tiling, scheduling and compute live in their own layers and only use
the device through the core context.
"""

from __future__ import annotations

import enum
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mc2emu.arch.platform import DAV_3510, CoreType, PlatformSpec
from mc2emu.runtime.compute_slots import ComputeSlots
from mc2emu.runtime.core import CoreContext
from mc2emu.runtime.cross_core import CoreKey, CrossCoreFlags
from mc2emu.runtime.decode_cache import DecodeCache
from mc2emu.runtime.event_bus import EventBus
from mc2emu.runtime.events import CoreBegin, CoreEnd, HazardReported, LaunchBegin, LaunchEnd
from mc2emu.runtime.faults import FaultPlan
from mc2emu.runtime.gm import GlobalMemory
from mc2emu.runtime.hazards import (
    ConstraintError,
    CoreError,
    Hazard,
    HazardLog,
    HazardReport,
    LaunchAborted,
    Mc2EmuError,
)
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.runtime.launch import Launch
from mc2emu.runtime.perturb import PerturbPolicy
from mc2emu.runtime.waiting import DEFAULT_TIMEOUT_S, Doorbell, Waiter

Kernel = Callable[..., Any]


class FlagCounters(enum.Enum):
    """What the cross-core flag counters hold when a launch starts on a device that ran launches before.
    Whether DAV_3510 clears them at kernel start is not public (docs/protocols.md "Across launches"): both
    are emulated; leftovers are reported at every launch end either way (UNCONSUMED_FLAG)."""

    PERSIST = "persist"   # a count left by launch N is pending when launch N + 1 starts (SPEC §2 assumption)
    RESET = "reset"       # every counter starts at 0 in every launch


@dataclass
class LaunchResult:
    hazards: list[HazardReport]
    returns: dict[str, Any]


class Device:
    """One NPU. `check` switches the hazard checkers; `timeout` is the wait deadline in seconds;
    `compute_slots`: how many cores compute on the host at once (host time only; None: the host's CPUs);
    `flag_counters`: `FlagCounters` across launches (None: PERSIST, or RESET on a platform whose
    `flags_persist_across_launches` is False)."""

    def __init__(self, rank: int = 0, platform: PlatformSpec = DAV_3510, *, check: bool = True,
                 timeout: float | None = None, perturb: PerturbPolicy | None = None,
                 faults: FaultPlan | None = None, compute_slots: int | None = None,
                 flag_counters: FlagCounters | str | None = None, data: bool = True) -> None:
        self.rank = rank
        self.data = data    # False: a protocol-only run (`runtime.gm`: PAYLOAD allocations hold no bytes)
        self.platform = platform
        self.events = EventBus(rank)
        self.hazards = HazardLog(rank, enabled=check, publish=self._publish_hazard)
        self.check = check
        self.gm = GlobalMemory(rank, self.events, self.hazards, check=check, data=data)
        self.waiter = Waiter(rank, self.events, DEFAULT_TIMEOUT_S if timeout is None else timeout)
        self.lock = threading.Lock()
        self._bells: dict[CoreKey, Doorbell] = {}
        self.flags = CrossCoreFlags(self)
        self.perturb = perturb
        self.faults = faults
        self.soft_sync_epochs: dict[Any, int] = {}
        self.flag_counters = _flag_counters(flag_counters, platform)
        self.launch_count = 0
        # A device that runs a stream of launches (a Communicator's) names each by its index in reports.
        self.numbered_launches = False
        self.current: Launch | None = None
        # The last completed signal post of this rank to each word: (target rank, window, byte offset) ->
        # (launch index, core, op, value). A deadlock report reads them to tell a post that never came from one
        # that landed and was overwritten (check/deadlock.py: a lost signal).
        self.signal_posts: dict[tuple[int, str, int], tuple[int | None, str, str, int]] = {}
        # host time only (no result, read, event or report depends on them)
        self.compute_slots = ComputeSlots(compute_slots, unlimited=not data)   # protocol-only: nothing to compute
        self.decode_cache = DecodeCache(self.events)

    def core_bell(self, key: CoreKey) -> Doorbell:
        """The doorbell a core sleeps on; its guard is the device lock that protects the flag state."""
        bell = self._bells.get(key)
        if bell is None:
            bell = self._bells.setdefault(key, Doorbell(self.lock))
        return bell

    # -- launch --------------------------------------------------------------------------------------------
    def _publish_hazard(self, rep: HazardReport) -> None:
        """Every hazard report is also a `HazardReported` event (trace, CLI, stress driver)."""
        if self.events.active:
            self.events.emit(HazardReported, rep.core, hazard=rep.hazard, severity=rep.severity, message=rep.message)

    def launch(self, kernel: Kernel, block_dim: int, kernel_type: KernelType | str, *args: Any,
               name: str | None = None, **kwargs: Any) -> LaunchResult:
        kt = KernelType.parse(kernel_type)
        if not isinstance(block_dim, int) or block_dim < 1:
            raise ConstraintError("block_dim", f"block_dim must be a positive integer, got {block_dim!r}")
        if kt.is_mix and block_dim > self.platform.aic_count:
            raise ConstraintError(
                "block_dim",
                f"a mixed kernel's block_dim {block_dim} exceeds the {self.platform.aic_count} physical AIC "
                f"cores of {self.platform.name}")
        launch = Launch(kt, block_dim, name=name or str(getattr(kernel, "__name__", "kernel")),
                        index=self.launch_count)
        if self.launch_count and self.flag_counters is FlagCounters.RESET:
            self.flags.reset()   # the counts launch N left (reported at its end) are gone at launch N + 1
        self.current = launch
        self.launch_count += 1
        self.decode_cache.reset()
        mark = len(self.hazards.peek())
        contexts: list[CoreContext] = []
        if kt.runs_aic:
            contexts += [CoreContext(self, launch, CoreType.AIC, b, 0) for b in range(block_dim)]
        for b in range(block_dim):
            for s in range(kt.aiv_ratio):
                contexts.append(CoreContext(self, launch, CoreType.AIV, b, s))
        self.waiter.abort_event = launch.abort
        self.waiter.declared = None
        failures: list[tuple[CoreContext, BaseException]] = []
        returns: dict[str, Any] = {}
        fail_lock = threading.Lock()

        def body(ctx: CoreContext) -> None:
            launch.core_state[ctx.label] = "running"
            try:
                if self.events.active:
                    self.events.emit(CoreBegin, ctx.label, launch=launch.name)
                returns[ctx.label] = kernel(ctx, *args, **kwargs)
                self.flags.flush_deferred(ctx)
                launch.core_state[ctx.label] = "finished"
                if self.events.active:
                    self.events.emit(CoreEnd, ctx.label, launch=launch.name)
            except BaseException as exc:
                launch.core_state[ctx.label] = f"failed ({type(exc).__name__})"
                with fail_lock:
                    failures.append((ctx, exc))
                launch.abort.set()
                self.waiter.wake_all()
                with self.lock:
                    for bell in self._bells.values():
                        bell.ring()

        if self.events.active:
            self.events.emit(LaunchBegin, "host", launch=launch.name, block_dim=block_dim, kernel_type=kt.value,
                             index=launch.index)
        threads = [threading.Thread(target=body, args=(ctx,), name=f"r{self.rank}-{ctx.label}", daemon=True)
                   for ctx in contexts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.waiter.abort_event = None
        if self.events.active:
            self.events.emit(LaunchEnd, "host", launch=launch.name, block_dim=block_dim, index=launch.index)
        if failures:
            ctx, exc = self._first_failure(failures)
            if isinstance(exc, Mc2EmuError):
                if sys.version_info >= (3, 11):  # add_note is 3.11+; on 3.10 the error goes up without it
                    exc.add_note(f"(raised on rank {self.rank} {ctx.label} in launch '{launch.name}')")
                raise exc
            raise CoreError(self.rank, ctx.label, exc) from exc
        self._end_of_launch_checks(contexts, launch)
        return LaunchResult(self.hazards.peek()[mark:], returns)

    @staticmethod
    def _first_failure(failures: list[tuple[CoreContext, BaseException]]) -> tuple[CoreContext, BaseException]:
        """The root cause: the first failure that is not a consequence of the abort, preferring a deadlock
        this rank diagnosed itself over one another rank declared."""
        causes = [(ctx, exc) for ctx, exc in failures if not isinstance(exc, LaunchAborted)]
        own = [(ctx, exc) for ctx, exc in causes if not getattr(exc, "declared_elsewhere", False)]
        return (own or causes or failures)[0]

    def _end_of_launch_checks(self, contexts: list[CoreContext], launch: Launch) -> None:
        for ctx in contexts:
            if ctx.atomic_dtype is not None:
                self.hazards.report(Hazard.ATOMIC_LEFT_SET, ctx.label,
                                    f"SetAtomicAdd<{ctx.atomic_dtype}> still set at kernel end: later "
                                    f"write-outs on this core add instead of overwrite")
        self.flags.report_leftovers()
        self.flags.report_reserved_ids(launch.used_sync_all)


def _flag_counters(value: FlagCounters | str | None, platform: PlatformSpec) -> FlagCounters:
    if value is None:
        return FlagCounters.PERSIST if platform.flags_persist_across_launches else FlagCounters.RESET
    if isinstance(value, FlagCounters):
        return value
    try:
        return FlagCounters(value)
    except ValueError:
        raise ConstraintError("flag_counters", f"flag_counters must be one of "
                              f"{[m.value for m in FlagCounters]}, got {value!r}") from None
