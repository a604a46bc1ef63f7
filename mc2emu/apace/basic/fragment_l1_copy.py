"""`FragmentSliceCopy<false>(copyGM2L1, tensorL1, slice)` into a new L1 tensor, through the device's read cache.

The gather itself is `fragment_tensor.FragmentSliceCopy`; this module adds what the decode cache needs
(`runtime.decode_cache`), host time only: the gather's place (`fragment_where`) and its stamp
(`gather_stamp`, built like `read_stamp` from every piece it reads). A gather whose stamp equals an earlier
gather's of the launch, and that nothing can see or report, is replayed with that gather's buffer; otherwise
every piece is read (windows, which peers write unseen, are never stamped, so they are always read again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.basic.fragment_tensor import FragmentSliceCopy, FragmentTensor
from mc2emu.blaze.tensor_api.copy import CopyGM2L1
from mc2emu.blaze.tensor_api.tensor import L1Tensor
from mc2emu.runtime.decode_cache import unobserved
from mc2emu.runtime.gm import GmAddr
from mc2emu.runtime.local_region import local_bytes

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.event_bus import EventBus


def fragment_where(t: FragmentTensor) -> tuple[Any, ...]:
    """The decode-cache place of a gathered chunk: the first piece's fragment address and row inside it, and
    the offset along the other axis (the chunk's identity is its stamp, `gather_stamp`, or its bytes)."""
    axis = t.GetSplitAxis()
    comp = t.copy_plan().composition   # ComputeFragmentComposition(sliceCoord[axis], sliceShape[axis])
    addr = t.addrList_[comp.startFragmentIdx] if comp.startFragmentIdx < len(t.addrList_) else None
    loc = (addr.alloc.aid, addr.offset) if addr is not None and hasattr(addr, "alloc") else (None, None)
    return (*loc, comp.startRelativeCoord, t.GetSliceCoord(1 - axis))


def gather_stamp(t: FragmentTensor, events: EventBus | None = None) -> tuple[tuple | None, bool, bool]:
    """(stamp, covered, unobserved) of the gather `FragmentSliceCopy<false>` makes of slice `t`, taken before it.
    `covered`: every piece lies in the fragment list, so the gather writes every row of its buffer. `stamp`: the
    fragments' parameters and layout maker, then per piece its allocation, fragment address, write generation,
    place in the fragment, shape and place in the buffer; None unless every piece reads an allocation only this
    rank writes (`Allocation.stable`: not a window) and lies in the list. These fix the bytes each piece reads
    and where they land, so equal stamps prove two gathers into buffers of one shape and dtype returned the same
    bytes. `unobserved` (with `events`, when stamped): no piece's read can report or be seen."""
    fragmentCnt = t.GetFragmentCnt()
    addrList = t.addrList_
    stamps: list[Any] | None = [t.fragParam_, t.LayoutFactory]
    quiet = events is not None
    for info in t.copy_plan().pieces:
        addr = addrList[info.fragmentIdx] if info.fragmentIdx < len(addrList) else None
        if info.fragmentIdx >= fragmentCnt or not isinstance(addr, GmAddr):
            return None, False, False
        if stamps is None:
            continue                   # a piece is unstamped (a window): only `covered` is left to find
        alloc = addr.alloc
        if not alloc.stable:
            stamps = None              # no read of it is stamped (`read_stamp`)
            continue
        stamps.append((alloc.aid, addr.offset, alloc.generation, info.fragCoord, info.copyShape, info.localCoord))
        quiet = quiet and events is not None and unobserved(events, alloc)
    if stamps is None:
        return None, True, False
    return tuple(stamps), True, quiet


def FragmentCopyToL1(ctx: CoreContext, t: FragmentTensor, shape: tuple[int, int]) -> L1Tensor:
    """`FragmentSliceCopy<false>(copyGM2L1, tensorL1, t)` into a new L1 tensor of `shape` (zeros where a piece
    is skipped: this L1 holds no stale data). A stamped gather is kept for the launch; a later gather with the
    same stamp that nothing can see or report is replayed by handing out the kept buffer (shared, never
    written)."""
    stamp, covered, quiet = gather_stamp(t, ctx.device.events)
    dtype = np.dtype(t.ElementType)
    cache = ctx.device.decode_cache
    key = ("gather", t.name, dtype, shape, stamp)
    kept = cache.kept(key) if stamp is not None else None
    if kept is not None and quiet:
        return L1Tensor(kept, fragment_where(t), stamp)
    # a gather that covers every row overwrites the whole buffer: `np.empty` saves the host fill
    buf = np.empty(shape, dtype=dtype) if covered else np.zeros(shape, dtype=dtype)
    if not ctx.device.data:   # protocol-only run: an L1 buffer that marks the payload it receives
        buf = local_bytes(buf.nbytes).view(dtype).reshape(shape)
    FragmentSliceCopy(CopyGM2L1(ctx), buf, t, isScatter=False)
    if stamp is not None and gather_stamp(t)[0] != stamp:
        stamp = None                   # the list or a fragment changed during the copy: not proven
    if stamp is not None and kept is None:
        cache.keep(key, buf)
    return L1Tensor(buf, fragment_where(t), stamp)
