"""`--predict` sweeps of the one-NPU operators weight_quant_matmul and grouped_matmul_mx (block_dim), run for real
in process on MPI.COMM_SELF: one row per knob, a predicted time per row, the recommendation is the argmin, and
the knob's block_dim reaches the kernel (the AICs that ran an MMAD)."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.cli.operators import grouped_matmul_mx, weight_quant_matmul
from mc2emu.cli.predict import format_predict_table, predict_operator, recommendation
from mc2emu.cli.scenarios import BLOCK_DIM_SWEEP, Shape
from mc2emu.runtime.events import Mmad

US = 1e6
SWEEP = (1, 2, 32)   # a subset of the operators' sweep: one core, two cores, the tiling's full spread


def _aics_with_mmads(recs) -> int:
    (_, rs), = recs.values()
    return len({x.core for x in rs if isinstance(x, Mmad)})


@pytest.mark.parametrize(("mod", "shape", "aics_at_32"), [
    (weight_quant_matmul, Shape(32, 256, 128), 8),     # WeightQuantTilingSwat: 8 N tiles of 16 at block_dim 32
    (grouped_matmul_mx, Shape(64, 128, 128), 4),       # groups of 24, 0, 8, 32 rows: 4 AICs busy
], ids=["weight_quant_matmul", "grouped_matmul_mx"])
def test_block_dim_sweep_table_and_recommendation(mod, shape, aics_at_32):
    from mpi4py import MPI

    knobs = mod.predict_knobs(shape, 1)
    assert [k.block_dim for k in knobs] == list(BLOCK_DIM_SWEEP)
    assert all(k.values == {"block_dim": k.block_dim} for k in knobs)
    knobs = [k for k in knobs if k.block_dim in SWEEP]
    t = predict_operator(mod.SPEC, shape, comm=MPI.COMM_SELF, knobs=knobs, keep_records=True)
    assert [r.knob.block_dim for r in t.rows] == list(SWEEP)
    assert all(r.ok and r.total_s > 0 for r in t.rows), [r.refused for r in t.rows]
    assert [_aics_with_mmads(recs) for recs in t.records] == [1, 2, aics_at_32]
    times = [r.total_s for r in t.rows]
    assert len(set(times)) == len(times)                  # the knob changes the prediction
    best = int(np.argmin(times))
    assert t.best() == best
    lines = format_predict_table(t).splitlines()
    assert [ln.split()[:2] for ln in lines[2:2 + len(SWEEP)]] == [[str(bd), f"{s * US:.2f}"]
                                                                 for bd, s in zip(SWEEP, times, strict=True)]
    assert lines[-1] == recommendation(t)
    assert lines[-1].startswith(f"recommend: block_dim {SWEEP[best]} ({times[best] * US:.2f} us predicted")
