"""The GroupedMatmul MX device entry: `grouped_matmul` (V310_GMM_QUANT_MX, ND weight) -> GmmCgmctMxKernel on the
AICs, and for split-K GQmmEmptyTensor on the AIVs.

Emulates ops-transformer (cannmirror/ops-transformer 25fb6b92):
- `gmm/grouped_matmul/op_kernel/grouped_matmul_apt.cpp`: the MX branches for an ND weight. NN and NT
  (split-M) run `GMM_QUANT_MX_IMPL_CLASS` on an AIC_ONLY launch; TN (transA, split-K) is MIX_AIC_1_2
  (`gqmm_tiling_key.h`): the AIVs run GQmmEmptyTensor, the AICs the kernel;
- `arch35/quant_adaptive_sliding_window_templates/gqmm_cgmct_mx_kernel.h` (`GmmCgmctMxKernel`);
- `gqmm_init_output.h` (`GQmmEmptyTensor`) and `quant_utils.h`: for split-K every group with K == 0 gets y[group]
  zero-filled by AIV sub-block 0 of the first realCoreNum blocks (perCoreSize = CeilDiv(m * n, blockNum)
  aligned up to 32 bytes). The AIC kernel skips those groups, so no flag orders the two sides (they write
  disjoint rows of y). Its group walk advances y by m * n per list entry.

`variant` picks the source kernel (kernel_qgmm_mx.py): CGMCT (default, the above), BLAZE (the `IS_BLAZE`
branch of hicann/ops-transformer grouped_matmul_apt.cpp 0baa2e82: `GmmTensorApiMxKernel` -> ops-tensor
kernel_qgmm_mx.h 03460a61 with `BlockMmadQgmmMx`; its TN branch runs the same GQmmEmptyTensor first) or
BLAZE_SAMPLE (ops-tensor's sample kernel's group loop and tail alignments, CGMCT's BlockMmad).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx import GROUP_LIST_TYPE_CUMSUM, GROUP_LIST_TYPE_SPARSE, _int32
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx_run import QGmmMxParams, kernel_qgmm_mx
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMxType
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

SPLIT_K = 2  # QuantUtils::SPLIT_K (groupType)
MAX_REPEAT_TIMES = 255  # QuantUtils::MAX_REPEAT_TIMES: the UB zero buffer holds 255 blocks
ONE_BLK_SIZE = 32  # AscendC::ONE_BLK_SIZE (bytes)
UB_ALIGN_SIZE = 32  # QuantUtils::UB_ALIGN_SIZE: perCoreSize aligned up to 32 bytes


def GetSplitValueFromGroupList(groupIdx: int, preOffset: int, groupListType: int,
                               groupList: list[int]) -> tuple[int, int]:
    """`QuantUtils::GetSplitValueFromGroupList` (returns (splitValue, preOffset)): the count form does not
    accumulate preOffset here (unlike the kernel's member of the same name; only cumsum reads it)."""
    if groupListType == GROUP_LIST_TYPE_CUMSUM:
        offset = _int32(groupList[groupIdx])
        return _int32(offset - preOffset), offset
    if groupListType == GROUP_LIST_TYPE_SPARSE:
        return _int32(groupList[groupIdx * 2 + 1]), preOffset
    return _int32(groupList[groupIdx]), preOffset


def InitOutputWithZero(ctx: CoreContext, yInit: GmAddr, dtype: np.dtype, initLocal: np.ndarray, ySize: int,
                       usedCoreNum: int) -> None:
    """`QuantUtils::InitOutputWithZero`: this AIV's share of ySize zeros (AIV sub-block 0 only)."""
    if ctx.ASCEND_IS_AIC or ctx.GetSubBlockIdx() >= 1:
        return
    taskRatio = ctx.GetTaskRation()
    if taskRatio == 0:
        return
    blockIndex = ctx.GetBlockIdx() // taskRatio
    item = dtype.itemsize
    initSize = MAX_REPEAT_TIMES * ONE_BLK_SIZE // item
    perCoreSize = -(-ySize // usedCoreNum)
    perCoreSize = -(-(perCoreSize * item) // UB_ALIGN_SIZE) * UB_ALIGN_SIZE // item
    initSize = min(initSize, perCoreSize)
    realCoreNum = min(-(-ySize // initSize), usedCoreNum)
    if blockIndex >= realCoreNum:
        return
    yOffset = perCoreSize * blockIndex
    outCurSize = ySize - yOffset if blockIndex == realCoreNum - 1 else perCoreSize
    movRound, movTail = divmod(outCurSize, initSize)
    zeros = initLocal[:initSize]
    for _ in range(movRound):
        ctx.gm_write(yInit + yOffset * item, zeros)  # DataCopyPad UB -> GM, initSize elements
        yOffset += initSize
    if movTail:
        ctx.gm_write(yInit + yOffset * item, zeros[:movTail])


def GQmmEmptyTensor(ctx: CoreContext, groupListPtr: GmAddr | None, y: GmAddr, dtype: Any, groupNum: int,
                    groupType: int, groupListType: int, m: int, n: int) -> None:
    """`GQmmEmptyTensor<DTYPE_Y>`: only split-K with K == 0 groups needs an output (zeros)."""
    if ctx.GetSubBlockIdx() > 1:
        return
    if groupListPtr is None or groupType != SPLIT_K:
        return
    dtype = np.dtype(dtype)
    entries = groupNum * (2 if groupListType == GROUP_LIST_TYPE_SPARSE else 1)
    groupList = [int(v) for v in ctx.gm_read(groupListPtr, np.int64, (entries,))]
    initLocal = np.zeros(0, dtype=dtype)
    if ctx.GetSubBlockIdx() == 0:
        initLocal = ctx.local.allocate(Position.VECCALC, "initLocal",
                                       MAX_REPEAT_TIMES * UB_ALIGN_SIZE // dtype.itemsize, dtype)
        initLocal[...] = 0  # Duplicate<T>(initLocal, 0, initSize), done once (isKZeroInit)
    yBaseOffset = 0
    preOffset = 0
    for groupIdx in range(groupNum):
        kSize, preOffset = GetSplitValueFromGroupList(groupIdx, preOffset, groupListType, groupList)
        if m == 0 or n == 0:
            continue
        ySize = m * n
        if kSize == 0:
            InitOutputWithZero(ctx, y + yBaseOffset * dtype.itemsize, dtype, initLocal, ySize, ctx.GetBlockNum())
        yBaseOffset += ySize


def grouped_matmul_mx(ctx: CoreContext, BlockMmad: BlockMmadMxType, params: QGmmMxParams,
                      variant: TailSplitVariant = TailSplitVariant.CGMCT) -> None:
    """`grouped_matmul` (MX, ND weight): the AIC kernel on AICs; for transA also GQmmEmptyTensor on AIVs."""
    if BlockMmad.transA:  # QUANT_A_TRANS == GMM_TRANS: the MIX_AIC_1_2 branch
        if ctx.ASCEND_IS_AIV:
            mp, p = params.mmadParams, params.gmmParams
            GQmmEmptyTensor(ctx, mp.groupListGmAddr, mp.cGmAddr, BlockMmad.CType, p.groupNum, p.groupType,
                            p.groupListType, p.m, p.n)
        if ctx.ASCEND_IS_AIC:
            kernel_qgmm_mx(ctx, BlockMmad, params, variant)
        return
    kernel_qgmm_mx(ctx, BlockMmad, params, variant)
