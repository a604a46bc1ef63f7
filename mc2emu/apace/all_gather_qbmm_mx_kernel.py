"""AllGatherQbmmMxKernel — the AIC side of all_gather_quant_matmul (seed 000 §7.1, SPEC §7.1).

Emulates ops-transformer `mc2/common/op_kernel/apace/kernel/matmul/quant_batch_matmul/all_gather_qbmm_mx_kernel.h`
(commit 5778144076). Regions: HEAD (own rows, dep 0), MAIN round r (dep r + 1), TAIL (dep commTurn); `SetL2Cache`
per tile with the tile's extents (SPEC §5 "AG").
- Wait orders: "mask" is the source up to f241800c4 (`qmm_mx_kernel_ag_udma.h`, `waitedMask`: each dep once, then
  a drain of 0..commTurn); "in_order" follows 42f69c50f (a flag-0 wait, in-order waits, an in-order drain).
- Slot ring (`enableBufferReuse`, `UrmaBufferSync`, hicann 67a83540d75e): rounds in order, round r's slot released
  before round r + 1 is acquired when r < commTurn - slotNum; `MAX_RANK_SIZE = 16U` (R <= 16) and `isBias` (the
  (1, N) fp32 bias slice of the tile's columns, added on the first K step). The seed kernel has `[8]` arrays and
  no bias.
- Ids past 15 wrap to 4 bits (SPEC §2, FLAG_ID_TRUNCATED). In order every Wait still consumes its own round's
  Set; the mask kernel's first wait on a wrapped id can consume an earlier round's Set and read the late round's
  rows unproven (READ_BEFORE_WAIT), from commTurn 16 on.
- Variants (`AgKernelVariant`): SKIP_FLAG0_WAIT (UNCONSUMED_FLAG; no source version did this);
  UPDATE_ADDR_BEFORE_WAIT (seed 000 §7 constraint 2, ADDR_LIST_UPDATED_EARLY). A block straddling two regions is
  resolved by its first row, as the source does: its rows past the region's fragments are FRAGMENT_OUT_OF_RANGE.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from mc2emu.apace.basic.fragment_tensor import MAX_FRAGMENT_COUNT, FragmentParam, FragmentTensor, MakeFragmentTensor
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch.platform import Pipe
from mc2emu.blaze.gemm.block.block_mmad_mx import L1Params
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams
from mc2emu.blaze.gemm.common_utils import FP8_CACHE_LINE_ALIGN_MASK, IDX_M_TILEIDX, IDX_N_TILEIDX, BlockCoord
from mc2emu.blaze.tensor_api.layout import (
    DNExtLayoutPtn,
    FrameLayoutFormat,
    NDExtLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import CacheMode, MakeMemPtr, MakeTensor
from mc2emu.numerics.constants import C0_SIZE_B8, SCALE_C0
from mc2emu.numerics.formats import E8M0_DTYPE, gm_storage_dtype
from mc2emu.runtime.events import FaultFired
from mc2emu.runtime.faults import Fault, FaultHook
from mc2emu.runtime.hazards import Hazard

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData

# `kCacheLineAlignMask` of the kernel: fixed to the FP8 128-byte mask (the kernel is FP8 only).
K_CACHE_LINE_ALIGN_MASK = FP8_CACHE_LINE_ALIGN_MASK
# `#define WINDOW_LEN 1L` before the scheduler include: no serpentine M windows in this kernel.
AG_WINDOW_LEN = 1
# `cFragAddrs_[8]` and friends (seed, 5778144076); `MAX_RANK_SIZE = 16U` (slot ring, 67a83540d75e).
MAX_RANK_ADDRS = 8
MAX_RANK_SIZE = 16
# `curMainRoundIdx_{0xFFFFFFFF}`: no MAIN fragment built yet.
NO_ROUND = 0xFFFFFFFF


class RegionTag(enum.IntEnum):
    HEAD = 0
    MAIN = 1
    TAIL = 2


class AgKernelVariant(enum.Enum):
    """The source kernel, or one of its reproduced hazards (module docstring)."""

    SOURCE = "source"
    SKIP_FLAG0_WAIT = "skip_flag0_wait"
    UPDATE_ADDR_BEFORE_WAIT = "update_addr_before_wait"
    SKIP_RELEASE_WAIT = "skip_release_wait"   # slot ring only: the AIV reuses a slot without the AIC's release


@dataclass(frozen=True)
class QBMMTiling:
    baseM: int
    baseN: int
    baseK: int
    dbL0C: int


@dataclass(frozen=True)
class FragmentParams:
    """`FragmentParams` (field order of the source)."""

    tileCnt: int
    tileM: int
    tailCnt: int
    tailM: int
    paddedTailM: int
    commTurn: int
    headRows: int
    rankId: int
    rankSize: int
    mPerRank: int
    k: int
    n: int
    scaleKLen: int


@dataclass(frozen=True)
class Params:
    mmTile: QuantMatmulTilingData
    qbmmParams: QBMMTiling
    fragParams: FragmentParams
    aGM: GmAddr
    aScaleGM: GmAddr
    bGM: GmAddr
    bScaleGM: GmAddr
    cGM: GmAddr
    winDataBase: GmAddr
    winScaleBase: GmAddr
    dataBytesPerMRow: int
    scaleBytesPerMRow: int
    cBytesPerM: int
    biasGM: GmAddr | None = None     # the source's field order has biasGM / isBias after cGM (67a83540d75e)
    isBias: bool = False


@dataclass
class TileCtx:
    dependTileIdx: int
    roundIdx: int
    region: RegionTag
    regionMPos: int
    fragA: FragmentTensor
    fragScaleA: FragmentTensor
    fragC: FragmentTensor
    rankCnt: int


class AllGatherQbmmMxKernel:
    """One AIC's instance. `BlockMmadFragC` is a `QmmMxBlockMmadFragmentType`; `scheduler_cls` the bound
    `BlockSchedulerQuantBatchMatmulV3.template(..., window_len=AG_WINDOW_LEN)`."""

    def __init__(self, ctx: CoreContext, BlockMmadFragC: Any, scheduler_cls: Any, *,
                 wait_order: WaitOrder = WaitOrder.MASK, variant: AgKernelVariant = AgKernelVariant.SOURCE,
                 enableBufferReuse: bool = False, bufferSyncMgr: Any = None) -> None:
        self.ctx = ctx
        # `enableBufferReuse`: the slot ring; `bufferSyncMgr_` its `UrmaBufferSync`.
        self.enableBufferReuse = enableBufferReuse
        self.bufferSyncMgr_ = bufferSyncMgr
        self.dataChannel_: Any = None    # BufferChannel*, injected by SetChannels
        self.scaleChannel_: Any = None
        self.readyRound_ = -1            # reuse path: the last round acquired (`readyTileIdx`)
        self.BlockMmadFragC = BlockMmadFragC
        self.BlockScheduler = scheduler_cls
        self.wait_order = wait_order
        self.variant = variant
        self.weightNz = bool(BlockMmadFragC.WEIGHT_NZ)
        self.AType = gm_storage_dtype(BlockMmadFragC.AType)
        self.BType = gm_storage_dtype(BlockMmadFragC.BType)
        self.CType = BlockMmadFragC.CType
        self.MakeLayoutA = FrameLayoutFormat(NDExtLayoutPtn, C0_SIZE_B8)
        self.MakeLayoutScaleA = FrameLayoutFormat(ScaleANDLayoutPtn, SCALE_C0)
        self.MakeLayoutB = FrameLayoutFormat(DNExtLayoutPtn, C0_SIZE_B8)
        self.MakeLayoutScaleB = FrameLayoutFormat(ScaleBDNLayoutPtn, SCALE_C0)
        self.MakeLayoutC = FrameLayoutFormat(NDExtLayoutPtn)
        rankAddrs = MAX_RANK_SIZE if enableBufferReuse else MAX_RANK_ADDRS
        self.cFragAddrs_: list[Any] = [None] * rankAddrs  # GM_ADDR[]: nullptr until filled
        self.winDataRankBase_: list[Any] = [None] * rankAddrs  # GM_ADDR[]: nullptr until filled
        self.winScaleRankBase_: list[Any] = [None] * rankAddrs  # GM_ADDR[]: nullptr until filled
        self.headAddrListA_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.headAddrListScale_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.headAddrListC_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.mainAddrListA_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.mainAddrListScale_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.mainAddrListC_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.tailAddrListA_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.tailAddrListScale_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.tailAddrListC_: list[GmAddr | None] = [None] * MAX_FRAGMENT_COUNT
        self.headFragA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.headFragScaleA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.headFragC_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.curMainA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.curMainScaleA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.curMainC_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.tailFragA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.tailFragScaleA_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.tailFragC_: FragmentTensor = cast("FragmentTensor", None)  # built on first use
        self.curMainRoundIdx_ = NO_ROUND
        self.winBasesReady_ = False
        self.tailBuilt_ = False
        self.curRoundDataOff_ = 0
        self.curRoundScaleOff_ = 0
        self.curRoundCOff_ = 0
        self.tileMDataStride_ = 0
        self.tileMScaleStride_ = 0
        self.tileMCStride_ = 0
        self.mmadFrag: Any = None
        self.tiles_done = 0
        self.waited: list[int] = []       # flag ids in the order this core waited them
        # the flag ids waited so far (the hazard check of UpdateAddrList reads it)
        self._waitedIds: set[int] = set()

    def __call__(self, params: Params) -> None:
        self.Run(params)

    def SetChannels(self, dataChannel: Any, scaleChannel: Any) -> None:
        """The impl's channels (slotNum / slotSize come from them; this core advances its own cursor)."""
        self.dataChannel_ = dataChannel
        self.scaleChannel_ = scaleChannel

    # -- Init / Run --------------------------------------------------------------------------------------------
    def Init(self, params: Params) -> bool:
        if self.ctx.ASCEND_IS_AIV:
            return False
        self.aGmAddr_, self.bGmAddr_, self.cGmAddr_ = params.aGM, params.bGM, params.cGM
        self.scaleAGmAddr_, self.scaleBGmAddr_ = params.aScaleGM, params.bScaleGM
        self.biasGmAddr_ = params.biasGM
        return True

    def Run(self, params: Params) -> None:
        if not self.Init(params):
            return
        mmT, fp = params.mmTile, params.fragParams
        Ki, Ni = fp.k, fp.n
        hasTail = fp.tailCnt > 0 and fp.tailM > 0
        headMainRows = fp.headRows
        mainRoundRows = (fp.rankSize - 1) * fp.tileM
        mainSectionRows = fp.tileCnt * mainRoundRows
        tailRows = fp.rankSize * fp.paddedTailM if hasTail else 0
        totalLogicalM = headMainRows + mainSectionRows + tailRows
        schParams = BlockSchedulerQbmmParams(mmT.baseM, mmT.baseN, mmT.mTailTile, mmT.nTailTile,
                                             mmT.mBaseTailSplitCnt, mmT.nBaseTailSplitCnt, mmT.mTailMain,
                                             mmT.nTailMain)
        l0TileShape = (mmT.baseM, mmT.baseN, mmT.baseK, 0)
        fragL1 = L1Params(mmT.stepK * mmT.baseK, mmT.scaleKL1, mmT.nBufferNum)
        problemShape = (totalLogicalM, Ni, Ki, 1)
        sch = self.BlockScheduler(problemShape, schParams, self.ctx)
        self.mmadFrag = self.BlockMmadFragC(self.ctx)
        self.mmadFrag.Init(problemShape, l0TileShape, fragL1, params.isBias, mmT.dbL0c > 1)
        self.BuildFragmentTensors(params)
        self.Process(params, problemShape, sch, self.mmadFrag)

    # -- waits -------------------------------------------------------------------------------------------------
    def _fault_skips(self, flagId: int) -> bool:
        """The `wait_tile` fault hook (stress): SKIP_WAIT_TILE drops this wait, its round stays unconsumed."""
        ctx = self.ctx
        faults = ctx.device.faults
        if faults is not None and faults.fires(FaultHook.WAIT_TILE, ctx.rank, ctx.label):
            ctx.emit(FaultFired, fault=faults.fault, at=flagId)
            return faults.fault is Fault.SKIP_WAIT_TILE
        return False

    def _wait(self, flagId: int) -> None:
        if self._fault_skips(flagId):
            return
        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, flagId)
        self.waited.append(flagId)
        self._waitedIds.add(flagId)

    def _acquire(self, flagId: int) -> None:
        """`bufferSyncMgr_.Acquire(flagId)` (reuse path)."""
        if self._fault_skips(flagId):
            return
        self.bufferSyncMgr_.Acquire(flagId)
        self.waited.append(flagId)
        self._waitedIds.add(flagId)

    def _process_setup(self, params: Params, sch: Any) -> tuple[int, int, int, int, int, int, Any, Any]:
        """The head of `Process` both instantiations share: K / N / scale-K, the HEAD / MAIN-round / MAIN-section
        row counts, the B and scaleB tensors, and the scheduler's tail-tile update."""
        mmT, fp = params.mmTile, params.fragParams
        Ki, Ni, scaleKLen = fp.k, fp.n, fp.scaleKLen
        mainRoundRows = (fp.rankSize - 1) * fp.tileM
        gmB = MakeTensor(MakeMemPtr(self.bGmAddr_, self.BType), self.MakeLayoutB(Ki, Ni), name="B")
        gmScaleB = MakeTensor(MakeMemPtr(self.scaleBGmAddr_, E8M0_DTYPE), self.MakeLayoutScaleB(scaleKLen, Ni),
                              name="scaleB")
        mTailTile, nTailTile = mmT.mTailTile, mmT.nTailTile
        if (sch.GetEndBlockIdx() + 1) * mTailTile * nTailTile <= self.ctx.GetBlockNum():
            sch.UpdateTailTile(mTailTile, nTailTile)
        return Ki, Ni, scaleKLen, fp.headRows, mainRoundRows, fp.tileCnt * mainRoundRows, gmB, gmScaleB

    def Process(self, params: Params, problemShape: tuple[int, int, int, int], sch: Any, mmadFrag: Any) -> None:
        if self.enableBufferReuse:
            self.ProcessBufferReuse(params, problemShape, sch, mmadFrag)
            return
        fp = params.fragParams
        Ki, Ni, scaleKLen, headMainRows, mainRoundRows, mainSectionRows, gmB, gmScaleB = \
            self._process_setup(params, sch)
        gmBias = None  # `biasNull`: a null tensor placeholder (isBias false)

        mask = self.wait_order is WaitOrder.MASK
        skip0 = self.variant is AgKernelVariant.SKIP_FLAG0_WAIT
        readyTileIdx = 0
        waitedMask = 0
        if not mask and not skip0:
            self._wait(0)   # dependTileIdx 0 is pre-set by the AIV: returns at once
        if mask and skip0:
            waitedMask |= 1  # the variant treats HEAD as needing no wait at all

        def wait_dep(dep: int) -> None:
            nonlocal readyTileIdx, waitedMask
            if mask:
                if not (waitedMask >> dep) & 1:
                    self._wait(dep)
                    waitedMask |= 1 << dep
            else:
                while readyTileIdx < dep:
                    readyTileIdx += 1
                    self._wait(readyTileIdx)

        blockIdx = BlockCoord()
        while sch.GetTileIdx(blockIdx):
            singleShape = sch.GetBlockShape(blockIdx, self.weightNz)
            curMtile, curNtile = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            if curMtile <= 0 or curNtile <= 0:
                break
            mPos, nPos = sch.GetTileCoord(blockIdx)
            tctx = self.ResolveTileCtx(mPos, headMainRows, mainRoundRows, mainSectionRows, fp.rankSize, fp.commTurn)
            early = self.variant is AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT
            if early:
                self._build_or_update(params, tctx)
            wait_dep(tctx.dependTileIdx)

            self.SetL2Cache(problemShape, curMtile, curNtile, gmB, gmScaleB)

            gmBlockB = gmB.Slice((0, nPos), (Ki, curNtile))
            gmBlockScaleB = gmScaleB.Slice((0, nPos), (scaleKLen, curNtile))
            gmBlockBias = gmBias
            coordA = (tctx.regionMPos, 0)
            coordC = (tctx.regionMPos, nPos)
            if not early:
                self._build_or_update(params, tctx)
            blockA = tctx.fragA.Slice(coordA, (curMtile, Ki))
            blockScaleA = tctx.fragScaleA.Slice(coordA, (curMtile, scaleKLen))
            blockC = tctx.fragC.Slice(coordC, (curMtile, curNtile))
            mmadFrag(blockA, gmBlockB, blockScaleA, gmBlockScaleB, gmBlockBias, self.cFragAddrs_, fp.mPerRank,
                     fp.tileM, fp.tileCnt, fp.tailM, tctx.rankCnt, Ni, singleShape, tctx.regionMPos, nPos, 0, blockC)
            self.tiles_done += 1

        # drain: every dependTileIdx is waited exactly once
        if mask:
            for t in range(fp.commTurn + 1):
                if not (waitedMask >> t) & 1:
                    self._wait(t)
        else:
            while readyTileIdx < fp.commTurn:
                readyTileIdx += 1
                self._wait(readyTileIdx)

    def ProcessBufferReuse(self, params: Params, problemShape: tuple[int, int, int, int], sch: Any,
                           mmadFrag: Any) -> None:
        """`Process` of the `enableBufferReuse = true` instantiation (the slot ring): in-order
        rounds (readyTileIdx from -1), each acquired at its slot's flag (slotIdx + 1) after releasing the round
        before it when that slot will be written again (r < commTurn - slotNum); MAIN tiles read A / scaleA as
        plain tensors at the round's slot offsets (rows packed by remote index), HEAD / TAIL through their
        fragments; the drain acquires (and releases) up to the last round."""
        fp = params.fragParams
        Ki, Ni, scaleKLen, headMainRows, mainRoundRows, mainSectionRows, gmB, gmScaleB = \
            self._process_setup(params, sch)
        # `biasPtr = params.isBias ? biasGmAddr_ : biasNull`: a (1, N) fp32 tensor, sliced per tile
        gmBias = (MakeTensor(MakeMemPtr(self.biasGmAddr_, mmadFrag.BiasType),
                             FrameLayoutFormat(NDExtLayoutPtn)(1, Ni), name="bias")
                  if params.isBias and self.biasGmAddr_ is not None else None)

        dataSlotNum = self.dataChannel_.GetSlotNum()
        self._acquire(0)   # HEAD's pre-set flag 0
        commTurnI = fp.commTurn
        readyTileIdx = -1
        dataSlotOffset = 0
        scaleSlotOffset = 0

        def advance() -> None:
            """One step of `while (readyTileIdx < dependRound)`: release the round done, acquire the next."""
            nonlocal readyTileIdx, dataSlotOffset, scaleSlotOffset
            if 0 <= readyTileIdx < commTurnI - dataSlotNum:
                self.bufferSyncMgr_.Release(self.dataChannel_.GetRoundSlotIdx(readyTileIdx) + 1)
            readyTileIdx += 1
            dataSlot = self.dataChannel_.GetNextSlot()
            self._acquire(dataSlot.slotIdx + 1)
            self.readyRound_ = readyTileIdx
            dataSlotOffset = dataSlot.offset
            scaleSlotOffset = self.scaleChannel_.GetNextSlot().offset

        blockIdx = BlockCoord()
        while sch.GetTileIdx(blockIdx):
            singleShape = sch.GetBlockShape(blockIdx, self.weightNz)
            curMtile, curNtile = singleShape[IDX_M_TILEIDX], singleShape[IDX_N_TILEIDX]
            if curMtile <= 0 or curNtile <= 0:
                break
            mPos, nPos = sch.GetTileCoord(blockIdx)
            tctx = self.ResolveTileCtx(mPos, headMainRows, mainRoundRows, mainSectionRows, fp.rankSize, fp.commTurn)
            early = self.variant is AgKernelVariant.UPDATE_ADDR_BEFORE_WAIT
            if early:
                self._build_or_update(params, tctx)
            dependRound = tctx.dependTileIdx - 1
            while readyTileIdx < dependRound:
                advance()

            self.SetL2Cache(problemShape, curMtile, curNtile, gmB, gmScaleB)

            gmBlockB = gmB.Slice((0, nPos), (Ki, curNtile))
            gmBlockScaleB = gmScaleB.Slice((0, nPos), (scaleKLen, curNtile))
            coordC = (tctx.regionMPos, nPos)
            if not early:
                self._build_or_update(params, tctx)
            if tctx.region == RegionTag.MAIN:
                # MAIN reads the slot contiguously: the R - 1 remote tiles packed by remote index, so
                # regionMPos is the row inside the slot (data slots wrap, scale slots do not).
                # The source's layout has mainRoundRows rows; its slice is not bounds-checked, so a block that
                # crosses the round's end (small m, AdjustBasicBlock's baseM) reads on past the slot (the next
                # slot, the scale region): the emulated layout is widened to let that read through, the host
                # pads the window by baseM rows, and the C scatter drops those rows (FRAGMENT_OUT_OF_RANGE).
                slotRows = max(mainRoundRows, tctx.regionMPos + curMtile)
                gmA = MakeTensor(MakeMemPtr(params.winDataBase + dataSlotOffset, self.AType),
                                 self.MakeLayoutA(slotRows, Ki), name="winA")
                gmScaleA = MakeTensor(MakeMemPtr(params.winScaleBase + scaleSlotOffset, E8M0_DTYPE),
                                      self.MakeLayoutScaleA(slotRows, scaleKLen), name="winScaleA")
                blockA: Any = gmA.Slice((tctx.regionMPos, 0), (curMtile, Ki))
                blockScaleA: Any = gmScaleA.Slice((tctx.regionMPos, 0), (curMtile, scaleKLen))
            else:
                coordA = (tctx.regionMPos, 0)
                blockA = tctx.fragA.Slice(coordA, (curMtile, Ki))
                blockScaleA = tctx.fragScaleA.Slice(coordA, (curMtile, scaleKLen))
            blockC = tctx.fragC.Slice(coordC, (curMtile, curNtile))
            gmBlockBias = gmBias.Slice((0, nPos), (1, curNtile)) if gmBias is not None else None
            mmadFrag(blockA, gmBlockB, blockScaleA, gmBlockScaleB, gmBlockBias, self.cFragAddrs_, fp.mPerRank,
                     fp.tileM, fp.tileCnt, fp.tailM, tctx.rankCnt, Ni, singleShape, tctx.regionMPos, nPos, 0, blockC)
            self.tiles_done += 1

        # drain: every round acquired; the rounds whose slots are written again released (a core with no tile
        # that left them unreleased would leave the writer waiting forever). The source repeats the loop body
        # here (without the scale cursor, which nothing reads after it).
        while readyTileIdx < commTurnI - 1:
            advance()

    def _build_or_update(self, params: Params, tctx: TileCtx) -> None:
        """MAIN / TAIL fragment tensors built on first use (MAIN addresses moved when the round changes);
        `ResolveTileCtx` handed out the member tensors, which these calls (re)assign, so the ctx is refreshed."""
        if tctx.region == RegionTag.MAIN:
            if self.curMainRoundIdx_ == NO_ROUND:
                self.BuildMainFragment(params, tctx.roundIdx)
            elif self.curMainRoundIdx_ != tctx.roundIdx:
                self.UpdateMainRoundAddrs(params, tctx.roundIdx)
            tctx.fragA, tctx.fragScaleA, tctx.fragC = self.curMainA_, self.curMainScaleA_, self.curMainC_
        elif tctx.region == RegionTag.TAIL and not self.tailBuilt_:
            self.BuildTailFragment(params)
            self.tailBuilt_ = True
            tctx.fragA, tctx.fragScaleA, tctx.fragC = self.tailFragA_, self.tailFragScaleA_, self.tailFragC_

    # -- L2 cache hints (SPEC §5 "AG") ---------------------------------------------------------------------------
    def SetL2Cache(self, problemShape: tuple[int, int, int, int], baseM: int, baseN: int, gmB: Any,
                   gmScaleB: Any) -> None:
        """Per tile, with the tile's own extents as baseM / baseN (the source passes curMtile, curNtile):
        B (DN) streams (DISABLE) when the tile covers all of M and K is 128-byte aligned; scaleB when the tile
        covers all of M and both N * 2 and baseN * 2 are 128-byte aligned. (SPEC §5 lists the B rule by K
        alignment alone; the source gates it by the full-M test too.)"""
        M, N, K, _ = problemShape
        fullMBlock = baseM >= M
        mask = K_CACHE_LINE_ALIGN_MASK
        if self.weightNz:
            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock else CacheMode.CACHE_MODE_NORMAL)
        else:
            bAlignForL2Stream = (K & mask) == 0
            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock and bAlignForL2Stream
                               else CacheMode.CACHE_MODE_NORMAL)
        scaleNStrideBytes = N * SCALE_C0
        scaleBaseNStrideBytes = baseN * SCALE_C0
        scaleAlign = (scaleNStrideBytes & mask) == 0 and (scaleBaseNStrideBytes & mask) == 0
        gmScaleB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock and scaleAlign
                                else CacheMode.CACHE_MODE_NORMAL)

    # -- FragmentTensor builders -------------------------------------------------------------------------------
    @staticmethod
    def MakeFragParam(fragSize: int, realFragSize: int, fragCnt: int, shape1: int) -> FragmentParam:
        return FragmentParam((fragSize * fragCnt, shape1), fragSize, realFragSize, 0, fragCnt)

    def _frag_a(self, param: FragmentParam, lst: list[GmAddr | None], name: str) -> FragmentTensor:
        return MakeFragmentTensor(param, lst, LayoutFactory=self.MakeLayoutA, ElementType=self.AType, name=name)

    def _frag_scale(self, param: FragmentParam, lst: list[GmAddr | None], name: str) -> FragmentTensor:
        return MakeFragmentTensor(param, lst, LayoutFactory=self.MakeLayoutScaleA, ElementType=E8M0_DTYPE, name=name)

    def _frag_c(self, param: FragmentParam, lst: list[GmAddr | None], name: str) -> FragmentTensor:
        return MakeFragmentTensor(param, lst, LayoutFactory=self.MakeLayoutC, ElementType=self.CType, name=name)

    def BuildFragmentTensors(self, params: Params) -> None:
        fp = params.fragParams
        for r in range(fp.rankSize):
            self.cFragAddrs_[r] = params.cGM + r * fp.mPerRank * params.cBytesPerM
        self.tileMDataStride_ = fp.tileM * params.dataBytesPerMRow
        self.tileMScaleStride_ = fp.tileM * params.scaleBytesPerMRow
        self.tileMCStride_ = fp.tileM * params.cBytesPerM
        # HEAD: this rank's own rows, one fragment.
        self.headAddrListA_[0] = params.aGM
        self.headAddrListScale_[0] = params.aScaleGM
        self.headAddrListC_[0] = self.cFragAddrs_[fp.rankId]
        self.headFragA_ = self._frag_a(self.MakeFragParam(fp.headRows, fp.headRows, 1, fp.k), self.headAddrListA_,
                                       "headFragA_")
        self.headFragScaleA_ = self._frag_scale(self.MakeFragParam(fp.headRows, fp.headRows, 1, fp.scaleKLen),
                                                self.headAddrListScale_, "headFragScaleA_")
        self.headFragC_ = self._frag_c(self.MakeFragParam(fp.headRows, fp.headRows, 1, fp.n), self.headAddrListC_,
                                       "headFragC_")

    def EnsureWinRankBasesReady(self, params: Params) -> None:
        if self.winBasesReady_:
            return
        fp = params.fragParams
        for r in range(fp.rankSize):
            self.winDataRankBase_[r] = params.winDataBase + r * fp.mPerRank * params.dataBytesPerMRow
            self.winScaleRankBase_[r] = params.winScaleBase + r * fp.mPerRank * params.scaleBytesPerMRow
        self.winBasesReady_ = True

    def _check_round_waited(self, roundIdx: int, what: str) -> None:
        """Seed 000 §7 constraint 2: the round's addresses may change only once its flag has been waited."""
        dep = roundIdx + 1
        if self.enableBufferReuse:
            # reuse path: rounds are acquired in order at their slot's flag; the round must be acquired
            if roundIdx <= self.readyRound_:
                return
            dep = self.dataChannel_.GetRoundSlotIdx(roundIdx) + 1
        elif dep in self._waitedIds:
            return
        self.ctx.device.hazards.report(
            Hazard.ADDR_LIST_UPDATED_EARLY, self.ctx.label,
            f"{what} for MAIN round {roundIdx} before CrossCoreWaitFlag({dep}) (waited so far: "
            f"{sorted(self._waitedIds)}): the previous tile's copies may still read through the list",
            round=roundIdx, flag=dep, waited=sorted(self._waitedIds))

    def BuildMainFragment(self, params: Params, roundIdx: int) -> None:
        """MAIN fragments of `roundIdx`. Reuse path: only C (A / scaleA are read at the slot offsets)."""
        self._check_round_waited(roundIdx, "BuildMainFragment")
        reuse = self.enableBufferReuse
        if not reuse:
            self.EnsureWinRankBasesReady(params)
        fp = params.fragParams
        if not reuse:
            self.curRoundDataOff_ = roundIdx * self.tileMDataStride_
            self.curRoundScaleOff_ = roundIdx * self.tileMScaleStride_
        self.curRoundCOff_ = roundIdx * self.tileMCStride_
        self._fill_main_lists(fp)
        cnt = fp.rankSize - 1
        if not reuse:
            self.curMainA_ = self._frag_a(self.MakeFragParam(fp.tileM, fp.tileM, cnt, fp.k), self.mainAddrListA_,
                                          "curMainA_")
            self.curMainScaleA_ = self._frag_scale(self.MakeFragParam(fp.tileM, fp.tileM, cnt, fp.scaleKLen),
                                                   self.mainAddrListScale_, "curMainScaleA_")
        self.curMainC_ = self._frag_c(self.MakeFragParam(fp.tileM, fp.tileM, cnt, fp.n), self.mainAddrListC_,
                                      "curMainC_")
        self.curMainRoundIdx_ = roundIdx

    def _fill_main_lists(self, fp: FragmentParams) -> None:
        fragIdx = 0
        for r in range(fp.rankSize):
            if r == fp.rankId:
                continue
            if not self.enableBufferReuse:
                self.mainAddrListA_[fragIdx] = self.winDataRankBase_[r] + self.curRoundDataOff_
                self.mainAddrListScale_[fragIdx] = self.winScaleRankBase_[r] + self.curRoundScaleOff_
            self.mainAddrListC_[fragIdx] = self.cFragAddrs_[r] + self.curRoundCOff_
            fragIdx += 1

    def BuildTailFragment(self, params: Params) -> None:
        reuse = self.enableBufferReuse
        if not reuse:
            self.EnsureWinRankBasesReady(params)
        fp = params.fragParams
        tailRowOff = fp.headRows
        tailDataOff = tailRowOff * params.dataBytesPerMRow
        tailScaleOff = tailRowOff * params.scaleBytesPerMRow
        tailCOff = tailRowOff * params.cBytesPerM
        # Reuse path: TAIL is round tileCnt, addressed by hand (not through the channel cursor): the data slot
        # wraps (tileCnt % slotNum), the scale slot does not.
        dataSlotOff = scaleSlotOff = 0
        if reuse:
            dataSlotOff = (fp.tileCnt % self.dataChannel_.GetSlotNum()) * ((fp.rankSize - 1) * self.tileMDataStride_)
            scaleSlotOff = fp.tileCnt * ((fp.rankSize - 1) * self.tileMScaleStride_)
        for r in range(fp.rankSize):
            if r == fp.rankId:
                self.tailAddrListA_[r] = params.aGM + tailDataOff
                self.tailAddrListScale_[r] = params.aScaleGM + tailScaleOff
            elif reuse:
                # packed remote tiles: remoteIdx is the rank's place with this rank skipped (the writer's layout)
                remoteIdx = r - 1 if r > fp.rankId else r
                self.tailAddrListA_[r] = params.winDataBase + dataSlotOff + remoteIdx * self.tileMDataStride_
                self.tailAddrListScale_[r] = params.winScaleBase + scaleSlotOff + remoteIdx * self.tileMScaleStride_
            else:
                self.tailAddrListA_[r] = self.winDataRankBase_[r] + tailDataOff
                self.tailAddrListScale_[r] = self.winScaleRankBase_[r] + tailScaleOff
            self.tailAddrListC_[r] = self.cFragAddrs_[r] + tailCOff
        self.tailFragA_ = self._frag_a(self.MakeFragParam(fp.paddedTailM, fp.tailM, fp.rankSize, fp.k),
                                       self.tailAddrListA_, "tailFragA_")
        self.tailFragScaleA_ = self._frag_scale(self.MakeFragParam(fp.paddedTailM, fp.tailM, fp.rankSize,
                                                                   fp.scaleKLen), self.tailAddrListScale_,
                                                "tailFragScaleA_")
        self.tailFragC_ = self._frag_c(self.MakeFragParam(fp.paddedTailM, fp.tailM, fp.rankSize, fp.n),
                                       self.tailAddrListC_, "tailFragC_")

    def UpdateMainRoundAddrs(self, params: Params, roundIdx: int) -> None:
        self._check_round_waited(roundIdx, "UpdateMainRoundAddrs")
        fp = params.fragParams
        delta = roundIdx - self.curMainRoundIdx_
        if not self.enableBufferReuse:
            self.curRoundDataOff_ += delta * self.tileMDataStride_
            self.curRoundScaleOff_ += delta * self.tileMScaleStride_
        self.curRoundCOff_ += delta * self.tileMCStride_
        self._fill_main_lists(fp)
        if not self.enableBufferReuse:
            assert self.curMainA_ is not None and self.curMainScaleA_ is not None
            self.curMainA_.UpdateAddrList(self.mainAddrListA_)
            self.curMainScaleA_.UpdateAddrList(self.mainAddrListScale_)
        self.curMainC_.UpdateAddrList(self.mainAddrListC_)
        self.curMainRoundIdx_ = roundIdx

    # -- tile context ------------------------------------------------------------------------------------------
    def ResolveTileCtx(self, mPos: int, headMainRows: int, mainRoundRows: int, mainSectionRows: int,
                       rankSize: int, commTurn: int) -> TileCtx:
        """The region of the tile's first row: HEAD (dep 0, rankCnt R - 1), MAIN round r (dep r + 1, R - 1),
        TAIL (dep commTurn, R)."""
        if mPos < headMainRows:
            return TileCtx(0, 0, RegionTag.HEAD, mPos, self.headFragA_, self.headFragScaleA_,
                           self.headFragC_, rankSize - 1)
        if mPos < headMainRows + mainSectionRows:
            relPos = mPos - headMainRows
            roundIdx = relPos // mainRoundRows
            return TileCtx(roundIdx + 1, roundIdx, RegionTag.MAIN, relPos % mainRoundRows,
                           self.curMainA_, self.curMainScaleA_, self.curMainC_, rankSize - 1)
        return TileCtx(commTurn, 0, RegionTag.TAIL, mPos - headMainRows - mainSectionRows, self.tailFragA_,
                       self.tailFragScaleA_, self.tailFragC_, rankSize)
