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


@pytest.mark.mpi(min_size=2)
def test_poisoned_window_bytes_nobody_wrote_read_as_nan_and_are_reported():
    """A poisoned data window: the peer puts 96 bytes at offset 32 of my window, my AIV writes 16 bytes at
    offset 0 itself; after a barrier I read bytes [0, 192). Bytes [16, 32) and [128, 192) were never written:
    they read as 0xFF (NaN) and one READ_UNWRITTEN names [16, 192) with 80 bytes; a read of only written
    bytes is not reported. (The put is ordered by its signal, so no READ_BEFORE_WAIT.)"""
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=10)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm)
    try:
        win = cw.window(NBYTES, "poisoned")
        flag = cw.window(64, "poisoned_flag")   # signal words stay zero (never poisoned)
        win.poison()
        src = dev.gm.alloc(0, "src", data=np.full(96, rank + 1, dtype=np.uint8))
        shmem = Shmem(cw)
        cw.barrier()
        got = {}

        def kernel(ctx):
            shmem.put_signal(ctx, win.addr(32), src, 96, flag.addr(0), 1, SignalOp.ADD, (rank + 1) % size)
            ctx.gm_write(win.addr(0), np.full(16, 7, dtype=np.uint8))
            shmem.signal_wait_until(ctx, flag.addr(0), Cmp.GE, 1)
            got["all"] = ctx.gm_read(win.addr(0), np.uint8, (192,))
            got["ok"] = ctx.gm_read(win.addr(32), np.uint8, (96,))

        dev.launch(kernel, 1, "AIV_ONLY")
        cw.barrier()
        hb.finish()
        reports = dev.hazards.take()
        a = got["all"]
        assert (a[:16] == 7).all() and (a[32:128] == (rank - 1) % size + 1).all()
        assert (a[16:32] == 0xFF).all() and (a[128:192] == 0xFF).all()
        assert np.isnan(a[16:32].view(np.float16)).all()
        got_reports = [(h.hazard.value, h.core, h.details.get("lo"), h.details.get("hi"), h.details.get("count"))
                       for h in reports]
        assert got_reports == [("READ_UNWRITTEN", "AIV0", 16, 192, 80)], reports
    finally:
        hb.close()
        cw.close()
