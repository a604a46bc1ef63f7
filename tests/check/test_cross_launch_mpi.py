"""The cross-launch checker on a hand-written ring protocol launched back to back on the raw API (one
`Device` + one `CommWorld` per rank, `device.launch` three times, no host barrier between the launches).

Rank r puts its payload into rank r+1's data window and reads what rank r-1 put into its own. Correct
protocol: a start barrier (post ARRIVE to the writer, wait for the reader's ARRIVE of this launch: the reader
finished the previous launch's read), put_signal READY, wait READY, read. Two ways to keep READY: epoch
counts (wait >= k + 1) or a status word (wait >= 1, reset to 0 after the wait, as the reduce-scatter's
status slots). Each fault is one line of the kernel; every one must be reported by name, the correct
protocol by none, at any world size >= 2. The status-word fault without start barrier could really lose a
post and hang the test: that run puts an (unrecorded) host barrier between launches, which the checker does
not see, so it still judges the kernel's own synchronization as on a stream.
"""

import enum

import numpy as np
import pytest

from mc2emu.check.cross_launch import CrossLaunchChecker
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.world import CommWorld
from mc2emu.runtime import Device, Pipe
from mc2emu.runtime.gm import MemRole

NBYTES = 256
LAUNCHES = 3
CROSS_LAUNCH = {"WRITE_AFTER_READ_ACROSS_LAUNCH", "STALE_READ", "STALE_FLAG", "LOST_SIGNAL", "LEFT_AT_LOOP_END"}


class Ready(enum.Enum):
    EPOCH = "epoch"     # READY counts launches: wait >= k + 1
    STATUS = "status"   # READY is a status word: wait >= 1, then reset to 0


class Fault(enum.Enum):
    NONE = "none"
    DROP_START_BARRIER = "drop_start_barrier"    # no wait for the reader's ARRIVE before the put
    SKIP_PUT = "skip_put"                        # launches >= 1 signal READY without the data
    EPOCH_THRESHOLD_ONE = "epoch_threshold_one"  # EPOCH: wait READY >= 1 (launch 0's count passes it)
    SKIP_RESET = "skip_reset"                    # STATUS: no reset after the wait
    READ_FIRST = "read_first"                    # launches >= 1 read before the READY wait


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_loop(ready: Ready, fault: Fault = Fault.NONE, *, host_barrier: bool = False, record_barrier: bool = False):
    comm = world()
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=20)
    cw = CommWorld(dev, comm)
    xl = CrossLaunchChecker(dev, comm)
    try:
        data = cw.window(NBYTES, "xl_data")
        sig = cw.window(64, "xl_sig", role=MemRole.CONTROL)
        READY, ARRIVE = sig.addr(0), sig.addr(8)
        shmem = Shmem(cw)
        peer, writer = (rank + 1) % size, (rank - 1) % size
        got = []

        def kernel(ctx, k):
            src = dev.gm.alloc(0, f"src{k}", data=np.full(NBYTES, 16 * k + rank + 1, dtype=np.uint8))
            shmem.signal_op(ctx, ARRIVE, 1, SignalOp.ADD, writer)          # my reads of launch k-1 are done
            if fault is not Fault.DROP_START_BARRIER:
                shmem.signal_wait_until(ctx, ARRIVE, Cmp.GE, k + 1, from_pe=peer)
            if fault is Fault.SKIP_PUT and k > 0:
                shmem.signal_op(ctx, READY, 1, SignalOp.ADD, peer)
            else:
                shmem.put_signal(ctx, data.addr(0), src, NBYTES, READY, 1, SignalOp.ADD, peer)
            if fault is Fault.READ_FIRST and k > 0:
                got.append(int(ctx.gm_read(data.addr(0), np.uint8, (NBYTES,))[0]))
            if ready is Ready.EPOCH:
                need = 1 if fault is Fault.EPOCH_THRESHOLD_ONE else k + 1
                shmem.signal_wait_until(ctx, READY, Cmp.GE, need, from_pe=writer)
            else:
                shmem.signal_wait_until(ctx, READY, Cmp.GE, 1, from_pe=writer)
                if fault is not Fault.SKIP_RESET:
                    ctx.gm_write(READY, np.zeros(8, dtype=np.uint8))        # reset the status word
            if not (fault is Fault.READ_FIRST and k > 0):
                got.append(int(ctx.gm_read(data.addr(0), np.uint8, (NBYTES,))[0]))

        for k in range(LAUNCHES):
            dev.launch(kernel, 1, "AIV_ONLY", k)
            if host_barrier:
                cw.barrier()
                if record_barrier:
                    xl.host_barrier()
        cw.barrier()
        xl.finish()
        reports = dev.hazards.take()
        return got, reports
    finally:
        xl.close()
        cw.close()


def names(reports):
    return sorted({h.hazard.value for h in reports} & CROSS_LAUNCH)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("ready", list(Ready))
def test_a_correct_loop_reports_nothing_and_reads_each_launchs_data(ready):
    got, reports = run_loop(ready)
    rank, size = world().Get_rank(), world().Get_size()
    writer = (rank - 1) % size
    assert got == [16 * k + writer + 1 for k in range(LAUNCHES)]
    assert reports == [], [str(r) for r in reports]


@pytest.mark.mpi(min_size=2)
def test_a_dropped_start_barrier_is_a_write_after_read_across_launches():
    _, reports = run_loop(Ready.EPOCH, Fault.DROP_START_BARRIER)
    war = [r for r in reports if r.hazard.value == "WRITE_AFTER_READ_ACROSS_LAUNCH"]
    writer = (world().Get_rank() - 1) % world().Get_size()
    assert war, [str(r) for r in reports]
    # both launches named: the read of launch k against the put of launch k + 1, from the writer, whole payload
    pairs = {(r.details["launch"], r.details["put_launch"]) for r in war}
    assert pairs >= {(k, k + 1) for k in range(LAUNCHES - 1)} and all(a < b for a, b in pairs)
    assert all(r.details["put_rank"] == writer and r.core == "AIV0" and r.details["window"] == "xl_data"
               and (r.details["lo"], r.details["hi"]) == (0, NBYTES) for r in war)
    # the ARRIVE posts nobody waits for are left at the end of the loop
    assert "LEFT_AT_LOOP_END" in names(reports)


@pytest.mark.mpi(min_size=2)
def test_a_dropped_start_barrier_with_a_recorded_host_barrier_is_safe():
    _, reports = run_loop(Ready.EPOCH, Fault.DROP_START_BARRIER, host_barrier=True, record_barrier=True)
    assert "WRITE_AFTER_READ_ACROSS_LAUNCH" not in names(reports)


@pytest.mark.mpi(min_size=2)
def test_a_skipped_put_is_a_stale_read_of_launch_0s_bytes():
    got, reports = run_loop(Ready.EPOCH, Fault.SKIP_PUT)
    writer = (world().Get_rank() - 1) % world().Get_size()
    assert got == [writer + 1] * LAUNCHES
    stale = [r for r in reports if r.hazard.value == "STALE_READ"]
    assert names(reports) == ["STALE_READ"]
    assert sorted((r.details["launch"], r.details["written_launch"]) for r in stale) == [(1, 0), (2, 0)]
    assert all((r.details["lo"], r.details["hi"], r.details["count"]) == (0, NBYTES, NBYTES) for r in stale)


@pytest.mark.mpi(min_size=2)
def test_a_read_before_the_wait_is_a_stale_read_naming_the_racing_put():
    """The read's bytes were written by the previous launch; this launch's put reaches them unordered."""
    _, reports = run_loop(Ready.EPOCH, Fault.READ_FIRST)
    writer = (world().Get_rank() - 1) % world().Get_size()
    stale = [r for r in reports if r.hazard.value == "STALE_READ"]
    assert names(reports) == ["STALE_READ"], [str(r) for r in reports]
    assert sorted((r.details["launch"], r.details["written_launch"]) for r in stale) == [(1, 0), (2, 1)]
    assert all(f"a write of launch {r.details['launch']} by rank {writer} AIV0 reaches them but is not ordered "
               f"before the read" in r.message for r in stale), [str(r) for r in stale]


@pytest.mark.mpi(min_size=2)
def test_a_wait_on_a_count_left_by_the_previous_launch_is_a_stale_flag():
    _, reports = run_loop(Ready.EPOCH, Fault.EPOCH_THRESHOLD_ONE)
    stale = [r for r in reports if r.hazard.value == "STALE_FLAG"]
    assert names(reports) == ["STALE_FLAG"]
    assert sorted(r.details["launch"] for r in stale) == [1, 2]
    assert all(r.details["window"] == "xl_sig" and r.details["lo"] == 0 for r in stale)


@pytest.mark.mpi(min_size=2)
def test_a_skipped_status_reset_is_a_stale_flag():
    _, reports = run_loop(Ready.STATUS, Fault.SKIP_RESET)
    assert names(reports) == ["STALE_FLAG"]
    assert sorted(r.details["launch"] for r in reports if r.hazard.value == "STALE_FLAG") == [1, 2]


@pytest.mark.mpi(min_size=2)
def test_a_status_reset_without_start_barrier_is_lost_signal_and_write_after_read():
    """The reduce-scatter's shape: status words reset after the wait, no barrier between launches."""
    _, reports = run_loop(Ready.STATUS, Fault.DROP_START_BARRIER, host_barrier=True)
    got = names(reports)
    assert {"LOST_SIGNAL", "WRITE_AFTER_READ_ACROSS_LAUNCH"} <= set(got), got
    lost = [r for r in reports if r.hazard.value == "LOST_SIGNAL"]
    assert {(r.details["launch"], r.details["post_launch"]) for r in lost} >= {(0, 1), (1, 2)}


def flag_kernel(ctx, rounds, waits):
    """AIV Sets `rounds` rounds of flag 3, the AIC waits `waits` of them (the QMRS per_block shape: one Set
    more than Waits per launch)."""
    if ctx.ASCEND_IS_AIV:
        for _ in range(rounds):
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 3)
    else:
        for _ in range(waits):
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 3)


@pytest.mark.mpi(min_size=2)
def test_a_flag_round_left_by_launch_0_is_taken_in_launch_1_and_the_rest_left_at_the_end():
    comm = world()
    dev = Device(comm.Get_rank(), timeout=20)
    xl = CrossLaunchChecker(dev, comm)
    try:
        for _ in range(2):
            dev.launch(flag_kernel, 1, "MIX_AIC_1_1", 2, 1)
        comm.Barrier()
        xl.finish()
        reports = dev.hazards.take()
    finally:
        xl.close()
    stale = [r for r in reports if r.hazard.value == "STALE_FLAG"]
    left = [r for r in reports if r.hazard.value == "LEFT_AT_LOOP_END"]
    assert [(r.core, r.details["launch"], r.details["set_launch"], r.details["flag"]) for r in stale] == [
        ("AIC0", 1, 0, 3)]
    assert [(r.core, r.details["count"], r.details["launches"]) for r in left] == [("AIC0", 2, [1])]


@pytest.mark.mpi(min_size=2)
def test_a_paired_flag_loop_reports_nothing():
    comm = world()
    dev = Device(comm.Get_rank(), timeout=20)
    xl = CrossLaunchChecker(dev, comm)
    try:
        for _ in range(2):
            dev.launch(flag_kernel, 1, "MIX_AIC_1_1", 2, 2)
        comm.Barrier()
        xl.finish()
        assert names(dev.hazards.take()) == []
    finally:
        xl.close()
