"""Cross-core flags (SPEC §2): every mode under the 1:1 and 1:2 mixes, remembered Sets, overflow, id
truncation, pipe no-ops, kernel-type rules, mixed modes, and a long ping-pong with no lost signal."""

import time

import pytest

from mc2emu.runtime import (
    DeadlockError,
    Device,
    FlagOverflowError,
    Hazard,
    KernelError,
    Pipe,
)
from mc2emu.runtime.hazards import Severity

SHORT = 1.0  # deadline for tests that expect a hang


def names(result):
    return [h.hazard for h in result.hazards]


@pytest.mark.parametrize("mix, ratio", [("MIX_AIC_1_1", 1), ("MIX_AIC_1_2", 2)])
def test_mode2_aiv_round_raises_aic_once(mix, ratio):
    """AIV -> AIC: the AIC's counter rises once per round, i.e. after every AIV of the group Set."""
    dev = Device(timeout=5)
    seen = {}

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for t in range(3):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t)
        else:
            for t in range(3):
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, t)
            key = (ctx.label, 0, False)
            seen[ctx.label] = dev.flags.counters[key].value

    res = dev.launch(kernel, 4, mix)
    assert res.hazards == []
    assert seen == {f"AIC{i}": 0 for i in range(4)}
    assert dev.flags.leftovers() == []


def test_mode2_partial_round_is_not_a_round():
    """Under MIX 1:2 one AIV's Set alone must not release the AIC (the round needs both AIVs)."""
    dev = Device(timeout=SHORT)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV and ctx.GetSubBlockIdx() == 0:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 3)
        elif ctx.ASCEND_IS_AIC:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 3)

    with pytest.raises(DeadlockError) as info:
        dev.launch(kernel, 1, "MIX_AIC_1_2")
    assert "CrossCoreWaitFlag<2, PIPE_MTE2>(3)" in str(info.value)
    assert "AIV0, AIV1" in str(info.value)


@pytest.mark.parametrize("mix, ratio", [("MIX_AIC_1_1", 1), ("MIX_AIC_1_2", 2)])
def test_mode2_aic_set_raises_every_aiv(mix, ratio):
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 7)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 7)
            return ctx.GetBlockIdx() // ctx.GetTaskRation()

    res = dev.launch(kernel, 3, mix)
    assert res.hazards == []
    assert sorted(v for k, v in res.returns.items() if k.startswith("AIV")) == sorted(
        b for b in range(3) for _ in range(ratio))


@pytest.mark.parametrize("mix", ["MIX_AIC_1_1", "MIX_AIC_1_2", "MIX_AIV_1_0", "MIX_AIC_1_0"])
def test_mode0_barrier_over_one_core_type(mix):
    """Mode 0: nobody passes the Wait before every core of its type has Set."""
    dev = Device(timeout=5)
    arrived = []

    def kernel(ctx):
        arrived.append(ctx.label)
        ctx.CrossCoreSetFlag(0, Pipe.PIPE_MTE2, 5)
        ctx.CrossCoreWaitFlag(0, Pipe.PIPE_MTE2, 5)
        return sum(1 for a in list(arrived) if a[:3] == ctx.label[:3])

    res = dev.launch(kernel, 4, mix)
    assert res.hazards == []
    ratio = {"MIX_AIC_1_2": 2, "MIX_AIC_1_0": 0}.get(mix, 1)
    for label, seen in res.returns.items():
        assert seen == (4 if label.startswith("AIC") else 4 * ratio)


def test_mode1_group_of_aivs():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(5):
                ctx.CrossCoreSetFlag(1, Pipe.PIPE_V, 2)
                ctx.CrossCoreWaitFlag(1, Pipe.PIPE_V, 2)

    assert dev.launch(kernel, 2, "MIX_AIC_1_2").hazards == []
    assert dev.flags.leftovers() == []


def test_mode4_id_spaces():
    """Mode 4 (MIX 1:2): AIC ids 0-15 talk to AIV0, 16-31 to AIV1; AIV sub s id i raises AIC id i+16s."""
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(4, Pipe.PIPE_FIX, 3)        # -> AIV 2b, id 3
            ctx.CrossCoreSetFlag(4, Pipe.PIPE_FIX, 16 + 9)   # -> AIV 2b+1, id 9
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_FIX, 4)       # from AIV sub 0, id 4
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_FIX, 16 + 4)  # from AIV sub 1, id 4
        elif ctx.GetSubBlockIdx() == 0:
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_V, 3)
            ctx.CrossCoreSetFlag(4, Pipe.PIPE_V, 4)
        else:
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_V, 9)
            ctx.CrossCoreSetFlag(4, Pipe.PIPE_V, 4)

    assert dev.launch(kernel, 2, "MIX_AIC_1_2").hazards == []
    assert dev.flags.leftovers() == []


def test_set_before_wait_is_remembered():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(15):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 1)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 2)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 2)   # all 15 Sets of id 1 happened before
            assert dev.flags.counters[(ctx.label, 1, False)].value == 15
            for _ in range(15):
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)

    assert dev.launch(kernel, 1, "MIX_AIC_1_1").hazards == []


def test_sixteenth_pending_set_is_a_hardware_error():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(16):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 4)

    with pytest.raises(FlagOverflowError) as info:
        dev.launch(kernel, 1, "MIX_AIC_1_1")
    msg = str(info.value)
    assert "AIC0 id 4" in msg and "at most 15" in msg
    assert msg.count("+1 by AIV0") >= 15  # the counter's history is in the report


def test_id_above_15_is_truncated_and_reported():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 17)   # hardware uses id 1
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)

    res = dev.launch(kernel, 1, "MIX_AIC_1_1")
    assert names(res) == [Hazard.FLAG_ID_TRUNCATED]
    assert res.hazards[0].details["effective"] == 1
    # a warning: the hardware runs it (the AG in-order kernel past 15 rounds relies on it); an aliasing that
    # breaks something is reported by its own check (READ_BEFORE_WAIT, DEADLOCK, UNCONSUMED_FLAG)
    assert res.hazards[0].severity is Severity.WARNING


def test_pipe_not_on_core_is_a_noop_and_the_partner_hangs():
    """`CrossCoreSetFlag<2, PIPE_MTE3>` on an AIC compiles to nothing on DAV_3510."""
    dev = Device(timeout=SHORT)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)

    t0 = time.monotonic()
    with pytest.raises(DeadlockError):
        dev.launch(kernel, 1, "MIX_AIC_1_1")
    assert time.monotonic() - t0 < 10
    assert [h.hazard for h in dev.hazards.peek()] == [Hazard.PIPE_NOT_ON_CORE]


@pytest.mark.parametrize("mode, pipe", [(2, Pipe.PIPE_ALL), (0, Pipe.PIPE_S), (4, Pipe.PIPE_ALL)])
def test_compile_time_pipe_rules(mode, pipe):
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(mode, pipe, 0)

    with pytest.raises(KernelError, match="rejected at compile time"):
        dev.launch(kernel, 1, "MIX_AIC_1_2")


@pytest.mark.parametrize("kt, mode", [("AIC_ONLY", 0), ("AIV_ONLY", 0), ("MIX_AIC_1_1", 4),
                                      ("MIX_AIV_1_0", 2)])
def test_kernel_type_without_the_mode_drops_the_set(kt, mode):
    dev = Device(timeout=SHORT)
    pipe = Pipe.PIPE_MTE2

    def kernel(ctx):
        ctx.CrossCoreSetFlag(mode, pipe, 0)

    res = dev.launch(kernel, 1, kt)
    assert Hazard.SYNC_KERNEL_TYPE in names(res)
    assert dev.flags.leftovers() == []


def test_mode_mixed_while_counts_outstanding():
    """Id 9 consumed in mode 0 on AIV0 while a mode-2 count from the AIC is still pending on it."""
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 9)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 10)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 10)
            ctx.CrossCoreSetFlag(0, Pipe.PIPE_MTE3, 9)
            ctx.CrossCoreWaitFlag(0, Pipe.PIPE_MTE3, 9)
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 9)

    res = dev.launch(kernel, 1, "MIX_AIC_1_1")
    assert names(res) == [Hazard.FLAG_MODE_MIXED, Hazard.FLAG_MODE_MIXED]
    assert res.hazards[0].details == {"flag": 9, "mode": 0, "previous_mode": 2}
    assert res.hazards[1].details == {"flag": 9, "mode": 2, "previous_mode": 0}


def test_draining_before_switching_modes_is_fine():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 9)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 9)
            ctx.CrossCoreSetFlag(0, Pipe.PIPE_MTE3, 9)
            ctx.CrossCoreWaitFlag(0, Pipe.PIPE_MTE3, 9)

    assert dev.launch(kernel, 2, "MIX_AIC_1_1").hazards == []


def test_unconsumed_counts_are_reported_and_persist():
    dev = Device(timeout=5)

    def leave_one(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 3)

    res = dev.launch(leave_one, 1, "MIX_AIC_1_1")
    assert names(res) == [Hazard.UNCONSUMED_FLAG]
    assert res.hazards[0].core == "AIC0"

    def consume(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 3)   # released by the previous launch's Set

    assert dev.launch(consume, 1, "MIX_AIC_1_1").hazards == []


def test_unmatched_wait_ends_with_a_report_naming_core_and_flag():
    dev = Device(timeout=2.0)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC and ctx.GetBlockIdx() == 1:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 12)

    t0 = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        dev.launch(kernel, 2, "MIX_AIC_1_1")
    elapsed = time.monotonic() - t0
    assert 1.9 < elapsed < 10
    err = info.value
    assert "AIC1" in str(err) and "CrossCoreWaitFlag<2, PIPE_MTE2>(12)" in str(err)
    assert err.registry and err.registry[0]["core"] == "AIC1"
    assert err.registry[0]["setter"].startswith("AIV1")


def test_ten_thousand_ping_pongs_lose_nothing():
    dev = Device(timeout=10)
    n = 10_000

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(n):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)
        else:
            for _ in range(n):
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, 1)

    assert dev.launch(kernel, 1, "MIX_AIC_1_1").hazards == []
    assert dev.flags.leftovers() == []
    assert dev.flags.counters[("AIC0", 0, False)].value == 0
    assert dev.flags.counters[("AIV0", 1, False)].value == 0
