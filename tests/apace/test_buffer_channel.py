"""BufferChannel (ops-transformer `apace/basic/buffer/buffer_channel.h`, 67a83540d75e) against a plain model:
the raw slot wraps at slotNum, the slot index (the flag id less one) at FLAG_ID_MODULO 11; GetRoundSlotIdx
agrees with the cursor; slotNum 0 means one slot; the impl's slot-count normalization."""

import pytest

from mc2emu.apace.all_gather_mx_matmul_urma_impl import normalized_slot_num
from mc2emu.apace.basic.buffer_channel import FLAG_ID_MODULO, BufferChannel


@pytest.mark.parametrize("slot_num", [1, 2, 3, 10, 11, 12, 14, 15])
def test_next_slot_wraps_the_offset_at_slot_num_and_the_flag_index_at_11(slot_num):
    ch = BufferChannel()
    ch.Init(96, slot_num)
    assert FLAG_ID_MODULO == 11
    assert ch.GetSlotNum() == slot_num and ch.GetCapacity() == 96 * slot_num
    for r in range(3 * slot_num + 2):
        raw = r % slot_num
        s = ch.GetNextSlot()
        assert (s.offset, s.slotIdx) == (raw * 96, raw % 11)
        assert ch.GetRoundSlotIdx(r) == raw % 11


def test_slots_0_and_11_share_an_index_and_slot_10_gives_flag_11():
    ch = BufferChannel()
    ch.Init(8, 13)
    idx = [ch.GetNextSlot().slotIdx for _ in range(13)]
    assert idx == [*range(11), 0, 1]
    assert max(idx) + 1 == 11      # the AllGather users signal slotIdx + 1


def test_zero_slots_mean_one_and_the_impl_normalizes_to_comm_turn():
    ch = BufferChannel()
    ch.Init(8, 0)
    assert ch.GetSlotNum() == 1 and [ch.GetNextSlot().offset for _ in range(3)] == [0, 0, 0]
    assert [normalized_slot_num(s, 5) for s in (0, 1, 4, 5, 9)] == [5, 1, 4, 5, 5]
