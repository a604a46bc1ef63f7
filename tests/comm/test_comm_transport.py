"""The window protocols on whatever transport the job runs (CI runs this file over shared memory, over
MPICH's network module with MPIR_CVAR_NOLOCAL=1, and over Open MPI's osc/rdma on TCP)."""

from __future__ import annotations

import numpy as np
import pytest
from comm_cases import TEST_TIMEOUT_S

from mc2emu.comm.transport_check import ROUNDS, check_window_protocols

pytestmark = pytest.mark.mpi(min_size=2)


def test_window_protocols_hold_on_this_transport():
    """put_signal all-to-all byte-exact, put_signal into a rank that computes without calling MPI
    (passive-target progress: without the rank's progress thread this starves on the network path),
    and TeamBarrier rounds; twice, so that a second world on the same ranks works too."""
    from mpi4py import MPI

    from mc2emu.runtime import Device

    for _ in range(2):
        res = check_window_protocols(Device(rank=MPI.COMM_WORLD.Get_rank(), check=True, timeout=TEST_TIMEOUT_S))
        assert res.problems() == []
        assert res.ok and res.bad_bytes == 0 and res.barrier_rounds == ROUNDS


def test_every_window_is_unified(make_world):
    """The comm layer loads its own window after Win_sync: allowed by MPI only in the unified model."""
    from mpi4py import MPI

    world = make_world()
    win = world.window(64, "model")
    assert win.win.Get_attr(MPI.WIN_MODEL) == MPI.WIN_UNIFIED
    assert np.all(win.mem == 0)
