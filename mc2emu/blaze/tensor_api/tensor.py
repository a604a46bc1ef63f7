"""Tensor API GM tensors: a typed GM pointer plus a layout, sliced without copying, moved by the core.

Emulates `Te::MakeTensor(Te::MakeMemPtr<Te::Location::GM>(addr), layout)`, `Tensor::Slice(coord, shape)`
and `Tensor::SetL2CacheHint(mode)` of the Ascend C tensor API (`include/tensor_api/tensor.h`, seed 000
§5.1 invariant 4). A `GmTensor` is a value: `Slice` returns a new tensor over the same bytes (zero copy).
Data moves only through the core that issues the copy, `tensor.load(ctx)` (a DataCopy GM -> L1/UB,
`ctx.gm_read`) and `tensor.store(ctx, array)` (a fixpipe / DataCopy to GM, `ctx.gm_write`), so bounds,
poison (never-written bytes), the core's atomic mode and GM events all apply.

`load` returns the logical (rows, cols) array; for a transposed (DN) tensor that is a transposed view of
the storage-ordered copy, so `arr.T` is C-contiguous. FP4 tensors (`ml_dtypes.float4_e2m1fn` storage, used
for both E2M1 and E1M2 codes) are packed two per byte: their innermost stored dimension must start at an
even element and hold an even count, as the device's byte-addressed copies require.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.blaze.tensor_api.layout import Layout, LayoutError, storage_of
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.constants import FP4_PER_BYTE
from mc2emu.numerics.formats import FP4_STORAGE_DTYPE as FP4_STORAGE_DTYPE
from mc2emu.numerics.formats import gm_storage_dtype
from mc2emu.numerics.payload import Payload, is_payload
from mc2emu.runtime.decode_cache import read_stamp
from mc2emu.runtime.events import L2Hint
from mc2emu.runtime.gm import GmAddr

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext



class Location(enum.Enum):
    """`Te::Location`: where a tensor lives. Only GM tensors are modelled as objects; L1/L0 data is held by
    the block components in numpy arrays whose capacity the core's LocalMemory accounts for."""

    GM = "GM"


class CacheMode(enum.Enum):
    """`Te::CacheMode` of `SetL2CacheHint`."""

    CACHE_MODE_NORMAL = "NORMAL"
    CACHE_MODE_DISABLE = "DISABLE"


@dataclass(frozen=True)
class MemPtr:
    """`Te::MakeMemPtr<Location::GM>(ptr)` of a typed `__gm__ T*`."""

    addr: GmAddr
    dtype: np.dtype
    location: Location = Location.GM


def element_dtype(dtype: Any) -> np.dtype:
    """The GM storage dtype of a `T`: a numpy / ml_dtypes dtype, an MX `ElemFormat` (FP8: its ml_dtypes type;
    FP4: packed FP4 storage, shared by E2M1 and E1M2) or a fixpipe `OutDtype`."""
    if isinstance(dtype, ElemFormat):
        return gm_storage_dtype(dtype)
    if isinstance(dtype, OutDtype):
        return dtype.dtype
    return np.dtype(dtype)


def MakeMemPtr(addr: GmAddr, dtype: Any, location: Location = Location.GM) -> MemPtr:
    return MemPtr(addr, element_dtype(dtype), location)


_FP4_TYPE = FP4_STORAGE_DTYPE.type


def is_fp4(dtype: np.dtype) -> bool:
    return dtype.type is _FP4_TYPE   # the scalar type: one identity test (a dtype == costs ~10x more)


@dataclass(frozen=True)
class GmTensor:
    """A GM tensor. `origin` is the coordinate of this tensor's element (0, 0) in the tensor MakeTensor
    built (kept for events and traces: a tile's position)."""

    ptr: MemPtr
    layout: Layout
    origin: tuple[int, int] = (0, 0)
    name: str = ""

    @property
    def addr(self) -> GmAddr:
        return self.ptr.addr

    @property
    def dtype(self) -> np.dtype:
        return self.ptr.dtype

    @property
    def shape(self) -> tuple[int, int]:
        return self.layout.shape

    def Slice(self, coord: tuple[int, int], shape: tuple[int, int]) -> GmTensor:
        """Zero-copy sub-tensor of `shape` elements from logical `coord`."""
        sub, off = self.layout.slice(coord, shape)
        ptr = self.ptr
        addr = GmAddr(ptr.addr.alloc, ptr.addr.offset + _byte_offset(off, ptr.dtype))
        # frozen values: fields set once, here (the dataclass __init__s are 2-3x slower)
        subPtr = object.__new__(MemPtr)
        object.__setattr__(subPtr, "addr", addr)
        object.__setattr__(subPtr, "dtype", ptr.dtype)
        object.__setattr__(subPtr, "location", ptr.location)
        out = object.__new__(GmTensor)
        object.__setattr__(out, "ptr", subPtr)
        object.__setattr__(out, "layout", sub)
        object.__setattr__(out, "origin", (self.origin[0] + int(coord[0]), self.origin[1] + int(coord[1])))
        object.__setattr__(out, "name", self.name)
        return out

    def _geometry(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]:
        """(storage shape, byte strides, perm or None when the storage order is the logical order)."""
        return _geometry_of(self.layout, self.ptr.dtype, self.name)

    def load(self, ctx: CoreContext, out: np.ndarray | None = None) -> np.ndarray:
        """Copy this tensor out of GM on behalf of `ctx`'s core; returns the logical (rows, cols) array. With
        `out` (a local buffer of the logical shape and element type) the bytes land there and `out` is
        returned."""
        rows, cols = self.layout.shape
        if rows == 0 or cols == 0:
            return np.empty((rows, cols), dtype=self.ptr.dtype) if out is None else out
        sshape, bstrides, perm = self._geometry()
        if out is not None and perm is None and not is_fp4(self.ptr.dtype):
            return ctx.gm_read(self.ptr.addr, self.ptr.dtype, sshape, bstrides, out=out)
        raw = ctx.gm_read(self.ptr.addr, self.ptr.dtype, sshape, bstrides)
        if perm is not None:
            raw = _logical(raw, perm, self.layout)
        if out is None:
            return raw
        out[...] = raw
        return out

    def load_l1(self, ctx: CoreContext) -> L1Tensor:
        """`Te::Copy(copyGM2L1, tensorL1, *this)` into a new L1 tensor: `load(ctx)` through the device's read
        cache (`DecodeCache.read`: the same bytes, events and reports; host copies saved), with the read's
        place and stamp for the decode cache."""
        addr = self.ptr.addr
        rows, cols = self.layout.shape
        stamp = read_stamp(addr, self.layout.shape)
        if stamp is None or rows == 0 or cols == 0 or is_fp4(self.ptr.dtype):
            return L1Tensor(self.load(ctx), (addr.alloc.aid, addr.offset), stamp)
        sshape, bstrides, perm = self._geometry()
        raw = ctx.device.decode_cache.read(ctx, addr, self.ptr.dtype, sshape, bstrides, stamp)
        return L1Tensor(raw if perm is None else _logical(raw, perm, self.layout),
                        (addr.alloc.aid, addr.offset), stamp)

    def store(self, ctx: CoreContext, value: np.ndarray) -> None:
        """Write the logical (rows, cols) array `value` into this tensor on behalf of `ctx`'s core (adds when
        the core's atomic mode is set)."""
        rows, cols = self.layout.shape
        value = value if is_payload(value) else np.asarray(value)
        if value.shape != (rows, cols):
            raise LayoutError(f"store of shape {value.shape} into a tensor of shape {(rows, cols)}")
        if value.dtype != self.ptr.dtype:
            raise LayoutError(f"store of {value.dtype} into a {self.ptr.dtype} tensor (cast first)")
        if rows == 0 or cols == 0:
            return
        if self.layout.span:
            raise LayoutError(f"store into the NZ view {self.name}{(rows, cols)}: an NZ operand is only read")
        sshape, bstrides, perm = self._geometry()
        if perm is None:
            ctx.gm_write(self.ptr.addr, value, bstrides)
            return
        split = [s for d in (0, 1) for s, _ in reversed(self.layout.modes[d]) if s != 1] or [1]
        inverse = np.argsort(perm)
        ctx.gm_write(self.ptr.addr, value.reshape(split).transpose(inverse).reshape(sshape), bstrides)

    def SetL2CacheHint(self, ctx: CoreContext, mode: CacheMode) -> None:
        """Record an L2 cache hint for this tensor (a pure decision: an L2_HINT event)."""
        ctx.emit(L2Hint, tensor=self.name or self.ptr.addr.alloc.name, mode=mode.name, offset=self.ptr.addr.offset,
                 shape=self.layout.shape)


class L1Tensor:
    """A local (L1) tensor filled from GM: its logical (rows, cols) array `data` (shared, never written), and
    for the device's decode cache where its bytes came from (`where`) and the read's `stamp` (None: not
    proven, e.g. a window; see `runtime.decode_cache.read_stamp`)."""

    __slots__ = ("data", "stamp", "where")

    def __init__(self, data: np.ndarray, where: tuple[Any, ...], stamp: tuple | None = None) -> None:
        self.data = data
        self.where = where
        self.stamp = stamp

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    def Slice(self, coord: tuple[int, int], shape: tuple[int, int]) -> L1Tensor:
        """`Tensor::Slice(coord, shape)`: a view (clipped at the tensor's edge, as numpy slicing; the caller
        checks the shape it got) whose stamp names the window."""
        (r, c), (n, m) = coord, shape
        stamp = None if self.stamp is None else (self.stamp, r, c, n, m)
        return L1Tensor(self.data[r:r + n, c:c + m], self.where, stamp)


def _logical(raw: np.ndarray, perm: tuple[int, ...], layout: Layout) -> np.ndarray:
    """A storage-ordered read as the logical (rows, cols) array; an NZ view drops its pad columns."""
    rows, cols = layout.shape
    if not layout.span:
        if type(raw) is Payload:   # a protocol-only read: the logical shape, nothing to permute
            return Payload((rows, cols), raw.dtype)
        return raw.transpose(perm).reshape(rows, cols)
    return raw.transpose(perm).reshape(rows, layout.span)[:, layout.skip:layout.skip + cols]


def _geometry_of(layout: Layout, dtype: np.dtype, name: str) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                      tuple[int, ...] | None]:
    geometry = _geometry_cached(layout.modes, layout.shape, dtype)
    if geometry is None:
        sshape, sstrides, _ = layout.storage
        raise LayoutError(f"FP4 tensor {name}{layout.shape}: the innermost stored dimension must be "
                          f"contiguous with an even element count and every other stride even (packed two "
                          f"per byte); storage {sshape} strides {sstrides}")
    return geometry


@lru_cache(maxsize=4096)
def _geometry_cached(modes: tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]], shape: tuple[int, int],
                     dtype: np.dtype) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None] | None:
    """`_geometry_of` for a layout's modes and shape (a pure function, cached: a tile loop's chunks share a few
    geometries); None for an FP4 layout packed storage cannot hold."""
    sshape, sstrides, perm = storage_of(modes)
    if is_fp4(dtype):
        if sstrides[-1] != 1 or sshape[-1] % FP4_PER_BYTE or any(s % FP4_PER_BYTE for s in sstrides[:-1]):
            return None
        bstrides = (*(s // FP4_PER_BYTE for s in sstrides[:-1]), 1)
    else:
        bstrides = tuple(s * dtype.itemsize for s in sstrides)
    identity = perm == tuple(range(len(perm))) and sshape == shape
    return sshape, bstrides, None if identity else perm


def _byte_offset(elements: int, dtype: np.dtype) -> int:
    if is_fp4(dtype):
        if elements % FP4_PER_BYTE:
            raise LayoutError(f"FP4 tensor slice at element offset {elements}: packed data can only be "
                              f"addressed at whole bytes (even element offsets)")
        return elements // FP4_PER_BYTE
    return elements * dtype.itemsize


def MakeTensor(ptr: MemPtr | GmAddr, layout: Layout, dtype: Any = None, name: str = "") -> GmTensor:
    """`Te::MakeTensor(Te::MakeMemPtr<Location::GM>(addr), layout)`. Accepts a MemPtr, or a GmAddr plus
    the element dtype (the `T` of `__gm__ T*`)."""
    if isinstance(ptr, GmAddr):
        if dtype is None:
            raise LayoutError("MakeTensor(GmAddr, layout) needs the element dtype (the T of __gm__ T*)")
        ptr = MakeMemPtr(ptr, dtype)
    elif dtype is not None and element_dtype(dtype) != ptr.dtype:
        raise LayoutError(f"MakeTensor: dtype {element_dtype(dtype)} disagrees with the pointer's {ptr.dtype}")
    return GmTensor(ptr, layout, (0, 0), name)
