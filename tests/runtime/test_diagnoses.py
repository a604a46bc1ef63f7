"""Diagnoses read, not just raised: for each single-device hazard class of SPEC §8, the report a user reads
names the rank, the core, the object (flag id and mode, pipe, allocation and byte range, tile and
splitKIdx) and, for a hang, who should have released the wait. Cross-rank classes (a hang across ranks,
a read before its wait, localMatmul 1 without atomic add, AIVs running the AIC kernel) are read in
tests/apace/test_diagnoses_mpi.py; the HCCL and bias rows in the CLI showcase (tests/cli/test_cli_mpi.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from mc2emu.runtime import DeadlockError, Device, FlagOverflowError, Hazard, Pipe

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "blaze"))
from blaze_cases import Tile, run_block_mmad, st_operands


def only(hazards, kind):
    got = [h for h in hazards if h.hazard is kind]
    assert got, [str(h) for h in hazards]
    return got


def test_unmatched_wait_names_core_object_count_and_releaser():
    """§8 row 1 on one rank: the waiting core, the flag (mode, pipe, id), its count, and the releaser."""
    dev = Device(timeout=1.0)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)   # no MTE3 on an AIC: compiles to nothing
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)

    with pytest.raises(DeadlockError) as info:
        dev.launch(kernel, 1, "MIX_AIC_1_1")
    msg = str(info.value)
    assert msg.startswith("rank 0 AIV0: no progress for 1.0 s while waiting on CrossCoreWaitFlag<2, PIPE_MTE2>(0) "
                          "(expects counter > 0; released by AIC0)"), msg
    assert "AIV0 wait on CrossCoreWaitFlag<2, PIPE_MTE2>(0) (expects counter > 0, now 0); released by AIC0" in msg
    rep = only(dev.hazards.peek(), Hazard.PIPE_NOT_ON_CORE)[0]
    assert (rep.rank, rep.core) == (0, "AIC0")
    assert rep.details == {"flag": 0, "mode": 2, "pipe": "PIPE_MTE3"}
    assert "CrossCoreSetFlag<2, PIPE_MTE3>(0) on an AIC: PIPE_MTE3 does not exist on this core" in rep.message


def test_unconsumed_set_names_the_core_and_the_flag():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV and ctx.GetBlockIdx() == 1:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 3)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 3)

    rep = only(dev.launch(kernel, 2, "MIX_AIC_1_1").hazards, Hazard.UNCONSUMED_FLAG)
    assert [str(h) for h in rep] == ["[UNCONSUMED_FLAG] rank 0 AIC1: flag id 3 holds 2 unconsumed round(s) at launch "
                                     "end: Sets and Waits do not pair (a skipped drain?)"]


def test_sixteenth_set_names_the_counter_and_its_history():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            for _ in range(16):
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 4)

    with pytest.raises(FlagOverflowError) as info:
        dev.launch(kernel, 1, "MIX_AIC_1_1")
    msg = str(info.value)
    assert "AIC0 id 4" in msg and "at most 15" in msg
    assert msg.count("+1 by AIV0") >= 15


def test_truncated_id_names_both_ids():
    dev = Device(timeout=5)

    def kernel(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 17)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 1)

    rep = only(dev.launch(kernel, 1, "MIX_AIC_1_1").hazards, Hazard.FLAG_ID_TRUNCATED)[0]
    assert str(rep) == ("[FLAG_ID_TRUNCATED] rank 0 AIV0: CrossCoreSetFlag<2>(17): ids are 4 bits, the hardware "
                        "uses id 1")
    assert rep.details == {"flag": 17, "effective": 1}


def test_mixed_modes_and_reserved_ids_name_flag_and_modes():
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

    rep = only(dev.launch(kernel, 1, "MIX_AIC_1_1").hazards, Hazard.FLAG_MODE_MIXED)
    assert str(rep[0]) == ("[FLAG_MODE_MIXED] rank 0 AIV0: flag id 9 of AIV0 used in mode 0 while mode-2 Sets/Waits "
                           "on it have not drained (undefined on hardware)")

    dev = Device(timeout=5)

    def reserved(ctx):
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 12)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 12)
        ctx.SyncAll(False)

    rep = only(dev.launch(reserved, 2, "MIX_AIC_1_1").hazards, Hazard.FLAG_ID_RESERVED)[0]
    assert "kernel flag ids [12] overlap the ids hard SyncAll uses (11-14)" in rep.message


def test_sync_under_the_wrong_kernel_type_names_mode_and_type():
    dev = Device(timeout=1)
    rep = only(dev.launch(lambda ctx: ctx.CrossCoreSetFlag(0, Pipe.PIPE_MTE2, 5), 1, "AIC_ONLY").hazards,
               Hazard.SYNC_KERNEL_TYPE)[0]
    assert str(rep) == ("[SYNC_KERNEL_TYPE] rank 0 AIC0: CrossCoreSetFlag<0, PIPE_MTE2>(5) under AIC_ONLY: this "
                        "kernel type has no mode-0 cross-core sync (Set dropped, Wait hangs)")


def test_read_of_never_written_gm_names_allocation_and_bytes():
    dev = Device()
    a = dev.gm.alloc(64, "scaleA")

    def kernel(ctx):
        ctx.gm_write(a, np.zeros(16, np.uint8))
        ctx.gm_read(a + 8, np.uint8, (32,))   # bytes 8..39: 16..39 were never written

    rep = only(dev.launch(kernel, 1, "AIC_ONLY").hazards, Hazard.READ_UNWRITTEN)[0]
    assert (rep.rank, rep.core) == (0, "AIC0")
    assert rep.details == {"alloc": "scaleA", "offset": 8, "count": 24}
    assert "read of 24 never-written byte(s) of 'scaleA' at offset 0x8 (poison 0xff)" in rep.message


def test_atomic_mode_left_set_names_core_and_type():
    dev = Device()
    rep = only(dev.launch(lambda ctx: ctx.SetAtomicAdd(np.float32), 1, "AIC_ONLY").hazards, Hazard.ATOMIC_LEFT_SET)
    assert [str(h) for h in rep] == ["[ATOMIC_LEFT_SET] rank 0 AIC0: SetAtomicAdd<float32> still set at kernel end: "
                                     "later write-outs on this core add instead of overwrite"]


@pytest.mark.parametrize("tiles, needle, details", [
    # a tile that never reaches its last index: reported at the next tile's index 0
    ([Tile(0, 0, 32, 32, 0), Tile(0, 32, 32, 32, 0), Tile(0, 32, 32, 32, 1)],
     "splitKIdx 0 at tile (0, 32) while tile (0, 0) expected 1", {"splitKIdx": 0, "expected": 1}),
    # out of order: index 1 first
    ([Tile(0, 0, 32, 32, 1), Tile(0, 0, 32, 32, 0)], "splitKIdx 1 at tile (0, 0)", {"splitKIdx": 1, "expected": 0}),
])
def test_split_k_sequence_names_tile_index_and_expectation(tiles, needle, details):
    ops = st_operands(32, 64, 128)
    res = run_block_mmad(ops, tiles, splitKNum=2, segments=2, baseM=32, baseN=32)
    rep = only(res.hazards, Hazard.SPLITK_SEQUENCE)
    first = rep[0]
    assert first.core == "AIC0" and needle in first.message, [str(h) for h in rep]
    assert {k: first.details[k] for k in details} == details
