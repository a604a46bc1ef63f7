"""Host tiling of the weight-quant matmul (seed 001): `WeightQuantTilingSwat`.

Emulates the Blaze skill asset `op_tiling/weight_quant/weight_quant_tiling.h` with its
`weight_quant_tiling_data.h` (hicann cannbot-skills `ascendc-blaze-best-practice` assets; the stored copies
carry no commit), checked against its consumers `block/weight_quant_matmul_block_mmad.h` (L1) and
`kernel/weight_quant_matmul_kernel.h` (UB). One pure function per source method, same names and order
(GetTilingData: CheckArgs -> ResetBase -> FormulateLoadBalanceBlock -> OptimizeEdgeBasicBlock ->
CalcTailBasicBlock -> CalL1AndUbTiling -> BuildTilingData); the source's `PrintTilingData` is left out.

Headline rules: baseM = min(Align16(m), 256), baseN = min(Align16(n), 256), shrunk to fill the AICs;
dbL0c = 2 when baseM * baseN * 4 * 2 <= L0C; nUbSize = baseN - (baseN / 32) * 16 when transB (AIV1's share
of N) else Align128(baseN); kL1 = FloorAlign16(min(kL1 from L1, kL1 from UB, k)); n % 16 == 0 when transB,
else k % 16 == 0; no N tail split when transB. elemBytes stay parameters (seed §5).

The UB bound follows the seed's §3 formula, as the source does, leaving out the +1 bank padding of bOut the
kernel allocates (seed §6.4). `layout_findings` checks the kernel's real UB halves and L1 layout and reports
the overlaps that then happen (the upper A buffer over the bias; a UB half over its bound with the padding),
plus what the source does not check: its own §3 bound broken when transB = false (AIV1's kUbSize exceeding
kUbSizeMax), a kL1 not 16-aligned, a UB half past the platform's usable UB.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from mc2emu.arch import DAV_3510, ConstraintError, PlatformSpec
from mc2emu.numerics.int_math import Align, CeilDiv, FloorAlign

# --- weight_quant_tiling.h constants -------------------------------------------------------------------------------
BASIC_BLOCK_SIZE_16 = 16  # fractal edge: M / N / K alignment
BASIC_BLOCK_SIZE_128 = 128
BASIC_BLOCK_SIZE_256 = 256  # largest baseM / baseN
BLOCK_BYTE_SIZE = 32
DATA_SIZE_FP32 = 4  # L0C accumulator and bias
DATA_SIZE_BF16 = 2  # A, B_dequant, scale, offset
DATA_SIZE_INT8 = 1  # the stored weight
DB_SIZE = 2
NUM_TWO = 2
UB_ALIGN_64 = 64  # the L1 bias reserve granule
UB_ALIGN_32 = 32
AIV_SPLIT_GRANULE = 32  # the AIVs split N (transB) or K as (len / 32) * 16 for AIV0, the rest for AIV1
UINT32_MAX = (1 << 32) - 1  # the tiling data serializes m, n, k as uint32
# Consumers (weight_quant_matmul_block_mmad.h, weight_quant_matmul_kernel.h)
L1_BUFFER_NUM = 2  # L1 halves [B0 | A0] and [B1 | A1]
BLOCK_MMAD_BIAS_BYTES = 4  # BlockMmad's BiasType is float whatever the tiling was told
UB_BUFFER_NUM = 2  # UB halves [bIn | bOut (+1 bank padding) | scale | offset]

RULE_SHAPE = "m, n, k > 0"
RULE_UINT32 = "m, n, k fit uint32"
RULE_N_ALIGN = "n % 16 == 0 when transB"
RULE_K_ALIGN = "k % 16 == 0 when not transB"
RULE_BASE_K = "baseK from L0A"
RULE_L1_BIAS = "L1 after the bias reserve"
RULE_UB_SCALE = "UB after scale / offset"
RULE_ELEM_BYTES = "element sizes"


@dataclass(frozen=True)
class WeightQuantPlatformInfo:
    """`weight_quant_tiling::PlatformInfo` (what `LoadPlatformInfo` reads), plus the kernel's TOTAL_UB_SIZE."""

    aicNum: int
    aivNum: int
    ubSize: int
    l1Size: int
    l0aSize: int
    l0bSize: int
    l0cSize: int
    btSize: int
    totalUbSize: int  # AscendC::TOTAL_UB_SIZE: the kernel splits it in two halves
    usableUbSize: int  # what a kernel can allocate on the emulated platform (mc2emu/runtime/local_memory.py)

    @classmethod
    def from_platform(cls, platform: PlatformSpec = DAV_3510, aic_num: int | None = None) -> WeightQuantPlatformInfo:
        """GetCoreMemSize(UB) and the kernel's TOTAL_UB_SIZE are both 248 KiB on DAV_3510: asc-devkit
        `kernel_utils_constants.h` (`__NPU_ARCH__ == 3510`: `TOTAL_UB_SIZE = 248 * 1024`, hicann/asc-devkit
        @28e7aba2) and `PlatformAscendC::GetCoreMemSize`, which returns the platform ini's `ub_size` (253952
        in the Ascend950 inis) unchanged off 910B (`platform.ub_usable_size`)."""
        aic = platform.aic_count if aic_num is None else int(aic_num)
        if aic < 1:  # CalcTailBasicBlock divides by it
            raise ConstraintError("aic_num >= 1", f"cannot tile for {aic_num} AI cores")
        return cls(aic, platform.aiv_count, platform.ub_usable_size, platform.l1_size, platform.l0a_size,
                   platform.l0b_size, platform.l0c_size, platform.bias_table_size, platform.ub_usable_size,
                   platform.ub_usable_size)


@dataclass(frozen=True)
class WeightQuantArgs:
    """`weight_quant_tiling::Args`, plus the element sizes the source fixes (elemBytesB / elemBytesDequantB)."""

    m: int
    n: int
    k: int
    transB: bool = False
    hasOffset: bool = False
    hasBias: bool = False
    biasElemBytes: int = DATA_SIZE_FP32
    weightElemBytes: int = DATA_SIZE_INT8
    dequantBElemBytes: int = DATA_SIZE_BF16


@dataclass(frozen=True)
class TailInfo:
    mCnt: int = 1
    nCnt: int = 1
    mTailMain: int = 0
    nTailMain: int = 0


@dataclass(frozen=True)
class WeightQuantRunInfo:
    """`weight_quant_tiling::RunInfo`: the state the steps pass on (each step returns a new one)."""

    baseM: int = 1
    baseN: int = 1
    baseK: int = 1
    kL1: int = 1
    nUbSize: int = 1
    kUbSize: int = 1
    mBaseTailSplitCnt: int = 1
    nBaseTailSplitCnt: int = 1
    usedCoreNum: int = 1
    dbL0c: int = 1
    l1BufferNum: int = 2
    tailInfo: TailInfo = field(default_factory=TailInfo)


@dataclass(frozen=True)
class WeightQuantMatmulTilingData:
    """`WeightQuantMatmulTilingData` (weight_quant_tiling_data.h): field names and order of the source."""

    m: int
    n: int
    k: int
    mL1: int
    nL1: int
    kL1: int
    baseM: int
    baseN: int
    baseK: int
    mTailCnt: int
    nTailCnt: int
    mBaseTailSplitCnt: int
    nBaseTailSplitCnt: int
    mTailMain: int
    nTailMain: int
    usedCoreNum: int
    l1BufferNum: int
    l0cDB: int
    nUbSize: int
    kUbSize: int
    transB: int
    hasOffset: int
    hasBias: int

    @property
    def block_dim(self) -> int:
        """The launch's block_dim (`<<<usedCoreNum>>>`)."""
        return self.usedCoreNum


# --- the steps of GetTilingData -------------------------------------------------------------------------------------


def CheckArgs(args: WeightQuantArgs) -> None:
    """The WQ_TILING_CHECK_COND at the entry of GetTilingData, each a ConstraintError naming its rule."""
    if min(args.m, args.n, args.k) <= 0:
        raise ConstraintError(RULE_SHAPE, f"m, n, k must be greater than zero, got ({args.m}, {args.n}, {args.k})")
    if max(args.m, args.n, args.k) > UINT32_MAX:
        raise ConstraintError(RULE_UINT32, f"WeightQuantMatmulTilingData stores m, n, k as uint32, got "
                                           f"({args.m}, {args.n}, {args.k})")
    if min(args.biasElemBytes, args.weightElemBytes, args.dequantBElemBytes) <= 0:
        raise ConstraintError(RULE_ELEM_BYTES, f"element sizes must be positive, got bias {args.biasElemBytes}, "
                                               f"weight {args.weightElemBytes}, B_dequant {args.dequantBElemBytes}")
    if args.transB and args.n % BASIC_BLOCK_SIZE_16:
        raise ConstraintError(RULE_N_ALIGN, f"n = {args.n} must be 16-aligned when transB = true (N is the "
                                            f"fractal axis the two AIVs split)")
    if not args.transB and args.k % BASIC_BLOCK_SIZE_16:
        raise ConstraintError(RULE_K_ALIGN, f"k = {args.k} must be 16-aligned when transB = false (K is the "
                                            f"fractal axis the two AIVs split)")


def ResetBase(plat: WeightQuantPlatformInfo) -> WeightQuantRunInfo:
    return WeightQuantRunInfo(baseM=BASIC_BLOCK_SIZE_256, baseN=BASIC_BLOCK_SIZE_256,
                              baseK=BASIC_BLOCK_SIZE_128 // DATA_SIZE_BF16, usedCoreNum=plat.aicNum,
                              dbL0c=1, l1BufferNum=2)


def CalcBasicBlock(args: WeightQuantArgs, plat: WeightQuantPlatformInfo,
                   run: WeightQuantRunInfo) -> WeightQuantRunInfo:
    """Shrink baseM / baseN so the tiles fill the AICs: the shorter tile count is kept, the other split."""
    mCore = CeilDiv(args.m, run.baseM)
    nCore = CeilDiv(args.n, run.baseN)
    if mCore == 0 or nCore == 0:
        return run
    if mCore <= nCore:
        baseM = Align(CeilDiv(args.m, mCore), BASIC_BLOCK_SIZE_16)
        mCore = CeilDiv(args.m, baseM)
        nCore = max(1, run.usedCoreNum // mCore)
        baseN = Align(CeilDiv(args.n, nCore), BASIC_BLOCK_SIZE_16)
    else:
        baseN = Align(CeilDiv(args.n, nCore), BASIC_BLOCK_SIZE_16)
        nCore = CeilDiv(args.n, baseN)
        mCore = max(1, run.usedCoreNum // nCore)
        baseM = Align(CeilDiv(args.m, mCore), BASIC_BLOCK_SIZE_16)
    return replace(run, baseM=baseM, baseN=baseN)


def FormulateLoadBalanceBlock(args: WeightQuantArgs, plat: WeightQuantPlatformInfo,
                              run: WeightQuantRunInfo) -> WeightQuantRunInfo:
    run = replace(run, baseM=min(Align(args.m, BASIC_BLOCK_SIZE_16), run.baseM),
                  baseN=min(Align(args.n, BASIC_BLOCK_SIZE_16), run.baseN))
    if CeilDiv(args.m, run.baseM) * CeilDiv(args.n, run.baseN) < plat.aicNum:
        run = CalcBasicBlock(args, plat, run)
    baseM = Align(run.baseM, BASIC_BLOCK_SIZE_16)
    baseN = Align(run.baseN, BASIC_BLOCK_SIZE_16)
    dbL0c = DB_SIZE if baseM * baseN * DATA_SIZE_FP32 * DB_SIZE <= plat.l0cSize else 1
    mCore = CeilDiv(args.m, baseM)
    nCore = CeilDiv(args.n, baseN)
    usedCoreNum = max(1, min(mCore * nCore, plat.aicNum))
    kAlign = BASIC_BLOCK_SIZE_16
    kValueAlign = Align(args.k, kAlign)
    kValueMax = FloorAlign(plat.l0aSize // DB_SIZE // DATA_SIZE_BF16 // max(baseM, baseN), kAlign)
    if kValueMax < kAlign:
        raise ConstraintError(RULE_BASE_K, f"Failed to derive valid baseK from L0A capacity: L0A {plat.l0aSize} "
                              f"B / 2 buffers / 2 B per element / max(baseM {baseM}, baseN {baseN}) < 16")
    return replace(run, baseM=baseM, baseN=baseN, dbL0c=dbL0c, usedCoreNum=usedCoreNum,
                   baseK=min(kValueAlign, kValueMax))


def GetOuterAxisTailCnt(args: WeightQuantArgs, plat: WeightQuantPlatformInfo, run: WeightQuantRunInfo,
                        nLoadBalance: bool) -> tuple[int, int] | None:
    """(baseTailSplitCnt, tailMain) merging the edge tile with `mergeLen` main tiles, if that helps; None if
    no merge beats the unmerged cost (the source then leaves both untouched)."""
    aicNum = plat.aicNum
    x, y = (args.n, args.m) if nLoadBalance else (args.m, args.n)
    baseX, baseY = (run.baseN, run.baseM) if nLoadBalance else (run.baseM, run.baseN)
    xCnt = CeilDiv(x, baseX)
    yCnt = CeilDiv(y, baseY)
    xTail = x % baseX
    if xTail == 0:
        return None
    totalWindows = CeilDiv(xCnt * yCnt, aicNum)
    mainWindows = CeilDiv((xCnt - 1) * yCnt + yCnt % aicNum, aicNum)
    tailWindows = totalWindows - mainWindows
    perfRes = mainWindows * baseX + tailWindows * xTail
    baseTailCntMax = min((baseX - xTail) // BASIC_BLOCK_SIZE_16, xCnt)
    best = None
    for mergeLen in range(1, baseTailCntMax):
        newTailMain = Align(CeilDiv(mergeLen * baseX + xTail, mergeLen + 1), BASIC_BLOCK_SIZE_16)
        newTailLast = mergeLen * (baseX - newTailMain) + xTail
        # sic: the source's main-round count, ((xCnt - 1 - mergeLen) + (mergeLen + 1)) * yCnt % aicNum
        newMainRound = (CeilDiv(((xCnt - 1 - mergeLen) * yCnt + (mergeLen + 1) * yCnt) % aicNum, aicNum)
                        if mergeLen < xCnt - 1 else 0)
        newTailRound = min(CeilDiv(mergeLen * yCnt + yCnt % aicNum, aicNum), totalWindows - newMainRound)
        curPerf = (newMainRound * baseX + newTailRound * newTailMain
                   + (totalWindows - newMainRound - newTailRound) * newTailLast)
        if curPerf < perfRes or (not nLoadBalance and curPerf == perfRes):
            perfRes = curPerf
            best = (mergeLen + 1, newTailMain & UINT32_MAX)
    return best


def OptimizeEdgeBasicBlock(args: WeightQuantArgs, plat: WeightQuantPlatformInfo,
                           run: WeightQuantRunInfo) -> WeightQuantRunInfo:
    """Merge the smaller edge (M, or N) with main tiles; runs only when baseM == baseN == 256."""
    mCore = CeilDiv(args.m, run.baseM)
    nCore = CeilDiv(args.n, run.baseN)
    if mCore * nCore < plat.aicNum or mCore == 1 or nCore == 1:
        return run
    mBaseTail = args.m % run.baseM
    nBaseTail = args.n % run.baseN
    if mBaseTail > 0 and (nBaseTail == 0 or mBaseTail <= nBaseTail):
        got = GetOuterAxisTailCnt(args, plat, run, False)
        if got is not None:
            return replace(run, mBaseTailSplitCnt=got[0], tailInfo=replace(run.tailInfo, mTailMain=got[1]))
    elif nBaseTail > 0:
        got = GetOuterAxisTailCnt(args, plat, run, True)
        if got is not None:
            return replace(run, nBaseTailSplitCnt=got[0], tailInfo=replace(run.tailInfo, nTailMain=got[1]))
    return run


def CalcTailBasicBlock(args: WeightQuantArgs, plat: WeightQuantPlatformInfo,
                       run: WeightQuantRunInfo) -> WeightQuantRunInfo:
    """Split each tile of the last, partial round over the idle AICs: M always, N only when not transB
    (with transB, N is the fractal axis and a CeilDiv split of it would break the 16 alignment)."""
    mnCnt = CeilDiv(args.m, run.baseM) * CeilDiv(args.n, run.baseN)
    tailCnt = 0 if mnCnt <= plat.aicNum else mnCnt % plat.aicNum
    mCnt, nCnt = 1, 1
    if tailCnt != 0:
        while (mCnt + 1) * nCnt * tailCnt <= plat.aicNum:
            mCnt += 1
            if not args.transB and mCnt * (nCnt + 1) * tailCnt <= plat.aicNum:
                nCnt += 1
    return replace(run, tailInfo=replace(run.tailInfo, mCnt=mCnt, nCnt=nCnt))


def CalL1AndUbTiling(args: WeightQuantArgs, plat: WeightQuantPlatformInfo,
                     run: WeightQuantRunInfo) -> WeightQuantRunInfo:
    """kL1 from the L1 bound (two buffers of A and B_dequant after the bias reserve) and the UB bound
    (the seed §3 formula, no bOut padding), nUbSize / kUbSize of one AIV's UB buffer."""
    biasBytes = Align(run.baseN * args.biasElemBytes, UB_ALIGN_64) if args.hasBias else 0
    if plat.l1Size <= biasBytes:
        raise ConstraintError(RULE_L1_BIAS, f"L1 space is insufficient after reserving bias: L1 {plat.l1Size} B, "
                                            f"bias {biasBytes} B")
    availL1 = plat.l1Size - biasBytes
    if args.transB:
        # N is split between the AIVs: AIV0 takes (baseN / 32) * 16, AIV1 the rest, the larger share.
        nUbSize = run.baseN - (run.baseN // AIV_SPLIT_GRANULE) * BASIC_BLOCK_SIZE_16
    else:
        nUbSize = Align(run.baseN, BASIC_BLOCK_SIZE_128)  # each AIV takes the whole curN
    kL1MaxL1 = FloorAlign(availL1 // (NUM_TWO * (run.baseM + run.baseN) * args.dequantBElemBytes),
                          BASIC_BLOCK_SIZE_16)
    scaleOffsetUbBytes = nUbSize * args.dequantBElemBytes * 2 * (1 + (1 if args.hasOffset else 0))
    if plat.ubSize <= scaleOffsetUbBytes:
        raise ConstraintError(RULE_UB_SCALE, f"UB space is insufficient for scale/offset: UB {plat.ubSize} B, "
                                             f"scale/offset {scaleOffsetUbBytes} B")
    availUb = plat.ubSize - scaleOffsetUbBytes
    ubBytesPerK = DB_SIZE * nUbSize * (args.weightElemBytes + args.dequantBElemBytes)
    kUbSizeMax = availUb // ubBytesPerK
    if args.transB:
        kL1MaxUb = FloorAlign(kUbSizeMax, BASIC_BLOCK_SIZE_128)
    else:
        kL1MaxUb = FloorAlign(kUbSizeMax * NUM_TWO, BASIC_BLOCK_SIZE_16)  # K is split between the AIVs
    kL1 = FloorAlign(min(kL1MaxL1, kL1MaxUb, args.k), BASIC_BLOCK_SIZE_16)
    if kL1 == 0:
        kL1 = min(args.k, kL1MaxL1)
    if kL1 == 0:
        kL1 = args.k
    kUbSize = Align(kL1, BASIC_BLOCK_SIZE_128) if args.transB else CeilDiv(kL1, 32) * BASIC_BLOCK_SIZE_16
    return replace(run, kL1=kL1, nUbSize=nUbSize, kUbSize=kUbSize)


def BuildTilingData(args: WeightQuantArgs, run: WeightQuantRunInfo) -> WeightQuantMatmulTilingData:
    return WeightQuantMatmulTilingData(
        m=args.m, n=args.n, k=args.k,
        mL1=min(Align(args.m, BASIC_BLOCK_SIZE_16), run.baseM),
        nL1=min(Align(args.n, BASIC_BLOCK_SIZE_16), run.baseN),
        kL1=run.kL1, baseM=run.baseM, baseN=run.baseN, baseK=run.baseK,
        mTailCnt=run.tailInfo.mCnt, nTailCnt=run.tailInfo.nCnt,
        mBaseTailSplitCnt=run.mBaseTailSplitCnt, nBaseTailSplitCnt=run.nBaseTailSplitCnt,
        mTailMain=run.tailInfo.mTailMain, nTailMain=run.tailInfo.nTailMain,
        usedCoreNum=run.usedCoreNum, l1BufferNum=run.l1BufferNum, l0cDB=run.dbL0c,
        nUbSize=run.nUbSize, kUbSize=run.kUbSize,
        transB=int(args.transB), hasOffset=int(args.hasOffset), hasBias=int(args.hasBias))


def GetTilingData(args: WeightQuantArgs, plat: WeightQuantPlatformInfo) -> WeightQuantMatmulTilingData:
    """`WeightQuantTilingSwat::GetTilingData` as one pure function."""
    CheckArgs(args)
    run = FormulateLoadBalanceBlock(args, plat, ResetBase(plat))
    if run.baseM == BASIC_BLOCK_SIZE_256 and run.baseN == BASIC_BLOCK_SIZE_256:
        run = OptimizeEdgeBasicBlock(args, plat, run)
    run = CalcTailBasicBlock(args, plat, run)
    run = CalL1AndUbTiling(args, plat, run)
    return BuildTilingData(args, run)


class WeightQuantTilingSwat:
    """`WeightQuantTilingSwat` with the source's entry signature; `aic_num` tiles for a smaller launch."""

    def __init__(self, platform: PlatformSpec = DAV_3510, aic_num: int | None = None) -> None:
        self.platformInfo_ = WeightQuantPlatformInfo.from_platform(platform, aic_num)

    def GetTilingData(self, m: int, n: int, k: int, transB: bool = False, hasOffset: bool = False,
                      hasBias: bool = False, biasElemBytes: int = DATA_SIZE_FP32, *,
                      weightElemBytes: int = DATA_SIZE_INT8,
                      dequantBElemBytes: int = DATA_SIZE_BF16) -> WeightQuantMatmulTilingData:
        args = WeightQuantArgs(int(m), int(n), int(k), bool(transB), bool(hasOffset), bool(hasBias),
                               int(biasElemBytes), int(weightElemBytes), int(dequantBElemBytes))
        return GetTilingData(args, self.platformInfo_)


def can_implement(args: WeightQuantArgs, platform: PlatformSpec = DAV_3510) -> list[str]:
    """The rules `args` breaks (each message starts with the rule); empty when the shape can be tiled."""
    try:
        GetTilingData(args, WeightQuantPlatformInfo.from_platform(platform))
    except ConstraintError as exc:
        return [str(exc)]
    return []
