"""HCCL device client + per-rank server: real data movement, the per-core rules, both server models."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from comm_cases import HANG_TIMEOUT_S, RESYNC_TIMEOUT_S, rank_data

from mc2emu.comm import (
    HCCL_FAILED,
    HCCL_MAX_HANDLE_ID,
    HCCL_SUCCESS,
    INVALID_HANDLE_ID,
    Hccl,
    HcclReduceOp,
    HcclServer,
    HcclServerType,
)
from mc2emu.runtime import DeadlockError, KernelType, Pipe

pytestmark = pytest.mark.mpi(min_size=2)

FP16 = np.dtype(np.float16)
# Reduce staging of the test servers: the largest reduce here stages 8 ranks x 2 repeats x 192 B.
STAGING_BYTES = 64 << 10
COUNT = 24                      # elements per block per repeat


def _setup(make_world, *, check=True, timeout=None, model=HcclServerType.CCU):
    world = make_world(check=check) if timeout is None else make_world(check=check, timeout=timeout)
    return world, HcclServer(world, model=model, staging_bytes=STAGING_BYTES)


def _names(world):
    return {h.hazard.value for h in world.device.hazards.take()}


def _send(world, nelem, dtype=FP16, salt=0):
    """This rank's random send buffer and a function giving any rank's."""
    def of(rank):
        return rank_data(rank, nelem * dtype.itemsize, salt).view(dtype).copy()
    return world.device.gm.alloc(nelem * dtype.itemsize, "send", data=of(world.rank)), of


# -- data movement ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", list(HcclServerType))
@pytest.mark.parametrize(("repeat", "pad"), [(1, 0), (1, 8), (3, 0), (3, 5)], ids=["r1", "r1-stride", "r3",
                                                                                  "r3-stride"])
def test_alltoall_is_byte_exact(make_world, model, repeat, pad):
    world, server = _setup(make_world, model=model)
    R, me, dev = world.size, world.rank, world.device
    stride = COUNT * repeat + pad if (pad or repeat > 1) else 0   # rank blocks hold every repeat's tile
    pitch = stride or COUNT
    send, send_of = _send(world, R * pitch)
    recv = world.window(R * pitch * FP16.itemsize, "recv")

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            return None
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, strideCount=stride, repeat=repeat)
        for _ in range(repeat):
            hccl.Commit(h)
            assert hccl.Wait(h) == HCCL_SUCCESS
        assert hccl.Query(h) == repeat
        ctx.CrossCoreSetFlag(0, Pipe.PIPE_FIX, 1)       # every AIC waited before block 0 finalizes
        ctx.CrossCoreWaitFlag(0, Pipe.PIPE_FIX, 1)
        hccl.Finalize()

    dev.launch(kernel, 2, KernelType.MIX_AIC_1_1)
    server.end_session()
    got = dev.gm.read(recv.base, FP16, (R * pitch,)).view(np.uint16)
    for i in range(R):
        want = send_of(i)[me * pitch: me * pitch + COUNT * repeat].view(np.uint16)
        np.testing.assert_array_equal(got[i * pitch: i * pitch + COUNT * repeat], want, err_msg=f"from rank {i}")
    assert not _names(world)
    world.barrier()


@pytest.mark.parametrize("repeat", [1, 4])
def test_allgather_is_byte_exact(make_world, repeat):
    world, server = _setup(make_world)
    R, dev = world.size, world.device
    dt = np.dtype(ml_dtypes.bfloat16)
    pitch = COUNT * repeat
    send, send_of = _send(world, pitch, dt, salt=3)
    recv = world.window(R * pitch * dt.itemsize, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AllGather(send, recv.base, COUNT, dt, strideCount=pitch, repeat=repeat, commit=True)
        for _ in range(repeat):
            assert hccl.Wait(h) == HCCL_SUCCESS
        hccl.Finalize()

    dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    got = dev.gm.view(recv.base, np.uint16, (R, pitch))
    for i in range(R):
        np.testing.assert_array_equal(got[i], send_of(i).view(np.uint16), err_msg=f"from rank {i}")
    assert not _names(world)
    world.barrier()


def test_reduce_scatter_and_allreduce(make_world):
    world, server = _setup(make_world)
    R, me, dev = world.size, world.rank, world.device
    f32 = np.dtype(np.float32)

    def ints(rank, n):
        return np.random.default_rng([7, rank]).integers(-50, 50, n).astype(np.float32)

    send = dev.gm.alloc(R * COUNT * 2 * 4, "send", data=ints(me, R * COUNT * 2))
    rs_out = dev.gm.alloc(COUNT * 2 * 4, "rs_out")
    ar_out = dev.gm.alloc(R * COUNT * 4, "ar_out")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        rs = hccl.ReduceScatter(send, rs_out, COUNT, f32, HcclReduceOp.SUM, strideCount=2 * COUNT, repeat=2,
                                commit=True)
        ar = hccl.AllReduce(send, ar_out, R * COUNT, f32, HcclReduceOp.MAX, commit=True)
        assert [hccl.Wait(rs), hccl.Wait(rs), hccl.Wait(ar)] == [HCCL_SUCCESS] * 3
        hccl.Finalize()

    dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    all_send = np.stack([ints(r, R * COUNT * 2) for r in range(R)])
    want_rs = all_send[:, me * 2 * COUNT:(me + 1) * 2 * COUNT].sum(axis=0)
    np.testing.assert_array_equal(dev.gm.read(rs_out, f32, (2 * COUNT,)), want_rs)
    np.testing.assert_array_equal(dev.gm.read(ar_out, f32, (R * COUNT,)), all_send[:, :R * COUNT].max(axis=0))
    world.barrier()


# -- rules: reported with checks on, the model's behaviour with checks off -----------------------------
@pytest.mark.parametrize("check", [True, False])
def test_too_many_prepares(make_world, check):
    world, server = _setup(make_world, check=check)
    recv = world.window(64, "recv")
    send = world.device.gm.alloc(64, "send", zero=True)

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        handles = [hccl.AlltoAll(send, recv.base, 0, FP16) for _ in range(HCCL_MAX_HANDLE_ID + 1)]
        hccl.Finalize()
        return handles

    res = world.device.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    handles = res.returns["AIC0"]
    assert handles[:HCCL_MAX_HANDLE_ID] == list(range(HCCL_MAX_HANDLE_ID))
    assert handles[-1] == INVALID_HANDLE_ID
    assert _names(world) == ({"HCCL_TOO_MANY_PREPARES"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_commit_beyond_repeat_is_dropped(make_world, check):
    world, server = _setup(make_world, check=check)
    R, me, dev = world.size, world.rank, world.device
    send, send_of = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        hccl.Commit(h)                                 # a second Commit of a repeat-1 task
        rc = hccl.Wait(h)
        hccl.Finalize()                                # drains: only one repeat was ever sent
        return rc, hccl.handles[h].commits

    res = dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    assert res.returns["AIC0"] == (HCCL_SUCCESS, 1)
    got = dev.gm.read(recv.base, FP16, (R, COUNT)).view(np.uint16)
    for i in range(R):
        np.testing.assert_array_equal(got[i], send_of(i)[me * COUNT:(me + 1) * COUNT].view(np.uint16))
    assert _names(world) == ({"HCCL_COMMIT_BEYOND_REPEAT"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_wait_beyond_commit_aicpu_returns_minus_one(make_world, check):
    world, server = _setup(make_world, check=check, model=HcclServerType.AICPU)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT * 2)
    recv = world.window(R * COUNT * 2 * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, repeat=2)
        hccl.Commit(h)
        rcs = [hccl.Wait(h), hccl.Wait(h)]
        hccl.Finalize()
        return rcs

    res = dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    assert res.returns["AIC0"] == [HCCL_SUCCESS, HCCL_FAILED]
    assert _names(world) == ({"HCCL_WAIT_BEYOND_COMMIT"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_wait_beyond_commit_ccu_hangs(make_world, check):
    world, server = _setup(make_world, check=check, timeout=HANG_TIMEOUT_S)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT * 2)
    recv = world.window(R * COUNT * 2 * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, repeat=2)
        hccl.Commit(h)
        hccl.Wait(h)
        hccl.Wait(h)

    with pytest.raises(DeadlockError, match="never committed"):
        dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    names = _names(world)
    assert ("HCCL_WAIT_BEYOND_COMMIT" in names) is check
    world.barrier(timeout=RESYNC_TIMEOUT_S)


@pytest.mark.parametrize("check", [True, False])
def test_wait_order_follows_prepare_order(make_world, check):
    world, server = _setup(make_world, check=check)
    R, me, dev = world.size, world.rank, world.device
    send, send_of = _send(world, R * COUNT)
    recv = world.window(2 * R * COUNT * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        h0 = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        h1 = hccl.AlltoAll(send, recv.addr(R * COUNT * 2), COUNT, FP16, commit=True)
        rcs = [hccl.Wait(h1), hccl.Wait(h0)]           # h1 before h0: out of Prepare order
        hccl.Finalize()
        return rcs

    res = dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    assert res.returns["AIC0"] == [HCCL_SUCCESS, HCCL_SUCCESS]
    got = dev.gm.read(recv.base, FP16, (2, R, COUNT)).view(np.uint16)
    for i in range(R):
        want = send_of(i)[me * COUNT:(me + 1) * COUNT].view(np.uint16)
        np.testing.assert_array_equal(got[0, i], want)
        np.testing.assert_array_equal(got[1, i], want)
    assert _names(world) == ({"HCCL_WAIT_ORDER"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_wait_on_another_core_type_fails(make_world, check):
    """AIC0 prepares; its AIV (MIX 1:1) Commits, Waits and Finalizes on the AIC's handle."""
    world, server = _setup(make_world, check=check)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        if ctx.ASCEND_IS_AIC:
            h = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 0)       # the AIV goes on only after the Prepare
            rc = hccl.Wait(h)
            hccl.Finalize()
            return rc
        ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
        hccl.Commit(0)
        rc = hccl.Wait(0)
        hccl.Finalize()
        return rc

    res = dev.launch(kernel, 1, KernelType.MIX_AIC_1_1)
    server.end_session()
    assert res.returns == {"AIC0": HCCL_SUCCESS, "AIV0": HCCL_FAILED}
    assert _names(world) == ({"HCCL_WRONG_CORE_TYPE"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_commit_of_a_non_working_block_is_never_sent(make_world, check):
    world, server = _setup(make_world, check=check, model=HcclServerType.AICPU)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            return None
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16)
        if ctx.GetBlockIdx() == 1:
            hccl.Commit(h)                             # only the non-working block commits
        ctx.CrossCoreSetFlag(0, Pipe.PIPE_FIX, 1)       # both AICs: mode-0 barrier
        ctx.CrossCoreWaitFlag(0, Pipe.PIPE_FIX, 1)
        done = hccl.Query(h)
        hccl.Finalize(reset=False)
        return done

    res = dev.launch(kernel, 2, KernelType.MIX_AIC_1_1)
    server.end_session()
    assert res.returns["AIC1"] == 0 and res.returns["AIC0"] == 0
    assert not dev.gm.view(recv.base, np.uint8, (R * COUNT * 2,)).any()      # nothing was moved
    names = _names(world)
    assert names == ({"HCCL_NON_WORKING_BLOCK", "HCCL_UNWAITED_COMMIT"} if check else set())
    world.barrier()


@pytest.mark.parametrize("check", [True, False])
def test_wait_after_aicpu_finalize_hangs(make_world, check):
    """AICPU model: block 0 Waits and Finalize<true>s (resetting the finish counters) before AIC1 Waits
    on the same, already finished repeat: AIC1 hangs."""
    world, server = _setup(make_world, check=check, timeout=HANG_TIMEOUT_S, model=HcclServerType.AICPU)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            return None
        hccl = Hccl(ctx, server)
        hccl.Init()
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        if ctx.GetBlockIdx() == 0:
            hccl.Wait(h)
            hccl.Finalize()
        ctx.CrossCoreSetFlag(0, Pipe.PIPE_FIX, 1)
        ctx.CrossCoreWaitFlag(0, Pipe.PIPE_FIX, 1)
        if ctx.GetBlockIdx() == 1:
            hccl.Wait(h)
            hccl.Finalize()

    with pytest.raises(DeadlockError, match="HCCL handle 0"):
        dev.launch(kernel, 2, KernelType.MIX_AIC_1_1)
    server.end_session()
    names = _names(world)
    assert ("HCCL_FINALIZE_WHILE_WAITING" in names) is check
    world.barrier(timeout=RESYNC_TIMEOUT_S)


@pytest.mark.parametrize("check", [True, False])
def test_unwaited_commit_is_reported_at_finalize(make_world, check):
    world, server = _setup(make_world, check=check)
    R, dev = world.size, world.device
    send, _ = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        hccl.Finalize()                                # no Wait: a skipped drain

    dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    assert _names(world) == ({"HCCL_UNWAITED_COMMIT"} if check else set())
    world.barrier()


@pytest.mark.parametrize("model", list(HcclServerType))
def test_non_working_core_waits_per_model(make_world, model):
    """Two AICs Wait on two handles in opposite orders. AICPU: every Wait waits for its own handle's
    next repeat. CCU: AIC1's Wait returns once AIC0 has completed more Waits than AIC1, whatever the
    handle. Both complete; AIC1's inverted order is a WAIT_ORDER report."""
    world, server = _setup(make_world, model=model)
    R, me, dev = world.size, world.rank, world.device
    send, send_of = _send(world, R * COUNT)
    recv = world.window(2 * R * COUNT * 2, "recv")

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            return None
        hccl = Hccl(ctx, server)
        hccl.Init()
        h0 = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        h1 = hccl.AlltoAll(send, recv.addr(R * COUNT * 2), COUNT, FP16, commit=True)
        order = [h0, h1] if ctx.GetBlockIdx() == 0 else [h1, h0]
        rcs = [hccl.Wait(h) for h in order]
        ctx.CrossCoreSetFlag(0, Pipe.PIPE_FIX, 1)
        ctx.CrossCoreWaitFlag(0, Pipe.PIPE_FIX, 1)
        hccl.Finalize()
        return rcs

    res = dev.launch(kernel, 2, KernelType.MIX_AIC_1_1)
    server.end_session()
    assert res.returns["AIC0"] == res.returns["AIC1"] == [HCCL_SUCCESS, HCCL_SUCCESS]
    reports = world.device.hazards.take()
    assert {(h.hazard.value, h.core) for h in reports} == {("HCCL_WAIT_ORDER", "AIC1")}
    got = dev.gm.read(recv.base, FP16, (2, R, COUNT)).view(np.uint16)
    for i in range(R):
        np.testing.assert_array_equal(got[1, i], send_of(i)[me * COUNT:(me + 1) * COUNT].view(np.uint16))
    world.barrier()


def test_session_owner_does_not_depend_on_who_prepares_first(make_world):
    """An AIC-only HCCL kernel launched mixed: the AIV Prepares first (it Sets the AIC's go-flag only
    after). The session still belongs to the AICs, as it does when the AIC happens to be first: the AIV's
    calls are the HCCL_WRONG_CORE_TYPE reports, the AIC's task runs and its Wait succeeds."""
    world, server = _setup(make_world)
    R, me, dev = world.size, world.rank, world.device
    send, send_of = _send(world, R * COUNT)
    recv = world.window(R * COUNT * 2, "recv")

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        if ctx.ASCEND_IS_AIV:
            h = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
            return hccl.Wait(h)
        ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
        h = hccl.AlltoAll(send, recv.base, COUNT, FP16, commit=True)
        rc = hccl.Wait(h)
        hccl.Finalize()
        return rc

    res = dev.launch(kernel, 1, KernelType.MIX_AIC_1_1)
    server.end_session()
    assert res.returns == {"AIC0": HCCL_SUCCESS, "AIV0": HCCL_FAILED}
    reports = {(h.hazard.value, h.core) for h in dev.hazards.take()}
    assert reports == {("HCCL_WRONG_CORE_TYPE", "AIV0")}, reports
    got = dev.gm.read(recv.base, FP16, (R * COUNT,)).view(np.uint16)
    for i in range(R):
        want = send_of(i)[me * COUNT: (me + 1) * COUNT].view(np.uint16)
        np.testing.assert_array_equal(got[i * COUNT: (i + 1) * COUNT], want, err_msg=f"from rank {i}")
    world.barrier()


def test_repeat_is_a_uint8(make_world):
    """`repeat` of Prepare is a uint8_t: 256 is refused with the rule named (the device would wrap it)."""
    world, server = _setup(make_world)
    R, dev = world.size, world.device
    send, _ = _send(world, R * 256)
    recv = world.window(R * 256 * 2, "recv")
    errors = []

    def kernel(ctx):
        hccl = Hccl(ctx, server)
        hccl.Init()
        try:
            hccl.AlltoAll(send, recv.base, 1, FP16, strideCount=256, repeat=256)
        except Exception as exc:
            errors.append(exc)
        h = hccl.AlltoAll(send, recv.base, 1, FP16, strideCount=255, repeat=255)
        return h

    res = dev.launch(kernel, 1, KernelType.AIC_ONLY)
    server.end_session()
    assert res.returns == {"AIC0": 0}
    assert len(errors) == 1 and getattr(errors[0], "rule", None) == "HCCL AlltoAll repeat <= 255", errors
    world.barrier()
