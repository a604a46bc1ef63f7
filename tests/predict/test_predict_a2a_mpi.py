"""The predictor over a real recorded all_to_all_quant_matmul run (UDMA, localMatmul 0, 2 communication
rounds): records of every rank gathered, replayed, and checked against values derived from the shape."""

from __future__ import annotations

import dataclasses

import pytest

from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.predict import CostModel, PredictRecorder, gather_records, replay
from mc2emu.runtime.comm_events import Put
from mc2emu.runtime.events import Mmad

ORI_M, KA, N, HEAD = 32, 128, 64, 16
SCALE_K_LEN = -(-KA // 64) * 2     # bytes of one scaleA row (E8M0)
MODEL = CostModel()


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.fixture(scope="module")
def recorded():
    comm = world()
    inp = gen_st_inputs(comm.Get_rank(), comm.Get_size(), ORI_M, KA, N, seed=3)
    rec = PredictRecorder()
    all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], head_tile_size=HEAD,
                            block_dim=max(4, comm.Get_size()), timeout=30.0, observers=(rec,), comm=comm)
    return gather_records(comm, rec, root=None)


@pytest.mark.mpi(min_size=2)
def test_replay_of_a_recorded_a2a(recorded):
    size = world().Get_size()
    p = replay(recorded, MODEL)
    puts_per_rank = 2 * (size - 1) * (ORI_M // HEAD)          # scale + data, per peer, per round
    assert p.node_counts["link"] == size * puts_per_rank
    mmads = sum(1 for _, recs in recorded.values() for r in recs if isinstance(r, Mmad))
    assert mmads > 0 and p.node_counts["mmad"] == mmads
    # each rank's egress serializes its puts: its communication time is its bytes over the link bandwidth
    sent = size * (size - 1) * ORI_M * (KA + SCALE_K_LEN)
    assert p.comm_s == pytest.approx(sent / MODEL.link_bw, rel=1e-9)
    assert p.hidden_s + p.exposed_s == pytest.approx(p.comm_s)
    assert p.critical_path[0].what == "launch barrier" and p.critical_path[-1].what.startswith("launch end")
    # a remote row block reaches a cube only through put -> quiet -> TeamBarrier observe: two put latencies
    assert p.total_s >= 2 * MODEL.put_latency_s
    assert p.total_s == max(p.per_rank_s.values())


@pytest.mark.mpi(min_size=2)
def test_recorded_a2a_self_consistency(recorded):
    base = replay(recorded, MODEL).total_s
    for faster in (MODEL.scaled(link=2), MODEL.scaled(gm=2)):
        assert replay(recorded, faster).total_s <= base
    heavier = {r: (off, [dataclasses.replace(x, nbytes=x.nbytes * 64) if isinstance(x, Put) else x for x in recs])
               for r, (off, recs) in recorded.items()}
    assert replay(heavier, MODEL).total_s > base
    slow_link = MODEL.with_overrides(put_latency_s=10e-6)
    assert replay(recorded, slow_link).total_s >= base + 2 * (10e-6 - MODEL.put_latency_s) - 1e-12


@pytest.fixture(scope="module")
def recorded_hcomm():
    comm = world()
    inp = gen_st_inputs(comm.Get_rank(), comm.Get_size(), ORI_M, KA, N, seed=4)
    rec = PredictRecorder()
    all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="hcomm",
                            wait_order="in_order", head_tile_size=HEAD, block_dim=max(4, comm.Get_size()),
                            timeout=30.0, observers=(rec,), comm=comm)
    return gather_records(comm, rec, root=None)


@pytest.mark.mpi(min_size=2)
def test_replay_of_a_recorded_hcomm_a2a(recorded_hcomm):
    """hcomm: the HCCL server of every rank executes the scale repeat and 2 head repeats, one transfer per
    peer each (its own block is a local copy); a client's Wait needs every rank's transfer of its repeat,
    which starts a commit latency after the working block's Commit."""
    size = world().Get_size()
    p = replay(recorded_hcomm, MODEL)
    assert p.node_counts["link"] == size * (size - 1) * (1 + ORI_M // HEAD)
    assert p.comm_s == pytest.approx(size * (size - 1) * ORI_M * (KA + SCALE_K_LEN) / MODEL.link_bw, rel=1e-9)
    assert p.total_s >= MODEL.hccl_commit_latency_s + MODEL.put_latency_s
    slow = replay(recorded_hcomm, MODEL.with_overrides(hccl_commit_latency_s=12e-6)).total_s
    assert slow >= p.total_s + 10e-6 - 1e-12
    assert replay(recorded_hcomm, MODEL.scaled(link=2, gm=2)).total_s <= p.total_s
