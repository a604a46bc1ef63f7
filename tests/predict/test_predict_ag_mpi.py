"""`--predict` for all_gather_quant_matmul: the window sweep (seed protocol vs slot ring x slot counts) runs at
every world size; the slot ring with one slot is predicted slower than without reuse (each reused round waits
for the AICs' release, SyncAll and a CrossDevice before its put), and slot_num 0 (commTurn slots) predicts
exactly the seed in-order protocol's time (the same synchronization structure)."""

import pytest

from mc2emu.cli.operators import all_gather
from mc2emu.cli.predict import predict_operator
from mc2emu.cli.scenarios import Shape

SHAPE = Shape(m=525, k=128, n=64)   # a 512-row tile + a 13-row tail: commTurn 2, one slot is reused once
RECORDINGS = 3


@pytest.mark.mpi(min_size=2)
def test_window_sweep_orders_the_slot_ring_after_the_seed():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    knobs = all_gather.predict_knobs(SHAPE, size)
    names = {k.values["window"] for k in knobs}
    assert names == {"seed mask", "seed in_order", "slot_ring 1", "slot_ring commTurn"}
    bd = max(8, size)
    pick = [k for k in knobs if k.block_dim == bd and k.values["window"].startswith("slot_ring")]
    # The replay keeps each recording's queue orders (puts on a link, posts before a wait), and those follow the
    # threads' timing: an unlucky recording lengthens one prediction (seen in CI at 8 ranks: commTurn 17.3 us
    # against 12.4-12.7 in every other recording). The best of a few recordings of each is compared.
    best: dict[str, float] = {}
    for _ in range(RECORDINGS):
        t = predict_operator(all_gather.SPEC, SHAPE, comm=comm, knobs=pick)
        assert all(r.ok and r.total_s > 0 for r in t.rows), [r.refused for r in t.rows]
        for r in t.rows:
            window = r.knob.values["window"]
            best[window] = min(best.get(window, r.total_s), r.total_s)
    assert best["slot_ring 1"] > best["slot_ring commTurn"], best
