"""QmmMxBlockMmadFragment: the MX block mmad whose A, scaleA and C are FragmentTensor slices.

Mirrors ops-transformer `mc2/common/op_kernel/apace/block/mmad/qmm_mx_block_mmad_fragment.h`, instantiated by
the AllGather kernel as `QmmMxBlockMmadFragment<0, false, AType, LayoutA, BType, LayoutB, CType, LayoutC,
float, LayoutC>` (A streamed, no atomic add). The source is a class of its own, but its Init, L1 map, K loops,
`Mmad` and splitK protocol are Blaze's `BlockMmad<MatmulWithScaleMx<0, false>, ...>` line for line, so this
class reuses `BlockMmadMx` and replaces exactly the three copies that differ:

- `CopyAInL1`: `PadMxKAL1Zero(tensorAL1, curGmAKL1)` then `FragmentSliceCopy<false>(copyGM2L1, tensorAL1,
  gmA.Slice({0, iter0 * kL1}, {curM, curGmAKL1}))` (`FragmentCopyToL1`: a piece the copy skips, reported
  FRAGMENT_OUT_OF_RANGE, leaves its rows zero; the K padding to Align64 is not materialized);
- `CopyScalesInL1`: scaleA by `FragmentSliceCopy<false>` of `gmScaleA.Slice({0, scaleKStart}, {curM,
  scaleKLength})`, scaleB by a plain `Te::Copy`;
- `ScatterL0C2GM`: `FragmentSliceCopy<true>(copyL0C2GM.with(FixpipeParams(3)), tensorL0C, gmC)`.

What differs: a plain (non-fragment) A / scaleA (the slot ring's MAIN tiles) is one contiguous copy. The
17-argument call is kept; the source reads none of cFragAddrs, mPerRank, tileM, tileCnt, tailM,
remoteRankCnt, cRowStride, mPosGlobal, nPosGlobal (seed 000 §7 says remoteRankCnt "controls the L0C
accumulation": the source ignores it; every call runs the full K with splitKIdx 0 and fixpipes its tile).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from mc2emu.apace.basic.fragment_l1_copy import FragmentCopyToL1
from mc2emu.apace.basic.fragment_tensor import FragmentSliceCopy, FragmentTensor
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx, BlockMmadMxType
from mc2emu.blaze.gemm.common_utils import FINAL_ACCUMULATION
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE
from mc2emu.blaze.tensor_api.copy import CopyL0C2GM, FixpipeParams
from mc2emu.numerics.constants import ALIGN_64_BYTES_SHIFT, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.int_math import Align64
from mc2emu.runtime.events import Fixpipe
from mc2emu.runtime.hazards import ConstraintError, KernelError

if TYPE_CHECKING:
    import numpy as np

    from mc2emu.blaze.tensor_api.tensor import GmTensor, L1Tensor
    from mc2emu.runtime.core import CoreContext


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
        super().__call__(gmA, gmB, gmScaleA, gmScaleB, gmBias, gmC, singleShape, splitKIdx)  # type: ignore[arg-type]

    def CopyScalesInL1(self, gmScaleA: Any, gmScaleB: GmTensor, curM: int, curN: int, scaleL1BufId: int,
                       kL1Offset: int, scaleGmOffset: int, needCopyScale: bool) -> tuple[L1Tensor, L1Tensor]:
        """`CopyScalesInL1` (mode 0): when the scales are due, scaleA gathered from the fragments, scaleB copied.
        A plain scaleA tensor (the slot ring's MAIN tiles, `CopyGmToL1`) is one contiguous copy."""
        if not isinstance(gmScaleA, FragmentTensor):
            return super().CopyScalesInL1(gmScaleA, gmScaleB, curM, curN, scaleL1BufId, kL1Offset, scaleGmOffset,
                                          needCopyScale)
        if needCopyScale:
            curScaleKL1 = self.scaleKL1_
            if kL1Offset + curScaleKL1 > self.k_:
                curScaleKL1 = self.k_ - kL1Offset
            scaleKLength = (Align64(curScaleKL1) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
            blockScaleA = gmScaleA.Slice((0, scaleGmOffset), (curM, scaleKLength))
            self._scaleAL1[scaleL1BufId] = FragmentCopyToL1(self.ctx, blockScaleA, (curM, scaleKLength))
            gmBlockScaleB = gmScaleB.Slice((scaleGmOffset, 0), (scaleKLength, curN))
            self._scaleBL1[scaleL1BufId] = gmBlockScaleB.load_l1(self.ctx)
        tensorScaleAL1, tensorScaleBL1 = self._scaleAL1[scaleL1BufId], self._scaleBL1[scaleL1BufId]
        if tensorScaleAL1 is None or tensorScaleBL1 is None:
            raise KernelError(f"{self.ctx.label}: L1 scale buffer {scaleL1BufId} read before any load")
        return tensorScaleAL1, tensorScaleBL1

    def CopyAInL1(self, gmA: Any, curM: int, curGmKL1: int, l1BufId: int, kL1Offset: int,
                  iter0: int) -> L1Tensor:
        """`CopyAInL1` (mode 0): PadMxKAL1Zero, then the gather of this K chunk's rows from the fragments. A
        plain A tensor (the slot ring's MAIN tiles, `CopyGmToL1`) is one contiguous copy."""
        if not isinstance(gmA, FragmentTensor):
            return super().CopyAInL1(gmA, curM, curGmKL1, l1BufId, kL1Offset, iter0)
        blockA = gmA.Slice((0, kL1Offset), (curM, curGmKL1))
        tensorAL1 = self._aL1[l1BufId] = FragmentCopyToL1(self.ctx, blockA, (curM, curGmKL1))
        return tensorAL1

    def CopyL0C2GM(self, gmC: Any, tensorL0C: np.ndarray, curM: int, curN: int, l0cOffset: int) -> None:
        """`ScatterL0C2GM`: `FragmentSliceCopy<true>(copyL0C2GM.with(FixpipeParams(3)), tensorL0C, gmC)`."""
        self.ctx.checkpoint("mmad")
        t0 = time.perf_counter_ns()
        FragmentSliceCopy(CopyL0C2GM(self.ctx).with_(FixpipeParams(FINAL_ACCUMULATION)), tensorL0C, gmC,
                          isScatter=True)
        self.ctx.emit(Fixpipe, tensor=gmC.name or "C", origin=gmC.origin, m=curM, n=curN, l0cOffset=l0cOffset,
                      dtype=str(self.T.CType), atomic=self.ctx.atomic_dtype is not None,
                      unitFlag=FINAL_ACCUMULATION, t0_ns=t0)
