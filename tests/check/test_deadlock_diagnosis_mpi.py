"""The cross-rank deadlock diagnosis (`mc2emu.check.deadlock`): one report per deadlock, also when a rank is
starved of CPU (modelled deterministically: its service thread held back, its deadline late), and a signal
wait names the rank that should have signalled."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from mc2emu.check.deadlock import COLLECT_S, DeadlockDiagnosis
from mc2emu.comm import Cmp, CommWorld, Shmem
from mc2emu.comm.shmem import SignalOp
from mc2emu.runtime import DeadlockError, Device, KernelType
from mc2emu.runtime.gm import MemRole

pytestmark = pytest.mark.mpi(min_size=2)

# Every rank reaches its deadline at about the same time: the case that used to give one report per rank.
HANG_TIMEOUT_S = 1.0
RESYNC_TIMEOUT_S = 30.0


def _hang_on_signals(rounds: int) -> list[list[tuple[bool, str]]]:
    """Every rank waits for a signal from its right neighbour that never comes (started right after a
    barrier, same deadline everywhere); returns, per round, every rank's (declared_elsewhere, message)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    dev = Device(rank=comm.Get_rank(), check=True, timeout=HANG_TIMEOUT_S)
    world = CommWorld(dev)
    diag = DeadlockDiagnosis(dev, comm)
    diag.attach()
    shmem = Shmem(world)
    me, size = world.rank, world.size
    right = (me + 1) % size
    win = world.window(8, "never")
    outcomes = []
    try:
        for _ in range(rounds):
            diag.reset()
            world.barrier(timeout=RESYNC_TIMEOUT_S)

            def kernel(ctx):
                shmem.signal_wait_until(ctx, win.base, Cmp.GE, 1, from_pe=right)

            with pytest.raises(DeadlockError) as info:
                dev.launch(kernel, 1, KernelType.AIV_ONLY)
            err = info.value
            diag_text = err.report if isinstance(err.report, str) else str(err)
            outcomes.append(comm.allgather((bool(err.declared_elsewhere), diag_text)))
            diag._stop.wait(COLLECT_S)            # answer late requests before the next round
            diag.reset()                          # a new round: no deadlock declared
            world.barrier(timeout=RESYNC_TIMEOUT_S)
    finally:
        diag.close()
        world.close()
    return outcomes


def test_one_report_per_deadlock_and_the_signal_releaser_is_named():
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    for everyone in _hang_on_signals(rounds=2):
        reports = [text for elsewhere, text in everyone if not elsewhere]
        # Exactly one, unless ranks were starved of CPU for COLLECT_S (seen with 8 ranks at load 60 on 2
        # cores): a declarer nobody hears from cannot be deferred to (mc2emu.check.deadlock, protocol).
        starved = any("no answer within" in t for t in reports)
        assert len(reports) == 1 or starved, \
            f"{len(reports)} reports for one deadlock: {[t[:80] for t in reports]}"
        report = reports[0]
        declarer = re.match(r"DEADLOCK report of rank (\d+) ", report)
        assert declarer is not None, report
        # A rank answers with its waiting cores, or with none when it was still on its way to the wait (starved
        # of CPU: 8 ranks on 2 cores), its state then named as such; a rank may also not answer within COLLECT_S.
        waiting = [q for q in range(size) if re.search(rf"^  rank {q} \(kernel\): [1-9]\d* core\(s\) waiting", report,
                                                       re.M)]
        late = [q for q in range(size) if f"  rank {q} (kernel): 0 core(s) waiting" in report]
        # the reporter itself is always in it, waiting (any rank may declare: under load ranks 0 and 1 may not
        # have reached their waits yet when rank 2 hits its deadline)
        assert int(declarer.group(1)) in waiting, report
        for q in waiting:
            # every waiting rank's wait names its releaser, the right neighbour, and follows it to its state
            right = (q + 1) % size
            assert f"put_signal / signal_op from rank {right}" in report, report
            if right in waiting:
                assert f"releaser rank {right} (any core): its cores are themselves waiting" in report, report
            elif right in late:
                assert f"releaser rank {right} (any core): not waiting (running or between launches)" in report, report
        if len(waiting) == size:
            assert "cycle: " in report, report
        deferred = [text for elsewhere, text in everyone if elsewhere]
        assert all("see rank" in t for t in deferred), deferred


# -- starvation ------------------------------------------------------------------------------------------
# The starved rank reaches its own deadline after the others declared, collected and reported.
STARVED_TIMEOUT_S = HANG_TIMEOUT_S + COLLECT_S + 1.5
# Every rank ends within this of its own deadline plus the collection (8 ranks on 2 cores: generous).
END_SLACK_S = 6.0


class StarvedDiagnosis(DeadlockDiagnosis):
    """A rank starved of CPU, deterministically: its service thread answers nothing until `close()` (8 ranks
    at load ~60 on 2 cores left a service unscheduled for seconds, and its rank then declared a second
    deadlock when its own deadline passed). The rank's waiting threads still run."""

    def _serve(self) -> None:
        self._stop.wait()
        super()._serve()


def _cycle_nodes(report: str) -> frozenset[str]:
    found = re.search(r"^  cycle: (.*)$", report, re.M)
    assert found is not None, report
    return frozenset(found.group(1).split(" -> "))


def _hang_once(pivot: int, starve: bool) -> list[tuple[bool, str, float, float]]:
    """Rank `pivot` waits on a signal of the others' ring, which hangs: every other rank waits on its right
    neighbour among the others. With `starve`, the pivot's service is held back and its deadline passes
    late. Every rank closes its diagnosis at once after its error (no linger: a late declarer finds nobody
    to ask). Returns every rank's (declared_elsewhere, message, seconds to the error, deadline)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    me, size = comm.Get_rank(), comm.Get_size()
    others = [q for q in range(size) if q != pivot]
    right = others[0] if me == pivot else others[(others.index(me) + 1) % len(others)]
    starved = starve and me == pivot
    timeout = STARVED_TIMEOUT_S if starved else HANG_TIMEOUT_S
    dev = Device(rank=me, check=True, timeout=timeout)
    world = CommWorld(dev)
    diag = (StarvedDiagnosis if starved else DeadlockDiagnosis)(dev, comm)
    diag.attach()
    shmem = Shmem(world)
    win = world.window(8, "never")
    try:
        world.barrier(timeout=RESYNC_TIMEOUT_S)

        def kernel(ctx):
            shmem.signal_wait_until(ctx, win.base, Cmp.GE, 1, from_pe=right)

        t0 = time.monotonic()
        with pytest.raises(DeadlockError) as info:
            dev.launch(kernel, 1, KernelType.AIV_ONLY)
        took = time.monotonic() - t0
        err = info.value
        text = err.report if isinstance(err.report, str) else str(err)
        outcome = (bool(err.declared_elsewhere), text, took, timeout)
    finally:
        diag.close()
        dev.waiter.declared = None              # the host barriers below are no waits of the deadlock
    everyone = comm.allgather(outcome)
    world.barrier(timeout=RESYNC_TIMEOUT_S)
    world.close()
    return everyone


def _one_report(everyone: list[tuple[bool, str, float, float]]) -> tuple[int, str]:
    reports = [(q, text) for q, (elsewhere, text, _, _) in enumerate(everyone) if not elsewhere]
    assert len(reports) == 1, f"{len(reports)} reports for one deadlock: {[t[:80] for _, t in reports]}"
    return reports[0]


@pytest.mark.parametrize("lowest", [True, False], ids=["lowest_rank_starved", "highest_rank_starved"])
def test_a_starved_rank_reaching_its_deadline_late_defers_to_the_one_report(lowest):
    """Exactly one report, naming the cycle the same hang names without starvation; the starved rank stops
    with a pointer to that report, listed in it as not answering; every rank ends within seconds of its
    deadline. (The lowest rank starved gave two reports before: it declared late, asked, and as the lowest
    declarer reported again.)"""
    from mpi4py import MPI

    size = MPI.COMM_WORLD.Get_size()
    if size != 2:   # the un-starved baseline needs every rank to answer within COLLECT_S: flaky under CI load at 4+
        pytest.skip("runs at 2 ranks (measured at 2, 4 and 8 when written; the baseline report needs every rank)")
    pivot = 0 if lowest else size - 1
    cycle = {f"rank {q} AIV0" for q in range(size) if q != pivot}
    _, report = _one_report(_hang_once(pivot, starve=False))
    assert _cycle_nodes(report) == cycle, report
    everyone = _hang_once(pivot, starve=True)
    reporter, report = _one_report(everyone)
    assert reporter != pivot and report.startswith(f"DEADLOCK report of rank {reporter} "), report
    assert _cycle_nodes(report) == cycle, report
    assert f"  rank {pivot}: no answer within" in report, report
    late = everyone[pivot][1]
    assert f"see rank {reporter}'s report" in late, late
    for q, (_, _, took, deadline) in enumerate(everyone):
        limit = deadline + (0.0 if q == pivot else COLLECT_S) + END_SLACK_S
        assert took <= limit, f"rank {q} ended {took:.1f} s after the launch (limit {limit:.1f} s)"


# -- a lost signal -------------------------------------------------------------------------------------------
STATUS, GO = 0, 8   # byte offsets of the status word and of the test's hold-back word in one control window


def _late_reset_loop(peer_posts_again: bool) -> tuple[bool, str]:
    """The per_block status handshake (WriteStatusToWin, ReadStatus, its plain reset) twice back to back on
    ranks 0 and 1, with rank 0's launch-0 reset held back until rank 1's launch 1 has posted (`GO`: the test's
    stand-in for a thread preempted between its poll and its reset). With `peer_posts_again`, rank 1's launch-1
    SET lands first and rank 0's late reset erases it: rank 0's launch 1 waits forever on a post that came.
    Without it rank 1 never posts in launch 1: the same hang, but nothing was lost. Other ranks stand by.
    Returns rank 0's (declared elsewhere, report)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    me = comm.Get_rank()
    dev = Device(rank=me, check=True, timeout=HANG_TIMEOUT_S)
    world = CommWorld(dev)
    diag = DeadlockDiagnosis(dev, comm)
    diag.attach()
    shmem = Shmem(world)
    win = world.window(16, "status", role=MemRole.CONTROL)
    peer = 1 - me
    outcome = (False, "")
    try:
        world.barrier(timeout=RESYNC_TIMEOUT_S)

        def kernel(ctx, k):
            if not (me == 1 and k == 1 and not peer_posts_again):
                shmem.signal_op(ctx, win.addr(STATUS), 1, SignalOp.SET, peer)        # WriteStatusToWin
            if me == 1 and k == 1:
                shmem.signal_op(ctx, win.addr(GO), 1, SignalOp.SET, peer)
            shmem.signal_wait_until(ctx, win.addr(STATUS), Cmp.GE, 1, from_pe=peer)  # ReadStatus: the poll
            if me == 0 and k == 0:
                shmem.signal_wait_until(ctx, win.addr(GO), Cmp.GE, 1, from_pe=peer)
            ctx.gm_write(win.addr(STATUS), np.zeros(1, dtype=np.uint64))               # ... and its reset

        if me < 2:
            try:
                for k in range(2):
                    dev.launch(kernel, 1, KernelType.AIV_ONLY, k)
            except DeadlockError as err:
                outcome = (bool(err.declared_elsewhere), err.report if isinstance(err.report, str) else str(err))
        everyone = comm.allgather(outcome)   # blocks the main thread only: the diagnosis service still answers
    finally:
        diag.close()
        dev.waiter.declared = None
    world.barrier(timeout=RESYNC_TIMEOUT_S)
    world.close()
    return everyone[0]


@pytest.mark.parametrize("lost", [True, False], ids=["post_erased", "never_posted"])
def test_a_post_erased_by_a_late_reset_is_named_lost_signal(lost):
    elsewhere, report = _late_reset_loop(peer_posts_again=lost)
    assert not elsewhere and report.startswith("DEADLOCK report of rank 0 "), report
    assert "rank 0 (kernel, launch 1)" in report or "rank 0 (kernel)" in report, report
    line = ("  LOST_SIGNAL: rank 0 AIV0 waits (launch 1) for signal status+0x0 >= 0x1; rank 1 AIV0 SET it to 0x1 "
            "in launch 1 and that post completed, yet the word reads 0x0: a store on rank 0 overwrote the post after "
            "it landed")
    if lost:
        assert line in report, report
    else:
        assert "LOST_SIGNAL" not in report, report
        assert "put_signal / signal_op from rank 1" in report, report
