# mpirun -n 4 python -m pytest -p mc2emu.testing.plugin --with-mpi docs/examples/ring_put_test.py
"""A user's own pytest-mpi tests with the kit (mc2emu.testing, loaded by pytest as a plugin)."""
import numpy as np
import pytest

from mc2emu import MemRole
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.testing import assert_golden, assert_no_hazards, expect_hazard, perturb_seeds


def ring(ctx, shmem, src, data, sig, peer, wait):
    if ctx.GetBlockIdx() != 0:
        return None
    shmem.put_signal(ctx, data, src, 16, sig, 1, SignalOp.ADD, peer)
    if wait:
        shmem.signal_wait_until(ctx, sig, Cmp.GE, 1)
    return ctx.gm_read(data, np.float32, (4,))


def setup(run):
    data = run.window(16, "data", role=MemRole.PAYLOAD)
    sig = run.window(64, "sig", role=MemRole.CONTROL)
    src = run.alloc(0, "src", data=np.full(4, run.rank + 0.5, dtype=np.float32))
    return Shmem(run.world), src, data.addr(0), sig.addr(0), (run.rank + 1) % run.size


@pytest.mark.mpi(min_size=2)
@perturb_seeds()                       # unperturbed, then seeds 1, 2, 3: the same output every time
def test_ring_receives_the_previous_rank(mc2_run_kernel, mc2_comm, perturb):
    res = mc2_run_kernel(ring, True, block_dim=1, kernel_type="AIV_ONLY", setup=setup, perturb=perturb)
    assert_no_hazards(res)
    prev = (mc2_comm.Get_rank() - 1) % mc2_comm.Get_size()
    assert_golden(res.returns["AIV0"], np.full(4, prev + 0.5, dtype=np.float32), max_ulp=0)


@pytest.mark.mpi(min_size=2)
def test_forgetting_the_wait_is_reported_on_every_rank(mc2_run_kernel, mc2_comm):
    with expect_hazard("READ_BEFORE_WAIT", ranks=range(mc2_comm.Get_size())) as cap:
        mc2_run_kernel(ring, False, block_dim=1, kernel_type="AIV_ONLY", setup=setup)
    assert cap.reports()[0].details["window"] == "data"
