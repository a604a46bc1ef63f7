"""Fixtures of the comm tests.

Multi-rank tests run under `mpirun -n N python -m pytest --with-mpi --only-mpi tests/comm` at any N >= 2;
every rank reaches the same collectives (world creation, barriers, close) in the same order. A test that
expects a hang uses a short deadline (`HANG_TIMEOUT_S`) and re-synchronizes with a barrier afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from comm_cases import TEST_TIMEOUT_S


@pytest.fixture
def make_world() -> Iterator[Callable[..., object]]:
    """`make_world(check=True, timeout=TEST_TIMEOUT_S)` -> a CommWorld on a fresh Device (collective);
    closed (collectively) at teardown."""
    from mpi4py import MPI

    from mc2emu.comm import CommWorld
    from mc2emu.runtime import Device

    worlds: list[CommWorld] = []

    def make(check: bool = True, timeout: float = TEST_TIMEOUT_S) -> CommWorld:
        dev = Device(rank=MPI.COMM_WORLD.Get_rank(), check=check, timeout=timeout)
        world = CommWorld(dev)
        worlds.append(world)
        return world

    yield make
    for world in worlds:
        world.close()
