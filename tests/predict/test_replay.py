"""The virtual-time replay: self-consistency on records of a real QBMM run (one NPU, in process) and on
synthetic UDMA all-to-all records (several ranks, no MPI)."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from mc2emu.ops import quant_batch_matmul_mx
from mc2emu.predict import CostModel, PredictRecorder, ReplayError, replay
from mc2emu.predict.synthetic import synthetic_a2a
from mc2emu.runtime.comm_events import Put
from mc2emu.runtime.events import CoreBegin, CoreEnd, GmRead, LaunchBegin, LaunchEnd, Mmad

MODEL = CostModel()
INSTANT = MODEL.with_overrides(gm_bw=1e30, mte_port_bytes_per_cycle=1e30, link_bw=1e30, put_latency_s=0.0,
                               put_issue_s=0.0, flag_latency_s=0.0,
                               barrier_latency_s=0.0, hccl_commit_latency_s=0.0, hccl_call_s=0.0)


@pytest.fixture(scope="module")
def qbmm_records():
    """QBMM 96x80x256 on 3 blocks: 2 x 2 tiles of baseM/baseN (tails), 2 K steps each."""
    m, n, k = 96, 80, 256
    rng = np.random.default_rng(0)
    x1 = rng.integers(0x30, 0x50, (m, k), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    x2 = rng.integers(0x30, 0x50, (k, n), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    s1 = np.full((m, k // 64, 2), 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    s2 = np.full((k // 64, n, 2), 127, np.uint8).view(ml_dtypes.float8_e8m0fnu)
    rec = PredictRecorder()
    quant_batch_matmul_mx(x1, s1, x2, s2, block_dim=3, observers=(rec,))
    return {0: rec.records()}


def _mmad_cycles_per_core(records):
    """Fractal steps per AIC, counted here from the MMAD shapes (16 x 32 x 16 per cycle for e4m3)."""
    out = {}
    for r in records:
        if isinstance(r, Mmad):
            m, n, k = r.m, r.n, r.k
            out[r.core] = out.get(r.core, 0) + (-(-m // 16)) * (-(-n // 16)) * (-(-k // 32))
    return out


def test_no_communication_schedule_is_its_compute_critical_path(qbmm_records):
    """With every byte and latency free, a schedule without communication takes exactly its busiest cube
    core's MMAD time (mmads of one core serialize on its M pipe; cores are independent)."""
    per_core = _mmad_cycles_per_core(qbmm_records[0])
    assert len(per_core) == 3 and min(per_core.values()) > 0
    p = replay(qbmm_records, INSTANT)
    assert p.total_s == pytest.approx(max(per_core.values()) / MODEL.clock_hz, rel=1e-9)
    assert p.comm_s == 0 and p.hidden_share is None
    assert p.critical_by_cat.get("mmad", 0) == pytest.approx(p.total_s, rel=1e-9)
    (on_path,) = {s.core for s in p.critical_path if s.cat == "mmad"}
    assert per_core[on_path] == max(per_core.values())


def test_loads_and_mmads_overlap_but_never_beyond_their_sum(qbmm_records):
    """Per core, time lies between max(load, cube, fixpipe work) and their sum (double-buffered pipes)."""
    p = replay(qbmm_records, MODEL)
    per_core = {c.core: c.busy_s for c in p.cores}
    lo = max(max(b.get("mmad", 0), b.get("mte2", 0), b.get("fixpipe", 0)) for b in per_core.values())
    hi = max(sum(b.values()) for b in per_core.values())
    assert lo <= p.total_s <= hi + 1e-12
    assert lo < hi   # the shape really has both kinds of work


@pytest.mark.parametrize("gm, link", [(2, 1), (1, 2), (2, 2), (8, 1)])
def test_more_bandwidth_never_slows(qbmm_records, gm, link):
    for recs in (qbmm_records, synthetic_a2a(4, 3)):
        base = replay(recs, MODEL)
        fast = replay(recs, MODEL.scaled(gm=gm, link=link))
        assert fast.total_s <= base.total_s
        assert fast.comm_s <= base.comm_s


def _scale_puts(per_rank, factor):
    def scaled(x):
        if isinstance(x, Put):
            return dataclasses.replace(x, nbytes=x.nbytes * factor)
        if isinstance(x, GmRead):
            return dataclasses.replace(x, item=x.item * factor)
        return x

    return {r: [scaled(x) for x in recs] for r, recs in per_rank.items()}


def test_monotone_in_bytes():
    recs = synthetic_a2a(4, 3, put_bytes=1 << 16)
    times = [replay(_scale_puts(recs, f), MODEL).total_s for f in (1, 2, 4, 16)]
    assert times == sorted(times) and times[-1] > times[0]


def test_synthetic_a2a_values():
    """4 ranks, 3 rounds, 64 KiB per peer per round: every rank sends 3 x 3 puts; its egress serializes them,
    so its communication time is exactly its bytes over the link bandwidth."""
    recs = synthetic_a2a(4, 3, put_bytes=1 << 16)
    p = replay(recs, MODEL)
    assert p.comm_s == pytest.approx(4 * 9 * (1 << 16) / MODEL.link_bw, rel=1e-9)
    assert p.hidden_s + p.exposed_s == pytest.approx(p.comm_s)
    assert p.critical_path[0].what.startswith("launch barrier") and p.critical_path[-1].what.startswith("launch end")
    assert p.total_s == max(p.per_rank_s.values())
    # the critical path accounts for every moment of the kernel time exactly once
    assert sum(p.critical_by_cat.values()) == pytest.approx(p.total_s, rel=1e-9)
    # the last round's three-hop chain (put -> quiet -> barrier observe) pays the put latency at least 3 times
    assert p.critical_by_cat.get("latency", 0) >= 3 * MODEL.put_latency_s


def test_latency_bound_chain_scales_with_the_latency():
    recs = synthetic_a2a(2, 4)
    a = replay(recs, MODEL.with_overrides(put_latency_s=1e-6)).total_s
    b = replay(recs, MODEL.with_overrides(put_latency_s=3e-6)).total_s
    # each of 4 rounds orders put -> quiet (1 latency) -> store -> the peer's observe (1 latency)
    assert b - a >= 4 * 2 * 2e-6 - 1e-12


def test_bad_records_are_named():
    with pytest.raises(ReplayError, match="no records"):
        replay({})
    with pytest.raises(ReplayError, match="no launch"):
        replay({0: [_mmad(1, 16, 16, 64)]})


def _mmad(t, m, n, k):
    return Mmad(0, "AIC0", t, t, m=m, n=n, k=k, tile=(0, 0), l0=0, aType="e4m3", unitFlag=3, cmatrixInitVal=True,
                bias=False)


def _core_program(ops):
    """One launch, one AIC running `ops`: ("load", bytes) or ("mmad", m, n, k)."""
    recs = [LaunchBegin(0, "host", 1, 1, launch="k", block_dim=1, kernel_type="AIC_ONLY"),
            CoreBegin(0, "AIC0", 2, 2, launch="k")]
    for i, op in enumerate(ops):
        t = 10 + i
        if op[0] == "load":
            recs.append(GmRead(0, "AIC0", t, t, "x", lo=0, hi=op[1], offset=0, shape=(op[1],), strides=(1,), item=1))
        else:
            recs.append(_mmad(t, *op[1:]))
    recs += [CoreEnd(0, "AIC0", 1000, 1000, launch="k"), LaunchEnd(0, "host", 1001, 1001, launch="k", block_dim=1)]
    return {0: recs}


def test_l1_double_buffering():
    """Load groups rotate through 2 L1 buffers: group 2 starts when group 0's MMAD has ended (not when the
    MTE2 pipe is free), and runs under group 1's MMAD."""
    load = int(MODEL.core_gm_bw_of(1) * 1e-6)              # ~1 us: one core alone runs at its MTE port
    t_load = load / MODEL.core_gm_bw_of(1)
    mm = ("mmad", 256, 256, 512)                            # 16 * 16 * 16 steps = 2.15 us
    p = replay(_core_program([("load", load), mm, ("load", load), mm, ("load", load), mm]), MODEL, timeline=True)
    loads = [(x.start_s, x.end_s) for x in p.timeline if x.cat == "mte2"]
    mmads = [(x.start_s, x.end_s) for x in p.timeline if x.cat == "mmad"]
    t_mm = MODEL.mmad_s(256, 256, 512)
    assert loads[1] == pytest.approx((t_load, 2 * t_load))   # group 1 loads under MMAD 0
    assert loads[2][0] == pytest.approx(mmads[0][1])         # group 2 waits for MMAD 0's buffer
    assert mmads[2][0] == pytest.approx(t_load + 2 * t_mm)   # the cube never waits for a load after the first
    assert p.total_s == pytest.approx(t_load + 3 * t_mm)


def test_the_cube_waits_for_the_data():
    """In the synthetic A2A every AIC waits for its flag, raised after the AIVs' puts landed (quiet) and the
    peers' TeamBarrier slots were observed: no MMAD starts before put end + 2 put latencies."""
    p = replay(synthetic_a2a(4, 2), MODEL, timeline=True)
    first_put_end = min(x.end_s for x in p.timeline if x.cat == "link")
    first_mmad = min(x.start_s for x in p.timeline if x.cat == "mmad")
    assert first_mmad >= first_put_end + 2 * MODEL.put_latency_s


def test_a_bf16_cube_is_costed_at_the_bf16_rate():
    """weight_quant_matmul's AIC multiplies dequantized bf16: its MMAD events name bfloat16, and the replay
    costs them at 16 x 16 x 16 MACs per cycle (half the MXFP8 rate)."""
    from mc2emu.ops import weight_quant_matmul

    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 128)).astype(ml_dtypes.bfloat16)
    w = rng.integers(-8, 8, (128, 64)).astype(np.int8)
    rec = PredictRecorder()
    weight_quant_matmul(x, w, np.full(64, 0.01, ml_dtypes.bfloat16), block_dim=1, observers=(rec,))
    mmads = [r for r in rec.records() if isinstance(r, Mmad)]
    assert mmads and {r.aType for r in mmads} == {"bfloat16"}
    steps = sum(-(-r.m // 16) * -(-r.n // 16) * -(-r.k // 16) for r in mmads)
    p = replay({0: rec.records()}, INSTANT)
    assert p.total_s == pytest.approx(steps / MODEL.clock_hz, rel=1e-9)


def _put_program(rank, puts):
    """One launch on `rank`: each of `puts` is (core, seq, t_ns, pe): one 1 KiB put of that core to rank pe."""
    recs = [LaunchBegin(rank, "host", 1, 1, launch="k", block_dim=2, kernel_type="AIV_ONLY")]
    recs += [CoreBegin(rank, f"AIV{c}", 2, 2 + c, launch="k") for c in (0, 1)]
    for core, seq, t, pe in puts:
        recs.append(Put(rank, f"AIV{core}", t, seq, window="w", offset=0, nbytes=1024, src_rank=rank, pe=pe,
                        op_seq=seq))
    recs += [CoreEnd(rank, f"AIV{c}", 1000, 100 + c, launch="k") for c in (0, 1)]
    recs.append(LaunchEnd(rank, "host", 1001, 102, launch="k", block_dim=2))
    return recs


def test_a_stamp_that_lags_its_seq_makes_no_cycle():
    """A core reads its stamp, loses the GIL, then takes its seq after another core's later-stamped put (seen
    at 16 ranks: 63 ms). Rank 0's egress queue follows seq (put to 2, then put to 3), the ingress queues of
    ranks 2 and 3 follow the stamps: rank 0 -> 3 (t 100) before rank 1 -> 3 (t 150), rank 1 -> 2 (t 200)
    before rank 0 -> 2 (t 300), and rank 1 puts to 3 before 2. Read as recorded that is a cycle; the stamp
    raised to its seq order's latest (300) orders rank 1 -> 3 first."""
    per_rank = {0: _put_program(0, [(0, 10, 300, 2), (1, 11, 100, 3)]),
                1: _put_program(1, [(0, 10, 150, 3), (0, 11, 200, 2)]),
                2: _put_program(2, []), 3: _put_program(3, [])}
    p = replay(per_rank, MODEL, timeline=True)
    link = {(x.rank, x.what): (x.start_s, x.end_s) for x in p.timeline if x.cat == "link"}
    # rank 3's ingress: rank 1's put (stamped 150) before rank 0's (its stamp raised to 300)
    assert link[(1, "put 1->3 1024 B")][1] <= link[(0, "put 0->3 1024 B")][0]
    # rank 2's ingress: rank 1's put (200) before rank 0's (300)
    assert link[(1, "put 1->2 1024 B")][1] <= link[(0, "put 0->2 1024 B")][0]


def _subclasses(cls):
    """Subclasses as their modules define them (`dataclass(slots=True)` replaces the class its statement made,
    which can stay alive among `__subclasses__`)."""
    import sys

    for sub in cls.__subclasses__():
        if getattr(sys.modules[sub.__module__], sub.__qualname__, None) is sub:
            yield sub
        yield from _subclasses(sub)


def test_records_packed_for_the_gather_come_back_equal_and_in_order(qbmm_records):
    """`gather_records` sends plain tuples (`pack_records`) and rebuilds the events through their slots: every
    record of a QBMM run and of synthetic all-to-all records (puts, quiets, flag rounds) comes back equal, of its
    class, in order, through pickle; and every event class the recorder keeps stores its fields in slots."""
    import pickle

    from mc2emu.predict.records import PREDICT_KINDS, pack_records, unpack_records

    recs = qbmm_records[0] + [r for rs in synthetic_a2a(3).values() for r in rs]
    back = unpack_records(pickle.loads(pickle.dumps(pack_records(recs))))
    assert len(back) == len(recs) > 100
    assert all(type(a) is type(b) and a == b for a, b in zip(back, recs, strict=True))
    assert len({type(r) for r in recs}) >= 10
    for kind in PREDICT_KINDS:
        for cls in (kind, *_subclasses(kind)):
            for f in dataclasses.fields(cls):
                assert type(getattr(cls, f.name)).__name__ == "member_descriptor", (cls, f.name)
