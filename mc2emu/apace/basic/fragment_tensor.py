"""FragmentTensor: one logical tensor assembled along one axis from equal fragments at unrelated GM addresses.

Emulates ops-transformer `mc2/common/op_kernel/apace/basic/fragment_tensor/fragment_tensor.h` and
`fragment_tensor_api.h` (commit 9ef00cfd163e). The AllGather kernel assembles the ranks' window rows into
one A (HEAD: 1 fragment, MAIN: R - 1, TAIL: R of paddedTailM rows, tailM real) and C the same way;
`QmmMxBlockMmadFragment` gathers with `FragmentSliceCopy<false>` and scatters L0C with `<true>`.

Differences and checks:
- `FragmentParam<Dims>::Validate()` returns a bool nobody reads; here it raises a `ConstraintError` naming
  the rule, and `MakeFragmentTensor` calls it (the device would run on into garbage).
- The tensor keeps the caller's address array by reference (`GM_ADDR const *addrList_`); kernels rewrite it
  in place and call `UpdateAddrList`. A change to entries a running `FragmentSliceCopy` uses is reported as
  `ADDR_LIST_MUTATED` (fragment, old and new address, the copy); the copy reads on, as the device would.
- `Slice(coord, shape)` adds `coord` to the origin and replaces the shape, unchecked. A copy past the last
  fragment reads `addrList[idx >= fragmentCnt]`: `FRAGMENT_OUT_OF_RANGE`; the piece is copied when the
  list holds an address there, skipped otherwise.
- `ComputeFragmentComposition`: head, whole bodies, tail (an empty tail becomes a whole fragment); the
  scatter skips pieces starting at >= realFragmentSize and clips the rest, the gather reads padded rows too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from mc2emu.blaze.tensor_api.copy import Copy, CopyHandle, SliceLocal
from mc2emu.blaze.tensor_api.tensor import GmTensor, MakeMemPtr, MakeTensor
from mc2emu.runtime.gm import GmAddr
from mc2emu.runtime.hazards import ConstraintError, Hazard, KernelError

if TYPE_CHECKING:
    from collections.abc import Callable, MutableSequence, Sequence

    from mc2emu.blaze.tensor_api.layout import Layout

# The capacity of a fragment address array: the first FragmentTensor (70b74b06d2af) copied the list into its
# own `GM_ADDR addrList_[MaxFragments]`; since f241800c40fc the kernels size their lists with it
# (`GM_ADDR headAddrListA_[MAX_FRAG]`). More fragments would write past those arrays (the device checks nothing).
MAX_FRAGMENT_COUNT = 32

_UINT32_MASK = 0xFFFF_FFFF

# Distinct slices whose copy pieces are kept (`_plan_pieces`): a launch slices a few thousand.
PLAN_CACHE_SIZE = 1 << 14


@dataclass(frozen=True)
class FragmentParam:
    """`FragmentParam<Dims>`: the assembled shape, the fragment size along `assembleAxis` (padded) and its
    real (written) part, the axis and the number of fragments."""

    assembledShape: tuple[int, ...]
    fragmentSize: int
    realFragmentSize: int
    assembleAxis: int
    fragmentCnt: int

    @property
    def Dims(self) -> int:
        return len(self.assembledShape)

    def Validate(self) -> None:
        """The source's `Validate()` rules, in its order; each failure raises a ConstraintError naming it."""
        shape, axis = self.assembledShape, self.assembleAxis
        if any(int(s) < 0 for s in shape):
            raise ConstraintError("FragmentParam: assembledShape >= 0", f"assembledShape {tuple(shape)}")
        if not 0 <= axis < len(shape):
            raise ConstraintError("FragmentParam: assembleAxis < rank",
                                  f"assembleAxis {axis} of an assembledShape of rank {len(shape)}")
        if shape[axis] != self.fragmentSize * self.fragmentCnt:
            raise ConstraintError("FragmentParam: assembledShape[assembleAxis] == fragmentSize * fragmentCnt",
                                  f"assembledShape[{axis}] = {shape[axis]}, fragmentSize {self.fragmentSize} * "
                                  f"fragmentCnt {self.fragmentCnt} = {self.fragmentSize * self.fragmentCnt}")
        if self.fragmentSize <= 0:
            raise ConstraintError("FragmentParam: fragmentSize > 0", f"fragmentSize {self.fragmentSize}")
        if not 0 < self.realFragmentSize <= self.fragmentSize:
            raise ConstraintError("FragmentParam: 0 < realFragmentSize <= fragmentSize",
                                  f"realFragmentSize {self.realFragmentSize}, fragmentSize {self.fragmentSize}")
        if self.fragmentCnt <= 0:
            raise ConstraintError("FragmentParam: fragmentCnt > 0", f"fragmentCnt {self.fragmentCnt}")


@dataclass(frozen=True)
class FragmentComposition:
    """How a slice along the assemble axis splits into pieces (`FragmentTensor::FragmentComposition`)."""

    headSize: int
    bodySize: int
    tailSize: int
    startRelativeCoord: int  # where the head starts inside its fragment
    startFragmentIdx: int
    endFragmentIdx: int
    totalFragmentCnt: int
    bodyCnt: int  # uint32 in the source: wraps when the slice ends on the boundary of its only fragment (unread)


@dataclass
class FragmentInfo:
    """One piece: `fragCoord` inside the fragment, `localCoord` inside the slice, `copyShape`."""

    addr: Any
    fragCoord: list[int]
    localCoord: list[int]
    copyShape: list[int]
    fragmentIdx: int


class FragmentTensor:
    """`FragmentTensor<Dims, MaxFragments, LayoutFactory, ElementType>`: a value; `Slice` returns a new view
    sharing the address list."""

    __slots__ = ("ElementType", "LayoutFactory", "MaxFragments", "addrList_", "fragParam_", "fragments_", "name",
                 "plan_", "sliceCoord_", "sliceShape_")

    def __init__(self, fragParam: FragmentParam, addrList: MutableSequence[GmAddr | None], *,
                 MaxFragments: int = MAX_FRAGMENT_COUNT, LayoutFactory: Callable[..., Layout] | None = None,
                 ElementType: Any = np.uint8, name: str = "") -> None:
        fragParam.Validate()
        if fragParam.fragmentCnt > MaxFragments:
            raise ConstraintError(f"FragmentTensor: fragmentCnt <= MaxFragments ({MaxFragments})",
                                  f"{name or 'fragment tensor'} has fragmentCnt {fragParam.fragmentCnt}; the address "
                                  f"arrays hold {MaxFragments}")
        self.fragParam_ = fragParam
        self.MaxFragments = MaxFragments
        self.LayoutFactory = LayoutFactory
        self.ElementType = ElementType
        self.name = name
        self.addrList_ = self._checked_list(addrList)
        self.sliceCoord_ = (0,) * fragParam.Dims
        self.sliceShape_ = tuple(int(s) for s in fragParam.assembledShape)
        # Host time only, never a result: the fragment GM tensors built so far, by (idx, address) (shared by
        # every slice: the parameters, layout maker, element type and name they depend on are), and this
        # slice's copy plan (`copy_plan`).
        self.fragments_: dict[tuple[int, GmAddr], GmTensor] = {}
        self.plan_: FragmentCopyPlan | None = None

    def _checked_list(self, addrList: MutableSequence[GmAddr | None]) -> MutableSequence[GmAddr | None]:
        if len(addrList) < self.fragParam_.fragmentCnt:
            raise ConstraintError("FragmentTensor: addrList holds an address per fragment",
                                  f"{self.name or 'fragment tensor'}: {len(addrList)} entries for fragmentCnt "
                                  f"{self.fragParam_.fragmentCnt}")
        return addrList

    # -- queries ---------------------------------------------------------------------------------------------
    def GetFragmentAddr(self, idx: int) -> GmAddr | None:
        """`addrList_[idx]`, read through the list reference (the source checks no bounds; past the list end
        this raises a KernelError)."""
        if not 0 <= idx < len(self.addrList_):
            raise KernelError(f"{self.name or 'fragment tensor'}: fragment {idx} is outside its address list of "
                              f"{len(self.addrList_)} entries")
        return self.addrList_[idx]

    def GetFragment(self, idx: int) -> GmTensor:
        """Fragment `idx` as a GM tensor: the assembled shape with fragmentSize along the assemble axis."""
        addr = self.GetFragmentAddr(idx)
        if not isinstance(addr, GmAddr):
            raise KernelError(f"{self.name or 'fragment tensor'}: fragment {idx} has no GM address ({addr!r})")
        if self.LayoutFactory is None:
            raise KernelError(f"{self.name or 'fragment tensor'}: GetFragment needs a LayoutFactory")
        fragment = self.fragments_.get((idx, addr))
        if fragment is None:   # a GM tensor is a value: the one built for this (idx, address) serves again
            fragmentShape = list(self.fragParam_.assembledShape)
            fragmentShape[self.fragParam_.assembleAxis] = self.fragParam_.fragmentSize
            fragment = MakeTensor(MakeMemPtr(addr, self.ElementType), self.LayoutFactory(*fragmentShape),
                                  name=f"{self.name}[{idx}]")
            self.fragments_[(idx, addr)] = fragment
        return fragment

    def GetFragmentSize(self) -> int:
        return self.fragParam_.fragmentSize

    def GetRealFragmentSize(self) -> int:
        return self.fragParam_.realFragmentSize

    def GetFragmentCnt(self) -> int:
        return self.fragParam_.fragmentCnt

    def GetSplitAxis(self) -> int:
        return self.fragParam_.assembleAxis

    def GetFragParam(self) -> FragmentParam:
        return self.fragParam_

    def GetSliceCoord(self, d: int) -> int:
        return self.sliceCoord_[d]

    def GetSliceShape(self, d: int) -> int:
        return self.sliceShape_[d]

    @property
    def origin(self) -> tuple[int, ...]:
        """The slice origin in the assembled tensor (events, traces and the splitK protocol name tiles by it)."""
        return self.sliceCoord_

    @property
    def addrList(self) -> MutableSequence[GmAddr | None]:
        """The list this tensor reads its addresses from (the caller's object, not a copy)."""
        return self.addrList_

    # -- updates and views -------------------------------------------------------------------------------------
    def UpdateAddrList(self, addrList: MutableSequence[GmAddr | None] | None) -> None:
        """Point this tensor (not earlier slices of it) at `addrList`; None leaves it unchanged."""
        if addrList is not None:
            self.addrList_ = self._checked_list(addrList)

    def Slice(self, coord: Sequence[int], shape: Sequence[int]) -> FragmentTensor:
        """Zero-copy view: origin = this slice's origin + `coord`, shape = `shape` (neither is checked)."""
        dims = len(self.sliceCoord_)
        if len(coord) != dims or len(shape) != dims:
            raise KernelError(f"{self.name or 'fragment tensor'}: Slice of a rank-{dims} tensor with coord "
                              f"{tuple(coord)} shape {tuple(shape)}")
        coordI = [int(c) for c in coord]
        shapeI = tuple(int(s) for s in shape)
        if min(coordI) < 0 or min(shapeI) < 0:
            raise KernelError(f"{self.name or 'fragment tensor'}: negative Slice coord {tuple(coord)} or shape "
                              f"{tuple(shape)} (uint64 on the device)")
        result = object.__new__(FragmentTensor)
        result.fragParam_ = self.fragParam_
        result.MaxFragments = self.MaxFragments
        result.LayoutFactory = self.LayoutFactory
        result.ElementType = self.ElementType
        result.name = self.name
        result.addrList_ = self.addrList_
        result.fragments_ = self.fragments_
        result.plan_ = None
        result.sliceCoord_ = tuple(o + c for o, c in zip(self.sliceCoord_, coordI, strict=True))
        result.sliceShape_ = shapeI
        return result

    # -- composition -----------------------------------------------------------------------------------------
    def ComputeFragmentComposition(self, startCoord: int, length: int) -> FragmentComposition:
        fragmentSize = self.fragParam_.fragmentSize
        startFragmentIdx = startCoord // fragmentSize
        startRelativeCoord = startCoord % fragmentSize
        endCoord = startCoord + length
        endFragmentIdx = endCoord // fragmentSize
        totalFragmentCnt = endFragmentIdx - startFragmentIdx + 1
        if totalFragmentCnt == 1:
            headSize, bodySize, bodyCnt, tailSize = length, fragmentSize, 0, length
        else:
            headSize = fragmentSize - startRelativeCoord
            bodySize = fragmentSize
            tailSize = endCoord % fragmentSize
            if tailSize == 0:
                tailSize = fragmentSize
                endFragmentIdx -= 1
                totalFragmentCnt -= 1
            bodyCnt = (totalFragmentCnt - 2) & _UINT32_MASK
        return FragmentComposition(headSize, bodySize, tailSize, startRelativeCoord, startFragmentIdx,
                                   endFragmentIdx, totalFragmentCnt, bodyCnt)

    def GetFragmentInfo(self, localIdx: int, comp: FragmentComposition) -> FragmentInfo:
        """Piece `localIdx` of `comp`: head, body or tail along the assemble axis; the slice's own origin and
        shape on the other axes."""
        axis = self.fragParam_.assembleAxis
        fragmentIdx = comp.startFragmentIdx + localIdx
        info = FragmentInfo(self.addrList_[fragmentIdx] if fragmentIdx < len(self.addrList_) else None,
                            list(self.sliceCoord_), [0] * self.fragParam_.Dims, list(self.sliceShape_), fragmentIdx)
        if localIdx == 0:
            info.copyShape[axis] = comp.headSize
            info.localCoord[axis] = 0
            info.fragCoord[axis] = comp.startRelativeCoord
        elif localIdx < comp.totalFragmentCnt - 1:
            info.copyShape[axis] = comp.bodySize
            info.localCoord[axis] = comp.headSize + (localIdx - 1) * comp.bodySize
            info.fragCoord[axis] = 0
        else:
            info.copyShape[axis] = comp.tailSize
            info.localCoord[axis] = comp.headSize + comp.bodyCnt * comp.bodySize
            info.fragCoord[axis] = 0
        return info

    def copy_plan(self) -> FragmentCopyPlan:
        """This slice's `FragmentCopyPlan`, built on its first copy (a slice's origin, shape and parameters never
        change; its addresses are read when a piece is copied). Host time only: the composition and pieces are
        shared by every slice of equal parameters, origin and shape (`_plan_pieces`)."""
        plan = self.plan_
        if plan is None:
            plan = self.plan_ = FragmentCopyPlan(*_plan_pieces(self.fragParam_, self.sliceCoord_, self.sliceShape_))
        return plan

    def __repr__(self) -> str:
        p = self.fragParam_
        return (f"<FragmentTensor {self.name!r} {p.fragmentCnt} x {p.fragmentSize} ({p.realFragmentSize} real) along "
                f"axis {p.assembleAxis}, slice {self.sliceCoord_} {self.sliceShape_}>")


def _plan_pieces(fragParam: FragmentParam, sliceCoord: tuple[int, ...], sliceShape: tuple[int, ...]
                 ) -> tuple[FragmentComposition, tuple[FragmentPiece, ...]]:
    """`ComputeFragmentComposition` and the `GetFragmentInfo` of every piece, addresses aside, of a slice at
    `sliceCoord` of shape `sliceShape`: a function of these and `fragParam` alone, kept per distinct slice of a
    process (the cores of a launch slice the same chunks again and again). Host time only."""
    key = (fragParam, sliceCoord, sliceShape)
    kept = _PLAN_PIECES.get(key)
    if kept is None:
        view = object.__new__(FragmentTensor)   # the fields these methods read; no address list
        view.fragParam_, view.addrList_ = fragParam, []
        view.sliceCoord_, view.sliceShape_ = sliceCoord, sliceShape
        axis = fragParam.assembleAxis
        comp = view.ComputeFragmentComposition(sliceCoord[axis], sliceShape[axis])
        kept = comp, tuple(FragmentPiece.of(view.GetFragmentInfo(idx, comp)) for idx in range(comp.totalFragmentCnt))
        if len(_PLAN_PIECES) >= PLAN_CACHE_SIZE:
            _PLAN_PIECES.clear()
        _PLAN_PIECES[key] = kept   # dict get / set are atomic under the GIL; the values are immutable
    return kept


_PLAN_PIECES: dict[tuple[FragmentParam, tuple[int, ...], tuple[int, ...]],
                   tuple[FragmentComposition, tuple[FragmentPiece, ...]]] = {}


def MakeFragmentTensor(fragParam: FragmentParam, addrList: MutableSequence[GmAddr | None], *,
                       MaxFragments: int = MAX_FRAGMENT_COUNT, LayoutFactory: Callable[..., Layout] | None = None,
                       ElementType: Any = np.uint8, name: str = "") -> FragmentTensor:
    """`MakeFragmentTensor<Dims, MaxFragments, LayoutFactory, ElementType>(fragParam, addrList)`; validates
    `fragParam` and the fragment count, and keeps `addrList` by reference."""
    return FragmentTensor(fragParam, addrList, MaxFragments=MaxFragments, LayoutFactory=LayoutFactory,
                          ElementType=ElementType, name=name)


class FragmentPiece(NamedTuple):
    """A `FragmentInfo` without its address: where piece `idx` of a slice lies (fixed by the slice)."""

    fragmentIdx: int
    fragCoord: tuple[int, ...]
    localCoord: tuple[int, ...]
    copyShape: tuple[int, ...]

    @staticmethod
    def of(info: FragmentInfo) -> FragmentPiece:
        return FragmentPiece(info.fragmentIdx, tuple(info.fragCoord), tuple(info.localCoord), tuple(info.copyShape))


class FragmentCopyPlan:
    """Host side of the copies of one slice (no counterpart in the source, which recomputes it per copy): its
    `ComputeFragmentComposition` and the `GetFragmentInfo` of every piece, addresses aside, and per piece the
    fragment slice built last (with the address and shape it was built for). The gather stamp, the copy and
    the decode-memo location of `QmmMxBlockMmadFragment` share it; results, reads, events and reports are
    those of recomputing it."""

    __slots__ = ("composition", "pieces", "slices_")

    def __init__(self, composition: FragmentComposition, pieces: tuple[FragmentPiece, ...]) -> None:
        self.composition = composition
        self.pieces = pieces
        self.slices_: list[tuple[GmAddr, tuple[int, ...], GmTensor] | None] = [None] * len(pieces)

    def FragmentSlice(self, fragmentTensor: FragmentTensor, idx: int, addr: Any,
                      copyShape: tuple[int, ...]) -> GmTensor:
        """`fragmentTensor.GetFragment(piece.fragmentIdx).Slice(piece.fragCoord, copyShape)` of piece `idx`,
        `addr` being the list entry just read at piece.fragmentIdx (a GM tensor is a value: the slice built
        for an equal address and shape serves again; anything but an address takes GetFragment's checks)."""
        last = self.slices_[idx]
        if last is not None and last[1] == copyShape and isinstance(addr, GmAddr) and last[0] == addr:
            return last[2]
        piece = self.pieces[idx]
        fragSlice = fragmentTensor.GetFragment(piece.fragmentIdx).Slice(
            cast("tuple[int, int]", piece.fragCoord), cast("tuple[int, int]", copyShape))
        self.slices_[idx] = (addr, copyShape, fragSlice)
        return fragSlice


def _copy_label(fragmentTensor: FragmentTensor, isScatter: bool) -> str:
    """How a report names a FragmentSliceCopy (built only when one is filed)."""
    return (f"FragmentSliceCopy<{'true' if isScatter else 'false'}> of {fragmentTensor.name or 'a fragment tensor'} "
            f"slice {fragmentTensor.sliceCoord_} {fragmentTensor.sliceShape_}")


class _AddrListInUse:
    """The entries one FragmentSliceCopy reads, as they were when it started; reports a change once."""

    def __init__(self, fragmentTensor: FragmentTensor, comp: FragmentComposition, isScatter: bool, ctx: Any) -> None:
        self.tensor = fragmentTensor
        self.isScatter = isScatter
        self.ctx = ctx
        lst = fragmentTensor.addrList_
        self.indices = range(comp.startFragmentIdx, min(comp.startFragmentIdx + comp.totalFragmentCnt, len(lst)))
        self.snapshot = lst[self.indices.start:self.indices.stop]
        self.reported = False

    def check(self, piece: int | None) -> None:
        """Before piece `piece` (None: at the copy's end)."""
        if self.reported:
            return
        lst = self.tensor.addrList_
        if lst[self.indices.start:self.indices.stop] == self.snapshot:   # the same entries: nothing changed
            return
        changed = [(i, old, lst[i]) for i, old in zip(self.indices, self.snapshot, strict=True) if lst[i] != old]
        if not changed:
            return
        self.reported = True
        copy = _copy_label(self.tensor, self.isScatter)
        where = "at its end" if piece is None else f"before piece {piece}"
        frags = ", ".join(f"fragment {i}: {old!r} -> {new!r}" for i, old, new in changed)
        self.ctx.device.hazards.report(
            Hazard.ADDR_LIST_MUTATED, self.ctx.label,
            f"address list of {self.tensor.name or 'a fragment tensor'} changed while {copy} used it "
            f"({where}): {frags}", fragments=[i for i, _, _ in changed], copy=copy,
            tensor=self.tensor.name, old=[o for _, o, _ in changed], new=[n for _, _, n in changed])


def FragmentSliceCopy(copyHandle: CopyHandle, tensor: Any, fragmentTensor: FragmentTensor, *,
                      isScatter: bool) -> None:
    """`FragmentSliceCopy<isScatter>(copyHandle, tensor, fragmentTensor)`: piece by piece, gather the slice of
    `fragmentTensor` into the local `tensor` (`isScatter=False`, every row) or scatter `tensor` into the
    fragments (`isScatter=True`, rows at or past realFragmentSize dropped). `copyHandle` moves one piece
    (`Te::Copy`) on behalf of its core."""
    ctx = getattr(copyHandle, "ctx", None)
    if ctx is None:
        raise KernelError("FragmentSliceCopy: the copy handle carries no core context (ctx)")
    assembleAxis = fragmentTensor.GetSplitAxis()
    # ComputeFragmentComposition(sliceCoord[axis], sliceShape[axis]) and GetFragmentInfo of each piece: the
    # slice's copy plan (computed once per slice); each piece's address is read through the list below.
    plan = fragmentTensor.copy_plan()
    composition = plan.composition
    inUse = _AddrListInUse(fragmentTensor, composition, isScatter, ctx)
    for idx in range(composition.totalFragmentCnt):
        inUse.check(idx)
        info = plan.pieces[idx]
        addrList = fragmentTensor.addrList_
        addr = addrList[info.fragmentIdx] if info.fragmentIdx < len(addrList) else None
        copyShape = info.copyShape
        if isScatter:
            realFragmentSize = fragmentTensor.GetRealFragmentSize()
            if info.fragCoord[assembleAxis] >= realFragmentSize:
                continue
            remain = realFragmentSize - info.fragCoord[assembleAxis]
            if copyShape[assembleAxis] > remain:
                copyShape = (*copyShape[:assembleAxis], remain, *copyShape[assembleAxis + 1:])
        if info.fragmentIdx >= fragmentTensor.GetFragmentCnt():
            label = _copy_label(fragmentTensor, isScatter)
            ctx.device.hazards.report(
                Hazard.FRAGMENT_OUT_OF_RANGE, ctx.label,
                f"{label}: piece {idx} reads fragment {info.fragmentIdx} of {fragmentTensor.GetFragmentCnt()} "
                f"(address {addr!r}{'' if isinstance(addr, GmAddr) else ': piece skipped'})",
                fragment=info.fragmentIdx, fragmentCnt=fragmentTensor.GetFragmentCnt(), copy=label, piece=idx)
            if not isinstance(addr, GmAddr):
                continue
        fragSlice = plan.FragmentSlice(fragmentTensor, idx, addr, copyShape)
        tensorSlice = _slice(tensor, info.localCoord, copyShape)
        if isScatter:
            Copy(copyHandle, fragSlice, tensorSlice)
        else:
            Copy(copyHandle, tensorSlice, fragSlice)
    inUse.check(None)


def _slice(tensor: Any, coord: Sequence[int], shape: Sequence[int]) -> Any:
    if isinstance(tensor, GmTensor):
        return tensor.Slice(cast("tuple[int, int]", tuple(coord)), cast("tuple[int, int]", tuple(shape)))
    return SliceLocal(tensor, coord, shape)
