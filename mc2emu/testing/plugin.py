"""The pytest plugin of the kit (`pytest11` entry point `mc2emu.testing.plugin`; `-p no:mc2emu.testing.plugin`
disables it): fixtures for users' pytest-mpi tests, each with its teardown, and the abort rule.

- `mc2_comm`: a duplicate of MPI.COMM_WORLD per test (freed at teardown), so a test's collectives never match
  another's; `mc2_device`: a `Device` on this rank; `mc2_make_world(check=True, timeout=None)`: a Device +
  `CommWorld` per call, closed at teardown (released without a barrier when the test failed);
  `mc2_run_kernel(kernel, *args, **kw)`: `mc2emu.run_kernel` on `mc2_comm` with the test's deadline.
- `--mc2emu-timeout S` (default DEFAULT_TIMEOUT_S): the wait deadline of the fixtures' devices and runs.
- Nothing starts MPI before a fixture or helper is used (the plugin loads in every pytest run).
- Under mpirun with pytest-mpi's `--with-mpi` / `--only-mpi`, a test failing on one rank prints its failure and
  aborts every rank (the others would block in their next collective).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from mc2emu.comm.world import CommWorld
    from mc2emu.host.kernel_run import KernelResult
    from mc2emu.runtime.device import Device

# The fixtures' wait deadline in seconds: a hang is a report within this, not a hung test.
DEFAULT_TIMEOUT_S = 20.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--mc2emu-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                     help="wait deadline (s) of the mc2emu.testing fixtures' devices and runs")


def _mpi_world() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _timeout(config: pytest.Config) -> float:
    return float(config.getoption("mc2emu_timeout", default=DEFAULT_TIMEOUT_S))


@pytest.fixture
def mc2_comm() -> Iterator[Any]:
    """A duplicate of MPI.COMM_WORLD for this test (collective), freed at teardown."""
    comm = _mpi_world().Dup()
    try:
        yield comm
    finally:
        comm.Free()


@pytest.fixture
def mc2_device(request: pytest.FixtureRequest) -> Device:
    """A fresh `Device` of this rank with checks on and the test's deadline."""
    from mc2emu.runtime.device import Device

    return Device(_mpi_world().Get_rank(), timeout=_timeout(request.config))


@pytest.fixture
def mc2_make_world(request: pytest.FixtureRequest) -> Iterator[Callable[..., CommWorld]]:
    """`mc2_make_world(check=True, timeout=None)` -> a `CommWorld` on a fresh Device (collective); closed at
    teardown, in creation order, by a collective close when the test passed, else released."""
    from mc2emu.comm.world import CommWorld
    from mc2emu.runtime.device import Device

    worlds: list[CommWorld] = []

    def make(check: bool = True, timeout: float | None = None) -> CommWorld:
        dev = Device(_mpi_world().Get_rank(), check=check,
                     timeout=_timeout(request.config) if timeout is None else timeout)
        world = CommWorld(dev)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()


@pytest.fixture
def mc2_run_kernel(mc2_comm: Any, request: pytest.FixtureRequest) -> Callable[..., KernelResult]:
    """`mc2emu.run_kernel` bound to this test's communicator and deadline (keywords override them)."""
    from mc2emu.host.kernel_run import run_kernel

    return functools.partial(run_kernel, comm=mc2_comm, timeout=_timeout(request.config))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and (item.config.getoption("with_mpi", default=False)
                          or item.config.getoption("only_mpi", default=False)):
        from mpi4py import MPI

        world = MPI.COMM_WORLD if MPI.Is_initialized() else None
        if world is not None and world.Get_size() > 1:
            sys.stderr.write(f"\n[rank {world.Get_rank()}] {item.nodeid} FAILED ({report.when}):\n"
                             f"{report.longreprtext}\n[rank {world.Get_rank()}] aborting all ranks\n")
            sys.stderr.flush()
            world.Abort(1)
    return report
