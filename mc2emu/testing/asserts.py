"""The kit's assertions: hazards expected or forbidden (by name, across ranks), golden comparison by the
project's ULP rule, and the perturbation-seed parametrizer (`mc2emu.testing`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from mc2emu.host.collective import world_comm
from mc2emu.host.kernel_run import KernelResult
from mc2emu.numerics.compare import AG_MAX_ULP, max_abs_error, ulp_distances, ulp_stats
from mc2emu.runtime.hazards import DeadlockError, Hazard, HazardError, HazardReport
from mc2emu.runtime.perturb import PerturbPolicy

# What a hang is called in `hazard_names` (a `DeadlockError`: the deadlock diagnosis' report).
DEADLOCK = Hazard.DEADLOCK.value
# The seeds `perturb_seeds()` runs besides the unperturbed run.
DEFAULT_SEEDS = (1, 2, 3)
# Elements listed when a golden comparison fails.
SHOW_ELEMENTS = 5

Hazardous = KernelResult | HazardError | DeadlockError | Iterable[HazardReport]


def hazard_names(what: Hazardous) -> set[str]:
    """The hazard names in a result, a list of reports or an exception (a `DeadlockError` is DEADLOCK plus the
    hazards filed before the hang)."""
    if isinstance(what, KernelResult):
        return what.names()
    if isinstance(what, HazardError):
        return what.names()
    if isinstance(what, DeadlockError):
        return {DEADLOCK} | {h.hazard.value for h in what.hazards}
    return {h.hazard.value for h in what}


def _reports(what: Hazardous) -> list[HazardReport]:
    if isinstance(what, KernelResult):
        return list(what.hazards)
    if isinstance(what, (HazardError, DeadlockError)):
        return list(what.hazards)
    return list(what)


def _check_name(name: str) -> str:
    known = {h.value for h in Hazard}
    if name not in known:
        raise ValueError(f"{name!r} is not a hazard name (mc2emu.runtime.hazards.Hazard): one of {sorted(known)}")
    return name


def assert_no_hazards(what: Hazardous, *, allow: Iterable[str] = ()) -> None:
    """Fail listing every hazard of `what` whose name is not in `allow`."""
    allowed = {_check_name(n) for n in allow}
    left = [h for h in _reports(what) if h.hazard.value not in allowed]
    if isinstance(what, DeadlockError) and DEADLOCK not in allowed:
        pytest.fail(f"the run deadlocked:\n{what.report or what}")
    if left:
        pytest.fail(f"{len(left)} hazard(s) {sorted({h.hazard.value for h in left})}:\n  "
                    + "\n  ".join(str(h) for h in left[:20]))


@dataclass
class HazardCapture:
    """What `expect_hazard` saw: this rank's exception (or None), its hazard names and reports, and every
    rank's names (`everyone[r]`, filled when the block ends)."""

    name: str
    error: BaseException | None = None
    names: set[str] = field(default_factory=set)
    hazards: list[HazardReport] = field(default_factory=list)
    everyone: list[set[str]] = field(default_factory=list)

    def add(self, what: Hazardous) -> None:
        """Count the hazards of a result the block obtained without an exception (warnings do not raise)."""
        self.names |= hazard_names(what)
        self.hazards += _reports(what)

    def reports(self) -> list[HazardReport]:
        """This rank's reports of the expected hazard."""
        return [h for h in self.hazards if h.hazard.value == self.name]


@contextlib.contextmanager
def expect_hazard(name: str, *, comm: Any = None, ranks: Sequence[int] | None = None) -> Iterator[HazardCapture]:
    """Run the block expecting hazard `name`: a `HazardError` or `DeadlockError` raised in it is caught and
    its names recorded. Collective over `comm` (None: MPI.COMM_WORLD): the ranks exchange their names, and the
    check fails unless `name` was reported on at least one rank (`ranks` None) or on exactly `ranks`."""
    cap = HazardCapture(_check_name(name))
    try:
        yield cap
    except (HazardError, DeadlockError) as exc:
        cap.error = exc
        cap.add(exc)
    comm = world_comm(comm)
    cap.everyone = [set(n) for n in comm.allgather(sorted(cap.names))]
    where = [r for r, names in enumerate(cap.everyone) if name in names]
    if ranks is None and not where:
        pytest.fail(f"{name} was reported on no rank; per rank: {[sorted(n) for n in cap.everyone]}")
    if ranks is not None and where != sorted(ranks):
        pytest.fail(f"{name} expected on rank(s) {sorted(ranks)}, reported on {where}; per rank: "
                    f"{[sorted(n) for n in cap.everyone]}")


def assert_golden(out: np.ndarray, golden: np.ndarray, *, max_ulp: int = AG_MAX_ULP,
                  dtype: Any = None) -> int:
    """Compare `out` with `golden` by the project's ULP rule (`mc2emu.numerics.compare`: +-0 equal, NaN only
    against NaN; bf16 / fp16 / fp32, both cast to `dtype` first when given); fail naming the worst elements
    when any is more than `max_ulp` apart. Returns the largest distance."""
    a, b = np.asarray(out), np.asarray(golden)
    if dtype is not None:
        a, b = a.astype(dtype), b.astype(dtype)
    if a.shape != b.shape:
        pytest.fail(f"output shape {a.shape} != golden shape {b.shape}")
    worst, _ = ulp_stats(a, b)          # bounded memory on the passing path
    if worst > max_ulp:
        dist = ulp_distances(a, b)
        bad = np.argwhere(dist > max_ulp)
        show = ", ".join(f"{tuple(int(i) for i in idx)}: {a[tuple(idx)]} vs {b[tuple(idx)]} "
                         f"({int(dist[tuple(idx)])} ULP)" for idx in bad[:SHOW_ELEMENTS])
        pytest.fail(f"{len(bad)} of {dist.size} element(s) more than {max_ulp} {a.dtype} ULP from the golden "
                    f"(max {worst}, max abs error {max_abs_error(a, b)}): {show}")
    return worst


def perturb_seeds(seeds: Iterable[int] = DEFAULT_SEEDS, *, unperturbed: bool = True,
                  argname: str = "perturb") -> pytest.MarkDecorator:
    """`@perturb_seeds()`: parametrize `argname` with None (unperturbed, when `unperturbed`) and one seeded
    `PerturbPolicy` per seed (ids `unperturbed`, `seed1`, ...): the same on every rank, so a pytest-mpi test
    stays collective. A correct kernel's output must not change across them."""
    values: list[PerturbPolicy | None] = [None] if unperturbed else []
    ids = ["unperturbed"] if unperturbed else []
    for s in seeds:
        values.append(PerturbPolicy(int(s)))
        ids.append(f"seed{int(s)}")
    return pytest.mark.parametrize(argname, values, ids=ids)
