"""The happens-before checker's content check: a read ordered after the signal that completes a put must
see the put's bytes. A transport that lets the signal overtake the data (the LATE_PUT_DATA fault: the
bytes land only at the next barrier_all) gives the reader stale bytes: READ_NOT_VISIBLE, every time."""

import numpy as np
import pytest

from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.world import CommWorld
from mc2emu.runtime import Device
from mc2emu.runtime.faults import Fault, FaultPlan

NBYTES = 4096


def run_ring(faults):
    """Every rank put_signals NBYTES to its right neighbour, waits for its left neighbour's signal, reads
    the data, then barrier_all. Returns (hazard names, what the read saw, the window at the end)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=20, faults=faults)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm)
    try:
        win = cw.window(NBYTES + 64, "visibility")
        data, sig = win.addr(0), win.addr(NBYTES)
        src = dev.gm.alloc(NBYTES, "src", data=np.full(NBYTES, rank + 1, dtype=np.uint8))
        shmem = Shmem(cw)
        seen = {}

        def kernel(ctx):
            shmem.put_signal(ctx, data, src, NBYTES, sig, 1, SignalOp.ADD, (rank + 1) % size)
            shmem.signal_wait_until(ctx, sig, Cmp.GE, 1, from_pe=(rank - 1) % size)
            seen["read"] = ctx.gm_read(data, np.uint8, (NBYTES,))
            shmem.barrier_all(ctx)

        dev.launch(kernel, 1, "AIV_ONLY")
        cw.barrier()
        hb.finish()
        reports = dev.hazards.take()
        final = dev.gm.read(data, np.uint8, (NBYTES,))
        return reports, seen["read"], final
    finally:
        hb.close()
        cw.close()


@pytest.mark.mpi(min_size=2)
def test_ordered_reads_see_the_put_bytes():
    from mpi4py import MPI

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    reports, read, _ = run_ring(None)
    assert reports == []
    assert np.all(read == (rank - 1) % size + 1)


@pytest.mark.mpi(min_size=2)
def test_a_put_not_visible_when_its_signal_is_seen_is_reported_every_time():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    for _ in range(2):
        reports, read, final = run_ring(FaultPlan(Fault.LATE_PUT_DATA, rank=0, core=None, nth=0))
        names = sorted(h.hazard.value for h in reports)
        if rank == 1 % size:                       # the reader of rank 0's late data
            assert np.all(read == 0) and np.all(final == 1)
            assert names == ["READ_NOT_VISIBLE"], names
            rep = reports[0]
            assert rep.details["put_rank"] == 0 and rep.details["differing"] == NBYTES
            assert rep.details["window"] == "visibility"
        else:
            assert names == [], names
        comm.Barrier()
