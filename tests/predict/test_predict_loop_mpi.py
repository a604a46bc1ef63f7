"""`predict_operator(..., repeat=N)` (the API behind `--predict --repeat N`): the loop of N calls on one
Communicator, replayed as one stream. At 2 ranks, where two runs of one protocol replay alike: one launch of the
loop is the single call's prediction; a kernel with a start barrier (AG) repeats its launch N times exactly
(symmetric ranks: no drift); per_block (no start barrier) never takes longer than N single launches."""

from __future__ import annotations

import pytest

from mc2emu.cli.operators import default_registry
from mc2emu.cli.predict import predict_operator

N = 3


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _knob(op: str, label: str):
    spec = default_registry().get(op)
    knobs = [k for k in spec.predict_knobs(spec.quick_shape, world().Get_size()) if label in k.label()]
    return spec, knobs[:1]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("op", "label"), [("all_gather_quant_matmul", "seed mask"),
                                           ("quant_matmul_reduce_scatter", "per_block")])
def test_loop_prediction_against_the_single_call(op, label):
    comm = world()
    if comm.Get_size() > 2:   # pytest-mpi's mark has no max_size
        pytest.skip("past 2 ranks two runs of one protocol replay differently (tests/protocol/test_equivalence_mpi.py)")
    spec, knobs = _knob(op, label)
    assert knobs, label
    single, one, loop = (predict_operator(spec, spec.quick_shape, comm=comm, knobs=knobs, timeout=60.0, repeat=rep)
                         for rep in (None, 1, N))
    (s,), (o,), (lp,) = single.rows, one.rows, loop.rows
    assert s.ok and o.ok and lp.ok and lp.loop is not None and loop.repeat == N
    assert o.total_s == pytest.approx(s.total_s, rel=1e-12)           # one launch of a stream: the single call
    assert [r.launch for r in lp.loop.rows] == list(range(N))
    assert lp.total_s == lp.loop.total_s
    assert sum(r.critical_s for r in lp.loop.rows) == pytest.approx(lp.total_s, rel=1e-9)
    if op == "all_gather_quant_matmul":   # the start barrier: each launch the single one, back to back
        assert lp.total_s == pytest.approx(N * s.total_s, rel=1e-9)
        for r in lp.loop.rows:
            assert r.device_s == pytest.approx(s.total_s, rel=1e-9)
            assert r.skew_s == pytest.approx(0, abs=1e-12)
            assert r.gap_s is None or r.gap_s == pytest.approx(0, abs=1e-12)
    else:   # no start barrier: a launch starts when the rank's own previous one ends, never later
        assert lp.total_s <= N * s.total_s * (1 + 1e-9)
        assert lp.loop.rows[0].device_s == pytest.approx(s.total_s, rel=1e-9)
