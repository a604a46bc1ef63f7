"""BlockEpilogueAlltoAll — the AIV epilogue of the shipped quant_matmul_reduce_scatter kernel: after each matmul
block, scatter its C rows from the workspace to the owner ranks' windows.

Emulates ops-transformer `mc2/common/op_kernel/apace/block/epilogue/block_epilogue_all_to_all.h`
(hicann/ops-transformer 3e6c8dc4de): the two AIVs of a block alternate 32-row sub-tiles; each copies GM -> UB
(rows of paddingN = singleN rounded up to 32 bytes), then per run of rows with one owner
(dstRankId = globalRow / tpSizeM, the own rank included) UB -> that rank's window rows
rankId * tpSizeM + globalRow % tpSizeM, columns [nPos, + singleN).

UB is one byte array per AIV (`ub_bytes`), shared with the impl's reduction as on the device (both use
offsets from 0). The UB -> remote window copies take the UBMEM MTE3 path: one strided copy per run of rows
(`Shmem.put_local_rows_nbi`) when singleN < N, one contiguous `Shmem.put_local_nbi` when the tile spans all
of N; the MTE3_MTE2 wait completes them (`quiet`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from mc2emu.apace.comm_resource_builder import GetBaseWindAddrByRankId, GetRankDim, GetRankId, HcclOpParam
from mc2emu.blaze.gemm.common_utils import IDX_M_TILEIDX, IDX_N_TILEIDX
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr

BF16 = np.dtype(ml_dtypes.bfloat16)
UB_ALIGN_BYTES = 32
# `AIV_UB_TILE_M`: rows of one epilogue sub-tile.
AIV_UB_TILE_M = 32
# `AIV_AIC_RATIO`: MIX_AIC_1_2, the two AIVs of a block alternate sub-tiles.
AIV_AIC_RATIO = 2
# The UB byte array of one AIV (the usable UB of DAV_3510).
UB_REGION = "ub_bytes"


def ub_bytes(ctx: CoreContext) -> np.ndarray:
    """This AIV's UB as bytes (one region for every user, so offsets alias as on the device)."""
    return ctx.local.allocate(Position.VECCALC, UB_REGION, ctx.device.platform.ub_usable_size, np.uint8)


def ub_view(ub: np.ndarray, offset: int, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return ub[offset: offset + n].view(dtype).reshape(shape)


@dataclass(frozen=True)
class EpilogueParams:
    """`BlockEpilogueAlltoAll::Params`."""

    cGmAddr: GmAddr
    m: int
    n: int
    ubBaseOffset: int
    hcclContext: HcclOpParam


class BlockEpilogueAlltoAll:
    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.m_ = self.n_ = self.tpSizeM_ = 0
        self.tpWorldSize_ = self.rankId_ = 0
        self.ubBaseOffset_ = 0
        self.subtiles = 0

    def Init(self, params: EpilogueParams) -> None:
        self.m_, self.n_ = params.m, params.n
        self.ubBaseOffset_ = params.ubBaseOffset
        self.cGmAddr_ = params.cGmAddr
        self.winContext_ = params.hcclContext
        self.rankId_ = GetRankId(self.winContext_)
        self.tpWorldSize_ = GetRankDim(self.winContext_)
        if self.tpWorldSize_ > 0:
            self.tpSizeM_ = self.m_ // self.tpWorldSize_

    def __call__(self, mPos: int, nPos: int, singleShape: Any) -> None:
        self.CommProcess(mPos, nPos, singleShape)

    def CommProcess(self, mPos: int, nPos: int, singleShape: Any) -> None:
        ctx = self.ctx
        singleM, singleN = int(singleShape[IDX_M_TILEIDX]), int(singleShape[IDX_N_TILEIDX])
        if singleM <= 0 or singleN <= 0:
            return
        aivIdx = ctx.GetBlockIdx() % AIV_AIC_RATIO
        subTileCnt = CeilDiv(singleM, AIV_UB_TILE_M)
        rowPaddedBytes = CeilDiv(singleN * BF16.itemsize, UB_ALIGN_BYTES) * UB_ALIGN_BYTES
        paddingN = rowPaddedBytes // BF16.itemsize
        ub = ub_bytes(ctx)
        shmem = self.winContext_.shmem
        n_ = self.n_
        for st in range(aivIdx, subTileCnt, AIV_AIC_RATIO):
            subTileM = min(AIV_UB_TILE_M, singleM - st * AIV_UB_TILE_M)
            if subTileM <= 0:
                continue
            globalBaseM = mPos + st * AIV_UB_TILE_M
            ubTensor = ub_view(ub, self.ubBaseOffset_, BF16, (subTileM, paddingN))
            src = self.cGmAddr_ + (globalBaseM * n_ + nPos) * BF16.itemsize
            ubTensor[:, :singleN] = ctx.gm_read(src, BF16, (subTileM, singleN), (n_ * BF16.itemsize, BF16.itemsize))
            processed = 0
            while processed < subTileM:
                globalRow = globalBaseM + processed
                if self.tpSizeM_ == 0:
                    break
                dstRankId = globalRow // self.tpSizeM_
                if dstRankId >= self.tpWorldSize_:
                    break
                tpBoundary = (dstRankId + 1) * self.tpSizeM_
                rowsInBatch = min(subTileM - processed, tpBoundary - globalRow)
                if rowsInBatch <= 0:
                    break
                remote = GetBaseWindAddrByRankId(self.winContext_, dstRankId)
                row0 = self.rankId_ * self.tpSizeM_ + globalRow % self.tpSizeM_
                rows = ubTensor[processed: processed + rowsInBatch, :singleN]
                dst = remote.addr + (row0 * n_ + nPos) * BF16.itemsize
                if singleN == n_:
                    shmem.put_local_nbi(ctx, dst, rows, dstRankId)
                else:   # the window rows are N wide: one strided copy, rows N * 2 bytes apart
                    shmem.put_local_rows_nbi(ctx, dst, rows, n_ * BF16.itemsize, dstRankId)
                processed += rowsInBatch
            shmem.quiet(ctx)            # SetFlag / WaitFlag<MTE3_MTE2>: the copies out of UB are complete
            self.subtiles += 1
