"""Every rank runs its own emulated device at the same time (the 8-NPU load of the main job); the first test
takes its device and communicator from the kit (`mc2emu.testing`)."""

import pytest

from mc2emu.runtime import DeadlockError, Device, Pipe


def _kernel(ctx, rounds):
    for t in range(rounds):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t % 4)
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 4 + t % 4)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, t % 4)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 4 + t % 4)
    ctx.SyncAll(False)
    return ctx.GetBlockIdx()


@pytest.mark.mpi(min_size=2)
def test_every_rank_runs_a_device_concurrently(mc2_device, mc2_comm):
    res = mc2_device.launch(_kernel, 2, "MIX_AIC_1_2", 300)
    summary = (len(res.hazards), len(mc2_device.flags.leftovers()), sorted(res.returns.values()))
    everyone = mc2_comm.allgather(summary)
    assert all(s == (0, 0, [0, 0, 1, 1, 2, 3]) for s in everyone), everyone


@pytest.mark.mpi(min_size=2)
def test_deadlock_on_one_rank_is_reported_within_the_deadline():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dev = Device(comm.Get_rank(), timeout=1.0)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC and ctx.rank == comm.Get_size() - 1:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 3)

    hung = False
    try:
        dev.launch(kernel, 1, "MIX_AIC_1_1")
    except DeadlockError as exc:
        hung = "CrossCoreWaitFlag<2, PIPE_MTE2>(3)" in str(exc)
    flags = comm.allgather(hung)
    assert flags == [False] * (comm.Get_size() - 1) + [True]
