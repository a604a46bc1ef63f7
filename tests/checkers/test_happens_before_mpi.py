"""The happens-before checker on hand-written kernels: puts ordered by a signal, puts read without any
wait, and signals nobody waits for. Deterministic: each case is run twice and must report the same."""

import numpy as np
import pytest

from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.world import CommWorld
from mc2emu.runtime import Device

NBYTES = 256


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_case(wait_before_read: bool, post_signal: bool = True, consume_signal: bool = True):
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=10)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm)
    try:
        win = cw.window(NBYTES + 64, "hb_case")
        data, sig = win.addr(0), win.addr(NBYTES)
        src = dev.gm.alloc(0, "src", data=np.full(NBYTES, rank + 1, dtype=np.uint8))
        shmem = Shmem(cw)
        peer = (rank + 1) % size

        def kernel(ctx):
            if ctx.GetBlockIdx() != 0:
                return None
            if post_signal:
                shmem.put_signal(ctx, data, src, NBYTES, sig, 1, SignalOp.ADD, peer)
            else:
                shmem.put_nbi(ctx, data, src, NBYTES, peer)
                shmem.quiet(ctx)
            if wait_before_read and consume_signal:
                shmem.signal_wait_until(ctx, sig, Cmp.GE, 1)
            got = ctx.gm_read(data, np.uint8, (NBYTES,))
            if not wait_before_read:
                # let the data land (or not) before the end of the launch: the checker must not care
                shmem.barrier_all(ctx)
            return int(got[0])

        dev.launch(kernel, 1, "AIV_ONLY")
        cw.barrier()
        hb.finish()
        return sorted(h.hazard.value for h in dev.hazards.take())
    finally:
        hb.close()
        cw.close()


@pytest.mark.mpi(min_size=2)
def test_reads_after_the_signal_wait_are_ordered():
    for _ in range(2):
        assert run_case(wait_before_read=True) == []


@pytest.mark.mpi(min_size=2)
def test_read_without_wait_is_reported_every_time():
    for _ in range(2):
        got = run_case(wait_before_read=False, post_signal=False)
        assert "READ_BEFORE_WAIT" in got


@pytest.mark.mpi(min_size=2)
def test_a_signal_nobody_waits_for_is_unpaired():
    got = run_case(wait_before_read=False, post_signal=True, consume_signal=False)
    assert "UNWAITED_SIGNAL" in got
