"""The happens-before checker in stream mode (`HappensBeforeChecker(stream=True)`, as a `Communicator` attaches
it): launches back to back with no host barrier, each core's records kept per launch and a rank's launches
ordered by stream order only. A ring (start barrier, put_signal READY, wait, read) runs three launches; with
`skip_put` launches >= 1 signal READY without the data, so their reads see launch 0's bytes: ordered before
them through launch 0's wait and the stream (no READ_BEFORE_WAIT; the stale bytes are the cross-launch
check's STALE_READ), where a checker without stream order would call every such read unordered."""

import numpy as np
import pytest

from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.world import CommWorld
from mc2emu.runtime import Device
from mc2emu.runtime.gm import MemRole

NBYTES = 256
LAUNCHES = 3


def ring_loop(*, skip_put: bool, drop_wait: bool = False):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=20)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm, stream=True)
    try:
        data = cw.window(NBYTES, "hb_data")
        sig = cw.window(64, "hb_sig", role=MemRole.CONTROL)
        READY, ARRIVE = sig.addr(0), sig.addr(8)
        shmem = Shmem(cw)
        peer, writer = (rank + 1) % size, (rank - 1) % size
        got = []

        def kernel(ctx, k):
            src = dev.gm.alloc(0, f"src{k}", data=np.full(NBYTES, 16 * k + rank + 1, dtype=np.uint8))
            shmem.signal_op(ctx, ARRIVE, 1, SignalOp.ADD, writer)
            shmem.signal_wait_until(ctx, ARRIVE, Cmp.GE, k + 1, from_pe=peer)
            if skip_put and k > 0:
                shmem.signal_op(ctx, READY, 1, SignalOp.ADD, peer)
            else:
                shmem.put_signal(ctx, data.addr(0), src, NBYTES, READY, 1, SignalOp.ADD, peer)
            if not (drop_wait and k == 0):
                shmem.signal_wait_until(ctx, READY, Cmp.GE, k + 1, from_pe=writer)
            got.append(int(ctx.gm_read(data.addr(0), np.uint8, (NBYTES,))[0]))

        for k in range(LAUNCHES):
            dev.launch(kernel, 1, "AIV_ONLY", k)
        cw.barrier()
        hb.finish()
        return got, dev.hazards.take()
    finally:
        hb.close()
        cw.close()


def _names(reports):
    return {h.hazard.value for h in reports}


@pytest.mark.mpi(min_size=2)
def test_a_correct_loop_is_clean_in_stream_mode():
    from mpi4py import MPI

    got, reports = ring_loop(skip_put=False)
    writer = (MPI.COMM_WORLD.Get_rank() - 1) % MPI.COMM_WORLD.Get_size()
    assert got == [16 * k + writer + 1 for k in range(LAUNCHES)]
    assert reports == [], [str(r) for r in reports]


@pytest.mark.mpi(min_size=2)
def test_a_read_of_an_earlier_launchs_put_is_ordered_by_the_stream():
    got, reports = ring_loop(skip_put=True)
    assert len(set(got)) == 1                      # launch 0's bytes, read three times
    assert "READ_BEFORE_WAIT" not in _names(reports), [str(r) for r in reports]


@pytest.mark.mpi(min_size=2)
def test_a_missing_wait_in_launch_0_is_still_reported_in_stream_mode():
    _, reports = ring_loop(skip_put=False, drop_wait=True)
    rbw = [r for r in reports if r.hazard.value == "READ_BEFORE_WAIT"]
    assert rbw and all(r.core == "AIV0@0" and r.details["window"] == "hb_data" for r in rbw), [str(r) for r in reports]
