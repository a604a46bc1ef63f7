"""Cross-core flag counters across launches on one device (`Device(flag_counters=)`): PERSIST (the default)
keeps a count launch N left pending for launch N + 1, RESET starts every launch at zero; the leftover is
reported at launch N's end either way. The per_block shape (one unconsumed Set per AIC per launch) reaches
the counter limit on the 16th launch under PERSIST and never under RESET."""

import pytest

from mc2emu.runtime import DeadlockError, Device, FlagOverflowError, Hazard, Pipe
from mc2emu.runtime.device import FlagCounters
from mc2emu.runtime.hazards import ConstraintError

SHORT = 1.0
FLAG = 9


def leave_one(ctx):
    """Every AIV Sets flag 9 once; no AIC waits (the per_block kernel's MNK_B == 1 early return)."""
    if ctx.ASCEND_IS_AIV:
        ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, FLAG)


def wait_one(ctx):
    """The AIC waits flag 9 once; nobody Sets it in this launch."""
    if ctx.ASCEND_IS_AIC:
        ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, FLAG)


def test_default_is_persist():
    assert Device().flag_counters is FlagCounters.PERSIST


def test_persist_a_leftover_satisfies_the_next_launch_wait():
    dev = Device(timeout=5, flag_counters="persist")
    first = dev.launch(leave_one, 2, "MIX_AIC_1_1")
    assert [h.hazard for h in first.hazards].count(Hazard.UNCONSUMED_FLAG) == 2
    second = dev.launch(wait_one, 2, "MIX_AIC_1_1")   # passes on launch 1's count: nothing set it here
    assert Hazard.UNCONSUMED_FLAG not in [h.hazard for h in second.hazards]
    assert dev.flags.leftovers() == []


def test_reset_the_next_launch_starts_at_zero():
    dev = Device(timeout=SHORT, flag_counters=FlagCounters.RESET)
    first = dev.launch(leave_one, 2, "MIX_AIC_1_1")
    assert [h.hazard for h in first.hazards].count(Hazard.UNCONSUMED_FLAG) == 2   # reported either way
    with pytest.raises(DeadlockError) as info:
        dev.launch(wait_one, 2, "MIX_AIC_1_1")
    assert f"CrossCoreWaitFlag<2, PIPE_MTE2>({FLAG})" in str(info.value)


def test_persist_overflows_on_the_sixteenth_launch_reset_never():
    persist = Device(timeout=5, flag_counters="persist")
    for _ in range(15):
        persist.launch(leave_one, 1, "MIX_AIC_1_1")
    with pytest.raises(FlagOverflowError):
        persist.launch(leave_one, 1, "MIX_AIC_1_1")
    reset = Device(timeout=5, flag_counters="reset")
    for _ in range(20):
        reset.launch(leave_one, 1, "MIX_AIC_1_1")


def test_bad_value_is_refused_naming_the_option():
    with pytest.raises(ConstraintError) as info:
        Device(flag_counters="sometimes")
    assert info.value.rule == "flag_counters"
