"""Seeded Set reordering reaches all_to_all_quant_matmul (UDMA): the AIV's `CrossCoreSetFlag(2, PIPE_MTE3, t)`
that tells the AIC tile t landed may be overtaken by the next round's puts (no pipe barrier orders them on
the device), and the output stays bitwise identical."""

import numpy as np
import pytest

from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.runtime import EventRecorder, PerturbPolicy
from mc2emu.runtime.events import SetOvertaken

TIMEOUT = 30.0
ORI_M, KA, N = 150, 128, 200
HEAD_TILE = 32          # 5 communication turns: four Sets followed by a next round's puts


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("local_matmul", [0, 2])
def test_udma_set_overtaken_by_next_rounds_puts_keeps_the_output_bitwise(local_matmul):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, KA, N, seed=7)
    kw = dict(impl="udma", local_matmul=local_matmul, wait_order="mask", head_tile_size=HEAD_TILE,
              block_dim=max(4, size), timeout=TIMEOUT)
    args = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    ref = all_to_all_quant_matmul(*args, **kw)
    for seed in (11, 12):
        rec = EventRecorder()
        out = all_to_all_quant_matmul(*args, perturb=PerturbPolicy(seed, max_delay_s=5e-4), observers=[rec], **kw)
        overtaken = [e for e in rec.of(SetOvertaken) if e.by_point == "put"]
        everyone = comm.allgather((len(overtaken), bool(np.array_equal(out.view(np.uint16), ref.view(np.uint16)))))
        assert all(n > 0 for n, _ in everyone), f"seed {seed}: overtaken Sets per rank {everyone}"
        assert all(same for _, same in everyone), f"seed {seed}: output changed {everyone}"
