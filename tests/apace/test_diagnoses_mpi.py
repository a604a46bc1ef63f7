"""Diagnoses read across ranks (SPEC §8), each provoked by a named fault on the real operator: the report a
user gets names the waiting rank, core and object, who should have released it and in what state that
releaser is; a read before its wait names the reading rank and core, the window and byte range, and the
put (rank, core) it is not ordered after; localMatmul 1 without atomic add and AIVs running the AIC kernel
name the core and the rule broken."""

from __future__ import annotations

import contextlib
import re

import pytest

from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.runtime import DeadlockError, EventRecorder, HazardError
from mc2emu.runtime.events import HazardReported
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.testing import expect_hazard

KA = 128


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("block_dim", max(4, world().Get_size()))
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


@pytest.mark.mpi(min_size=2)
def test_cross_rank_deadlock_report_names_waits_releasers_and_every_rank():
    """Rank R-1 drops one AIV Set of round 0: its paired AIC waits forever on flag 0. The report (on the rank
    that declared it) lists every rank, the stuck wait with its object and count, and the releaser's state."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 96, KA, 64)
    plan = FaultPlan(Fault.DROP_SET_FLAG, rank=size - 1, core=None, nth=0)
    with expect_hazard("DEADLOCK", comm=comm, ranks=range(size)) as cap:
        run(inp, impl="udma", wait_order="in_order", head_tile_size=32, faults=plan, timeout=2.0)
    err = cap.error
    assert isinstance(err, DeadlockError)
    reports = comm.allgather(None if err.declared_elsewhere else str(err))
    full = [rep for rep in reports if rep]
    assert full, "no rank produced the cross-rank report"
    rep = next((x for x in full if f"rank {size - 1} (" in x and "CrossCoreWaitFlag" in x), full[0])
    assert re.search(r"^DEADLOCK report of rank \d+ \(\S+ waited 2\.0 s on .+ with no progress anywhere\):$", rep,
                     re.M), rep
    for q in range(size):
        assert re.search(rf"^  rank {q} \(all_to_all_quant_matmul\): \d+ core\(s\) waiting", rep, re.M), rep
    wait = re.search(r"^    AIC(\d+) wait on CrossCoreWaitFlag<2, PIPE_MTE2>\((\d+)\) \(expects counter > 0, now 0\); "
                     r"released by AIV(\d+)", rep, re.M)
    assert wait, rep
    aic, flag, aiv = wait.groups()
    assert aic == aiv and flag == "0", rep       # mode 2 pairs AIC i with AIV i; round 0 is flag 0
    assert re.search(rf"^      releaser rank {size - 1} AIV{aiv}: finished without signalling$", rep, re.M), rep
    comm.Barrier()


@pytest.mark.mpi(min_size=2)
def test_read_before_wait_names_reader_window_range_and_put():
    """Rank 0 skips its first WaitTile: its reads of peer rows are not ordered after the puts of the peers'
    AIV0 (AIV block r serves peer r). The report names rank 0's AIC, the window, a byte range no longer than
    one communication tile of one rank, and the putting rank and core."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    head = 64
    inp = gen_st_inputs(r, size, 600, KA, 64)
    with expect_hazard("READ_BEFORE_WAIT", comm=comm, ranks=[0]) as cap:
        run(inp, impl="udma", wait_order="mask", head_tile_size=head, timeout=20,
            faults=FaultPlan(Fault.SKIP_WAIT_TILE, rank=0, core=None, nth=0))
    assert (len(cap.reports()) > 0) == (r == 0)
    for h in cap.reports():
        d = h.details
        assert h.rank == 0 and re.fullmatch(r"AIC\d+", h.core), str(h)
        assert d["window"] == "udma_a2a" and d["put_rank"] in range(1, size) and d["put_core"] == "AIV0", d
        assert 0 < d["hi"] - d["lo"] <= head * KA, d
        assert (f"read of window 'udma_a2a' bytes [{d['lo']}, {d['hi']}) is not ordered after the put from rank "
                f"{d['put_rank']} AIV0 that writes them: no wait of {h.core} is ordered after the completion of "
                f"that put (rank {d['put_rank']} AIV0's event #") in h.message, str(h)


@pytest.mark.mpi(min_size=2)
def test_local_matmul_1_without_atomic_names_the_core_and_the_rule():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, KA, 64)
    with expect_hazard("LOCAL_WITHOUT_ATOMIC", comm=comm, ranks=[0]) as cap:
        run(inp, local_matmul=1, wait_order="in_order", faults=FaultPlan(Fault.NO_ATOMIC_ADD, rank=0), timeout=20)
    for h in cap.reports():
        assert h.rank == 0 and re.fullmatch(r"AIC\d+", h.core), str(h)
        assert "REMOTE pass with localMatmul 1 but no SetAtomicAdd: its write-out overwrites the LOCAL pass's C" \
               in h.message


@pytest.mark.mpi(min_size=2)
def test_aivs_running_the_aic_kernel_are_named():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, KA, 64)
    rec = EventRecorder()
    with contextlib.suppress(HazardError, DeadlockError):
        run(inp, impl="hcomm", wait_order="in_order", block_dim=2, observers=[rec], timeout=2.0,
            faults=FaultPlan(Fault.AIV_JOINS_AIC_KERNEL, rank=r))
    joined = [e for e in rec.of(HazardReported) if e.hazard.value == "AIV_RUNS_AIC_KERNEL"]
    assert joined and all(re.fullmatch(r"AIV\d+", e.core) for e in joined), [(e.core, e.hazard) for e in joined]
    assert any("QuantMatmulMxKernel::Run on an AIV: only Init returns early on AIV" in e.message
               for e in joined), [e.message for e in joined]
    comm.Barrier()
