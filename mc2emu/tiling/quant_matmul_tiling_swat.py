"""Host tiling of the MX quant matmuls (QBMM MX, all_to_all_quant_matmul): the apace SWAT formulas.

Emulates ops-transformer `mc2/common/op_kernel/apace/tiling/quant_matmul_tiling_swat.h`
(`QuantMatmulTilingSwat<aDataType, bDataType>`, revision f241800c; revision 0ad72eea's bias L1 reserve,
baseM halving and AdjustBasicBlock switch are not emulated), its base `quant_matmul_tiling_base.h`, the
structs of `quant_matmul_tiling_common.h` / `quant_matmul_tiling_data.h` and `apace/utils/constant.h`
(SPEC §5). Method and field names are the source's (DoOpTiling: CalcBasicBlock -> OptimizeEdgeBasicBlock ->
CalcTailBasicBlock -> CalcPathSpecificL1 -> CalcScaleKL1 -> BuildTilingData).

Headline results: baseM = Align16(min(m, 256)) (Align to 32 B of A when transA), baseN = min(n, 256)
aligned to 16 (transB) or 32 B, baseK = Align64(min(k, 128)) (256 for FP4), AdjustBasicBlock when fewer
tiles than AICs; kL1 = min(stepKa, stepKb) * baseK; scaleKL1 = min(sfA * stepKa * baseK,
sfB * stepKb * baseK); nBufferNum 2; dbL0c = 2 when baseM * baseN * 4 * 2 <= L0C size, else 1;
usedCoreNum = aicNum unless a single tile is split among cores. The source's `PrintTilingData` is left out
(no prints in library code).

`QuantMatmulTilingData` (frozen) is the tiling result; `kL1` and `block_dim` are derived properties.
`can_implement(args)` lists every rule an input breaks (empty list: the shape can be tiled and run).
"""

from __future__ import annotations

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.blaze.gemm.common_utils import WINDOW_LEN
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import CUBE_BLOCK, FP8_C0_SIZE, MX_GROUP_SIZE, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.int_math import Align, CeilDiv, FloorAlign
from mc2emu.tiling.quant_matmul_tiling_data import (
    DataType,
    GetShapeWithDataType,
    GetSizeWithDataType,
    QuantMatmulArgs,
    QuantMatmulPlatformInfo,
    QuantMatmulRunInfo,
    QuantMatmulTilingData,
)

# --- apace/utils/constant.h (host tiling names) ---------------------------------------------------------------
DB_SIZE = 2  # double buffering: L1 depth counts two stages per stepK, nBufferNum, dbL0c
NUM_TWO = 2
BASEK_LIMIT = 4095  # baseK beyond this is halved (mmadParams.k is a uint16 with headroom)
DATA_SIZE_L0C = 4  # bytes per L0C accumulator (float32)
BASEM_BASEN_RATIO = 2  # AdjustBasicBlock rebalances tiles more skewed than 2:1
SCALER_FACTOR_MIN = 1  # scale reuse factor bounds of CalScaleFactors
SCALER_FACTOR_MAX = 127
MTE2_MIN_LOAD_SIZE = 32768  # bytes one MTE2 load should move to run at bandwidth
MTE2_CACHELINE_SIZE = 128  # GM cache line: K of A aligned to it enables edge-tile merging
BASIC_BLOCK_SIZE_16 = 16
BASIC_BLOCK_SIZE_128 = 128
BASIC_BLOCK_SIZE_256 = 256
BASIC_BLOCK_SIZE_512 = 512
L1_ALIGN_SIZE = 32  # bytes: the L1 row granule of a transposed operand
L2_ALIGN_SIZE = 128  # bytes: the L2 / GM cache-line granule
STEPK_MAX = 4  # CalStepKs caps stepKa / stepKb at 4
ALIGN_SPLIT_MAX_INCREMENT = 2  # CalcAlignedSplit tries growing a tail split by 1 or 2
UINT32_MAX = (1 << 32) - 1  # QuantMatmulTilingData serializes shapes as uint32


def dtype_pair_violations(aType: ElemFormat, bType: ElemFormat) -> list[str]:
    """The rule on the pair of element formats every SWAT-tiled MX matmul (QBMM, A2A) shares: both FP8 or
    both FP4 (one C0_SIZE and one L1 size rule serve both operands)."""
    if aType.is_fp4 != bType.is_fp4:
        return [f"aType {aType.value} / bType {bType.value}: both operands must be FP8 or both FP4 (one C0_SIZE "
                f"and one L1 size rule serve both)"]
    return []


def can_implement(args: QuantMatmulArgs, platform: PlatformSpec = DAV_3510) -> list[str]:
    """Every rule `args` breaks, each naming the parameter; an empty list means tiling and kernel accept it."""
    reasons: list[str] = []
    for name in ("m", "n", "k", "batch"):
        v = getattr(args, name)
        if not isinstance(v, int) or v <= 0:
            reasons.append(f"{name} = {v!r}: must be a positive integer")
        elif v > UINT32_MAX:
            reasons.append(f"{name} = {v}: QuantMatmulTilingData serializes shapes as uint32")
    a, b = ElemFormat.parse(args.aType, "aType"), ElemFormat.parse(args.bType, "bType")
    reasons += dtype_pair_violations(a, b)
    if reasons:
        return reasons
    if a.is_fp4:
        packed_a = args.m if args.transA else args.k
        packed_b = args.k if args.transB else args.n
        if packed_a % 2:
            reasons.append(f"{'m' if args.transA else 'k'} = {packed_a}: FP4 A is packed two per byte along its "
                           f"stored rows (transA={args.transA}), the count must be even")
        if packed_b % 2:
            reasons.append(f"{'k' if args.transB else 'n'} = {packed_b}: FP4 B is packed two per byte along its "
                           f"stored rows (transB={args.transB}), the count must be even")
    if not reasons:
        try:
            QuantMatmulTilingSwat(platform).GetTilingData(args.m, args.n, args.k, args.transA, args.transB, a, b)
        except ConstraintError as exc:
            reasons.append(str(exc))
    return reasons


class QuantMatmulTilingSwat:
    """`QuantMatmulTilingSwat<aDataType, bDataType>` (with its base's `GetTilingData` entry).

    `aic_num` overrides the platform's AIC count (a smaller launch is tiled as a smaller SKU)."""

    def __init__(self, platform: PlatformSpec = DAV_3510, aic_num: int | None = None, *,
                 isOpenOptimize: bool = True, enableMTailAlign: bool = False) -> None:
        self.platform = platform
        self.aic_num = aic_num
        self.isOpenOptimize_ = isOpenOptimize
        self.enableMTailAlign_ = enableMTailAlign
        self.args_ = QuantMatmulArgs(1, 1, 1)
        self.platformInfo_ = QuantMatmulPlatformInfo.from_platform(platform, aic_num)
        self.runInfo_ = QuantMatmulRunInfo()
        self.aDataType = DataType.DT_FLOAT8_E4M3FN
        self.bDataType = DataType.DT_FLOAT8_E4M3FN
        self.maxBaseM_ = BASIC_BLOCK_SIZE_256

    def SetMaxBaseM(self, v: int) -> None:
        """`SetMaxBaseM` (recursion-ascend a093e954 `quant_matmul_tiling_swat.h`; called by the shipped
        reduce-scatter's ST host): CalcBasicBlock caps its first baseM guess at `v` before aligning it."""
        self.maxBaseM_ = int(v)

    def SetOptimizeEnable(self, enable: bool) -> None:
        self.isOpenOptimize_ = enable

    def SetMTailAlignEnable(self, enable: bool) -> None:
        self.enableMTailAlign_ = enable

    def TilingName(self) -> str:
        return "swat"

    def GetTilingData(self, m: int, n: int, k: int, transA: bool = False, transB: bool = True,
                      aType: ElemFormat | str = ElemFormat.E4M3,
                      bType: ElemFormat | str | None = None) -> QuantMatmulTilingData:
        """Tiling of an (m, k) x (k, n) MX matmul; the source's default is transA = false, transB = true."""
        a = ElemFormat.parse(aType, "aType")
        b = a if bType is None else ElemFormat.parse(bType, "bType")
        self.args_ = QuantMatmulArgs(int(m), int(n), int(k), 1, bool(transA), bool(transB), a, b)
        self.platformInfo_ = QuantMatmulPlatformInfo.from_platform(self.platform, self.aic_num)
        self.runInfo_ = QuantMatmulRunInfo()
        self.aDataType = DataType.of(a)
        self.bDataType = DataType.of(b)
        if min(self.args_.m, self.args_.n, self.args_.k) <= 0:
            raise ConstraintError("m, n, k > 0", f"cannot tile an empty matmul ({m}, {n}, {k})")
        for reason in dtype_pair_violations(a, b):  # baseK is sized for A's type only (AdjustBasicBlock)
            raise ConstraintError("aType / bType both FP8 or both FP4", reason)
        return self.DoOpTiling()

    def DoOpTiling(self) -> QuantMatmulTilingData:
        self.CalcBasicBlock()
        if self.isOpenOptimize_:
            self.OptimizeEdgeBasicBlock()
        self.CalcTailBasicBlock()
        self.CalcPathSpecificL1()
        scaleKL1 = self.CalcScaleKL1()
        return self.BuildTilingData(scaleKL1, DB_SIZE)

    def CalcScaleKL1(self) -> int:
        r = self.runInfo_
        return min(r.scaleFactorA * r.stepKa * r.baseK, r.scaleFactorB * r.stepKb * r.baseK)

    def BuildTilingData(self, scaleKL1: int, nBufferNum: int) -> QuantMatmulTilingData:
        r, p, a = self.runInfo_, self.platformInfo_, self.args_
        usedCoreNum = (p.aicNum if (r.totalBlockCnt > 1 or r.tailBlockCnt == 0)
                       else r.tailBlockCnt * r.mTailTile * r.nTailTile)
        return QuantMatmulTilingData(
            m=a.m, n=a.n, k=a.k, baseM=r.baseM, baseN=r.baseN, baseK=r.baseK, scaleKL1=scaleKL1,
            mTailTile=r.mTailTile, nTailTile=r.nTailTile, mBaseTailSplitCnt=r.mBaseTailSplitCnt,
            nBaseTailSplitCnt=r.nBaseTailSplitCnt, mTailMain=r.mTailMain, nTailMain=r.nTailMain,
            usedCoreNum=usedCoreNum, stepK=min(r.stepKa, r.stepKb), nBufferNum=nBufferNum, dbL0c=r.dbL0c,
            runInfo=r)

    def CalcTailBasicBlock(self) -> None:
        r, p = self.runInfo_, self.platformInfo_
        if r.tailBlockCnt == 0:
            return
        # Non-full-load can split both M and N tail tiles. Grow the heavier edge first, but keep the total
        # tail work within the available cores.
        tiles = {"m": 1, "n": 1}
        preIsM = r.mTailSize >= r.nTailSize
        preKey, secKey = ("m", "n") if preIsM else ("n", "m")
        preSplit = 1
        secSplit = 1
        tileMax = p.aicNum // r.tailBlockCnt
        mTileMax = min(tileMax, CeilDiv(r.baseM, CUBE_BLOCK))
        nTileMax = min(tileMax, CeilDiv(r.baseN, CUBE_BLOCK))
        preSplitMax = mTileMax if preIsM else nTileMax
        secSplitMax = nTileMax if preIsM else mTileMax
        if self.enableMTailAlign_:
            while True:
                newPreTile, newSecTile = preSplit, secSplit
                if preSplit < preSplitMax and self.CalUsedCoreNum(preSplit + 1, secSplit) <= p.aicNum:
                    nxt = self.CalcAlignedSplit(preSplit, secSplit, preSplitMax, r.mTailSize if preIsM else 0)
                    if nxt > 0:
                        newPreTile = nxt
                if secSplit < secSplitMax and self.CalUsedCoreNum(newPreTile, secSplit + 1) <= p.aicNum:
                    nxt = self.CalcAlignedSplit(secSplit, newPreTile, secSplitMax, r.mTailSize if not preIsM else 0)
                    if nxt > 0:
                        newSecTile = nxt
                if newPreTile == preSplit and newSecTile == secSplit:
                    break
                preSplit, secSplit = newPreTile, newSecTile
                tiles[preKey], tiles[secKey] = newPreTile, newSecTile
        else:
            def can_pre() -> bool:
                return preSplit < preSplitMax and self.CalUsedCoreNum(preSplit + 1, secSplit) <= p.aicNum

            def can_sec() -> bool:
                return secSplit < secSplitMax and self.CalUsedCoreNum(preSplit, secSplit + 1) <= p.aicNum

            while can_pre() or can_sec():
                if can_pre():
                    preSplit += 1
                    tiles[preKey] = preSplit
                if can_sec():
                    secSplit += 1
                    tiles[secKey] = secSplit
        r.mTailTile = tiles["m"]
        r.nTailTile = tiles["n"]

    def CalcPathSpecificL1(self) -> None:
        r, p = self.runInfo_, self.platformInfo_
        baseASize = GetSizeWithDataType(self.aDataType, r.baseM * r.baseK)
        baseBSize = GetSizeWithDataType(self.bDataType, r.baseN * r.baseK)
        baseScaleASize = Align(CeilDiv(r.baseK, MX_GROUP_SIZE), MXFP_MULTI_BASE_SIZE) * r.baseM
        baseScaleBSize = Align(CeilDiv(r.baseK, MX_GROUP_SIZE), MXFP_MULTI_BASE_SIZE) * r.baseN
        baseL1Size = baseASize + baseBSize + baseScaleASize + baseScaleBSize
        depthInit = self.GetDepthA1B1(p.l1Size, baseL1Size, 1)
        leftL1SizeByDepthInit = p.l1Size - depthInit * baseL1Size
        depthASec = self.GetDepthA1B1(leftL1SizeByDepthInit, (baseASize + baseScaleASize) * depthInit, depthInit)
        depthBSec = self.GetDepthA1B1(leftL1SizeByDepthInit, (baseBSize + baseScaleBSize) * depthInit, depthInit)
        # Start from a symmetric A/B depth and only break symmetry if the budget cannot sustain it.
        r.depthA1 = max(depthASec, depthBSec)
        r.depthB1 = r.depthA1
        if r.depthA1 * baseL1Size > p.l1Size:
            r.depthA1 = depthASec if depthASec >= depthBSec else depthInit
            r.depthB1 = depthBSec if depthASec < depthBSec else depthInit
        self.CalStepKs()
        self.CalScaleFactors(baseASize, baseBSize, baseScaleASize, baseScaleBSize)

    def AdjustBasicBlock(self) -> None:
        """Re-balance the initial M/N split when the first guess leaves AICs idle or is highly skewed."""
        a, r, p = self.args_, self.runInfo_, self.platformInfo_
        baseMAlignNum = GetShapeWithDataType(self.aDataType, L2_ALIGN_SIZE) if a.transA else CUBE_BLOCK
        baseNAlignNum = CUBE_BLOCK if a.transB else GetShapeWithDataType(self.bDataType, L2_ALIGN_SIZE)
        baseKAlignNum = (GetShapeWithDataType(self.aDataType, FP8_C0_SIZE) if (a.transA and not a.transB)
                         else GetShapeWithDataType(self.aDataType, L2_ALIGN_SIZE))
        if a.transA or not a.transB:
            baseKAlignNum = GetShapeWithDataType(self.aDataType, MXFP_DIVISOR_SIZE)
        mMaxtile = CeilDiv(a.m, baseMAlignNum)
        nMaxtile = CeilDiv(a.n, baseNAlignNum)
        tempBaseM = r.baseM
        tempBaseN = r.baseN
        coreNumMN = p.aicNum
        if not (mMaxtile * nMaxtile >= coreNumMN or (not a.transA and a.transB)):
            return
        mCnt = CeilDiv(a.m, r.baseM)
        nCnt = CeilDiv(a.n, r.baseN)
        if mMaxtile > nMaxtile:
            tempBaseN = Align(CeilDiv(a.n, nCnt), baseNAlignNum)
            nCnt = CeilDiv(a.n, tempBaseN)
            mCnt = p.aicNum // nCnt
            tempBaseM = Align(CeilDiv(a.m, mCnt), baseMAlignNum)
        else:
            tempBaseM = Align(CeilDiv(a.m, mCnt), baseMAlignNum)
            mCnt = CeilDiv(a.m, tempBaseM)
            nCnt = p.aicNum // mCnt
            tempBaseN = Align(CeilDiv(a.n, nCnt), baseNAlignNum)
        while tempBaseN > tempBaseM * BASEM_BASEN_RATIO and nCnt < p.aicNum // NUM_TWO and tempBaseN != baseNAlignNum:
            nCnt = nCnt * NUM_TWO
            mCnt = p.aicNum // nCnt
            tempBaseM = Align(CeilDiv(a.m, mCnt), baseMAlignNum)
            tempBaseN = Align(CeilDiv(a.n, nCnt), baseNAlignNum)
            mCnt = CeilDiv(a.m, tempBaseM)
            nCnt = CeilDiv(a.n, tempBaseN)
        while tempBaseM >= tempBaseN * BASEM_BASEN_RATIO and mCnt < p.aicNum // NUM_TWO and tempBaseM != baseMAlignNum:
            mCnt = mCnt * NUM_TWO
            nCnt = p.aicNum // mCnt
            tempBaseM = Align(CeilDiv(a.m, mCnt), baseMAlignNum)
            tempBaseN = Align(CeilDiv(a.n, nCnt), baseNAlignNum)
            mCnt = CeilDiv(a.m, tempBaseM)
            nCnt = CeilDiv(a.n, tempBaseN)
        kAlignValue = Align(a.k, baseKAlignNum)
        kMaxValue = GetShapeWithDataType(self.aDataType, p.l0aSize // DB_SIZE) // max(tempBaseM, tempBaseN)
        kMaxValue = FloorAlign(kMaxValue, baseKAlignNum)
        if kMaxValue >= baseKAlignNum:
            r.baseM = tempBaseM
            r.baseN = tempBaseN
            r.baseK = min(kAlignValue, kMaxValue)
            r.baseK = Align(r.baseK // NUM_TWO, BASIC_BLOCK_SIZE_256) if r.baseK > BASEK_LIMIT else r.baseK

    def CalcBasicBlock(self) -> None:
        a, r, p = self.args_, self.runInfo_, self.platformInfo_
        r.baseM = min(a.m, BASIC_BLOCK_SIZE_256)
        if r.baseM > self.maxBaseM_:
            r.baseM = self.maxBaseM_
        r.baseM = (Align(r.baseM, CUBE_BLOCK) if not a.transA
                   else Align(r.baseM, GetShapeWithDataType(self.aDataType, L1_ALIGN_SIZE)))
        r.baseN = min(a.n, BASIC_BLOCK_SIZE_256)
        r.baseN = (Align(r.baseN, CUBE_BLOCK) if a.transB
                   else Align(r.baseN, GetShapeWithDataType(self.bDataType, L1_ALIGN_SIZE)))
        r.baseK = Align(min(a.k, BASIC_BLOCK_SIZE_256 if self.aDataType is DataType.DT_FLOAT4_E2M1
                            else BASIC_BLOCK_SIZE_128), MXFP_DIVISOR_SIZE)
        blockNum = CeilDiv(a.m, r.baseM) * CeilDiv(a.n, r.baseN)
        if blockNum < p.aicNum:
            self.AdjustBasicBlock()
        if r.baseM == 0 or r.baseN == 0 or r.baseK == 0:
            raise ConstraintError("baseM, baseN, baseK != 0", "Failed to derive a valid tiling base shape")
        r.mBlockCnt = CeilDiv(a.m, r.baseM)
        r.nBlockCnt = CeilDiv(a.n, r.baseN)
        r.totalBlockCnt = r.mBlockCnt * r.nBlockCnt
        r.tailBlockCnt = r.totalBlockCnt % p.aicNum
        r.mTailSize = a.m - (r.mBlockCnt - 1) * r.baseM
        r.nTailSize = a.n - (r.nBlockCnt - 1) * r.baseN
        r.dbL0c = DB_SIZE if r.baseM * r.baseN * DATA_SIZE_L0C * DB_SIZE <= p.l0cSize else 1

    def OptimizeEdgeBasicBlock(self) -> None:
        """Merge tiny edge tiles (when K is cache-line aligned) so the tail behaves like the steady state."""
        a, r = self.args_, self.runInfo_
        if r.mBlockCnt == 1 and r.nBlockCnt == 1:
            return
        isInnerAxisAlign = GetSizeWithDataType(self.aDataType, a.k) % MTE2_CACHELINE_SIZE == 0
        mTailSize = a.m % r.baseM
        if r.mBlockCnt > 1 and mTailSize > 0 and not a.transA and isInnerAxisAlign:
            r.mTailMain, r.mBaseTailSplitCnt = self._merge_edge(r.baseM, mTailSize, r.mBlockCnt,
                                                                r.mTailMain, r.mBaseTailSplitCnt)
        nTailSize = a.n % r.baseN
        if r.nBlockCnt > 1 and nTailSize > 0 and a.transB and isInnerAxisAlign:
            r.nTailMain, r.nBaseTailSplitCnt = self._merge_edge(r.baseN, nTailSize, r.nBlockCnt,
                                                                r.nTailMain, r.nBaseTailSplitCnt)

    @staticmethod
    def _merge_edge(base: int, tailSize: int, blockCnt: int, tailMain: int, splitCnt: int) -> tuple[int, int]:
        """The loop OptimizeEdgeBasicBlock runs for M and again for N: (tailMain, baseTailSplitCnt)."""
        baseTailCntMax = min((base - tailSize) // BASIC_BLOCK_SIZE_16, blockCnt)
        windowSize = min(WINDOW_LEN, blockCnt)
        mainWindowNum = blockCnt // windowSize - 1
        tailWindowSize = blockCnt - mainWindowNum * windowSize
        perfRes = (mainWindowNum + 1) * base
        mergeWindowNum = 1
        mergeLen = tailWindowSize - 1
        while mergeLen < baseTailCntMax:
            newTailMain = Align(CeilDiv(mergeLen * base + tailSize, mergeLen + 1), BASIC_BLOCK_SIZE_16)
            curPerf = (mainWindowNum + 1 - mergeWindowNum) * base + mergeWindowNum * newTailMain
            if curPerf <= perfRes:
                perfRes = curPerf
                tailMain = newTailMain
                splitCnt = mergeLen + 1
            mergeLen += windowSize
            mergeWindowNum += 1
        return tailMain, splitCnt

    def CalUsedCoreNum(self, mTile: int, nTile: int) -> int:
        return mTile * nTile * self.runInfo_.tailBlockCnt

    def CalcAlignedSplit(self, growTileCount: int, fixedTileCount: int, tileCountMax: int,
                         alignTailSize: int) -> int:
        for increment in range(1, ALIGN_SPLIT_MAX_INCREMENT + 1):
            nextTileCount = growTileCount + increment
            if nextTileCount > tileCountMax:
                break
            if self.CalUsedCoreNum(nextTileCount, fixedTileCount) > self.platformInfo_.aicNum:
                break
            if alignTailSize == 0 or CeilDiv(alignTailSize, nextTileCount) % CUBE_BLOCK == 0:
                return nextTileCount
        return 0

    def GetDepthA1B1(self, leftSize: int, perDepthSize: int, depthInit: int) -> int:
        """Grow by powers of two to a feasible depth, then snap to a DMA-friendly K granularity."""
        if depthInit > 1 and perDepthSize > DB_SIZE * MTE2_MIN_LOAD_SIZE:
            return depthInit
        depthScale = leftSize // perDepthSize
        if depthInit > 1:
            baseKSize = GetSizeWithDataType(self.aDataType, self.runInfo_.baseK)
            while (depthScale * baseKSize) % BASIC_BLOCK_SIZE_512 and depthScale * baseKSize > BASIC_BLOCK_SIZE_512:
                depthScale -= 1
            if (depthScale * baseKSize) % BASIC_BLOCK_SIZE_512 and depthScale * baseKSize >= BASIC_BLOCK_SIZE_256:
                depthScale = BASIC_BLOCK_SIZE_256 // baseKSize
            depthScale = max(depthScale, 1)
        else:
            scaleIndex = 2
            depthScale = 1
            while depthScale * perDepthSize < leftSize:
                depthScale *= scaleIndex
            depthScale = depthScale if depthScale == 1 else depthScale // scaleIndex
        return depthInit * depthScale

    def CalStepKs(self) -> None:
        a, r = self.args_, self.runInfo_
        r.stepKa = r.depthA1 // DB_SIZE
        r.stepKb = r.depthB1 // DB_SIZE
        if r.stepKa * r.baseK > a.k:
            r.stepKa = CeilDiv(a.k, r.baseK)
        if r.stepKb * r.baseK > a.k:
            r.stepKb = CeilDiv(a.k, r.baseK)
        if r.stepKa == 0 or r.stepKb == 0:
            # C++ would divide by zero below; only reachable when one base block fills half of L1.
            raise ConstraintError("stepKa, stepKb >= 1", f"L1 depth {r.depthA1}/{r.depthB1} leaves no double-"
                                  f"buffered K step for base ({r.baseM}, {r.baseN}, {r.baseK})")
        if r.stepKa > r.stepKb:
            r.stepKa = r.stepKa // r.stepKb * r.stepKb
        if r.stepKb > r.stepKa:
            r.stepKb = r.stepKb // r.stepKa * r.stepKa
        r.stepKa = min(r.stepKa, STEPK_MAX)
        r.stepKb = min(r.stepKb, STEPK_MAX)
        r.depthA1 = r.stepKa * DB_SIZE
        r.depthB1 = r.stepKb * DB_SIZE

    def CalScaleFactors(self, baseASize: int, baseBSize: int, baseScaleASize: int, baseScaleBSize: int) -> None:
        """Scale reuse after A/B depth is fixed, balanced between A and B inside the leftover L1."""
        a, r, p = self.args_, self.runInfo_, self.platformInfo_
        scaleFactorAMax = min(MTE2_MIN_LOAD_SIZE // baseScaleASize, SCALER_FACTOR_MAX)
        scaleFactorBMax = min(MTE2_MIN_LOAD_SIZE // baseScaleBSize, SCALER_FACTOR_MAX)
        scaleFactorA = a.k // (r.stepKa * r.baseK)
        scaleFactorB = a.k // (r.stepKb * r.baseK)
        r.scaleFactorA = min(scaleFactorAMax, max(SCALER_FACTOR_MIN, scaleFactorA))
        r.scaleFactorB = min(scaleFactorBMax, max(SCALER_FACTOR_MIN, scaleFactorB))
        # scaleInit: the balanced reuse factor both sides afford; leftovers go to the side that still gains.
        leftL1Size = p.l1Size - (r.depthA1 * baseASize + r.depthB1 * baseBSize)
        scaleInit = leftL1Size // (r.depthA1 * baseScaleASize + r.depthB1 * baseScaleBSize)
        if r.scaleFactorA <= scaleInit < r.scaleFactorB:
            leftL1Size -= r.scaleFactorA * r.depthA1 * baseScaleASize
            r.scaleFactorB = min(leftL1Size // (r.depthB1 * baseScaleBSize), r.scaleFactorB)
        elif r.scaleFactorB <= scaleInit < r.scaleFactorA:
            leftL1Size -= r.scaleFactorB * r.depthB1 * baseScaleBSize
            r.scaleFactorA = min(leftL1Size // (r.depthA1 * baseScaleASize), r.scaleFactorA)
        elif r.scaleFactorA > scaleInit and r.scaleFactorB > scaleInit:
            leftL1Size -= scaleInit * r.depthB1 * baseScaleBSize + scaleInit * r.depthA1 * baseScaleASize
            scaleASec = min(leftL1Size // (r.depthA1 * baseScaleASize), r.scaleFactorA - scaleInit)
            scaleBSec = min(leftL1Size // (r.depthB1 * baseScaleBSize), r.scaleFactorB - scaleInit)
            r.scaleFactorA = scaleASec + scaleInit if scaleASec >= scaleBSec else scaleInit
            r.scaleFactorB = scaleBSec + scaleInit if scaleASec < scaleBSec else scaleInit
