"""The protocol-only event record equals the full run's (tests/protocol/record.py): every event kind, core,
flag, address range, byte count and peer, per core as multisets (orders the happens-before relation allows).
Any world size; toy shapes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics.payload import Payload
from mc2emu.ops.all_to_all_quant_matmul_op import all_to_all_quant_matmul
from tests.protocol.record import Recorder, differences

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
