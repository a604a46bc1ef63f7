"""KernelQGmmMx's compute half: Init, UpdateOffset, UpdateMMGlobalAddr, the L2 hints, GetQuantOffset and Iterate.

Emulates ops-transformer `gmm/common/cgmct/kernel/kernel_qgmm_mx.h` (`Cgmct::Gemm::Kernel::KernelQGmmMx::Run`,
cannmirror/ops-transformer 25fb6b92) on one AIC, with `Coordinate::GetQuantOffset<MX_PERGROUP_MODE>` of
`gmm/common/cgmct/utils/coord_utils.h`. The group loop and the scheduler are `KernelQGmmMx.Tiles`
(`kernel_qgmm_mx.py`); this class adds what the source does around them: per group on this core
UpdateOffset, UpdateParamsForNextProblem, UpdateMMGlobalAddr and the L2 hints; per tile GetQuantOffset and
Iterate.

Offsets (elements; FP4 A / B halves of them are bytes) per UpdateOffset:
- split-M (not transA): A (preOffset - m) * k, B perGroupBOffset * groupIdx (n * k ND; NZ AlignC0(n) * Align16(k),
  transB Align16(n) * AlignC0(k), libochao-huawei 5778144 kernel_qgmm_mx.h Init), x1Scale
  (preOffset - m) * ceil(k/64) * 2, x2Scale groupIdx * n * ceil(k/64) * 2, y (preOffset - m) * n;
- split-K (transA): A m * (preOffset - k), B n * (preOffset - k), scales ((preOffset - k) / 64 + groupIdx) * 2
  rows of (m, 2) / (n, 2) (the (K/64 + g, ., 2) layout), y groupIdx * m * n;
- bias groupIdx * n. `if (groupIdx == 0) return;` keeps the previous group's offsets: with a sparse list
  that names group 0 after another group, group 0 reads and writes at that group's offsets (reproduced; the
  output write check reports the rows written twice and never).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from mc2emu.blaze.gemm.block.block_mmad_mx_cgmct import BlockMmadMxCgmct, CgmctL1Params
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.blaze.gemm.common_utils import DOUBLE_BUFFER_COUNT, MNK_K, MNK_M, MNK_N
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx import GMMTiling, KernelQGmmMx, QGmmTileTask
from mc2emu.blaze.tensor_api.layout import (
    DNExtLayoutPtn,
    FrameLayoutFormat,
    IsNz,
    MakeFrameLayout,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, GmTensor, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B4, C0_SIZE_B8, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype
from mc2emu.numerics.int_math import Align, Align16, CeilDiv
from mc2emu.runtime.events import TileTask
from mc2emu.runtime.hazards import KernelError

if TYPE_CHECKING:
    from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMxType
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

IDX_A_OFFSET, IDX_B_OFFSET, IDX_X1SCALE_OFFSET, IDX_X2SCALE_OFFSET, IDX_BIAS_OFFSET, IDX_C_OFFSET = range(6)
L2_ALIGN_MASK = 0xFF  # SetL2CacheDisableIfNeeded: K (transB) or N and baseN multiples of 256


@dataclass(frozen=True)
class QGmmMxMmadParams:
    """`BlockMmadMx::Params` (GM addresses; biasGmAddr None without a bias)."""

    aGmAddr: GmAddr
    bGmAddr: GmAddr
    x2ScaleGmAddr: GmAddr
    x1ScaleGmAddr: GmAddr
    cGmAddr: GmAddr
    biasGmAddr: GmAddr | None
    groupListGmAddr: GmAddr


@dataclass(frozen=True)
class QGmmMxParams:
    """`KernelQGmmMx::Params{problemShape, mmadParams, gmmParams}`."""

    mmadParams: QGmmMxMmadParams
    gmmParams: GMMTiling
    problemShape: tuple[int, int, int, int] = (1, 1, 1, 1)


def CalBOffset4LowerBits(transB: bool, weightNz: bool, k: int, nOffset: int, C0Size: int) -> int:
    """`Coordinate::CalBOffset4LowerBits<C0Size>` (coord_utils.h at 5778144): the tile's first B element; NZ
    (not transB) steps whole C0 blocks of Align16(k) rows, NZ transB rows of C0 inside the first k block."""
    if weightNz:
        return nOffset * C0Size if transB else nOffset * Align16(k)
    return nOffset * k if transB else nOffset


def GetQuantOffset(transA: bool, transB: bool, m: int, n: int, k: int, l1M: int, l1N: int, mTileIdx: int,
                   nTileIdx: int, mSplitOffset: int = 0, nSplitOffset: int = 0, weightNz: bool = False,
                   c0Size: int = 0) -> tuple[int, ...]:
    """`Coordinate<transA, transB, ND, formatB, ND>::GetQuantOffset<MX_PERGROUP_MODE, c0Size>`: element offsets
    of the tile in (A, B, x1Scale, x2Scale, bias, y) of the group."""
    mOffset = mTileIdx * l1M + mSplitOffset
    nOffset = nTileIdx * l1N + nSplitOffset
    scaleK = CeilDiv(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
    a = mOffset if transA else mOffset * k
    b = CalBOffset4LowerBits(transB, weightNz, k, nOffset, c0Size)
    x1 = mOffset * MXFP_MULTI_BASE_SIZE if transA else mOffset * scaleK
    x2 = nOffset * scaleK if transB else nOffset * MXFP_MULTI_BASE_SIZE
    return a, b, x1, x2, nOffset, mOffset * n + nOffset


class KernelQGmmMxRun(KernelQGmmMx):
    """One AIC's `KernelQGmmMx` object: `Run(params)` as the source (see the module docstring)."""

    def __init__(self, ctx: CoreContext, BlockMmad: BlockMmadMxType, gmmParams: GMMTiling, *,
                 variant: TailSplitVariant = TailSplitVariant.CGMCT) -> None:
        super().__init__(gmmParams, transA=BlockMmad.transA, transB=BlockMmad.transB, isFp4=BlockMmad.AType.is_fp4,
                         variant=variant)
        self.ctx = ctx
        self.BlockMmad = BlockMmad
        self.IS_FP4 = BlockMmad.AType.is_fp4
        self.mmadOp_ = cast(BlockMmadMxCgmct, BlockMmad(ctx))
        self.baseOffset_ = [0] * 6
        self.blockOffset_: tuple[int, ...] = (0,) * 6
        self.perGroupBOffset_ = 0
        self.isBias_ = False
        self.mmad: QGmmMxMmadParams | None = None
        self.groupList_: list[int] = []
        self.aGlobal_ = self.bGlobal_ = self.x1ScaleGlobal_ = self.x2ScaleGlobal_ = self.yGlobal_ = cast(GmTensor, None)
        self.biasGlobal_: GmTensor | None = None
        C0 = C0_SIZE_B4 if self.IS_FP4 else C0_SIZE_B8
        self.weightNz = IsNz(BlockMmad.LayoutB)  # formatB == CubeFormat::NZ (layout::Nz / layout::Zn)
        self.MakeLayoutA = FrameLayoutFormat(DNExtLayoutPtn if self.transA else NDExtLayoutPtn, C0)
        self.MakeLayoutB = FrameLayoutFormat(BlockMmad.LayoutB if self.weightNz else
                                             DNExtLayoutPtn if self.transB else NDExtLayoutPtn, C0)
        self.MakeLayoutScaleA = FrameLayoutFormat(ScaleADNLayoutPtn if self.transA else ScaleANDLayoutPtn, SCALE_C0)
        self.MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn if self.transB else ScaleBNDLayoutPtn, SCALE_C0)

    def __call__(self, params: QGmmMxParams) -> None:
        self.Run(params)

    def Run(self, params: QGmmMxParams) -> None:
        self.Init(params)
        for task in self.Tiles(self.groupList_, self.ctx):
            p = self.gmmParams
            m, n, k = task.problemShape
            self.blockOffset_ = GetQuantOffset(self.transA, self.transB, m, n, k, task.curBaseM, p.baseN,
                                               task.mTileIdx, task.nTileIdx, task.mSplitOffset, task.nSplitOffset,
                                               self.weightNz, self.c0Size)
            self.Iterate(task)

    def Init(self, params: QGmmMxParams) -> None:
        self.mmad = mp = params.mmadParams
        p = params.gmmParams
        self.isBias_ = p.isBias == 1
        if not self.transA:
            if not self.weightNz:
                self.perGroupBOffset_ = p.n * p.k
            elif self.transB:
                self.perGroupBOffset_ = Align16(p.n) * Align(p.k, self.c0Size)
            else:
                self.perGroupBOffset_ = Align(p.n, self.c0Size) * Align16(p.k)
        entries = p.groupNum * (2 if self.groupListType_ == 2 else 1)
        # groupListGlobal_.GetValue(i): the int64 group list read from GM (once here; the source reads lazily)
        self.groupList_ = [int(v) for v in self.ctx.gm_read(mp.groupListGmAddr, np.int64, (entries,))]
        l0Shape = (p.baseM, p.baseN, p.baseK)
        l1Params = CgmctL1Params(p.kAL1, p.kBL1, p.scaleKAL1)
        self.mmadOp_.Init(self.problemShape_, l0Shape, l1Params, self.isBias_, p.dbL0C == DOUBLE_BUFFER_COUNT)

    def BeginGroup(self, groupIdx: int) -> None:
        self.UpdateOffset(groupIdx)
        self.mmadOp_.UpdateParamsForNextProblem(self.problemShape_)
        self.UpdateMMGlobalAddr()
        if not self.isLastGroupAndNeedSplit_:
            self.SetL2CacheDisableIfNeeded(self.problemShape_[MNK_M], self.curBaseM_, self.gmmParams.baseN)

    def UpdateOffset(self, groupIdx: int) -> None:
        # offset is 0 when groupIdx = 0 (the previous group's offsets stay: see the module docstring)
        if groupIdx == 0:
            return
        m, n, k = (self.problemShape_[i] for i in (MNK_M, MNK_N, MNK_K))
        pre = self.preOffset_
        off = self.baseOffset_
        if not self.transA:  # split m, weight ND/NZ
            shift = 1 if self.IS_FP4 else 0
            off[IDX_A_OFFSET] = ((pre - m) * k) >> shift
            off[IDX_B_OFFSET] = (self.perGroupBOffset_ * groupIdx) >> shift
            scaleK = CeilDiv(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
            off[IDX_X1SCALE_OFFSET] = (pre - m) * scaleK
            off[IDX_X2SCALE_OFFSET] = groupIdx * n * scaleK
            off[IDX_C_OFFSET] = (pre - m) * n
        else:  # split k, weight ND only
            off[IDX_A_OFFSET] = m * (pre - k)
            off[IDX_B_OFFSET] = n * (pre - k)
            scaleK = ((pre - k) // MXFP_DIVISOR_SIZE + groupIdx) * MXFP_MULTI_BASE_SIZE
            off[IDX_X1SCALE_OFFSET] = m * scaleK
            off[IDX_X2SCALE_OFFSET] = n * scaleK
            off[IDX_C_OFFSET] = groupIdx * m * n
        off[IDX_BIAS_OFFSET] = groupIdx * n

    def UpdateMMGlobalAddr(self) -> None:
        """The group's GlobalTensors: base pointer + baseOffset_, with the group's (m, n, k) layouts."""
        T = self.BlockMmad
        mp = cast(QGmmMxMmadParams, self.mmad)
        m, n, k = (self.problemShape_[i] for i in (MNK_M, MNK_N, MNK_K))
        off = self.baseOffset_
        scaleKLen = CeilDiv(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        cItem = np.dtype(T.CType).itemsize
        self.aGlobal_ = MakeTensor(MakeMemPtr(mp.aGmAddr + off[IDX_A_OFFSET], gm_storage_dtype(T.AType)),
                                   self.MakeLayoutA(m, k), name="x")
        self.bGlobal_ = MakeTensor(MakeMemPtr(mp.bGmAddr + off[IDX_B_OFFSET], gm_storage_dtype(T.BType)),
                                   self.MakeLayoutB(k, n), name="weight")
        if self.isBias_:
            self.biasGlobal_ = MakeTensor(MakeMemPtr(cast("GmAddr", mp.biasGmAddr) + off[IDX_BIAS_OFFSET] * 4,
                                                     T.BiasType), MakeFrameLayout(NDExtLayoutPtn, 1, n), name="bias")
        self.x1ScaleGlobal_ = MakeTensor(MakeMemPtr(mp.x1ScaleGmAddr + off[IDX_X1SCALE_OFFSET], E8M0_DTYPE),
                                         self.MakeLayoutScaleA(m, scaleKLen), name="x1Scale")
        self.x2ScaleGlobal_ = MakeTensor(MakeMemPtr(mp.x2ScaleGmAddr + off[IDX_X2SCALE_OFFSET], E8M0_DTYPE),
                                         self.MakeLayoutScaleB(scaleKLen, n), name="x2Scale")
        self.yGlobal_ = MakeTensor(MakeMemPtr(mp.cGmAddr + off[IDX_C_OFFSET] * cItem, T.CType),
                                   MakeFrameLayout(NDExtLayoutPtn, m, n), name="y")

    def SetL2CacheDisableIfNeeded(self, mSize: int, curBaseM: int, baseN: int) -> None:
        """Disable B / x2Scale in L2 when one M tile covers the group and (ND weight) the weight streams aligned."""
        if self.weightNz:
            disable = curBaseM >= mSize
        elif self.transB:
            disable = curBaseM >= mSize and (self.problemShape_[MNK_K] & L2_ALIGN_MASK) == 0
        else:
            disable = curBaseM >= mSize and (self.problemShape_[MNK_N] & L2_ALIGN_MASK) == 0 \
                and (baseN & L2_ALIGN_MASK) == 0
        mode = CacheMode.CACHE_MODE_DISABLE if disable else CacheMode.CACHE_MODE_NORMAL
        self.bGlobal_.SetL2CacheHint(self.ctx, mode)
        self.x2ScaleGlobal_.SetL2CacheHint(self.ctx, mode)

    def _at(self, t: GmTensor, coord: tuple[int, int], shape: tuple[int, int], flat: int) -> GmTensor:
        """`global[flat]` of the source as a slice at the tile's logical coordinate (the layout maps the one to
        the other; a disagreement is a kernel bug, not a device behaviour)."""
        if t.layout.offset(coord) != flat:
            raise KernelError(f"{self.ctx.label}: {t.name} offset {flat} of GetQuantOffset is not the layout's "
                              f"offset {t.layout.offset(coord)} of tile coordinate {coord}")
        return t.Slice(coord, shape)

    def Iterate(self, task: QGmmTileTask) -> None:
        singleCoreM, singleCoreN = task.singleCoreM, task.singleCoreN
        k = self.problemShape_[MNK_K]
        mOff, nOff = task.mOffset, task.nOffset
        o = self.blockOffset_
        scaleKLen = CeilDiv(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        gA = self._at(self.aGlobal_, (mOff, 0), (singleCoreM, k), o[IDX_A_OFFSET])
        if self.weightNz:  # the tile's whole fractals: the 16-row axis to 16, the C0 axis to C0 (in the padding)
            kL = self.bGlobal_.shape[0]
            bShape = (kL, Align16(singleCoreN)) if self.transB else (kL, Align(singleCoreN, self.c0Size))
            gB = self._at(self.bGlobal_, (0, nOff), bShape, o[IDX_B_OFFSET])
        else:
            gB = self._at(self.bGlobal_, (0, nOff), (k, singleCoreN), o[IDX_B_OFFSET])
        gSA = self._at(self.x1ScaleGlobal_, (mOff, 0), (singleCoreM, scaleKLen), o[IDX_X1SCALE_OFFSET])
        gSB = self._at(self.x2ScaleGlobal_, (0, nOff), (scaleKLen, singleCoreN), o[IDX_X2SCALE_OFFSET])
        gBias = (self._at(self.biasGlobal_, (0, nOff), (1, singleCoreN), o[IDX_BIAS_OFFSET])
                 if self.biasGlobal_ is not None and self.isBias_ else None)
        gY = self._at(self.yGlobal_, (mOff, nOff), (singleCoreM, singleCoreN), o[IDX_C_OFFSET])
        self.ctx.checkpoint("mmad")
        # the trace's answer to "which core ran which group's tile, in which round" (instrumentation)
        self.mmadOp_.traceTile = TileTask(task.group, task.roundIdx, task.mTileIdx, task.nTileIdx)
        self.mmadOp_(gA, gB, gSA, gSB, gBias, gY, (singleCoreM, singleCoreN, k))

    def Destroy(self) -> None:
        self.mmadOp_.Destroy()


def kernel_qgmm_mx(ctx: CoreContext, BlockMmad: BlockMmadMxType, params: QGmmMxParams,
                   variant: TailSplitVariant = TailSplitVariant.CGMCT) -> Any:
    """`GmmKernel gmm; gmm(params);` on one AIC, then the destructors."""
    gmm = KernelQGmmMxRun(ctx, BlockMmad, params.gmmParams, variant=variant)
    gmm(params)
    gmm.Destroy()
