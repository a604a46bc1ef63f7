"""Device launches: core indices per kernel type, exceptions, SyncAll (hard, both forms and mixes; soft),
atomic write-outs, GM address space and local memory capacities, events."""

import threading
import time

import ml_dtypes
import numpy as np
import pytest

from mc2emu.runtime import (
    DAV_3510,
    CapacityError,
    ConstraintError,
    CoreError,
    DeadlockError,
    Device,
    EventRecorder,
    GmError,
    Hazard,
    Pipe,
    Position,
)
from mc2emu.runtime.events import (
    AtomicMode,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmRead,
    LaunchBegin,
    LaunchEnd,
    Mmad,
    SetOvertaken,
    SyncAllBegin,
)
from mc2emu.runtime.gm import POISON_BYTE


@pytest.mark.parametrize("kt, aics, aivs, ration", [
    ("AIC_ONLY", 3, 0, 1), ("AIV_ONLY", 0, 3, 1), ("MIX_AIC_1_0", 3, 0, 1), ("MIX_AIV_1_0", 0, 3, 1),
    ("MIX_AIC_1_1", 3, 3, 1), ("MIX_AIC_1_2", 3, 6, 2)])
def test_indices_per_kernel_type(kt, aics, aivs, ration):
    dev = Device()

    def kernel(ctx):
        return (ctx.ASCEND_IS_AIC, ctx.GetBlockIdx(), ctx.GetBlockNum(), ctx.GetTaskRation(),
                ctx.GetSubBlockIdx(), ctx.GetBlockIdx() // ctx.GetTaskRation())

    ret = dev.launch(kernel, 3, kt).returns
    aic = sorted(v for v in ret.values() if v[0])
    aiv = sorted(v for v in ret.values() if not v[0])
    assert aic == [(True, b, 3, 1, 0, b) for b in range(aics)]
    assert len(aiv) == aivs
    for _, idx, num, ratio, sub, block in aiv:
        assert num == 3 and ratio == (ration if aics else 1) and idx == block * ratio + sub


def test_mixed_block_dim_above_physical_aic_count_is_refused():
    with pytest.raises(ConstraintError, match="exceeds the 32 physical AIC"):
        Device().launch(lambda ctx: None, 33, "MIX_AIC_1_1")


def test_exception_on_one_core_aborts_the_others_and_is_labelled():
    dev = Device(timeout=30)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV and ctx.GetBlockIdx() == 2:
            raise ValueError("boom")
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)   # would wait 30 s without the abort

    t0 = time.monotonic()
    with pytest.raises(CoreError) as info:
        dev.launch(kernel, 4, "MIX_AIC_1_1")
    assert time.monotonic() - t0 < 5
    assert info.value.core == "AIV2" and info.value.rank == 0
    assert "rank 0 AIV2: ValueError: boom" in str(info.value)


@pytest.mark.parametrize("mix", ["MIX_AIC_1_1", "MIX_AIC_1_2"])
@pytest.mark.parametrize("aiv_only", [True, False])
def test_sync_all_is_a_barrier(mix, aiv_only):
    dev = Device(timeout=5)
    phase = {"before": 0}
    lock = threading.Lock()
    n_cores = 4 * (1 + (2 if mix == "MIX_AIC_1_2" else 1))

    def kernel(ctx):
        with lock:
            phase["before"] += 1
        ctx.SyncAll(aiv_only)
        if aiv_only and ctx.ASCEND_IS_AIC:
            return None
        return phase["before"]

    res = dev.launch(kernel, 4, mix)
    assert res.hazards == []
    aiv_count = n_cores - 4
    for label, seen in res.returns.items():
        if aiv_only and label.startswith("AIC"):
            continue
        # SyncAll<true> only orders the AIVs among themselves; <false> orders everyone.
        assert seen >= (aiv_count if aiv_only else n_cores)
    assert dev.flags.leftovers() == []


def test_sync_all_on_aic_alone_is_a_noop():
    dev = Device(timeout=1)
    assert dev.launch(lambda ctx: ctx.SyncAll(), 2, "AIC_ONLY").hazards == []


def test_kernel_ids_11_to_14_next_to_hard_sync_all_warn():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 12)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 12)
        ctx.SyncAll(False)

    res = dev.launch(kernel, 2, "MIX_AIC_1_1")
    assert [h.hazard for h in res.hazards] == [Hazard.FLAG_ID_RESERVED]


def test_soft_sync_all_uses_gm_epoch_slots():
    dev = Device(timeout=5)
    ws = dev.gm.alloc(32 * 8, "syncall_ws")
    hits = []

    def kernel(ctx):
        for r in range(3):
            hits.append(ctx.label)
            ctx.SyncAllSoft(ws)
            assert len(hits) >= 8 * (r + 1)   # every core arrived in this round before anyone left
    assert dev.launch(kernel, 8, "AIV_ONLY").hazards == []
    assert dev.gm.view(ws, np.int32, (8,), strides=(32,)).tolist() == [3] * 8


def test_sync_all_oversubscribed_hangs_with_a_report():
    dev = Device(timeout=1)
    with pytest.raises(DeadlockError):
        dev.launch(lambda ctx: ctx.SyncAll(), 65, "AIV_ONLY")
    assert Hazard.SYNC_ALL_OVERSUBSCRIBED in {h.hazard for h in dev.hazards.peek()}


@pytest.mark.parametrize(("atomic", "written"), [(np.float32, ml_dtypes.bfloat16),
                                                   (ml_dtypes.bfloat16, np.float32)])
def test_atomic_add_of_another_dtype_adds_words_of_the_atomic_type_over_the_bytes(atomic, written):
    """SetAtomicAdd<T> while the write-out is another dtype: the atomic unit reads each contiguous run of
    written bytes, and GM's bytes under it, as T words and adds them in T; bytes past a run's last whole
    word are undefined (poison 0xFF). Reported once per core: rank, core, the byte range, both types."""
    dev = Device(rank=3)
    rng = np.random.default_rng(11)
    init = rng.uniform(1, 4, (2, 16)).astype(written)
    c = dev.gm.alloc(0, "C", data=init)
    item = np.dtype(written).itemsize
    cols = 5 if item == 2 else 3                  # bf16: 10-byte runs (2 float words + 2 bytes); f32: 12 bytes
    add = rng.uniform(1, 4, (2, cols)).astype(written)
    row = init.strides[0]

    def kernel(ctx):
        ctx.SetAtomicAdd(atomic)
        ctx.gm_write(c + item, add, (row, item))    # rows of `cols` elements from column 1
        ctx.SetAtomicNone()

    reps = dev.launch(kernel, 1, "AIC_ONLY").hazards
    assert [r.hazard for r in reps] == [Hazard.ATOMIC_DTYPE_MISMATCH]
    rep = reps[0]
    assert (rep.rank, rep.core, rep.details["lo"], rep.details["hi"]) == (3, "AIC0", item, row + item + cols * item)
    assert str(np.dtype(atomic)) == rep.details["atomic"] and str(np.dtype(written)) == rep.details["written"]
    assert f"'C' bytes [{item:#x}, {row + item + cols * item:#x})" in rep.message
    want = init.copy().view(np.uint8).reshape(2, -1)
    run = cols * item
    w = np.dtype(atomic).itemsize
    whole = run // w * w
    for r in range(2):
        old = want[r, item:item + whole].copy().view(atomic).astype(np.float32)
        new = add[r].view(np.uint8)[:whole].copy().view(atomic).astype(np.float32)
        want[r, item:item + whole] = (old + new).astype(atomic).view(np.uint8)
        want[r, item + whole:item + run] = 0xFF
    got = dev.gm.view(c, np.uint8, (2, row))
    np.testing.assert_array_equal(got, want)


def test_atomic_add_rounds_in_the_target_type():
    dev = Device()
    init = np.array([1.0, 256.0, -3.5, 0.0], dtype=ml_dtypes.bfloat16)
    c = dev.gm.alloc(0, "C", data=init)
    add = np.array([2 ** -9, 1.0, 3.5, 1e-3], dtype=ml_dtypes.bfloat16)

    def kernel(ctx):
        ctx.SetAtomicAdd(ml_dtypes.bfloat16)
        ctx.gm_write(c, add)
        ctx.SetAtomicNone()
        ctx.gm_write(c + 6, np.array([7.0], dtype=ml_dtypes.bfloat16))   # plain write after None

    assert dev.launch(kernel, 1, "AIC_ONLY").hazards == []
    got = dev.gm.view(c, ml_dtypes.bfloat16, (4,)).astype(np.float32)
    expect = (init.astype(np.float32) + add.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    expect[3] = 7.0
    np.testing.assert_array_equal(got, expect)
    assert got[1] == 256.0   # 257 is not a bf16: RNE ties to even


def test_atomic_mode_left_set_is_reported():
    dev = Device()
    res = dev.launch(lambda ctx: ctx.SetAtomicAdd(np.float32), 2, "AIC_ONLY")
    assert [h.hazard for h in res.hazards] == [Hazard.ATOMIC_LEFT_SET] * 2


def test_gm_pointer_arithmetic_bounds_and_poison():
    dev = Device()
    a = dev.gm.alloc(64, "A")
    b = a + 16
    assert b.offset == 16 and (b - 16) == a and b.value == a.value + 16
    dev.gm.write(a, np.arange(4, dtype=np.float32))
    assert dev.gm.read(a, np.float32, (4,)).tolist() == [0, 1, 2, 3]
    with pytest.raises(GmError, match="outside GM allocation 'A' of 64 bytes"):
        dev.gm.read(a + 60, np.float32, (2,))
    raw = dev.gm.read(a + 16, np.uint8, (4,), core="AIC0")
    assert raw.tolist() == [POISON_BYTE] * 4
    reps = dev.hazards.peek()
    assert [h.hazard for h in reps] == [Hazard.READ_UNWRITTEN] and reps[0].core == "AIC0"


def test_a_write_of_every_byte_makes_an_allocation_fully_written():
    """Host inputs are allocated, then written whole: once every byte is written, reads skip the unwritten-byte
    mask (`fully_written`). A write spanning the allocation with gaps (overlapping rows, strides (5, 1, 1):
    bytes 3 and 4 left out) does not, and a read of the gap is still reported."""
    dev = Device(check=True)
    whole = dev.gm.alloc(64, "whole")
    dev.gm.write(whole, np.arange(8, dtype=np.float32))
    assert not whole.alloc.fully_written                 # half of it
    dev.gm.write(whole + 32, np.arange(8, dtype=np.float32))
    assert not whole.alloc.fully_written                 # every byte now, but no write spans the allocation
    dev.gm.write(whole, np.arange(16, dtype=np.float32))
    assert whole.alloc.fully_written
    assert dev.gm.read(whole + 60, np.float32, (1,), core="AIC0").tolist() == [15.0]
    gappy = dev.gm.alloc(8, "gappy")
    dev.gm.write(gappy, np.ones((2, 2, 2), dtype=np.uint8), strides=(5, 1, 1))   # bytes 0-2 and 5-7
    assert not gappy.alloc.fully_written
    assert dev.gm.read(gappy + 2, np.uint8, (3,), core="AIC1").tolist() == [1, POISON_BYTE, POISON_BYTE]
    (report,) = dev.hazards.peek()
    assert report.hazard is Hazard.READ_UNWRITTEN and report.core == "AIC1" and report.details["count"] == 2


def test_gm_strided_2d_views_and_fp4_packing():
    dev = Device()
    mat = np.arange(6 * 8, dtype=np.float32).reshape(6, 8)
    a = dev.gm.alloc(0, "M", data=mat)
    tile = dev.gm.read(a + (2 * 8 + 3) * 4, np.float32, (3, 4), strides=(8 * 4, 4))
    np.testing.assert_array_equal(tile, mat[2:5, 3:7])
    codes = np.array([[1, 2, 3, 15], [0, 7, 8, 9]], dtype=np.uint8)
    f4 = codes.view(ml_dtypes.float4_e2m1fn)
    p = dev.gm.alloc(4, "F4")
    dev.gm.write(p, f4)
    assert dev.gm.view(p, np.uint8, (4,)).tolist() == [0x21, 0xF3, 0x70, 0x98]
    back = dev.gm.read(p, ml_dtypes.float4_e2m1fn, (2, 4))
    np.testing.assert_array_equal(back.view(np.uint8), codes)


def test_no_poison_without_checks():
    dev = Device(check=False)
    a = dev.gm.alloc(8, "A")
    assert dev.gm.read(a, np.uint8, (8,)).tolist() == [0] * 8
    assert dev.hazards.peek() == []


def test_local_memory_capacities_come_from_the_platform_table():
    dev = Device()

    def kernel(ctx):
        ctx.local.allocate(Position.A1, "a", DAV_3510.l1_size // 2, np.uint8)
        ctx.local.allocate(Position.A1, "b", DAV_3510.l1_size // 2, np.uint8)
        ctx.local.allocate(Position.A1, "c", 1, np.uint8)

    with pytest.raises(CapacityError, match="L1 region 'c' of 1 B does not fit"):
        dev.launch(kernel, 1, "AIC_ONLY")

    def ub(ctx):
        ctx.local.allocate(Position.VECCALC, "x", (DAV_3510.ub_usable_size // 4 + 1,), np.float32)

    with pytest.raises(CapacityError, match="UB"):
        dev.launch(ub, 1, "AIV_ONLY")


def test_events_reach_observers():
    dev = Device()
    rec = EventRecorder()
    dev.events.subscribe(rec)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 1)
            ctx.SyncAll()
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)
            ctx.SetAtomicAdd(np.float32)
            ctx.SetAtomicNone()

    dev.launch(kernel, 1, "MIX_AIC_1_1")
    kinds = {type(e) for e in rec.events}
    assert {FlagSet, FlagRaise, FlagConsume, SyncAllBegin, AtomicMode, LaunchBegin, LaunchEnd} <= kinds
    sets = [e for e in rec.of(FlagRaise) if e.target == "AIC0"]
    consumed = [e for e in rec.of(FlagConsume) if e.core == "AIC0"]
    assert sets[0].token == consumed[0].token   # a flow from Set to the Wait it released


def test_seeded_perturbation_reorders_consecutive_sets_without_losing_any():
    """Hardware does not order consecutive Sets of one core: the seeded policy lets a Set overtake the
    previous one; every Wait is still satisfied and nothing is left over."""
    from mc2emu.runtime import PerturbPolicy

    overtaken = []
    for seed in range(3):
        dev = Device(timeout=5, perturb=PerturbPolicy(seed, probability=0.0))
        rec = EventRecorder()
        dev.events.subscribe(rec)

        def kernel(ctx):
            for t in range(8):
                if ctx.ASCEND_IS_AIV:
                    ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t)
                else:
                    ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 7 - t)   # waits in reverse: any order completes

        assert dev.launch(kernel, 2, "MIX_AIC_1_1").hazards == []
        assert dev.flags.leftovers() == []
        overtaken.append(sum(1 for e in rec.of(SetOvertaken) if e.by_fid is not None))
    assert all(n > 0 for n in overtaken), overtaken


def test_an_observer_of_some_kinds_sees_only_those_and_wants_follows_subscriptions():
    """Checkers subscribe to the kinds they read: hot publishers skip an event nobody reads (`wants`), the
    others still reach every observer, in one sequence numbering across kinds."""
    from mc2emu.runtime.event_bus import EventBus

    def mmad() -> None:
        bus.emit(Mmad, "AIC0", m=1, n=1, k=64, tile=(0, 0), l0=0, aType="e4m3", unitFlag=3, cmatrixInitVal=True,
                 bias=False)

    def read(buffer: str) -> None:
        bus.emit(GmRead, "AIC0", buffer, lo=0, hi=1, offset=0, shape=(1,), strides=(1,), item=1)

    def flag_set(fid: int) -> None:
        bus.emit(FlagSet, "AIV0", fid=fid, mode=2, pipe="PIPE_MTE3", set_id=fid)

    bus = EventBus(0)
    every, some = EventRecorder(), EventRecorder()
    assert not bus.active and not bus.wants(Mmad)
    off_some = bus.subscribe(some, (GmRead, FlagSet))
    assert bus.active and bus.wants(GmRead) and not bus.wants(Mmad)
    mmad()                                  # nobody reads it: dropped, no sequence number
    read("x")
    off_every = bus.subscribe(every)
    assert bus.wants(Mmad)
    mmad()
    flag_set(1)
    assert [type(e) for e in some.events] == [GmRead, FlagSet]
    assert [type(e) for e in every.events] == [Mmad, FlagSet]
    assert [e.seq for e in some.events] == [1, 3] and [e.seq for e in every.events] == [2, 3]
    off_every()
    assert not bus.wants(Mmad) and bus.wants(FlagSet)
    off_some()
    assert not bus.active and not bus.wants(FlagSet)
    windows = EventRecorder()
    bus.subscribe(windows, (GmRead, FlagSet), prefixes={GmRead: "win:"})
    assert bus.wants(GmRead, "win:data") and not bus.wants(GmRead, "x1")
    assert bus.wants(GmRead) and bus.wants(FlagSet, "x1")
    for buffer in ("x1", "win:data", "win:scale"):
        read(buffer)
    flag_set(3)
    assert [(e.subject, e.seq) for e in windows.events] == [("win:data", 4), ("win:scale", 5), ("flag3", 6)]


def test_a_read_proven_equal_returns_that_array_with_the_same_event_and_checks():
    """`GlobalMemory.read(same_as=)`: no host copy, the same GM_READ (range, bytes) and the same unwritten
    report as a copying read; a proof of another geometry is refused."""
    import ml_dtypes

    from mc2emu.runtime.gm import GmError

    dev = Device()
    rec = EventRecorder()
    dev.events.subscribe(rec, (GmRead,))
    data = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(16, 16)
    addr = dev.gm.alloc(data.nbytes, "B", data=data)
    first = dev.gm.read(addr + 16, data.dtype, (4, 8), (16, 1), core="AIC0")
    again = dev.gm.read(addr + 16, data.dtype, (4, 8), (16, 1), core="AIC0", same_as=first)
    assert again is first
    assert np.array_equal(first.view(np.uint8), data[1:5, :8].view(np.uint8))
    e0, e1 = rec.of(GmRead)
    assert (e0.lo, e0.hi) == (e1.lo, e1.hi) == (16, 16 + 3 * 16 + 8) and e1.data is first
    with pytest.raises(GmError, match="proven equal"):
        dev.gm.read(addr, data.dtype, (4, 4), (16, 1), core="AIC0", same_as=first)
    part = dev.gm.alloc(64, "part", data=np.zeros(8, dtype=np.uint8))   # bytes 8.. never written
    buf = np.zeros((2, 8), dtype=np.uint8)
    dev.gm.read(part, np.uint8, (2, 8), same_as=buf, core="AIC1")
    (report,) = dev.hazards.peek()
    assert report.hazard.name == "READ_UNWRITTEN" and report.core == "AIC1" and report.details["count"] == 8


def test_allocations_written_from_the_start_read_and_add_without_reports_and_the_rest_stays_poisoned():
    """`alloc(data=)` filling the allocation whole, `alloc(zero=True)` and `adopt(written=True)` (a window)
    start fully written: reads and atomic adds of any byte report nothing and see the bytes given. Data
    covering part of an allocation leaves the rest poisoned and reported; `adopt(written=False)` reports a read
    before any write and not after one."""
    dev = Device(check=True)
    data = np.arange(16, dtype=np.float32)
    whole = dev.gm.alloc(data.nbytes, "whole", data=data)
    zero = dev.gm.alloc(64, "zero", zero=True)
    win = dev.gm.adopt(np.zeros(64, dtype=np.uint8), "win:w", written=True)
    for addr, first in ((whole, data[:4]), (zero, np.zeros(4, np.float32)), (win, np.zeros(4, np.float32))):
        assert addr.alloc.fully_written
        np.testing.assert_array_equal(dev.gm.read(addr, np.float32, (4,), core="AIC0"), first)
        dev.gm.write(addr + 48, np.ones(4, np.float32), core="AIC0", atomic=np.dtype(np.float32))
        np.testing.assert_array_equal(dev.gm.read(addr + 48, np.float32, (4,)), first + 1 if addr is not whole
                                      else data[12:] + 1)
    assert dev.hazards.peek() == []
    part = dev.gm.alloc(64, "part", data=np.arange(4, dtype=np.float32))   # bytes 16.. never written
    assert not part.alloc.fully_written
    assert dev.gm.read(part, np.float32, (4,)).tolist() == [0, 1, 2, 3]
    assert dev.gm.read(part + 16, np.uint8, (4,), core="AIC1").tolist() == [POISON_BYTE] * 4
    (report,) = dev.hazards.take()
    assert report.hazard is Hazard.READ_UNWRITTEN and report.core == "AIC1" and report.details["count"] == 4
    fresh = dev.gm.adopt(np.zeros(32, dtype=np.uint8), "win:fresh", written=False)
    dev.gm.read(fresh, np.uint8, (8,), core="AIV0")
    (report,) = dev.hazards.take()
    assert report.hazard is Hazard.READ_UNWRITTEN and report.core == "AIV0" and report.details["count"] == 8
    dev.gm.write(fresh + 8, np.ones(8, np.uint8), core="AIV0")
    assert dev.gm.read(fresh + 8, np.uint8, (8,), core="AIV0").tolist() == [1] * 8
    assert dev.hazards.peek() == []
