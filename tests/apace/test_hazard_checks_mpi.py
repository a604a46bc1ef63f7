"""The checkers on the real operator: a read not ordered after its put (happens-before), and a hang
diagnosed across ranks, each provoked by a named fault."""

import time

import pytest

from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.runtime import DeadlockError
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.testing import expect_hazard


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    size = world().Get_size()
    kw.setdefault("block_dim", max(4, size))
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


@pytest.mark.mpi(min_size=2)
def test_skipped_wait_is_a_read_before_wait_on_every_run():
    """600 rows in 64-row communication tiles: the core of the first M tile depends on tile 3 only (mask
    order); skipping that one wait leaves its reads of every peer's rows unordered, whatever the timing."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 600, 128, 64)
    for _ in range(2):
        plan = FaultPlan(Fault.SKIP_WAIT_TILE, rank=0, core=None, nth=0)
        with expect_hazard("READ_BEFORE_WAIT", comm=comm, ranks=[0]) as cap:
            run(inp, impl="udma", wait_order="mask", head_tile_size=64, faults=plan, timeout=20)
        for rep in cap.reports():
            assert rep.details["window"] == "udma_a2a" and rep.details["put_rank"] != 0


@pytest.mark.mpi(min_size=2)
def test_clean_runs_raise_no_read_hazard():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 600, 128, 64)
    for order in ("mask", "in_order"):
        run(inp, impl="udma", wait_order=order, head_tile_size=64, timeout=20)   # raises on any hazard


@pytest.mark.mpi(min_size=2)
def test_dropped_set_is_diagnosed_across_ranks_within_seconds():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 96, 128, 64)
    plan = FaultPlan(Fault.DROP_SET_FLAG, rank=size - 1, core=None, nth=0)
    deadline = 2.0
    t0 = time.monotonic()
    with expect_hazard("DEADLOCK", comm=comm, ranks=range(size)) as cap:
        run(inp, impl="udma", wait_order="in_order", head_tile_size=32, faults=plan, timeout=deadline)
    elapsed = time.monotonic() - t0
    assert elapsed < deadline + 10, elapsed
    err = cap.error
    assert isinstance(err, DeadlockError)
    reports = comm.allgather(None if err.declared_elsewhere else str(err))
    full = [rep for rep in reports if rep]
    assert full, "no rank produced the cross-rank report"
    assert "DEADLOCK report of rank" in full[0]
    for q in range(size):
        assert f"rank {q} (" in full[0] or f"rank {q}: no answer" in full[0]
