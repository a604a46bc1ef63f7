"""Global memory (GM) of one emulated NPU: an address space with pointer arithmetic.

Kernels receive `GmAddr` values and write formulas as the Ascend C source does
(`aGM + r * mPerRank * rowBytes`): an address plus a byte offset is an address. Reads and writes go
through `GlobalMemory.read` / `write` with a dtype, a shape and optional byte strides, so that

- every access is bounds-checked against its allocation (`GmError` names allocation, offset and size);
- in check mode, bytes nobody wrote hold `POISON_BYTE` and a read of them files `READ_UNWRITTEN`
  (on hardware: "C all zero / garbage" when a scale address is wrong for the mode);
- a write from a core in atomic mode (`SetAtomicAdd<T>`) adds in T: new = RNE_T(f32(old) + f32(value)); a
  write of another dtype than T is added by the atomic unit in T over the written bytes (`ATOMIC_DTYPE_MISMATCH`,
  below);
- observers (the happens-before checker, the trace) see each access as a `GmRead` / `GmWrite` event;
- in a protocol-only run (`data=False`) a PAYLOAD allocation has a size and no bytes: reads return a
  `numerics.payload.Payload`, writes emit the same events over the same byte ranges and store nothing.

FP4 dtypes (`ml_dtypes.float4_e2m1fn`) are stored packed two per byte, element 2i in the low nibble;
their shapes are given in elements and their strides in bytes of the packed storage.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, cast

import ml_dtypes
import numpy as np

from mc2emu.numerics.int_math import Align
from mc2emu.numerics.payload import Payload, contiguous, is_payload, refuse
from mc2emu.runtime.event_bus import EventBus
from mc2emu.runtime.events import GmRead, GmWrite
from mc2emu.runtime.hazards import GmError, Hazard, HazardLog

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

# 0xFF decodes as NaN in float8_e4m3fn, float8_e5m2, float8_e8m0fnu, bfloat16, float16 and float32, so
# poisoned data is visible in any result it reaches.
POISON_BYTE = 0xFF
# GM allocations are aligned like the CANN runtime's (512 B) so that alignment-driven L2 decisions match.
GM_ALLOC_ALIGN = 512

FP4_DTYPES = (np.dtype(ml_dtypes.float4_e2m1fn),)

# SetAtomicAdd<T> over a write of another dtype (e.g. QBMM's SetAtomicAdd<float> over a bf16 C). On DAV_3510
# SetAtomicAdd<float> is `set_atomic_f32(); set_atomic_add();` (asc-devkit impl/basic_api/dav_3510/
# kernel_operator_set_atomic_impl.h, cannmirror/asc-devkit 2e0db4c9): one atomic type for the core, which
# "specifies the data type written" (CCE intrinsics, set_atomic_s8/s16/bf16/f16/s32/f32, CANN 8.5.0
# cceapi_0065); the fixpipe converts L0C to C's type (quantPre) before the transfer, and CANN's own kernels
# pair SetAtomicAdd<DstT> with the type written (e.g. LoadL0c2Gm with F322BF16 and SetAtomicAdd<DstT>). No
# document defines an add in T over data of another type, so the emulator takes it as the atomic unit does
# it: each contiguous run of written bytes and the GM bytes under it are read as T words, added in T, and the
# bytes of a run that do not fill a T word are undefined (written as POISON_BYTE). Reported as an error.


class MemRole(Enum):
    """What an allocation holds, declared once where it is made. PAYLOAD: tensor data (inputs, outputs,
    workspaces, data windows): never-written bytes are poisoned in check mode, and a protocol-only run need
    not materialize them. CONTROL: what a kernel branches on (signals, status words, barrier words, HCCL
    counters, flag slots): starts at zero, always real."""

    PAYLOAD = "payload"
    CONTROL = "control"


@dataclass(eq=False)
class Allocation:
    aid: int
    name: str
    buf: np.ndarray | None     # uint8, 1-D; None: a payload not materialized (protocol-only run)
    written: np.ndarray | None  # bool per byte, check mode only
    kind: str = "gm"           # "gm" or "window"
    base: int = 0              # device-virtual base address (for printing only)
    reported: set[str] = field(default_factory=set)
    # Every byte is known written (inputs copied in whole, adopted windows): reads skip the mask test.
    fully_written: bool = False
    # Bumped by every write through this GM (not by peers' puts into a window: see `stable`).
    generation: int = 0
    # A window filled with POISON_BYTE (check mode): the happens-before checker reports reads of its
    # bytes that nothing wrote (peers' puts cannot update `written`, so it is not used for windows).
    poisoned: bool = False
    # Optional: names the protocol place of a byte offset (a window's slot, flag, source rank) in diagnoses.
    describe: Callable[[int], str] | None = None
    role: MemRole = MemRole.PAYLOAD
    size: int = -1             # bytes (-1: the buffer's length)
    # Protocol-only run: bytes of `buf` that received payload (a UB block of which only some words are status
    # words, written whole); a read covering one returns a Payload. None: none did.
    marks: np.ndarray | None = None

    @property
    def materialized(self) -> bool:
        """Whether every byte exists (False: a PAYLOAD allocation or window of a protocol-only run)."""
        return self.buf is not None and (self.size < 0 or self.size == self.buf.shape[0])

    def real(self, lo: int, hi: int) -> bool:
        """Whether bytes [lo, hi) exist (a protocol-only PAYLOAD window keeps only its control prefix)."""
        return self.buf is not None and hi <= self.buf.shape[0]

    @property
    def stable(self) -> bool:
        """Only this rank's own writes change it (a window is also written by peers, unseen here)."""
        return self.kind == "gm"

    @property
    def nbytes(self) -> int:
        return self.size if self.size >= 0 else int(self.buf.shape[0])  # type: ignore[union-attr]


@dataclass(frozen=True)
class GmAddr:
    """A GM address: an allocation and a byte offset into it (`__gm__ uint8_t*`)."""

    alloc: Allocation
    offset: int = 0

    def __add__(self, nbytes: int) -> GmAddr:
        return GmAddr(self.alloc, self.offset + int(nbytes))

    def __sub__(self, nbytes: int) -> GmAddr:
        return GmAddr(self.alloc, self.offset - int(nbytes))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GmAddr) and other.alloc is self.alloc and other.offset == self.offset

    def __hash__(self) -> int:
        return hash((self.alloc.aid, self.offset))

    def __repr__(self) -> str:
        return f"GmAddr({self.alloc.name}+{self.offset:#x})"

    @property
    def value(self) -> int:
        """The numeric device address (allocation base + offset)."""
        return self.alloc.base + self.offset


# Unsigned integer types by item size: a strided copy of an ml_dtypes array (float8, bfloat16) runs through
# the dtype's per-element copy (4x slower than uint8 for a (256, 256) float8 block); the same bytes
# copied as integers of the same size and viewed back are identical.
_COPY_AS: dict[int, np.dtype] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32),
                                 8: np.dtype(np.uint64)}


def copy_out(view: np.ndarray) -> np.ndarray:
    """A fresh C-contiguous copy of `view` with its dtype (host speed only: the bytes are the view's)."""
    as_int = _COPY_AS.get(view.dtype.itemsize)
    if as_int is None or view.dtype == as_int or view.dtype.hasobject:
        return np.array(view, copy=True)
    return np.array(view.view(as_int), copy=True).view(view.dtype)


def _copy_into(dst: np.ndarray, view: np.ndarray) -> None:
    """`dst[...] = view` (host speed only: ml_dtypes data moved as same-size integers, as `copy_out`)."""
    as_int = _COPY_AS.get(view.dtype.itemsize)
    if as_int is None or view.dtype == as_int or view.dtype.hasobject:
        dst[...] = view
    else:
        dst.view(as_int)[...] = view.view(as_int)


def _is_fp4(dtype: np.dtype) -> bool:
    return dtype in FP4_DTYPES


class GlobalMemory:
    """The GM of one rank. Thread-safe for concurrent core threads."""

    _ids = itertools.count(1)

    def __init__(self, rank: int, events: EventBus, hazards: HazardLog, *, check: bool = True,
                 data: bool = True) -> None:
        self.rank = rank
        self.events = events
        self.hazards = hazards
        self.check = check
        self.data = data     # False: a protocol-only run, PAYLOAD allocations hold no bytes
        self._atomic_lock = threading.Lock()
        self._next_base = 0x1000_0000
        self.allocations: list[Allocation] = []

    # -- allocation ---------------------------------------------------------------------------------
    def alloc(self, nbytes: int, name: str, *, data: np.ndarray | None = None, zero: bool = False,
              role: MemRole = MemRole.PAYLOAD) -> GmAddr:
        """Allocate `nbytes`; with `data`, copy its bytes in (written). Unwritten bytes are poisoned in
        check mode, zero otherwise (or with `zero=True`)."""
        nbytes = int(nbytes)
        if data is not None:
            raw = contiguous(data).view(np.uint8).reshape(-1)
            nbytes = max(nbytes, raw.size)
        size = max(nbytes, 1)
        if not self.data and role is MemRole.PAYLOAD:
            alloc = self._register(name, None, None, "gm", size)
            alloc.role = role
            alloc.fully_written = True   # no never-written check without bytes (`data=False`: it is off)
            return GmAddr(alloc, 0)
        if data is not None and is_payload(data):
            raise refuse(f"the initial bytes of {role.value} allocation '{name}'")
        whole = data is not None and raw.size >= size
        fill = 0 if (zero or not self.check) else POISON_BYTE
        # Host time only: a buffer the data fills whole is not poisoned first, and an allocation every byte of
        # which is written from the start (zeroed, or filled by `data`) keeps no mask (reads would skip it).
        buf = np.empty(size, dtype=np.uint8) if whole else np.full(size, fill, dtype=np.uint8)
        written = np.zeros(buf.shape, dtype=bool) if self.check and not (zero or whole) else None
        alloc = self._register(name, buf, written, "gm")
        alloc.role = role
        if data is not None:
            buf[: raw.size] = raw
            if written is not None:
                written[: raw.size] = True
        alloc.fully_written = written is None
        return GmAddr(alloc, 0)

    def adopt(self, buf: np.ndarray | None, name: str, *, kind: str = "window", written: bool = False,
              role: MemRole = MemRole.PAYLOAD, nbytes: int = -1) -> GmAddr:
        """Wrap memory allocated elsewhere (an MPI window) as a GM allocation. Window memory is zeroed
        by the caller; with `written=False` a read of it before any put is reported. `nbytes` above the
        length of `buf` (or `buf` None): a window of `nbytes` of which only the bytes of `buf` (its control
        prefix) exist, the payload is not materialized (protocol-only run)."""
        if buf is None or nbytes > buf.size:
            if buf is not None:
                buf = buf.view(np.uint8).reshape(-1)
            alloc = self._register(name, buf, None, kind, int(nbytes))
            alloc.role = role
            alloc.fully_written = True
            return GmAddr(alloc, 0)
        buf = buf.view(np.uint8).reshape(-1)
        mask = None
        if self.check and not written:   # every byte written from the start: no mask (reads would skip it)
            mask = np.zeros(buf.shape, dtype=bool)
        alloc = self._register(name, buf, mask, kind)
        alloc.role = role
        alloc.fully_written = mask is None
        return GmAddr(alloc, 0)

    def _register(self, name: str, buf: np.ndarray | None, written: np.ndarray | None, kind: str,
                  size: int = -1) -> Allocation:
        alloc = Allocation(next(self._ids), name, buf, written, kind, self._next_base, size=size)
        self._next_base += Align(alloc.nbytes, GM_ALLOC_ALIGN) + GM_ALLOC_ALIGN
        self.allocations.append(alloc)
        return alloc

    # -- geometry -------------------------------------------------------------------------------------
    @staticmethod
    def _geometry(dtype: np.dtype, shape: Sequence[int], strides: Sequence[int] | None
                  ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int]:
        """(storage shape, storage strides, element shape, storage itemsize) in bytes of storage."""
        shape = tuple(map(int, shape))
        if dtype in FP4_DTYPES:
            if shape and shape[-1] % 2:
                raise GmError(f"FP4 rows must hold an even number of elements, got shape {shape}")
            sshape = (*shape[:-1], shape[-1] // 2) if shape else shape
            item = 1
        else:
            sshape = shape
            item = dtype.itemsize
        if strides is None:
            st, acc = [], item
            for s in reversed(sshape):
                st.append(acc)
                acc *= max(s, 1)
            return sshape, tuple(reversed(st)), shape, item
        return sshape, tuple(map(int, strides)), shape, item

    def _span(self, addr: GmAddr, sshape: tuple[int, ...], strides: tuple[int, ...], item: int,
              what: str) -> tuple[int, int]:
        lo = hi = addr.offset
        if 0 in sshape:
            return lo, hi
        for n, st in zip(sshape, strides, strict=True):
            if st > 0:
                hi += (n - 1) * st
            elif st < 0:
                lo += (n - 1) * st
        hi += item
        if lo < 0 or hi > addr.alloc.nbytes:
            raise GmError(f"rank {self.rank}: {what} of bytes [{lo}, {hi}) is outside GM allocation "
                          f"'{addr.alloc.name}' of {addr.alloc.nbytes} bytes")
        return lo, hi

    @staticmethod
    def _raw(buf: np.ndarray, offset: int, sshape: tuple[int, ...], strides: tuple[int, ...],
             dtype: np.dtype) -> np.ndarray:
        return np.ndarray(sshape, dtype=dtype, buffer=buf, offset=offset, strides=strides)

    # -- access ----------------------------------------------------------------------------------------
    def view(self, addr: GmAddr, dtype: np.dtype | type, shape: Sequence[int],
             strides: Sequence[int] | None = None) -> np.ndarray:
        """A raw, unchecked numpy view (host-side use: inputs and results). Not for FP4."""
        dtype = np.dtype(dtype)
        sshape, st, _, item = self._geometry(dtype, shape, strides)
        if _is_fp4(dtype):
            raise GmError("FP4 data is packed: use read()/write() or view it as uint8")
        if not addr.alloc.real(*self._span(addr, sshape, st, item, "view")):
            return Payload(sshape, dtype)  # type: ignore[return-value]
        return self._raw(cast("np.ndarray", addr.alloc.buf), addr.offset, sshape, st, dtype)

    def read(self, addr: GmAddr, dtype: np.dtype | type, shape: Sequence[int],
             strides: Sequence[int] | None = None, *, core: str = "host", out: np.ndarray | None = None,
             same_as: np.ndarray | None = None) -> np.ndarray:
        """Copy out of GM (a DataCopy GM -> L1/UB). Checks bounds and, in check mode, unwritten bytes.

        With `out` (a local buffer of the element shape and dtype; not FP4) the bytes land there directly and
        `out` is returned: the same bytes, events and reports as a read followed by a copy into `out`.
        With `same_as` (storage shape and dtype; not FP4), an array the caller has proven holds exactly the
        bytes this read returns (an earlier read of the same place of an allocation only this rank writes, at
        the same write generation: `Allocation.stable`), the host copy is skipped and `same_as` is returned
        (the caller must not write into it): the same bytes, events and reports as the read."""
        dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        sshape, st, eshape, item = self._geometry(dtype, shape, strides)
        lo, hi = self._span(addr, sshape, st, item, "read")
        alloc = addr.alloc
        if not alloc.real(lo, hi) or (alloc.marks is not None and alloc.marks[lo:hi].any()):
            return self._read_payload(addr, alloc, dtype, sshape, st, eshape, item, lo, hi, core, out, same_as)
        buf = cast("np.ndarray", alloc.buf)
        fp4 = dtype in FP4_DTYPES
        sdtype = np.dtype(np.uint8) if fp4 else dtype
        if same_as is not None:
            if fp4 or out is not None or same_as.shape != sshape or same_as.dtype != dtype:
                raise GmError(f"rank {self.rank}: read of {dtype} {sshape} proven equal to a {same_as.dtype} "
                              f"{same_as.shape} array")
            out = same_as
        elif out is None:
            out = copy_out(self._raw(buf, addr.offset, sshape, st, sdtype))
        else:
            if fp4 or out.shape != sshape or out.dtype != dtype:
                raise GmError(f"rank {self.rank}: read of {dtype} {sshape} into a {out.dtype} {out.shape} buffer")
            _copy_into(out, self._raw(buf, addr.offset, sshape, st, sdtype))
        if not alloc.fully_written and alloc.written is not None and hi > lo:
            mask = np.ndarray((*sshape, item), dtype=bool, buffer=alloc.written, offset=addr.offset,
                              strides=(*st, 1))
            if not mask.all():
                self._report_unwritten(alloc, addr, mask, core)
        if self.events.wants(GmRead, alloc.name):   # `data`: the bytes returned (the HB content check)
            self.events.emit(GmRead, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,
                             strides=st, item=item, alloc=alloc, data=out)
        if fp4:
            lowhi = np.empty((*sshape, 2), dtype=np.uint8)
            lowhi[..., 0] = out & 0x0F
            lowhi[..., 1] = out >> 4
            return lowhi.reshape(eshape).view(dtype)
        return out

    def _read_payload(self, addr: GmAddr, alloc: Allocation, dtype: np.dtype, sshape: tuple[int, ...],
                      st: tuple[int, ...], eshape: tuple[int, ...], item: int, lo: int, hi: int, core: str,
                      out: np.ndarray | None, same_as: np.ndarray | None) -> np.ndarray:
        """`read` of an allocation without bytes: the same event, a `Payload` (or `out` marked as holding one)."""
        if self.events.wants(GmRead, alloc.name):   # no bytes: the content check is off (`data=None`)
            self.events.emit(GmRead, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,
                             strides=st, item=item, alloc=alloc, data=None)
        if same_as is not None:
            return same_as
        if out is not None:
            mark = getattr(out, "mark_payload", None)
            if mark is None and not isinstance(out, Payload):
                raise refuse(f"the bytes read from '{alloc.name}' into a plain array")
            if mark is not None:
                mark()
            return out
        return Payload(eshape, dtype)  # type: ignore[return-value]

    def write(self, addr: GmAddr, value: np.ndarray, strides: Sequence[int] | None = None, *,
              core: str = "host", atomic: np.dtype | None = None) -> None:
        """Copy into GM (a DataCopy / fixpipe out). With `atomic` (the core's SetAtomicAdd type) the
        write adds: new = RNE_T(f32(old) + f32(value))."""
        alloc = addr.alloc
        payload = is_payload(value)
        if not payload:
            value = np.asarray(value)
        dtype = value.dtype
        sshape, st, _, item = self._geometry(dtype, value.shape, strides)
        lo, hi = self._span(addr, sshape, st, item, "write")
        if payload or not alloc.real(lo, hi):
            self._write_payload(addr, alloc, value, sshape, st, item, lo, hi, core, atomic)
            return
        buf = cast("np.ndarray", alloc.buf)
        if _is_fp4(dtype):
            codes = value.view(np.uint8).reshape(*sshape, 2)
            packed = (codes[..., 0] & 0x0F) | ((codes[..., 1] & 0x0F) << 4)
            self._raw(buf, addr.offset, sshape, st, np.dtype(np.uint8))[...] = packed
        elif atomic is not None:
            atomic = np.dtype(atomic)
            dst = self._raw(buf, addr.offset, sshape, st, dtype)
            with self._atomic_lock:
                if alloc.written is not None:
                    wmask = np.ndarray((*sshape, item), dtype=bool, buffer=alloc.written,
                                       offset=addr.offset, strides=(*st, 1))
                    if not wmask.all():
                        # Atomic add onto never-written GM adds to the poison pattern, as the device
                        # would add to whatever was there.
                        self._report_unwritten(alloc, addr, wmask, core, what="atomic add onto")
                if atomic == dtype:
                    dst[...] = (dst.astype(np.float32) + value.astype(np.float32)).astype(dtype)
                else:
                    self._report_atomic_mismatch(alloc, lo, hi, atomic, dtype, core)
                    _atomic_add_as(atomic, buf, addr.offset, sshape, st, item, value)
        else:
            _copy_into(self._raw(buf, addr.offset, sshape, st, dtype), value)
        alloc.generation += 1
        if alloc.marks is not None:
            np.ndarray((*sshape, item), dtype=bool, buffer=alloc.marks, offset=addr.offset,
                       strides=(*st, 1))[...] = False
        if alloc.written is not None and hi > lo:
            np.ndarray((*sshape, item), dtype=bool, buffer=alloc.written, offset=addr.offset,
                       strides=(*st, 1))[...] = True
            if lo == 0 and hi == alloc.nbytes and not alloc.fully_written:
                # a write spanning the allocation (a host input written whole): once every byte is written,
                # reads skip the mask test (the one full test here, on writes of this span only)
                alloc.fully_written = bool(alloc.written.all())
        if self.events.wants(GmWrite, alloc.name):
            self.events.emit(GmWrite, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,
                             strides=st, item=item, alloc=alloc, atomic=atomic is not None)

    def _write_payload(self, addr: GmAddr, alloc: Allocation, value: np.ndarray, sshape: tuple[int, ...],
                       st: tuple[int, ...], item: int, lo: int, hi: int, core: str, atomic: np.dtype | None) -> None:
        """`write` of payload bytes or into bytes that do not exist: the same checks of bounds and types, the
        same event; nothing stored. Payload bytes into bytes that exist (CONTROL) are refused."""
        dtype = value.dtype
        if alloc.real(lo, hi):
            self._write_marked(addr, alloc, value, sshape, st, item, core, atomic)
            return
        if atomic is not None and np.dtype(atomic) != dtype:
            self._report_atomic_mismatch(alloc, lo, hi, np.dtype(atomic), dtype, core)
        alloc.generation += 1
        if self.events.wants(GmWrite, alloc.name):
            self.events.emit(GmWrite, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,
                             strides=st, item=item, alloc=alloc, atomic=atomic is not None)

    def _write_marked(self, addr: GmAddr, alloc: Allocation, value: Any, sshape: tuple[int, ...],
                      st: tuple[int, ...], item: int, core: str, atomic: np.dtype | None) -> None:
        """Payload bytes into bytes that exist (a protocol-only run: a UB block holding one status word among
        stale data, written whole): the known bytes are written, the others keep theirs and are marked, so a
        later read of them returns a Payload (refused in a branch)."""
        if self.data or atomic is not None:
            raise refuse(f"bytes written into {alloc.role.value} allocation '{alloc.name}'")
        assert alloc.buf is not None
        if alloc.marks is None:
            alloc.marks = np.zeros(alloc.buf.shape, dtype=bool)
        dst = np.ndarray((*sshape, item), dtype=bool, buffer=alloc.marks, offset=addr.offset, strides=(*st, 1))
        marks = getattr(value, "_marks", None)
        src = marks() if marks is not None else None
        if src is None:
            dst[...] = True
        else:
            raw = np.ndarray((*sshape, item), dtype=np.uint8, buffer=alloc.buf, offset=addr.offset, strides=(*st, 1))
            known = ~src
            raw[known] = value.view(np.ndarray).view(np.uint8).reshape(*sshape, item)[known]
            dst[...] = src
        alloc.generation += 1
        lo, hi = self._span(addr, sshape, st, item, "write")
        if self.events.wants(GmWrite, alloc.name):
            self.events.emit(GmWrite, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,
                             strides=st, item=item, alloc=alloc, atomic=False)

    def _report_atomic_mismatch(self, alloc: Allocation, lo: int, hi: int, atomic: np.dtype, written: np.dtype,
                                core: str) -> None:
        """ATOMIC_DTYPE_MISMATCH, once per core and allocation (the first write's byte range)."""
        key = f"{core}:atomic {atomic} over {written}"
        if key in alloc.reported:
            return
        alloc.reported.add(key)
        self.hazards.report(
            Hazard.ATOMIC_DTYPE_MISMATCH, core,
            f"SetAtomicAdd<{_c_type(atomic)}> while the write-out to '{alloc.name}' bytes [{lo:#x}, {hi:#x}) is "
            f"{_c_type(written)}: the atomic unit adds {_c_type(atomic)} words over {_c_type(written)} data "
            f"(the result is neither sum); SetAtomicAdd's type must be the type written",
            alloc=alloc.name, lo=lo, hi=hi, atomic=str(atomic), written=str(written))

    def _report_unwritten(self, alloc: Allocation, addr: GmAddr, mask: np.ndarray, core: str,
                          what: str = "read of") -> None:
        key = f"{core}:{what}"
        if key in alloc.reported:
            return
        alloc.reported.add(key)
        flat = np.flatnonzero(~mask.reshape(-1))
        self.hazards.report(
            Hazard.READ_UNWRITTEN, core,
            f"{what} {flat.size} never-written byte(s) of '{alloc.name}' at offset {addr.offset:#x} "
            f"(poison {POISON_BYTE:#04x}); e.g. a scale or data address wrong for the mode",
            alloc=alloc.name, offset=addr.offset, count=int(flat.size))


_C_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16_t", "int8": "int8_t", "int16": "int16_t",
            "int32": "int32_t"}


def _c_type(dtype: np.dtype) -> str:
    """The Ascend C spelling of a dtype (float, half, bfloat16_t, ...)."""
    return _C_TYPES.get(str(dtype), str(dtype))


def _atomic_add_as(atomic: np.dtype, buf: np.ndarray, offset: int, sshape: tuple[int, ...],
                   strides: tuple[int, ...], item: int, value: np.ndarray) -> None:
    """The atomic unit set to `atomic` adding a write of another dtype (the module docstring): every
    contiguous run of written bytes (a row, or one element when rows are strided) and the GM bytes under it
    are read as `atomic` words and added in `atomic` (floats: RNE of the f32 sum; integers: wrapping); the
    bytes of a run past its last whole word are undefined: POISON_BYTE."""
    if not sshape:
        sshape, strides = (1,), (item,)
    if strides[-1] == item:
        rows, run, row_strides = sshape[:-1], sshape[-1] * item, strides[:-1]
    else:
        rows, run, row_strides = sshape, item, strides
    dst = np.ndarray((*rows, run), dtype=np.uint8, buffer=buf, offset=offset, strides=(*row_strides, 1))
    src = np.ascontiguousarray(value).view(np.uint8).reshape(*rows, run)
    whole = run // atomic.itemsize * atomic.itemsize
    if whole:
        old = np.ascontiguousarray(dst[..., :whole]).view(atomic)
        add = np.ascontiguousarray(src[..., :whole]).view(atomic)
        with np.errstate(all="ignore"):
            if np.issubdtype(atomic, np.integer):
                new = (old.astype(np.int64) + add.astype(np.int64)).astype(atomic)
            else:
                new = (old.astype(np.float32) + add.astype(np.float32)).astype(atomic)
        dst[..., :whole] = new.view(np.uint8)
    dst[..., whole:] = POISON_BYTE
