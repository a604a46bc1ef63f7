"""BufferChannel — the ring allocator of window slots shared (as a configuration) by the AIC reader and the AIV
writer of one rank; each core keeps its own cursor.

Emulates ops-transformer `mc2/common/op_kernel/apace/basic/buffer/buffer_channel.h` (commit 67a83540d75e,
hicann/ops-transformer 67a83540d75ec60a1809a5d672659b72c04022f9):

    FLAG_ID_MODULO = 11                     # "avoid SyncAll's 11-14": notify ids 0..10
    Init(slotSize, slotNum): slotNum_ = 1 if slotNum == 0 else slotNum; slotIdxRaw_ = 0
    GetSlotNum() -> slotNum_
    GetCapacity() -> slotNum_ * slotSize_
    GetRoundSlotIdx(r) -> r % slotNum_ % FLAG_ID_MODULO           # no cursor move
    GetNextSlot() -> {offset = slotIdxRaw_ * slotSize_, slotIdx = slotIdxRaw_ % FLAG_ID_MODULO}, then
                     slotIdxRaw_ = (slotIdxRaw_ + 1) % slotNum_

`slotIdx` is meant to be used as the cross-core flag id directly; the AllGather users add 1 (flag 0 is the
HEAD pre-set), so slot 10 gives flag 11, one of the ids hard SyncAll reserves (SPEC §2): with 11 or more slots
the ring reaches them (reproduced, see `apace.all_gather_mx_matmul_urma_impl`). Slots 0 and 11 share flag 1.
"""

from __future__ import annotations

from dataclasses import dataclass

# `FLAG_ID_MODULO`: slot indices wrap at 11 so that (the source says) the flag ids stay below SyncAll's 11-14.
FLAG_ID_MODULO = 11


@dataclass(frozen=True)
class Slot:
    offset: int   # the slot's logical byte offset
    slotIdx: int  # usable as a flag id: in [0, FLAG_ID_MODULO - 1]


class BufferChannel:
    """One core's channel (the source's member object: every core of the rank has its own cursor)."""

    def __init__(self) -> None:
        self.slotSize_ = 0
        self.slotNum_ = 1
        self.slotIdxRaw_ = 0

    def Init(self, slotSize: int, slotNum: int) -> None:
        self.slotSize_ = int(slotSize)
        self.slotNum_ = 1 if slotNum == 0 else int(slotNum)
        self.slotIdxRaw_ = 0

    def GetSlotNum(self) -> int:
        return self.slotNum_

    def GetCapacity(self) -> int:
        return self.slotNum_ * self.slotSize_

    def GetRoundSlotIdx(self, roundIdx: int) -> int:
        """The slotIdx the (roundIdx + 1)-th GetNextSlot returns, without moving the cursor."""
        return roundIdx % self.slotNum_ % FLAG_ID_MODULO

    def GetNextSlot(self) -> Slot:
        s = Slot(self.slotIdxRaw_ * self.slotSize_, self.slotIdxRaw_ % FLAG_ID_MODULO)
        self.slotIdxRaw_ = (self.slotIdxRaw_ + 1) % self.slotNum_
        return s
