"""The happens-before checker on hand-written kernels run through the one call (`mc2emu.run_kernel`, via the
kit's `mc2_run_kernel`): puts ordered by a signal, puts read without any wait, signals nobody waits for, and
a PAYLOAD window read where nobody wrote. Deterministic: each case is run twice and must report the same."""

import numpy as np
import pytest

from mc2emu import MemRole
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.testing import assert_no_hazards, expect_hazard

NBYTES = 256


def run_case(run_kernel, wait_before_read: bool, post_signal: bool = True, consume_signal: bool = True):
    def setup(run):
        win = run.window(NBYTES + 64, "hb_case", role=MemRole.CONTROL)   # zero-filled: only ordering is checked
        src = run.alloc(0, "src", data=np.full(NBYTES, run.rank + 1, dtype=np.uint8))
        return Shmem(run.world), win.addr(0), win.addr(NBYTES), src, (run.rank + 1) % run.size

    def kernel(ctx, shmem, data, sig, src, peer):
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

    return run_kernel(kernel, block_dim=1, kernel_type="AIV_ONLY", setup=setup, name="hb_case")


@pytest.mark.mpi(min_size=2)
def test_reads_after_the_signal_wait_are_ordered(mc2_run_kernel, mc2_comm):
    for _ in range(2):
        res = run_case(mc2_run_kernel, wait_before_read=True)
        assert_no_hazards(res)
        assert res.returns["AIV0"] == (mc2_comm.Get_rank() - 1) % mc2_comm.Get_size() + 1


@pytest.mark.mpi(min_size=2)
def test_read_without_wait_is_reported_every_time(mc2_run_kernel, mc2_comm):
    for _ in range(2):
        with expect_hazard("READ_BEFORE_WAIT", comm=mc2_comm, ranks=range(mc2_comm.Get_size())) as cap:
            run_case(mc2_run_kernel, wait_before_read=False, post_signal=False)
        (rep,) = cap.reports()
        assert rep.details["window"] == "hb_case" and (rep.details["lo"], rep.details["hi"]) == (0, NBYTES)


@pytest.mark.mpi(min_size=2)
def test_a_signal_nobody_waits_for_is_unpaired(mc2_run_kernel, mc2_comm):
    with expect_hazard("UNWAITED_SIGNAL", comm=mc2_comm, ranks=range(mc2_comm.Get_size())):
        run_case(mc2_run_kernel, wait_before_read=False, post_signal=True, consume_signal=False)


@pytest.mark.mpi(min_size=2)
def test_poisoned_window_bytes_nobody_wrote_read_as_nan_and_are_reported(mc2_run_kernel, mc2_comm):
    """A PAYLOAD window (poisoned by the one call, no `poison()` needed): the peer puts 96 bytes at offset 32
    of my window, my AIV writes 16 bytes at offset 0 itself; after the signal I read bytes [0, 192). Bytes
    [16, 32) and [128, 192) were never written: they read as 0xFF (NaN) and one READ_UNWRITTEN names [16, 192)
    with 80 bytes; a read of only written bytes is not reported. (The put is ordered by its signal, so no
    READ_BEFORE_WAIT.)"""
    rank, size = mc2_comm.Get_rank(), mc2_comm.Get_size()

    def setup(run):
        win = run.window(NBYTES, "poisoned", role=MemRole.PAYLOAD)
        flag = run.window(64, "poisoned_flag", role=MemRole.CONTROL)   # signal words start at zero
        src = run.alloc(0, "src", data=np.full(96, rank + 1, dtype=np.uint8))
        return Shmem(run.world), win.addr(0), flag.addr(0), src

    def kernel(ctx, shmem, win, flag, src):
        shmem.put_signal(ctx, win + 32, src, 96, flag, 1, SignalOp.ADD, (rank + 1) % size)
        ctx.gm_write(win, np.full(16, 7, dtype=np.uint8))
        shmem.signal_wait_until(ctx, flag, Cmp.GE, 1)
        return ctx.gm_read(win, np.uint8, (192,)), ctx.gm_read(win + 32, np.uint8, (96,))

    with expect_hazard("READ_UNWRITTEN", comm=mc2_comm, ranks=range(size)) as cap:
        mc2_run_kernel(kernel, block_dim=1, kernel_type="AIV_ONLY", setup=setup, name="poisoned")
    a, ok = cap.error.output.returns["AIV0"]
    assert (a[:16] == 7).all() and (a[32:128] == (rank - 1) % size + 1).all()
    assert (ok == (rank - 1) % size + 1).all()
    assert (a[16:32] == 0xFF).all() and (a[128:192] == 0xFF).all()
    assert np.isnan(a[16:32].view(np.float16)).all()
    got_reports = [(h.hazard.value, h.core, h.details.get("lo"), h.details.get("hi"), h.details.get("count"))
                   for h in cap.hazards]
    assert got_reports == [("READ_UNWRITTEN", "AIV0", 16, 192, 80)], cap.hazards
