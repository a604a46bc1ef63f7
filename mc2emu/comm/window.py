"""A symmetric communication window: the HCCL / SHMEM comm buffer ("window") of one rank.

Emulates the symmetric heap of SPEC §3.1: every rank exposes a window of the same size, created in the
same order, so an offset means the same place on every rank and `ptr(addr, pe)` translates a local
window address to rank `pe` (shmem_ptr / `GetWindowsInAddr(rank)` in the Ascend sources).

The memory is an MPI window made with `MPI.Win.Allocate` (never `Win.Create` over numpy memory: it stalls
for 1 s and deadlocks, MPI-NOTES), locked once with `Lock_all(MODE_NOCHECK)` for its lifetime,
viewed as numpy and adopted into the rank's GM, so kernels read their own window like any GM buffer
through `GmAddr`s, while peers reach it only through MPI RMA (no shared-memory shortcut: ranks may live
on different hosts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.comm.errors import CommClosedError, WindowError
from mc2emu.numerics.int_math import Align
from mc2emu.runtime.gm import POISON_BYTE

if TYPE_CHECKING:
    from mpi4py import MPI

    from mc2emu.runtime.gm import GmAddr

# Sub-allocations carved out of a window start on this boundary, like the GM allocator (CANN aligns
# device buffers to 512 B; signal slots then never straddle a cache line).
WINDOW_CARVE_ALIGN = 512
# Signals and counters in windows are uint64 (MPI_UINT64_T accumulates).
SIGNAL_BYTES = 8


@dataclass(frozen=True)
class RemoteAddr:
    """A window address on another rank: `pe` and the byte offset into the (symmetric) window."""

    window: str
    pe: int
    offset: int

    def __add__(self, nbytes: int) -> RemoteAddr:
        return RemoteAddr(self.window, self.pe, self.offset + int(nbytes))

    def __repr__(self) -> str:
        return f"RemoteAddr({self.window}@pe{self.pe}+{self.offset:#x})"


class Window:
    """One symmetric window of one rank. Created by `CommWorld.window(nbytes, name)` (collective)."""

    def __init__(self, name: str, win: MPI.Win, mem: np.ndarray, base: GmAddr | None, rank: int,
                 size: int, nbytes: int | None = None) -> None:
        self.name = name
        self.win = win
        self.mem = mem                      # uint8 view of the whole window
        self.base = base                    # the window as a GM allocation (None: not adopted)
        self.rank = rank
        self.size = size
        self.nbytes = int(mem.shape[0]) if nbytes is None else int(nbytes)
        usable = mem.shape[0] - mem.shape[0] % SIGNAL_BYTES
        self.u64 = mem[:usable].view(np.uint64)
        self._carved = 0
        self.freed = False
        # A protocol-only Communicator's buffer: its real prefix holds one call's status words and other calls'
        # payload (every call's window starts at the buffer base); a payload put into it moves nothing.
        self.shared_prefix = False

    def real(self, offset: int, nbytes: int) -> bool:
        """Whether bytes [offset, offset + nbytes) exist (a PAYLOAD window of a protocol-only run keeps only its
        control prefix: puts beyond it move no bytes)."""
        return offset + nbytes <= self.mem.shape[0]

    # -- addresses -----------------------------------------------------------------------------------
    def offset_of(self, addr: GmAddr, nbytes: int = 0, what: str = "address") -> int:
        """The byte offset of `addr` in this window, after checking that [addr, addr + nbytes) lies in it."""
        if self.freed:
            raise CommClosedError(f"window '{self.name}' was freed by CommWorld.close()")
        if self.base is None or addr.alloc is not self.base.alloc:
            raise WindowError(f"{what} {addr!r} is not in window '{self.name}'")
        off = addr.offset
        if off < 0 or nbytes < 0 or off + nbytes > self.nbytes:
            raise WindowError(f"{what} range [{off}, {off + nbytes}) is outside window '{self.name}' of "
                              f"{self.nbytes} bytes")
        return off

    def ptr(self, addr: GmAddr, pe: int) -> RemoteAddr:
        """`shmem_ptr`: the same symmetric address on rank `pe`."""
        if not 0 <= pe < self.size:
            raise WindowError(f"pe {pe} is not a rank of this world (size {self.size})")
        return RemoteAddr(self.name, pe, self.offset_of(addr))

    def addr(self, offset: int) -> GmAddr:
        """The local GM address of byte `offset` of this window."""
        if self.base is None:
            raise WindowError(f"window '{self.name}' is not adopted into GM")
        return self.base + offset

    def carve(self, nbytes: int, align: int = WINDOW_CARVE_ALIGN) -> GmAddr:
        """Reserve `nbytes` of this window (a symmetric allocation: every rank that carves the same sizes
        in the same order gets the same offsets, as `shmem_malloc` does)."""
        start = Align(self._carved, align)
        if nbytes < 0 or start + nbytes > self.nbytes:
            raise WindowError(f"carving {nbytes} bytes at offset {start} overflows window '{self.name}' of "
                              f"{self.nbytes} bytes")
        self._carved = start + int(nbytes)
        return self.addr(start)

    def poison(self) -> None:
        """Fill this window with the GM never-written pattern (check mode, data windows only: signal
        slots and barrier words must start at zero). Bytes that no put, HCCL task or local write reaches
        then read as POISON_BYTE, NaN in every float format, and the happens-before checker reports the
        read (READ_UNWRITTEN, with the byte range). Call on every rank before any peer may put into it
        (e.g. before the host barrier that precedes the launch)."""
        if self.real(0, self.nbytes):
            self.mem[:] = POISON_BYTE
            self.win.Sync()
        if self.base is not None:
            self.base.alloc.poisoned = True

    # -- lifetime --------------------------------------------------------------------------------------
    def free(self) -> None:
        """Unlock and free the MPI window (collective: every rank frees its windows in the same order).
        The GM allocation is emptied so that a stale `GmAddr` fails its bounds check instead of touching
        freed memory."""
        if self.freed:
            return
        self.freed = True
        self.win.Unlock_all()
        if self.base is not None:
            self.base.alloc.buf = np.zeros(0, dtype=np.uint8)
            self.base.alloc.size = -1
            if self.base.alloc.written is not None:
                self.base.alloc.written = np.zeros(0, dtype=bool)
        self.u64 = np.zeros(0, dtype=np.uint64)
        self.mem = np.zeros(0, dtype=np.uint8)
        self.win.Free()

    def __repr__(self) -> str:
        return f"<Window {self.name} {self.nbytes} B rank {self.rank}/{self.size}>"
