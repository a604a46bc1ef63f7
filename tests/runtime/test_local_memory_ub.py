"""UB as one memory (issue 35 item 6): every UB slot of an AIV is a view into one byte array; `allocate`
places slots clear of each other, `allocate_at` where the kernel says, overlaps shared and reported."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.arch.platform import DAV_3510, CoreType
from mc2emu.runtime.hazards import CapacityError, Hazard, HazardLog
from mc2emu.runtime.local_memory import UB_RESERVED_SLOT, LocalMemory, Position


def _ub() -> tuple[LocalMemory, HazardLog]:
    log = HazardLog(0)
    return LocalMemory(DAV_3510, CoreType.AIV, "AIV0", log), log


def test_allocate_places_slots_apart_in_one_byte_array():
    mem, log = _ub()
    a = mem.allocate(Position.VECCALC, "a", 40, np.float32)
    b = mem.allocate(Position.VECCALC, "b", 8, np.float32)
    assert mem.ub_slots["a"] == (0, 160) and mem.ub_slots["b"] == (160, 32)  # 32-byte aligned, first fit
    a[:] = 1.0
    assert (b == 0).all()
    assert np.shares_memory(a, mem.ub) and np.shares_memory(b, mem.ub)
    assert log.take() == []
    # the whole TOTAL_UB_SIZE still fits as before (A2A's ub_bytes), the reserve stays out of it
    mem2, _ = _ub()
    mem2.allocate(Position.VECCALC, "ub_bytes", DAV_3510.ub_usable_size, np.uint8)
    with pytest.raises(CapacityError, match="does not fit"):
        mem2.allocate(Position.VECCALC, "more", 32, np.uint8)


def test_allocate_at_overlap_shares_bytes_and_is_reported():
    mem, log = _ub()
    x = mem.allocate_at("x", 0, 64, np.uint8)
    y = mem.allocate_at("y", 48, 32, np.uint8)
    y[:] = 7
    assert (x[48:] == 7).all() and (x[:48] == 0).all()          # y's writes land in x, as on the device
    reps = [r for r in log.take() if r.hazard is Hazard.UB_OVERLAP]
    assert len(reps) == 1
    assert reps[0].details["overlap"] == (48, 64)
    assert "'y' [48, 80) overlaps slot 'x' [0, 64) in bytes [48, 64) (16 B)" in reps[0].message


def test_a_slot_past_total_ub_size_overlaps_the_reserve_and_past_the_ub_faults():
    mem, log = _ub()
    mem.allocate_at("z", DAV_3510.ub_usable_size - 32, 64, np.uint8)
    reps = log.take()
    assert [r.details["other"] for r in reps] == [UB_RESERVED_SLOT]
    with pytest.raises(CapacityError, match="outside the 262144 B UB"):
        mem.allocate_at("w", DAV_3510.ub_size - 16, 32, np.uint8)
