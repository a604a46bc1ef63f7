"""HCCL task descriptions shared by the device client (`hccl.py`) and the server (`hccl_server.py`).

Emulates the message an AscendC `Hccl` client writes for the server on `Prepare` (SPEC §3.2): the
collective, its buffers, count, dtype, strideCount and repeat, and the limits of the protocol.

Buffer arithmetic of one repeat `r` (elements of `dtype`, `blk` = strideCount, or count when it is 0):

| op            | rank i sends to rank j                          | lands at rank j                        |
|---------------|-------------------------------------------------|----------------------------------------|
| AlltoAll      | send + (j*blk + r*count), count elements        | recv + (i*blk + r*count)               |
| AllGather     | send + r*count, count elements                  | recv + (i*blk + r*count)               |
| ReduceScatter | send + (j*blk + r*count), count (= recvCount)   | op over i into recv + r*count          |
| AllReduce     | send + r*count, count elements                  | op over i into recv + r*count          |
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mc2emu.runtime.hazards import ConstraintError

if TYPE_CHECKING:
    from mc2emu.runtime.gm import GmAddr

# AscendC Hccl: handle ids are 0..62; a 64th Prepare is refused (the message area has 63 entries).
HCCL_MAX_HANDLE_ID = 63
# `repeat` of a Prepare is a uint8_t in the AscendC Hccl API (the apace hcomm impl casts tileCnt to it):
# a larger count would wrap on the device.
HCCL_MAX_REPEAT = 255
# What a refused Prepare returns (AscendC `INVALID_HANDLE_ID`).
INVALID_HANDLE_ID = -1
# Wait / Query return codes of the AICPU model.
HCCL_SUCCESS = 0
HCCL_FAILED = -1

_PACKED_DTYPES = (np.dtype(ml_dtypes.float4_e2m1fn),)


class HcclServerType(enum.Enum):
    """Which server executes the client's messages (SPEC §3.2); chosen per launch. The one HCCL server
    model enum of mc2emu (the operators' `hccl_server` option parses to it)."""

    CCU = "ccu"       # DAV_3510 default (hcomm): Wait beyond Commit hangs; non-working cores follow block 0
    AICPU = "aicpu"   # Wait beyond Commit: error, returns -1; Finalize<true> resets the finish counters


class HcclCMDType(enum.Enum):
    ALL_TO_ALL = "AlltoAll"
    ALL_GATHER = "AllGather"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_REDUCE = "AllReduce"

    @property
    def reduces(self) -> bool:
        return self in (HcclCMDType.REDUCE_SCATTER, HcclCMDType.ALL_REDUCE)

    @property
    def per_peer_blocks(self) -> bool:
        """The send buffer holds one block per destination rank."""
        return self in (HcclCMDType.ALL_TO_ALL, HcclCMDType.REDUCE_SCATTER)


class HcclReduceOp(enum.Enum):
    """`HcclReduceOp`: HCCL_REDUCE_SUM / PROD / MAX / MIN."""

    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"

    def combine(self, acc: np.ndarray, value: np.ndarray) -> np.ndarray:
        if self is HcclReduceOp.SUM:
            return acc + value
        if self is HcclReduceOp.PROD:
            return acc * value
        if self is HcclReduceOp.MAX:
            return np.maximum(acc, value)
        return np.minimum(acc, value)


def hccl_dtype(dtype: Any) -> np.dtype:
    """The element dtype of a task; packed FP4 has no byte size HCCL could count in."""
    dt = np.dtype(dtype)
    if dt in _PACKED_DTYPES:
        raise ConstraintError("HCCL dataType", f"{dt} is packed two per byte: count it as uint8 bytes")
    return dt


@dataclass(frozen=True)
class HcclTask:
    """One prepared collective, as the working block sends it to the server."""

    handle: int
    op: HcclCMDType
    send: GmAddr
    recv: GmAddr
    count: int
    dtype: np.dtype
    stride: int                         # strideCount in elements (0: blocks are `count` apart)
    repeat: int
    reduce_op: HcclReduceOp | None = None
    staging: int | None = None          # byte offset of the reduce staging area in the server window

    @property
    def item(self) -> int:
        return self.dtype.itemsize

    @property
    def block_bytes(self) -> int:
        """Bytes one rank contributes per peer per repeat."""
        return self.count * self.item

    @property
    def block_pitch(self) -> int:
        """Bytes between consecutive rank blocks in send (per-peer ops) and recv (gather ops)."""
        return (self.stride or self.count) * self.item

    def repeat_offset(self, r: int) -> int:
        return r * self.count * self.item

    def send_span(self, ranks: int) -> int:
        """Bytes of `send` the task reads over all repeats."""
        blocks = (ranks - 1) * self.block_pitch if self.op.per_peer_blocks else 0
        return blocks + self.repeat_offset(self.repeat - 1) + self.block_bytes

    def recv_span(self, ranks: int) -> int:
        """Bytes of `recv` the task writes over all repeats."""
        blocks = 0 if self.op.reduces else (ranks - 1) * self.block_pitch
        return blocks + self.repeat_offset(self.repeat - 1) + self.block_bytes

    def staging_bytes(self, ranks: int) -> int:
        """Reduce ops stage every rank's contribution of every repeat: [repeat][src rank][block]."""
        return self.repeat * ranks * self.block_bytes if self.op.reduces else 0
