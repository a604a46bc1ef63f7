"""QmmMxBlockMmadFragment: the MX block mmad whose A, scaleA and C are FragmentTensor slices.

Emulates ops-transformer `mc2/common/op_kernel/apace/block/mmad/qmm_mx_block_mmad_fragment.h` (commit
5778144076, 2026-08-21), instantiated by the AllGather kernel as `QmmMxBlockMmadFragment<0, false, AType,
LayoutA, BType, LayoutB, CType, LayoutC, float, LayoutC>` (A streamed, no atomic add). The source is a class
of its own, not a `BlockMmad` specialization, but its Init, L1 map, K loops (`iter0` over kL1 chunks, scales
reloaded when `iter0 % (scaleKL1 / kL1) == 0`, `iter1` over baseK steps with the L0A / L0B ping-pong),
`Mmad` parameters and splitK protocol are those of Blaze's `BlockMmad<MatmulWithScaleMx<0, false>, ...>`
line for line; so this class reuses `BlockMmadMx` and replaces exactly the three copies that differ:

- `CopyAInL1`: `PadMxKAL1Zero(tensorAL1, curGmAKL1)` then `FragmentSliceCopy<false>(copyGM2L1, tensorAL1,
  gmA.Slice({0, iter0 * kL1}, {curM, curGmAKL1}))`: the rows are gathered piece by piece from the fragments
  (the padded rows of a TAIL fragment too); a piece the copy skips (a fragment past the list, reported
  FRAGMENT_OUT_OF_RANGE) leaves its L1 rows as they were: zeros here (this L1 holds no stale data, so a
  straddling block stays deterministic; a gather with every piece in range needs no fill); the K padding to
  Align64 is zero on both operands and is not materialized (as in `BlockMmadMx`);
- `CopyScalesInL1`: scaleA by `FragmentSliceCopy<false>` of `gmScaleA.Slice({0, scaleKStart}, {curM,
  scaleKLength})`, scaleB by a plain `Te::Copy`;
- `ScatterL0C2GM`: `FragmentSliceCopy<true>(copyL0C2GM.with(FixpipeParams(3)), tensorL0C, gmC)`: each piece
  is fixpiped (RNE to CType) into its fragment; rows at or past realFragmentSize are dropped.

Host time only: a gather whose pieces are all stamped like `BlockMmadMx`'s plain loads (the same places,
geometry and write generations as an earlier gather of the launch) and that nothing can see or report is
replayed with that gather's buffer (`_gather`); otherwise every piece is read.

The 17-argument call `(gmA, gmB, gmScaleA, gmScaleB, gmBias, cFragAddrs, mPerRank, tileM, tileCnt, tailM,
remoteRankCnt, cRowStride, singleShape, mPosGlobal, nPosGlobal, splitKIdx = 0, gmC)` is kept; the source
reads none of cFragAddrs, mPerRank, tileM, tileCnt, tailM, remoteRankCnt, cRowStride, mPosGlobal and
nPosGlobal. In particular seed 000 §7 says remoteRankCnt "controls the L0C accumulation / fixpipe timing":
the source ignores it; every call runs the full K with the splitKIdx the kernel passes (always 0, with
splitKNum 1 from Init), so each call fixpipes its tile. This emulation follows the source.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.apace.basic.fragment_tensor import FragmentSliceCopy, FragmentTensor
from mc2emu.blaze.gemm.block.block_mmad_host import L1Operand, read_stamp, unobserved
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, BlockMmadMxType
from mc2emu.blaze.gemm.common_utils import FINAL_ACCUMULATION
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE
from mc2emu.blaze.tensor_api.copy import CopyGM2L1, CopyL0C2GM, FixpipeParams
from mc2emu.numerics.constants import ALIGN_64_BYTES_SHIFT, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.int_math import Align64
from mc2emu.runtime.events import EventKind
from mc2emu.runtime.gm import GmAddr
from mc2emu.runtime.hazards import ConstraintError, KernelError

if TYPE_CHECKING:
    from mc2emu.blaze.tensor_api.tensor import GmTensor
    from mc2emu.runtime.core import CoreContext


def _fragment_where(t: FragmentTensor) -> tuple[Any, ...]:
    """A decode-memo location for a gathered chunk: the first piece's fragment address and row inside it,
    and the K offset (the chunk's identity is its stamp, `_gather_stamp`, or its bytes)."""
    axis = t.GetSplitAxis()
    comp = t.copy_plan().composition   # ComputeFragmentComposition(sliceCoord[axis], sliceShape[axis])
    addr = t.addrList_[comp.startFragmentIdx] if comp.startFragmentIdx < len(t.addrList_) else None
    loc = (addr.alloc.aid, addr.offset) if addr is not None and hasattr(addr, "alloc") else (None, None)
    return (*loc, comp.startRelativeCoord, t.GetSliceCoord(1 - axis))


def _gather_stamp(t: FragmentTensor, ctx: CoreContext | None = None) -> tuple[tuple | None, bool, bool]:
    """(stamp, covered, unobserved) of the gather `FragmentSliceCopy<false>` makes of slice `t`, taken before it
    as `BlockMmadMx` stamps its plain reads. `covered`: every piece lies in the fragment list, so the gather
    writes every row of its buffer. `stamp`: the fragments' parameters and layout maker, then per piece its
    allocation, fragment address, write generation, place in the fragment, shape and place in the buffer; None
    unless every piece reads an allocation only this rank writes (`Allocation.stable`: not a window) and lies in
    the list. These fix the bytes each piece reads (`read_stamp` of its fragment slice) and where they land, so
    equal stamps prove two gathers into buffers of one shape and dtype returned the same bytes. `unobserved`
    (with `ctx`, when stamped): no piece's read can report or be seen (`block_mmad_host.unobserved`). Host time
    only (the slice's copy plan, shared with the gather, gives its pieces; no fragment slice is built)."""
    fragmentCnt = t.GetFragmentCnt()
    addrList = t.addrList_
    stamps: list[Any] | None = [t.fragParam_, t.LayoutFactory]
    quiet = ctx is not None
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
        quiet = quiet and ctx is not None and unobserved(ctx, alloc)
    if stamps is None:
        return None, True, False
    return tuple(stamps), True, quiet


def _still(stamp: tuple | None, t: FragmentTensor) -> tuple | None:
    """`stamp` if the gather of `t` just made still has it (no address-list change, no write of this rank
    during the copy), else None (the memo then compares bytes)."""
    return stamp if stamp is not None and _gather_stamp(t)[0] == stamp else None


def _gather(mmad: QmmMxBlockMmadFragment, t: FragmentTensor, shape: tuple[int, int]) -> tuple[np.ndarray, tuple | None]:
    """`FragmentSliceCopy<false>(copyGM2L1, buffer, t)` into a new L1 buffer of `shape`; returns the buffer and
    its stamp (None: not proven, see `_gather_stamp`). A stamped gather is kept for the launch (as
    `BlockMmadMx._load_stamped` keeps plain loads): a later gather with the same stamp, that nothing can see
    or report, is replayed by handing out the kept buffer (shared, never written)."""
    ctx = mmad.ctx
    stamp, covered, quiet = _gather_stamp(t, ctx)
    dtype = np.dtype(t.ElementType)
    memo, launch = mmad.T.host.memo, ctx.launch
    key = ("gather", t.name, dtype, shape, stamp)
    kept = memo.stamped_read(launch, key) if stamp is not None else None
    if kept is not None and quiet:
        return kept, stamp
    buf = _gather_buffer(shape, dtype, covered)
    FragmentSliceCopy(CopyGM2L1(ctx), buf, t, isScatter=False)
    stamp = _still(stamp, t)
    if stamp is not None and kept is None:
        memo.keep_read(launch, key, buf)
    return buf, stamp


def _gather_buffer(shape: tuple[int, int], dtype: Any, covered: bool) -> np.ndarray:
    """The L1 buffer of a gather: zeros (a skipped piece leaves its rows deterministic) unless the gather
    covers every row (then its contents are all overwritten; `np.empty` saves the host fill)."""
    return np.empty(shape, dtype=dtype) if covered else np.zeros(shape, dtype=dtype)


class QmmMxBlockMmadFragmentType(BlockMmadMxType):
    """The template instantiation `QmmMxBlockMmadFragment<A_FULL_LOAD_MODE, ATOMIC_ADD, AType, LayoutA, ...>`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.DispatchPolicy.FULL_LOAD_MODE != NONE_FULL_LOAD_MODE:
            # The AllGather kernel instantiates mode 0 only; the A-full-load branch is not emulated.
            raise ConstraintError("QmmMxBlockMmadFragment: A_FULL_LOAD_MODE 0",
                                  "only the streamed-A instantiation (the AllGather kernel's) is emulated")

    def __call__(self, ctx: CoreContext) -> QmmMxBlockMmadFragment:
        return QmmMxBlockMmadFragment(ctx, self)


class QmmMxBlockMmadFragment(BlockMmadMx):
    """The per-core object (`BlockMmadFragC mmadFrag;`)."""

    template = QmmMxBlockMmadFragmentType

    def __call__(self, gmA: FragmentTensor, gmB: GmTensor, gmScaleA: FragmentTensor,  # type: ignore[override]
                 gmScaleB: GmTensor, gmBias: GmTensor | None, cFragAddrs: Any, mPerRank: int, tileM: int,
                 tileCnt: int, tailM: int, remoteRankCnt: int, cRowStride: int, singleShape: Any,
                 mPosGlobal: int, nPosGlobal: int, splitKIdx: int = 0, gmC: FragmentTensor | None = None) -> None:
        if gmC is None:
            raise KernelError(f"{self.ctx.label}: QmmMxBlockMmadFragment called without its C fragment slice")
        with self.T.host:
            self._call(gmA, gmB, gmScaleA, gmScaleB, gmBias, gmC, singleShape, splitKIdx)  # type: ignore[arg-type]

    def CopyScalesInL1(self, gmScaleA: Any, gmScaleB: GmTensor, curM: int, curN: int, scaleL1BufId: int,
                       kL1Offset: int, scaleGmOffset: int, needCopyScale: bool) -> tuple[np.ndarray, np.ndarray]:
        """`CopyScalesInL1` (mode 0): when the scales are due, scaleA gathered from the fragments, scaleB copied.
        A plain scaleA tensor (the slot ring's MAIN tiles, 67a83540d75e `CopyGmToL1`) is one contiguous copy."""
        if not isinstance(gmScaleA, FragmentTensor):
            return super().CopyScalesInL1(gmScaleA, gmScaleB, curM, curN, scaleL1BufId, kL1Offset, scaleGmOffset,
                                          needCopyScale)
        if needCopyScale:
            curScaleKL1 = self.scaleKL1_
            if kL1Offset + curScaleKL1 > self.k_:
                curScaleKL1 = self.k_ - kL1Offset
            scaleKLength = (Align64(curScaleKL1) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
            blockScaleA = gmScaleA.Slice((0, scaleGmOffset), (curM, scaleKLength))
            self._scaleAL1[scaleL1BufId], self._scaleAStamp[scaleL1BufId] = _gather(
                self, blockScaleA, (curM, scaleKLength))
            gmBlockScaleB = gmScaleB.Slice((scaleGmOffset, 0), (scaleKLength, curN))
            stamp = self._scaleBStamp[scaleL1BufId] = read_stamp(gmBlockScaleB)
            self._scaleBL1[scaleL1BufId] = self._load_stamped(gmBlockScaleB, stamp)
        tensorScaleAL1, tensorScaleBL1 = self._scaleAL1[scaleL1BufId], self._scaleBL1[scaleL1BufId]
        if tensorScaleAL1 is None or tensorScaleBL1 is None:
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} read before any load")
        return tensorScaleAL1, tensorScaleBL1

    def CopyAInL1(self, gmA: Any, curM: int, curGmKL1: int, l1BufId: int, kL1Offset: int,
                  iter0: int) -> L1Operand:
        """`CopyAInL1` (mode 0): PadMxKAL1Zero, then the gather of this K chunk's rows from the fragments. A
        plain A tensor (the slot ring's MAIN tiles, 67a83540d75e `CopyGmToL1`) is one contiguous copy."""
        if not isinstance(gmA, FragmentTensor):
            return super().CopyAInL1(gmA, curM, curGmKL1, l1BufId, kL1Offset, iter0)
        blockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
        tensorAL1, stampA = _gather(self, blockA, (curM, curGmKL1))
        operand = L1Operand(tensorAL1, _fragment_where(blockA), stampA)
        self._aL1[l1BufId] = operand
        return operand

    def CopyL0C2GM(self, gmC: Any, tensorL0C: np.ndarray, curM: int, curN: int, l0cOffset: int) -> None:
        """`ScatterL0C2GM`: `FragmentSliceCopy<true>(copyL0C2GM.with(FixpipeParams(3)), tensorL0C, gmC)`."""
        self.ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        FragmentSliceCopy(CopyL0C2GM(self.ctx).with_(FixpipeParams(FINAL_ACCUMULATION)), tensorL0C, gmC,
                          isScatter=True)
        self.ctx.emit(EventKind.FIXPIPE, gmC.name or "C", (*gmC.origin, curM, curN), l0cOffset=l0cOffset,
                      dtype=str(self.T.CType), atomic=self.ctx.atomic_dtype is not None,
                      unitFlag=FINAL_ACCUMULATION, t0_ns=t0)
