"""Host-side plumbing of the MX BlockMmad: what changes host time only, never a result, a read, an event or a
report. Not part of the source: ops-tensor's `BlockMmad` has no counterpart (the device has one core per
AI core); `block_mmad_mx.py` keeps the source's members and reads these through `BlockMmadMxType.host`.

- `BlockMmadHost`: the compute slots and the launch-wide dequantization memo of one instantiation;
- `L1Operand` and the read stamps: what the memo keys a chunk held in L1 by, and the proof (equal stamps)
  that two reads returned the same bytes; `unobserved`: when such a read may be replayed outright.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.blaze.gemm.tile.tile_mmad_mx import DequantMemo
from mc2emu.blaze.tensor_api.tensor import GmTensor
from mc2emu.runtime.events import EventKind

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import Allocation


# Environment naming the number of ranks the MPI launcher started on this host (MPICH hydra, Open MPI).
LOCAL_RANKS_ENV = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
SLOTS_ENV = "MC2EMU_COMPUTE_SLOTS"


def default_slots() -> int:
    """Compute slots per rank: `MC2EMU_COMPUTE_SLOTS` when set, else the host's CPUs, down to one when the
    launcher put more ranks on this host than it has CPUs (every CPU then already has a rank's slot to run)."""
    if os.environ.get(SLOTS_ENV):
        return int(os.environ[SLOTS_ENV])
    cpus = os.cpu_count() or 1
    for name in LOCAL_RANKS_ENV:
        if os.environ.get(name, "").isdigit() and int(os.environ[name]) > cpus:
            return 1
    return cpus


class BlockMmadHost:
    """Host-side resources the cores of one BlockMmad instantiation share; they change host time only.

    - `slots`: how many cores may run their MMAD loops on the host at once. With 32 core threads on a few
      host CPUs, every core interleaving its numpy calls thrashes the caches and convoys on the GIL
      (measured: ~2x the CPU time of the same work on 2 threads). A core holds a slot for one `BlockMmad`
      call, which never waits on another core (no flags, no HCCL inside), so slots cannot deadlock and
      cannot change a result; cores still interleave at tile boundaries.
    - `memo`: the launch-wide `DequantMemo` (decode once per GM chunk, verified against the bytes read)."""

    def __init__(self, slots: int | None = None) -> None:
        self.count = max(1, int(slots if slots is not None else default_slots()))
        self._sem = threading.BoundedSemaphore(self.count)
        self.memo = DequantMemo()

    def __enter__(self) -> BlockMmadHost:
        self._sem.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sem.release()


class L1Operand:
    """One operand chunk held in L1: its raw codes as read from GM location `where` (allocation id, offset),
    and the `stamp` of that read (see `read_stamp`)."""

    __slots__ = ("codes", "stamp", "where")

    def __init__(self, codes: np.ndarray, where: tuple[int, int], stamp: tuple | None = None) -> None:
        self.codes = codes
        self.where = where
        self.stamp = stamp


def read_where(t: GmTensor) -> tuple[int, int]:
    return (t.addr.alloc.aid, t.addr.offset)


def read_stamp(t: GmTensor) -> tuple | None:
    """(allocation, offset, shape, generation) of a read from GM this rank alone writes; None for a window.
    Two reads with equal stamps returned the same bytes (no write in between), so the decode memo may skip
    its byte compare; reads of windows (peers write them unseen) keep it."""
    alloc = t.addr.alloc
    if not alloc.stable:
        return None
    return (alloc.aid, t.addr.offset, t.shape, alloc.generation)


def unobserved(ctx: CoreContext, alloc: Allocation) -> bool:
    """Whether a read of `alloc` can neither report nor be seen: every byte is known written (no unwritten-byte
    report) and no observer takes its GM_READ events (no trace, no happens-before record). Then a read whose
    stamp equals an earlier read's (`read_stamp`: the same place, shape and write generation, already bounds
    checked) may be replayed by handing out that read's array: the same bytes, and nothing else to do."""
    return alloc.fully_written and not ctx.device.events.wants(EventKind.GM_READ, alloc.name)


def pair_stamp(codes: tuple | None, scales: tuple | None, scaleOffset: int, nb: int) -> tuple | None:
    """The stamp of an (operand chunk, scale window) pair: None unless both reads are stamped."""
    if codes is None or scales is None:
        return None
    return (codes, scales, scaleOffset, nb)
