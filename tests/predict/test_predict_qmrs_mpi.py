"""`--predict` of quant_matmul_reduce_scatter: the rounds kernel's T (via head_m) beside the per-block kernel, at the
quick shape (32 rows per rank: head_m 32 -> T 1, 16 -> T 2): one row per knob, a predicted time per row, the
recommendation is the argmin, and each row's head_m reaches the kernel (one put per peer per round)."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.cli.operators.quant_matmul_reduce_scatter import QUICK_SHAPE, SPEC, predict_knobs
from mc2emu.cli.predict import format_predict_table, predict_operator, recommendation
from mc2emu.runtime.comm_events import Put

US = 1e6


@pytest.mark.mpi(min_size=2)
def test_predict_qmrs_rounds_t_and_per_block():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    knobs = predict_knobs(QUICK_SHAPE, size)
    assert [dict(k.values) for k in knobs] == [{"kernel": "rounds", "head_m": 32, "T": 1},
                                               {"kernel": "rounds", "head_m": 16, "T": 2},
                                               {"kernel": "per_block"}]
    t = predict_operator(SPEC, QUICK_SHAPE, comm=comm, knobs=knobs, timeout=60.0, keep_records=comm.Get_rank() == 0)
    rows = comm.allgather([(r.total_s, r.refused) for r in t.rows])
    assert all(x == rows[0] for x in rows)                       # every rank returns the same table
    assert len(t.rows) == len(knobs) and all(r.ok and r.total_s > 0 for r in t.rows), [r.refused for r in t.rows]
    times = [r.total_s for r in t.rows]
    best = int(np.argmin(times))
    assert t.best() == best
    lines = format_predict_table(t).splitlines()
    assert [ln.split()[:4] for ln in lines[2:4]] == [["rounds", "32", "1", f"{times[0] * US:.2f}"],
                                                     ["rounds", "16", "2", f"{times[1] * US:.2f}"]]
    assert lines[4].split()[:4] == ["per_block", "-", "-", f"{times[2] * US:.2f}"]
    assert lines[-1] == recommendation(t)
    assert lines[-1].startswith(f"recommend: {knobs[best].label()} ({times[best] * US:.2f} us predicted")
    if comm.Get_rank() == 0:
        for knob, recs in zip(knobs[:2], t.records[:2], strict=True):
            puts = {r: sum(1 for x in rs if isinstance(x, Put)) for r, (_, rs) in recs.items()}
            assert puts == {r: knob.values["T"] * (size - 1) for r in range(size)}
