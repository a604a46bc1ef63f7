"""Hazard rows of SPEC §8 that only a broken kernel or launch shows, provoked by named faults."""

import contextlib

import pytest

from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.runtime import DeadlockError, EventRecorder, HazardError
from mc2emu.runtime.events import HazardReported
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.testing import expect_hazard


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
def test_local_matmul_1_without_atomic_add_overwrites_the_local_result():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    plan = FaultPlan(Fault.NO_ATOMIC_ADD, rank=0)
    with expect_hazard("LOCAL_WITHOUT_ATOMIC", comm=comm, ranks=[0]):
        all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], local_matmul=1,
                                wait_order="in_order", block_dim=max(4, size), faults=plan, timeout=20)


@pytest.mark.mpi(min_size=2)
def test_aic_only_kernel_launched_mixed_lets_the_aivs_join():
    """The hcomm kernel guards only Init against AIV: launched MIX_AIC_1_1, its AIVs run Run and join the
    HCCL waits (seed 000 §8 "AIV joins HCCL"). Reported; what follows (errors or a hang) is the server's."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    rec = EventRecorder()
    with contextlib.suppress(HazardError, DeadlockError):
        all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="hcomm",
                                wait_order="in_order", block_dim=2, faults=FaultPlan(Fault.AIV_JOINS_AIC_KERNEL,
                                                                                     rank=r),
                                observers=[rec], timeout=2.0)
    names = {e.hazard.value for e in rec.of(HazardReported)}
    assert "AIV_RUNS_AIC_KERNEL" in names
    comm.Barrier()
