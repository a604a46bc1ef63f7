"""CommWorld: symmetric windows adopted into GM, address translation, host barriers, the global
progress probe, and close()."""

from __future__ import annotations

import numpy as np
import pytest
from comm_cases import HANG_TIMEOUT_S, RESYNC_TIMEOUT_S
from mpi4py import MPI

from mc2emu.comm import CommClosedError, HostBarrierFailed, RemoteAddr, SymmetryError, WindowError

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


def test_a_barrier_one_rank_gave_up_on_fails_on_every_rank(make_world):
    """Rank 0's deadline passes before rank 1 arrives (rank 1 is held until rank 0 has given up); rank 1's
    barrier then completes at once, as every rank posted it. Every rank must still leave with the same
    outcome: rank 1 (and every other rank) raises too, naming rank 0, instead of walking on alone into
    the next collective."""
    from mc2emu.runtime import DeadlockError

    world = make_world()
    base = MPI.COMM_WORLD
    with pytest.raises(DeadlockError) as info:
        if world.rank == 0:
            try:
                world.barrier(timeout=HANG_TIMEOUT_S)
            finally:
                base.send("gave up", dest=1, tag=77)
        else:
            if world.rank == 1:
                assert base.recv(source=0, tag=77) == "gave up"
            world.barrier(timeout=RESYNC_TIMEOUT_S)
    msg = str(info.value)
    if world.rank == 0:
        assert "no progress" in msg and "host barrier" in msg
    elif world.rank == 1:
        assert isinstance(info.value, HostBarrierFailed) and info.value.declared_elsewhere
        assert "host barrier: rank(s) [0] gave up waiting in it" in msg, msg
    assert world.failed is not None
    with pytest.raises(CommClosedError, match="left it"):
        world.barrier()
    # the failed world is freed on every rank by close() (the fixture's), with no barrier
