"""CommWorld: symmetric windows adopted into GM, address translation, host barriers, the global
progress probe, and close()."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from mc2emu.comm import CommClosedError, RemoteAddr, SymmetryError, WindowError

pytestmark = pytest.mark.mpi(min_size=2)


def test_windows_are_symmetric_and_adopted_into_gm(make_world):
    world = make_world()
    win = world.window(4096, "w")
    assert win.base.alloc.kind == "window" and win.nbytes == 4096
    assert world.device.gm.view(win.base, np.uint8, (4096,)).sum() == 0       # zero-filled
    a = win.carve(100)
    b = win.carve(8)
    assert b.offset == 512                                                      # carve alignment
    assert win.ptr(b, (world.rank + 1) % world.size) == RemoteAddr("w", (world.rank + 1) % world.size, 512)
    offsets = world.comm.allgather((a.offset, b.offset))
    assert all(o == offsets[0] for o in offsets)
    assert world.window_of(b + 16) == (win, 528)
    with pytest.raises(WindowError, match="not in a symmetric window"):
        world.window_of(world.device.gm.alloc(64, "plain"))
    with pytest.raises(WindowError, match="outside window"):
        world.window_of(win.addr(4090), 16)
    with pytest.raises(WindowError, match="not a rank"):
        win.ptr(b, world.size)


def test_asymmetric_window_is_refused_on_every_rank(make_world):
    world = make_world()
    with pytest.raises(SymmetryError, match="same name and size"):
        world.window(64 + world.rank, "bad")
    world.barrier()


def test_global_progress_probe_reads_every_rank(make_world):
    world = make_world()
    dev = world.device
    for _ in range(world.rank + 1):
        dev.waiter.progress.bump()
    world.barrier()
    world.probe.reuse_s = 0.0
    counts = dev.waiter.global_progress()
    assert len(counts) == world.size
    assert counts[world.rank] == dev.waiter.progress.count
    assert all(c > 0 for c in counts)


def test_barrier_and_close_are_idempotent(make_world):
    world = make_world()
    win = world.window(64, "w")
    for _ in range(3):
        world.barrier()
    world.close()
    world.close()
    assert world.device.waiter.global_progress is None
    assert world.device.waiter.progress.mirror is None
    with pytest.raises(CommClosedError):
        world.barrier()
    with pytest.raises(CommClosedError):
        win.ptr(win.base, 0)


def test_device_rank_must_match_the_mpi_rank():
    from mc2emu.comm import CommWorld
    from mc2emu.runtime import ConstraintError, Device

    rank = MPI.COMM_WORLD.Get_rank()
    with pytest.raises(ConstraintError, match=r"device\.rank"):
        CommWorld(Device(rank=rank + 1))
