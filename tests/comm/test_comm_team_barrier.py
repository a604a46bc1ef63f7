"""apace TeamBarrier: CrossDevice / CrossCore across ranks and launches, at any world size."""

from __future__ import annotations

import numpy as np
import pytest
from comm_cases import HANG_TIMEOUT_S, RESYNC_TIMEOUT_S

from mc2emu.comm import BarrierMode, Shmem, TeamBarrier
from mc2emu.runtime import DeadlockError, KernelType

pytestmark = pytest.mark.mpi(min_size=2)

ROUNDS = 3
LAUNCHES = 2


@pytest.mark.parametrize("jobs_of", [lambda r: 1, lambda r: 2, lambda r: r, lambda r: r + 2],
                         ids=["1job", "2jobs", "Rjobs", "R+2jobs"])
def test_team_barrier_orders_puts_across_ranks_and_launches(make_world, jobs_of):
    """The apace pattern: job j puts this round's token to the ranks it serves (j, j + step, ...), then
    CrossDevice + CrossCore; afterwards core 0 sees every rank's token of this round."""
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    jobs = jobs_of(R)
    barrier = TeamBarrier(world, jobs)
    win = world.window(R * 8, "tokens")
    tok = dev.gm.alloc(8 * jobs, "tok")

    def kernel(ctx, launch_idx):
        job = ctx.GetBlockIdx()
        barrier.Init(ctx, job, BarrierMode.BARRIER_NONE)
        for rnd in range(ROUNDS):
            value = (launch_idx * ROUNDS + rnd + 1) * 1000 + me
            for pe in range(job, R, min(jobs, R)):
                ctx.gm_write(tok + job * 8, np.array([value], dtype=np.uint64))
                shmem.put_nbi(ctx, win.addr(me * 8), tok + job * 8, 8, pe)
            barrier.CrossDevice(ctx, job)
            barrier.CrossCore(ctx, job)
            if job == 0:
                got = ctx.gm_read(win.base, np.uint64, (R,))
                want = (launch_idx * ROUNDS + rnd + 1) * 1000 + np.arange(R, dtype=np.uint64)
                np.testing.assert_array_equal(got, want, err_msg=f"round {rnd} of launch {launch_idx}")
            # Before anyone puts the next tokens: job 0 has read (CrossDevice of job j only syncs the ranks
            # job j serves), then every rank passed CrossDevice + CrossCore again.
            barrier.CrossCore(ctx, job)
            barrier.CrossDevice(ctx, job)
            barrier.CrossCore(ctx, job)

    for launch_idx in range(LAUNCHES):
        dev.launch(kernel, jobs, KernelType.AIV_ONLY, launch_idx)
    for job in range(jobs):
        assert barrier.epoch(job) == (LAUNCHES * ROUNDS * 2 if job < R else 0), f"job {job}"
    world.barrier()


def test_init_both_runs_cross_device_then_cross_core(make_world):
    world = make_world()
    barrier = TeamBarrier(world, 2)

    def kernel(ctx):
        barrier.Init(ctx, ctx.GetBlockIdx(), BarrierMode.BARRIER_BOTH)

    world.device.launch(kernel, 2, KernelType.AIV_ONLY)
    assert [barrier.epoch(j) for j in range(2)] == [1, 1 if world.size > 1 else 0]
    world.barrier()


def test_rank_that_skips_the_barrier_leaves_the_others_in_deadlock(make_world):
    world = make_world(timeout=HANG_TIMEOUT_S)
    barrier = TeamBarrier(world, 1)
    me = world.rank

    def kernel(ctx):
        if me != 0:
            barrier.CrossDevice(ctx, 0)

    if me == 0:
        world.device.launch(kernel, 1, KernelType.AIV_ONLY)
    else:
        with pytest.raises(DeadlockError, match=r"TeamBarrier team_barrier slot \d+ on rank 0"):
            world.device.launch(kernel, 1, KernelType.AIV_ONLY)
    world.barrier(timeout=RESYNC_TIMEOUT_S)


def test_deadlock_report_names_the_job_that_stores_the_slot(make_world):
    """jobs = R (the a2a layout): job j of rank me waits for slot me on rank j, which rank j's job
    me % step stores. Rank 0 skips the barrier: on every other rank job 0 hangs, released by rank 0's job
    me (not job 0)."""
    world = make_world(timeout=HANG_TIMEOUT_S)
    R, me = world.size, world.rank
    barrier = TeamBarrier(world, R)

    def kernel(ctx):
        if me != 0:
            barrier.CrossDevice(ctx, ctx.GetBlockIdx())

    if me == 0:
        world.device.launch(kernel, R, KernelType.AIV_ONLY)
    else:
        with pytest.raises(DeadlockError) as info:
            world.device.launch(kernel, R, KernelType.AIV_ONLY)
        text = str(info.value)
        assert f"slot {me} on rank 0" in text, text
        assert f"released by rank 0 TeamBarrier CrossDevice(job {me})" in text, text
    world.barrier(timeout=RESYNC_TIMEOUT_S)
