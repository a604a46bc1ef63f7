"""The protocol-only event record equals the full run's (tests/protocol/record.py): every event kind, core,
flag, address range, byte count and peer, per core as multisets (orders the happens-before relation allows).
Any world size; toy shapes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from record import Recorder, differences

from mc2emu.numerics.payload import Payload
from mc2emu.ops.all_gather_quant_matmul_op import all_gather_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_op import all_to_all_quant_matmul
from mc2emu.ops.quant_matmul_reduce_scatter_op import quant_matmul_reduce_scatter
from mc2emu.runtime.hazards import HazardError

E4M3, E8M0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu


def _a2a_shapes(R: int, ori_m: int, ka: int, n: int) -> list[tuple[tuple[int, ...], object]]:
    pairs = -(-ka // 64)
    return [((R * ori_m, ka), E4M3), ((R * ori_m, pairs, 2), E8M0), ((n, R * ka), E4M3), ((n, R * pairs, 2), E8M0)]


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("wait_order", ["mask", "in_order"])
@pytest.mark.parametrize("impl", ["udma", "hcomm"])
def test_a2a_protocol_only_record_equals_the_full_runs(impl, wait_order):
    comm = _world()
    shapes = _a2a_shapes(comm.Get_size(), 48, 256, 160)
    rng = np.random.default_rng(7 + comm.Get_rank())
    full_in = [rng.uniform(1, 8, s).astype(d) for s, d in shapes]
    records = []
    for data in (True, False):
        rec = Recorder()
        ins = full_in if data else [Payload(s, d) for s, d in shapes]
        c = all_to_all_quant_matmul(*ins, impl=impl, wait_order=wait_order, data=data, observers=[rec], comm=comm)
        assert c.shape == (48, 160) and isinstance(c, Payload) == (not data)
        records.append(rec.events)
    assert len(records[0]) > 100
    assert differences(records[0], records[1]) == []


def _mx(m: int, k: int, n: int) -> list[tuple[tuple[int, ...], object]]:
    pairs = -(-k // 64)
    return [((m, k), E4M3), ((m, pairs, 2), E8M0), ((n, k), E4M3), ((n, pairs, 2), E8M0)]


def _records(op, shapes, comm, **kw):
    """(record, hazard names) of a full run and of a protocol-only run of `op` on the same inputs."""
    rng = np.random.default_rng(11 + comm.Get_rank())
    full_in = [rng.uniform(1, 8, s).astype(d) for s, d in shapes]
    out = []
    for data in (True, False):
        rec = Recorder()
        ins = full_in if data else [Payload(s, d) for s, d in shapes]
        try:
            op(*ins, data=data, observers=[rec], comm=comm, **kw)
            hazards: list[str] = []
        except HazardError as err:   # e.g. per_block's reproduced UNCONSUMED_FLAG: the same in both runs
            hazards = sorted(f"{h.hazard.name}@{h.core}" for h in err.hazards)
        out.append((rec.events, hazards))
    return out


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("protocol", "wait_order"),
                         [("seed", "mask"), ("seed", "in_order"), ("slot_ring", "in_order")])
def test_ag_protocol_only_record_equals_the_full_runs(protocol, wait_order):
    (full, hz_full), (proto, hz_proto) = _records(all_gather_quant_matmul, _mx(48, 256, 96), _world(),
                                                  protocol=protocol, wait_order=wait_order)
    assert len(full) > 100 and hz_full == hz_proto
    assert differences(full, proto) == []


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kw", [dict(impl="rounds", split="m"), dict(impl="rounds", split="k"),
                                dict(impl="per_block", split="m"),
                                dict(impl="per_block", split="k", kernel_variant="final_wait")],
                         ids=["rounds-m", "rounds-k", "per_block-m", "per_block-k-final_wait"])
def test_qmrs_protocol_only_record_equals_the_full_runs(kw):
    comm = _world()
    (full, hz_full), (proto, hz_proto) = _records(quant_matmul_reduce_scatter, _mx(64 * comm.Get_size(), 256, 96),
                                                  comm, **kw)
    assert len(full) > 100 and hz_full == hz_proto
    if kw["impl"] == "per_block" and "kernel_variant" not in kw:
        assert hz_full and all(h.startswith("UNCONSUMED_FLAG") for h in hz_full)
    assert differences(full, proto) == []


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("op", ["all_to_all_quant_matmul", "all_gather_quant_matmul", "quant_matmul_reduce_scatter"])
def test_predict_protocol_only_equals_the_full_runs(op, request):
    """`--predict --protocol-only`: every knob's refusal, predicted time, communication time, hidden share and
    critical path equal the full run's (the replay sees the same record), and so does the recommended time. Past 2
    ranks two full runs' replays differ as well (the order in which waits complete): checked at 2 ranks, where
    the predictions agree to 0.5 % (equal in the runs seen). The suite's budget: three knobs spread over the
    operator's list (A2A 6, AG 12, QMRS 4 knobs at this shape); every knob with `-m slow`."""
    from mc2emu.cli.operators import default_registry
    from mc2emu.cli.predict import predict_operator
    from mc2emu.cli.scenarios import Shape

    comm = _world()
    if comm.Get_size() > 2:
        # Past 2 ranks two FULL runs' replays differ too (the order in which waits complete reaches the record's
        # order): QMRS R 4 knobs 43.0 vs 49.0 us, A2A 7.638 vs 7.642 us; protocol-only runs fall in that spread.
        pytest.skip("the replay of one protocol varies run to run past 2 ranks")
    spec = default_registry().get(op)
    shape = Shape(32 if op != "quant_matmul_reduce_scatter" else 32 * comm.Get_size(), 128, 64)
    knobs = list(spec.predict_knobs(shape, comm.Get_size()))
    if "slow" not in (request.config.getoption("-m") or ""):
        knobs = knobs[::-(-len(knobs) // 3)]
    tables = [predict_operator(spec, shape, comm=comm, timeout=60.0, data=data, knobs=knobs)
              for data in (True, False)]
    if comm.Get_rank() != 0:   # the replay runs on rank 0
        return
    full, proto = ([(r.refused, r.total_s, r.comm_s, r.hidden_share, dict(r.critical)) for r in t.rows]
                   for t in tables)
    assert any(r[1] for r in full) and len(full) == len(proto)
    for f, p in zip(full, proto, strict=True):
        assert f[0] == p[0] and (f[1] is None) == (p[1] is None)
        if f[1] is not None:
            assert p[1] == pytest.approx(f[1], rel=5e-3) and p[2] == pytest.approx(f[2], rel=5e-3, abs=1e-12)
            assert set(f[4]) == set(p[4])
    bf, bp = tables[0].best(), tables[1].best()   # near-ties may swap: the recommended time must agree
    assert bf is not None and bp is not None
    assert tables[1].rows[bp].total_s == pytest.approx(tables[0].rows[bf].total_s, rel=5e-3)
