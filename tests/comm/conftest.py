"""Fixtures of the comm tests.

Multi-rank tests run under `mpirun -n N python -m pytest --with-mpi --only-mpi tests/comm` at any N >= 2;
every rank reaches the same collectives (world creation, barriers, close) in the same order. A test that
expects a hang uses a short deadline (`HANG_TIMEOUT_S`) and re-synchronizes with a barrier afterwards.
`make_world` is the kit's `mc2_make_world` (`mc2emu.testing`) with the comm tests' deadline.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest
from comm_cases import TEST_TIMEOUT_S


@pytest.fixture
def make_world(mc2_make_world: Callable[..., object]) -> Callable[..., object]:
    """`make_world(check=True, timeout=TEST_TIMEOUT_S)` -> a CommWorld on a fresh Device (collective);
    closed (collectively) at teardown by the kit."""
    return functools.partial(mc2_make_world, timeout=TEST_TIMEOUT_S)
