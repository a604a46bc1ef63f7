"""Cross-core flag checks at their edges (`mc2emu.runtime.cross_core`), one step short and one step past:
- FLAG_ID_TRUNCATED: id 15 is the last of the 16 counters (no report); id 16 is truncated to 0 (a warning);
- UNCONSUMED_FLAG: n Sets and n Waits pair (no report); n + 1 Sets leave exactly one round, named;
- a mode-2 round AIV -> AIC under MIX 1:2 completes with the second AIV's Set, not the first's (the AIC
  counter reads 0 after one Set, 1 after both).
The 15-pending / 16th-Set counter edge is tests/runtime/test_cross_core_flags.py (remembered Sets, overflow).
"""

import pytest

from mc2emu.runtime import Device, Hazard, Pipe
from mc2emu.runtime.hazards import Severity


@pytest.mark.parametrize("fid, effective", [(15, None), (16, 0)])
def test_flag_id_15_is_a_counter_16_is_truncated(fid, effective):
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, fid)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, fid if effective is None else effective)

    hazards = dev.launch(kernel, 1, "MIX_AIC_1_1").hazards
    if effective is None:
        assert hazards == []
    else:
        assert [(h.hazard, h.severity, h.details["effective"]) for h in hazards] == [
            (Hazard.FLAG_ID_TRUNCATED, Severity.WARNING, effective)]


@pytest.mark.parametrize("extra", [0, 1])
def test_sets_and_waits_pair_one_extra_set_is_one_unconsumed_round(extra):
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(3 + extra):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 5)
        else:
            for _ in range(3):
                ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 5)

    hazards = dev.launch(kernel, 1, "MIX_AIC_1_1").hazards
    assert [(h.hazard, h.core) for h in hazards] == [(Hazard.UNCONSUMED_FLAG, "AIC0")] * extra
    assert all("flag id 5 holds 1 unconsumed round(s)" in h.message for h in hazards)


def test_a_mode2_round_completes_with_the_last_aiv_of_the_group():
    """The AIVs Set one after the other, sequenced through mode-4 flags (AIC ids 0-15 pair with AIV0, 16-31
    with AIV1); the AIC reads its counter of id 7 after each Set."""
    dev = Device(timeout=5)
    seen = []

    def counter(ctx):
        c = dev.flags.counters.get((ctx.label, 7, False))
        return 0 if c is None else c.value

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            if ctx.GetSubBlockIdx() == 0:
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 7)
                ctx.CrossCoreSetFlag(4, Pipe.PIPE_MTE3, 1)      # -> AIC id 1: AIV0 has Set
            else:
                ctx.CrossCoreWaitFlag(4, Pipe.PIPE_MTE2, 1)     # <- AIC id 17: AIV1 may Set
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 7)
                ctx.CrossCoreSetFlag(4, Pipe.PIPE_MTE3, 1)      # -> AIC id 17: AIV1 has Set
        else:
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_MTE2, 1)
            seen.append(counter(ctx))                           # one AIV of two: no round yet
            ctx.CrossCoreSetFlag(4, Pipe.PIPE_FIX, 17)
            ctx.CrossCoreWaitFlag(4, Pipe.PIPE_MTE2, 17)
            seen.append(counter(ctx))                           # both: one round
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 7)

    assert dev.launch(kernel, 1, "MIX_AIC_1_2").hazards == []
    assert seen == [0, 1]
