"""`Communicator` at any world size >= 2: calls back to back on one persistent communicator match their
golden every iteration (AllGather seed, A2A UDMA and hcomm, QMRS rounds), with no host barrier between the
calls after the first; the data window is carved from the HCCL buffer (the same bytes every call) and a
call whose window does not fit is refused with the inequality, leaving the communicator usable; a rank
that stalls in iteration k stops every rank with a report naming launch k."""

import os
import threading
import time

import ml_dtypes
import numpy as np
import pytest

from mc2emu.comm import Communicator, CommWorld
from mc2emu.comm.communicator import NOTICE_POLL_S
from mc2emu.comm.errors import CommClosedError
from mc2emu.numerics.compare import ulp_distance
from mc2emu.ops import (
    all_gather_quant_matmul,
    all_to_all_quant_matmul,
    gen_ag_st_inputs,
    gen_qmrs_st_inputs,
    golden_a2a,
    golden_all_gather_quant_matmul,
    golden_quant_matmul_reduce_scatter,
    quant_matmul_reduce_scatter,
)
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.runtime import DeadlockError
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.runtime.hazards import ConstraintError

ITERATIONS = 3
TIMEOUT = 20.0
BUFFER = 4 << 20
STALL_TIMEOUT = 2.0
STOP_WITHIN_S = 10.0


def mpi_world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def bits(a):
    return np.ascontiguousarray(a).view(np.uint16)


def ag_case(world):
    r = world.Get_rank()
    inp = gen_ag_st_inputs(64, 256, 128, r)
    gold = golden_all_gather_quant_matmul(world.allgather(inp["x1"]), world.allgather(inp["x1_scale"]),
                                          inp["x2"], inp["x2_scale"])
    return inp, gold


def ag_call(inp, comm, **kw):
    return all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], comm=comm, **kw)


def count_barriers(monkeypatch):
    counted = []
    real = CommWorld.barrier

    def barrier(self, *a, **kw):
        counted.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(CommWorld, "barrier", barrier)
    return counted


@pytest.mark.mpi(min_size=2)
def test_all_gather_loop_every_iteration_equals_golden_no_host_barrier(monkeypatch):
    world = mpi_world()
    inp, gold = ag_case(world)
    counted = count_barriers(monkeypatch)
    with Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT) as comm:
        first = ag_call(inp, comm)
        after_first = len(counted)
        outs = [ag_call(inp, comm) for _ in range(ITERATIONS - 1)]
        assert len(counted) == after_first     # stream order only: no host barrier between the calls
        assert comm.calls == ITERATIONS
        assert comm.device.launch_count == ITERATIONS
    for out in [first, *outs]:
        assert np.array_equal(bits(out), bits(gold))


@pytest.mark.mpi(min_size=2)
def test_a2a_loops_udma_and_hcomm_equal_golden():
    world = mpi_world()
    r, size = world.Get_rank(), world.Get_size()
    inp = gen_st_inputs(r, size, 16, 128, 64)
    gold = golden_a2a(world.allgather(inp["x1"]), world.allgather(inp["x1_scale"]), inp["x2"], inp["x2_scale"], r,
                      "e4m3")
    with Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT) as comm:
        for impl in ("udma", "hcomm"):
            for _ in range(ITERATIONS):
                out = all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl=impl,
                                              comm=comm)
                assert ulp_distance(out, gold, ml_dtypes.bfloat16) <= 1, impl


@pytest.mark.mpi(min_size=2)
def test_qmrs_rounds_loop_equals_golden():
    world = mpi_world()
    size = world.Get_size()
    r = world.Get_rank()
    inp = gen_qmrs_st_inputs(16 * size, 128, 64, r)
    gold = golden_quant_matmul_reduce_scatter(world.allgather(inp["x1"]), world.allgather(inp["x1_scale"]),
                                              world.allgather(inp["x2"]), world.allgather(inp["x2_scale"]), r)
    with Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT) as comm:
        for _ in range(ITERATIONS):
            out = quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="rounds",
                                              comm=comm)
            assert np.array_equal(bits(out), bits(gold))


@pytest.mark.mpi(min_size=2)
def test_window_carved_at_the_buffer_base_and_refused_when_it_does_not_fit():
    world = mpi_world()
    inp, gold = ag_case(world)
    size = world.Get_size()
    need = size * 64 * 256 + size * 64 * 8          # the seed window: R*m*(K + scaleK) bytes
    with Communicator(world, buffer_size=need - 1, timeout=TIMEOUT) as small:
        with pytest.raises(ConstraintError) as info:
            ag_call(inp, small)
        assert info.value.rule == "HCCL_BUFFSIZE"
        assert f"= {need} bytes <= the communicator buffer of {need - 1} bytes" in str(info.value)
        assert small.failed is None                  # refused before any launch: still usable
    with Communicator(world, buffer_size=need, timeout=TIMEOUT) as fits:
        assert np.array_equal(bits(ag_call(inp, fits)), bits(gold))
        win = fits.carve(need, "udma_all_gather", op="test")
        assert win.start == 0 and not win.first      # the call's window: the same bytes, carved before


@pytest.mark.mpi(min_size=2)
def test_a_stalled_rank_in_iteration_k_stops_every_rank_naming_launch_k():
    """The last rank drops one Set in call k (DROP_SET_FLAG): its AIC waits forever in launch k; the other
    ranks finish launch k and wait in launch k + 1 for its puts. Every rank stops within STOP_WITHIN_S with
    the one report, which shows the stalled rank still in launch k."""
    world = mpi_world()
    inp, _ = ag_case(world)
    k = 2
    stalled = world.Get_size() - 1
    comm = Communicator(world, buffer_size=BUFFER, timeout=STALL_TIMEOUT)
    try:
        for _ in range(k):
            ag_call(inp, comm)
        t0 = time.monotonic()
        with pytest.raises(DeadlockError) as info:
            for i in range(k, k + 3):
                ag_call(inp, comm, faults=FaultPlan(Fault.DROP_SET_FLAG, stalled) if i == k else None)
        took = time.monotonic() - t0
    finally:
        comm.close()
    assert took < STOP_WITHIN_S
    reports = [t for t in world.allgather(info.value.report or "") if "DEADLOCK report" in t]
    assert len(reports) == 1, reports
    assert f"rank {stalled} (all_gather_quant_matmul, launch {k})" in reports[0]
    assert comm.failed is not None and "a deadlock" in comm.failed


@pytest.mark.mpi(min_size=2)
def test_a_rank_failing_in_iteration_k_stops_its_peers_at_once_by_notice(monkeypatch):
    """The last rank's kernel raises in call k: it sends its notice; the peers, waiting in launch k for its
    puts, stop at once (well before their deadline) naming that rank, the call and the launch. A peer still in
    launch k - 1 when the notice comes (no barrier between calls) finishes it, and its call k is refused
    naming the same; every rank's close then releases the communicator without a barrier."""
    import mc2emu.ops.all_gather_quant_matmul_host as host

    world = mpi_world()
    inp, _ = ag_case(world)
    k, failing = 2, world.Get_size() - 1
    real = host.all_gather_quant_matmul_udma

    def kernel(ctx, *args):
        if ctx.device.launch_count - 1 == k and ctx.rank == failing:
            raise RuntimeError("planted kernel failure")
        return real(ctx, *args)

    monkeypatch.setattr(host, "all_gather_quant_matmul_udma", kernel)
    comm = Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT)
    try:
        for _ in range(k):
            ag_call(inp, comm)
        t0 = time.monotonic()
        with pytest.raises(Exception) as info:
            ag_call(inp, comm)
        took = time.monotonic() - t0
    finally:
        comm.close()
    assert took < TIMEOUT / 2
    if world.Get_rank() != failing:
        assert isinstance(info.value, DeadlockError | CommClosedError), repr(info.value)
        assert f"rank {failing} left the stream" in str(info.value)
        assert f"(call {k}, launch {k})" in str(info.value)
        assert comm.peer_failed is not None and f"rank {failing}" in comm.peer_failed
    else:
        assert comm.failed is not None
    assert comm.closed


def until(pred, within: float) -> bool:
    """Whether `pred()` holds within `within` seconds (polled; a deadline-guarded wait, not an ordering)."""
    end, tick = time.monotonic() + within, threading.Event()
    while not pred():
        if time.monotonic() >= end:
            return False
        tick.wait(NOTICE_POLL_S / 5)
    return True


@pytest.mark.mpi(min_size=2)
def test_a_notice_refuses_the_next_call_spares_earlier_launches_and_close_needs_no_barrier():
    """The last rank fails at its launch 1 before any launch ran anywhere: each peer learns it (`peer_failed`
    names the rank and reason), but its waiter gets no verdict (its launch 0 would still be met: the peer only
    failed from launch 1 on); its next call is refused naming the peer; and its close releases the communicator
    without the barrier the failed rank never joins."""
    world = mpi_world()
    if world.Get_size() > 2 and os.environ.get("MPIR_CVAR_NOLOCAL") == "1":
        pytest.skip("open: over MPICH's network path at 4 ranks, after earlier communicators in the file, one "
                    "peer's notice receive matched neither the notice nor a send to itself (docs/protocols.md)")
    failing = world.Get_size() - 1
    comm = Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT)
    if world.Get_rank() == failing:
        comm.fail("planted failure (call 1, launch 1)", launch=1)
        comm.close()
        return
    try:
        assert until(lambda: comm.peer_failed is not None, STOP_WITHIN_S)
        assert f"rank {failing} left the stream: planted failure" in comm.peer_failed
        assert not until(lambda: comm.device.waiter.declared is not None, 20 * NOTICE_POLL_S)
        with pytest.raises(CommClosedError, match=f"rank {failing} left the stream"):
            ag_call(gen_ag_st_inputs(64, 256, 128, world.Get_rank()), comm)
    finally:
        t0 = time.monotonic()
        comm.close(timeout=STOP_WITHIN_S)
    assert comm.closed and time.monotonic() - t0 < STOP_WITHIN_S


@pytest.mark.mpi(min_size=2)
def test_a_slowed_rank_changes_no_iteration():
    """DELAY_RANK on the last rank in call 1 of 3 (every checkpoint of that rank stalls): every rank's every
    iteration stays equal to the golden, bit for bit."""
    world = mpi_world()
    inp, gold = ag_case(world)
    slow = world.Get_size() - 1
    with Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT) as comm:
        for i in range(ITERATIONS):
            out = ag_call(inp, comm, faults=FaultPlan(Fault.DELAY_RANK, slow) if i == 1 else None)
            assert np.array_equal(bits(out), bits(gold)), i
