"""The options every operator call takes the same way, read once into a frozen `CallOptions`.

Every operator in `mc2emu.ops` takes, keyword-only, with these defaults and this meaning:

    check=True       the hazard checkers run; error-severity hazards then raise `HazardError` (carrying
                     the output and the call's statistics)
    timeout=None     the wait deadline in seconds (None: the device's default)
    perturb=None     a seeded `PerturbPolicy` (reorders and delays as the hardware may)
    observers=()     EventBus observers for the call (trace, recorders)
    faults=None      a `FaultPlan` injecting one named fault
    comm=None        (collective operators only) the MPI communicator, None: MPI.COMM_WORLD
    data=True        False: a protocol-only run: the full control flow, events and checks, no payload bytes
                     (inputs may be `Payload`s; the output is a `Payload`; docs/architecture.md)

`call_options(...)` turns them into one `CallOptions`, the value `LaunchHarness` takes. Each operator also
takes `return_stats=False`: True returns `(output, stats)`, its frozen launch statistics beside the output
(`call_result`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from mc2emu.arch.errors import ConstraintError
from mc2emu.runtime.hazards import HazardError, HazardReport

if TYPE_CHECKING:
    from mc2emu.runtime.events import Event
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

Observer = Callable[["Event"], None]
S = TypeVar("S")


@dataclass(frozen=True)
class CallOptions:
    """The common options of one operator call (module docstring); `comm` None: one NPU, no communication."""

    check: bool = True
    timeout: float | None = None
    perturb: PerturbPolicy | None = None
    observers: tuple[Observer, ...] = ()
    faults: FaultPlan | None = None
    comm: Any = None
    data: bool = True


def call_options(*, check: bool = True, timeout: float | None = None, perturb: PerturbPolicy | None = None,
                 observers: Iterable[Observer] = (), faults: FaultPlan | None = None,
                 comm: Any = None, data: bool = True) -> CallOptions:
    """The `CallOptions` of an operator's common keywords (`comm`: the resolved communicator of a collective
    call). A timeout that is not a positive number and an observer that is not callable are refused."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
        raise ConstraintError("timeout", f"timeout must be None or a positive number of seconds, got {timeout!r}")
    obs = tuple(observers)
    bad = [o for o in obs if not callable(o)]
    if bad:
        raise ConstraintError("observers", f"observers must be callables taking an Event, got {bad[0]!r}")
    if not isinstance(data, bool):
        raise ConstraintError("data", f"data must be True (full run) or False (protocol-only), got {data!r}")
    return CallOptions(bool(check), timeout, perturb, obs, faults, comm, data)


def call_result(output: np.ndarray, stats: S, hazards: list[HazardReport], opts: CallOptions,
                return_stats: bool) -> np.ndarray | tuple[np.ndarray, S]:
    """The end of every operator call: with checks on, error-severity hazards raise `HazardError` (carrying
    the output and the statistics); else the output, with the statistics beside it when `return_stats`."""
    HazardError.raise_on_errors(hazards, output, check=opts.check, stats=stats)
    return (output, stats) if return_stats else output
