"""The host harness at every world size: a failed call's windows are freed by the next call on the same
communicator (after a deadlock, a kernel failure, and a failure on one rank only), every rank leaves a
call the same way whatever fails where, a failed hcomm call's HCCL server thread ends when its world is
freed, and many calls in one process grow neither the number of live windows nor the MPI progress threads
nor the memory."""

import numpy as np
import pytest
from harness_jobs import (
    SHORT_TIMEOUT,
    WINDOW_BYTES,
    KernelBug,
    a2a_hcomm_deadlock,
    call,
    failing_kernel,
    hccl_server_threads,
    live_windows,
    progress_threads,
    rss_bytes,
    sum_kernel,
    unset_flag_kernel,
)

from mc2emu.comm import HostBarrierFailed
from mc2emu.host import CallOptions, LaunchHarness, left_behind_windows
from mc2emu.host.harness import LEFT_BEHIND
from mc2emu.runtime import CoreError, DeadlockError

CALLS = 24
DEADLOCKS = 1          # it lingers the diagnosis a few seconds: the other calls fail fast instead
# The 11 failed calls' windows of WINDOW_BYTES, leaked, would be 44 MiB; the allowance covers allocator noise.
RSS_ALLOWANCE = 24 << 20


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def expect_failure(comm, kernel):
    with pytest.raises((DeadlockError, CoreError, KernelBug)) as info:
        call(comm, kernel, "win", WINDOW_BYTES) if kernel is sum_kernel else call(comm, kernel)
    return info.value


def settled(comm):
    """A successful call first: it frees what earlier tests' failed calls left on this communicator."""
    call(comm, sum_kernel, "win", 16)
    assert left_behind_windows(comm) == 0
    return live_windows()


@pytest.mark.mpi(min_size=2)
def test_deadlocked_call_leaves_its_windows_to_the_next_call():
    comm = world()
    before = settled(comm)
    exc = expect_failure(comm, unset_flag_kernel)
    assert isinstance(exc, DeadlockError)
    assert left_behind_windows(comm) == 1
    assert live_windows() == before + 2      # the call's window and its progress window
    out = call(comm, sum_kernel, "win", 16)
    assert left_behind_windows(comm) == 0
    assert live_windows() == before
    np.testing.assert_array_equal(out, np.full(16, comm.Get_rank() + 1, dtype=np.uint8))


@pytest.mark.mpi(min_size=2)
def test_failed_kernel_leaves_its_windows_to_the_next_call():
    comm = world()
    before = settled(comm)
    exc = expect_failure(comm, failing_kernel)
    assert isinstance(exc, (CoreError, KernelBug))
    assert left_behind_windows(comm) == 1 and live_windows() == before + 2
    call(comm, sum_kernel, "win", 16)
    assert left_behind_windows(comm) == 0 and live_windows() == before


@pytest.mark.mpi(min_size=2)
def test_a_failed_hcomm_calls_hccl_server_ends_when_its_world_is_freed():
    comm = world()
    settled(comm)
    assert hccl_server_threads() == 0
    with pytest.raises(DeadlockError):
        a2a_hcomm_deadlock(comm)
    assert left_behind_windows(comm) == 1 and hccl_server_threads() == 1
    settled(comm)                             # frees the left-behind world: its close hooks end the server
    assert hccl_server_threads() == 0


@pytest.mark.mpi(min_size=2)
def test_many_calls_grow_neither_windows_nor_threads_nor_memory():
    comm = world()
    for _ in range(3):                       # warm-up: allocator pools, MPI caches
        expect_failure(comm, failing_kernel)
        call(comm, sum_kernel, "win", 16)
    windows, threads, rss = live_windows(), progress_threads(), rss_bytes()
    for i in range(CALLS):
        if i < DEADLOCKS:
            expect_failure(comm, unset_flag_kernel)
        elif i % 2:
            expect_failure(comm, failing_kernel)
        else:
            call(comm, sum_kernel, "win", 16)
        assert live_windows() <= windows + 2, f"call {i}: {live_windows()} live windows, {windows} before"
        # a failed call's world keeps its progress thread until the next call frees it, no longer
        assert progress_threads() <= threads + 1, f"call {i}: {progress_threads()} MPI progress threads"
    call(comm, sum_kernel, "win", 16)
    assert live_windows() == windows
    assert progress_threads() == threads
    grown = rss_bytes() - rss
    assert grown < RSS_ALLOWANCE, f"RSS grew by {grown >> 20} MiB over {CALLS} calls"


class HostCodeBug(Exception):
    pass


@pytest.mark.mpi(min_size=2)
def test_a_rank_leaving_before_a_window_stops_every_rank_there():
    """Rank 0's host code raises after the call opened and before its window; the others go on to create
    the window. They must stop at that window's agreement, naming rank 0, instead of entering the window's
    collectives that rank 0 never joins (a hang); and every rank keeps the same call's world, freed by the
    next call."""
    comm = world()
    before = settled(comm)
    opts = CallOptions(timeout=SHORT_TIMEOUT, comm=comm)
    with pytest.raises((HostCodeBug, DeadlockError)) as info, LaunchHarness("harness_test", opts) as h:
        if comm.Get_rank() == 0:
            raise HostCodeBug("rank 0: the operator's host code failed")
        h.window(WINDOW_BYTES, "harness_test")
    if comm.Get_rank() == 0:
        assert isinstance(info.value, HostCodeBug)
    else:
        assert isinstance(info.value, HostBarrierFailed) and info.value.declared_elsewhere
        assert "host barrier: rank(s) [0] left the call" in str(info.value), str(info.value)
    assert left_behind_windows(comm) == 1
    assert live_windows() == before + 1        # the progress window only: no rank allocated the other
    assert comm.allgather(LEFT_BEHIND.calls(comm)) == [LEFT_BEHIND.calls(comm)] * comm.Get_size()
    call(comm, sum_kernel, "win", 16)
    assert left_behind_windows(comm) == 0 and live_windows() == before


@pytest.mark.mpi(min_size=2)
def test_divergent_left_behind_lists_free_only_the_calls_every_rank_kept():
    """Forced divergence: rank 0 keeps two failed calls' worlds, the others only the second. The next call
    frees the second everywhere (freeing the first on rank 0 against the second elsewhere, as a common prefix
    of the two lists would, pairs two different collective Win_frees: both hang); the first stays on rank 0
    until every rank keeps it again."""
    comm = world()
    before = settled(comm)
    expect_failure(comm, failing_kernel)
    [first] = LEFT_BEHIND.calls(comm)
    held = None
    if comm.Get_rank() != 0:
        held = LEFT_BEHIND._worlds[comm.py2f()][1].pop(first)   # as if this rank had not kept it
    expect_failure(comm, failing_kernel)                          # its start frees no call: none is common
    second = first + 1
    assert LEFT_BEHIND.calls(comm) == ([first, second] if comm.Get_rank() == 0 else [second])
    out = call(comm, sum_kernel, "win", 16)
    np.testing.assert_array_equal(out, np.full(16, comm.Get_rank() + 1, dtype=np.uint8))
    if comm.Get_rank() == 0:
        assert LEFT_BEHIND.calls(comm) == [first] and live_windows() == before + 2
    else:
        assert LEFT_BEHIND.calls(comm) == [] and live_windows() == before + 2   # the held world's windows
        LEFT_BEHIND.keep(comm, first, held, "restored by the test")
    call(comm, sum_kernel, "win", 16)
    assert left_behind_windows(comm) == 0 and live_windows() == before
