"""GroupedQmmBasicApiTiling: the MX (MXFP8 / MXFP4) GroupedMatmul tiling on DAV_3510, template priority 0.

Emulates ops-transformer `gmm/grouped_matmul/op_host/op_tiling/arch35/grouped_quant_basic_api_matmul_tiling.cpp`
at hicann/ops-transformer 05fd5631 (the revision that writes `l1BufferStage`; cannmirror master 25fb6b92 has
the same formulas without it) and the tiling structs of
`gmm/grouped_matmul/op_kernel/arch35/grouped_matmul_tiling_data_apt.h`:

    IsCapable: E8M0 scales (IsMicroScaling) and x FP8 (E4M3 / E5M2) or FP4 (E2M1 / E1M2)
    DoOpTiling -> GMMQuantParams
    DoLibApiTiling: CalBasicBlock -> CalL1Tiling (InitCommonL1TilingFields, CalcLeftL1Size,
        CalL1Depth: depthInit = GetDepthA1B1, GetDepthWithHighBW per side, fall back to depthInit when over L1,
        ModifyDepthForUnalign (K % 128 != 0 only), CalStepKs, CalScaleFactors)
        -> QuantBasicApiMMTiling (kAL1 = stepKa * baseK, kBL1 = stepKb * baseK,
           scaleKAL1 = scaleKBL1 = min(max(sfA * stepKa, sfB * stepKb) * baseK, K),
           l1BufferStage = 3 if CanEnableThreeL1Buffer() else 2)

The NZ-weight branch of CalL1Depth (a search over reduced / expanded depths for three L1 buffers) is not
emulated: NZ weights are refused earlier. Worked numbers (L1 512 KiB, L0C 256 KiB, SPEC §7.3):
(100, 700, 4096) NN -> 112/256/128, kAL1 1024, kBL1 256, scaleK 4096, dbL0C 2, stage 2;
(600, 700, 4096) NN -> 256/256/128, 256, 256, 4096, dbL0C 1, stage 3 (seed 002's "depth 8/4" is really 4/4).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mc2emu.arch.errors import ConstraintError
from mc2emu.tiling.grouped_quant_matmul_tiling import (
    BASIC_BLOCK_SIZE_128,
    BASIC_BLOCK_SIZE_256,
    DB_SIZE,
    MTE2_MIN_LOAD_SIZE_V120,
    MX_GROUP_SIZE,
    MXFP_BASEK_FACTOR,
    MXFP_MULTI_BASE_SIZE,
    NUM_HALF,
    POWER_OF_TWO,
    SCALER_FACTOR_MAX,
    SCALER_FACTOR_MIN,
    TB_SIZE,
    CalBasicBlock,
    CalcAlignedMxBaseScaleSize,
    CalcLeftL1Size,
    CalStepKs,
    CeilAlign,
    CeilDiv,
    GeDataType,
    GetDepthA1B1,
    GetSizeByDataType,
    GetSizeWithDataType,
    GQmmInputInfo,
    InitCommonL1TilingFields,
    IsFp4,
    IsMicroScaling,
    QuantMode,
)

FRACTAL_NZ = "FRACTAL_NZ"
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class GMMQuantParams:
    """`GroupedMatmulTilingData::GMMQuantParams` (pack 8: four uint32, six bytes, uint16 reserved)."""

    groupNum: int = 0
    activeType: int = 0
    aQuantMode: int = 0
    bQuantMode: int = 0
    singleX: int = 0
    singleW: int = 0
    singleY: int = 0
    groupType: int = 0
    groupListType: int = 0
    hasBias: int = 0

    def words(self) -> list[int]:
        """The struct as the uint32 words the UT prints (little-endian byte packing)."""
        packed = (self.singleX | self.singleW << 8 | self.singleY << 16 | (self.groupType & 0xFF) << 24)
        return [self.groupNum, self.activeType, self.aQuantMode, self.bQuantMode, packed,
                self.groupListType | self.hasBias << 8]


@dataclass(frozen=True)
class QuantBasicApiMMTiling:
    """`GroupedMatmulTilingData::QuantBasicApiMMTiling`, plus the unserialized host intermediates for debugging
    (depthA1, depthB1, stepKa, stepKb, scaleFactorA, scaleFactorB: not part of the kernel's tiling data)."""

    m: int = 0
    n: int = 0
    k: int = 0
    baseM: int = 0
    baseN: int = 0
    baseK: int = 0
    kAL1: int = 0
    kBL1: int = 0
    scaleKAL1: int = 0
    scaleKBL1: int = 0
    isBias: int = 0
    dbL0C: int = 0
    l1BufferStage: int = 0
    depthA1: int = field(default=0, metadata={"serialized": False})
    depthB1: int = field(default=0, metadata={"serialized": False})
    stepKa: int = field(default=0, metadata={"serialized": False})
    stepKb: int = field(default=0, metadata={"serialized": False})
    scaleFactorA: int = field(default=0, metadata={"serialized": False})
    scaleFactorB: int = field(default=0, metadata={"serialized": False})

    def words(self) -> list[int]:
        return [self.m, self.n, self.k, self.baseM, self.baseN, self.baseK, self.kAL1, self.kBL1, self.scaleKAL1,
                self.scaleKBL1, self.isBias | self.dbL0C << 8 | self.l1BufferStage << 16, 0]


@dataclass(frozen=True)
class GMMQuantBasicApiTilingData:
    """`GMMQuantBasicApiTilingData { GMMQuantParams gmmQuantParams; QuantBasicApiMMTiling mmTilingData; }`."""

    gmmQuantParams: GMMQuantParams
    mmTilingData: QuantBasicApiMMTiling

    def words(self) -> list[int]:
        """The serialized tiling data as uint32 words (what the source's UT compares, space-separated)."""
        return self.gmmQuantParams.words() + self.mmTilingData.words()

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"gmmQuantParams": asdict(self.gmmQuantParams), "mmTilingData": asdict(self.mmTilingData)}


@dataclass(frozen=True)
class L1Depths:
    """The `basicTiling_` fields CalL1Depth settles."""

    depthA1: int
    depthB1: int
    stepKa: int
    stepKb: int
    scaleFactorA: int
    scaleFactorB: int


def IsCapable(inp: GQmmInputInfo) -> bool:
    """Template 0 handles MX quantization (E8M0 scales) with FP8 or FP4 x."""
    if not IsMicroScaling(inp):
        return False
    return inp.aDtype in (GeDataType.DT_FLOAT8_E4M3FN, GeDataType.DT_FLOAT8_E5M2) or IsFp4(inp.aDtype)


def DoOpTiling(inp: GQmmInputInfo) -> GMMQuantParams:
    return GMMQuantParams(groupNum=inp.groupNum, activeType=inp.actType, aQuantMode=int(inp.aQuantMode),
                          bQuantMode=int(inp.bQuantMode), singleX=int(inp.isSingleX), singleW=int(inp.isSingleW),
                          singleY=int(inp.isSingleY), groupType=inp.groupType, groupListType=inp.groupListType,
                          hasBias=int(inp.hasBias))


def GetDepthWithHighBW(inp: GQmmInputInfo, baseK: int, mnL1: int) -> int:
    """Depth whose GM reads reach 64 KiB: ru256(ceil(64 KiB / mnL1)) / baseK bytes * 2, rounded up to a power of
    two, capped at 2 * ceil(K / baseK)."""
    baseKSize = GetSizeWithDataType(baseK, inp.aDtype)
    depth = CeilAlign(CeilDiv(MTE2_MIN_LOAD_SIZE_V120, mnL1), BASIC_BLOCK_SIZE_256) // baseKSize * DB_SIZE
    pow2Depth = POWER_OF_TWO
    while pow2Depth < depth:
        pow2Depth *= POWER_OF_TWO
    return min(pow2Depth, CeilDiv(inp.kSize, baseK) * DB_SIZE)


def ModifyDepthForUnalign(inp: GQmmInputInfo, depthA1: int, depthB1: int, leftL1Size: int, baseASize: int,
                          baseBSize: int, baseScaleABSize: int) -> tuple[int, int]:
    """With K % 128 != 0, grow the smaller side's depth by powers of two into the L1 left over."""
    if inp.kSize % BASIC_BLOCK_SIZE_128 == 0:
        return depthA1, depthB1
    if inp.transA and (not inp.transB or inp.bFormat == FRACTAL_NZ):
        return depthA1, depthB1

    def over(dA: int, dB: int) -> bool:
        return dA * baseASize + dB * baseBSize + max(dA, dB) * baseScaleABSize > leftL1Size

    if not inp.transA:
        if depthA1 <= depthB1:
            leftASize = (leftL1Size - depthB1 * baseBSize - depthB1 * baseScaleABSize) & _U64
            while depthA1 * POWER_OF_TWO * baseASize <= leftASize:
                depthA1 *= POWER_OF_TWO
            if over(depthA1, depthB1):
                depthA1 = depthB1
        elif inp.transB and inp.bFormat == "ND":
            leftBSize = (leftL1Size - depthA1 * baseASize - depthA1 * baseScaleABSize) & _U64
            while depthB1 * POWER_OF_TWO * baseBSize <= leftBSize:
                depthB1 *= POWER_OF_TWO
            if over(depthA1, depthB1):
                depthB1 = depthA1
    else:  # transA && transB (ND): unreachable after AnalyzeAttrs (split-M forbids transA, split-K transB)
        while ((depthA1 * baseASize - max(depthA1, depthB1 * POWER_OF_TWO) * baseScaleABSize) & _U64) < leftL1Size:
            depthB1 *= POWER_OF_TWO
    return depthA1, depthB1


def CalScaleFactors(inp: GQmmInputInfo, baseM: int, baseN: int, baseK: int, depthA1: int, depthB1: int,
                    stepKa: int, stepKb: int, l1Size: int) -> tuple[int, int]:
    """(scaleFactorA, scaleFactorB): scale loads cover ceil(K / (stepK * baseK)) L1 loads, at most
    min(64 KiB / base-scale bytes, 127); when both exceed what L1 holds (scaleInit), shrink both."""
    baseASize = GetSizeWithDataType(baseM * baseK, inp.aDtype)
    baseBSize = GetSizeWithDataType(baseN * baseK, inp.bDtype)
    baseScaleASize = GetSizeWithDataType(CeilDiv(baseK, MX_GROUP_SIZE) * baseM, inp.perTokenScaleDtype)
    baseScaleBSize = GetSizeWithDataType(CeilDiv(baseK, MX_GROUP_SIZE) * baseN, inp.scaleDtype)
    baseBiasSize = baseN * GetSizeByDataType(inp.biasDtype) if inp.hasBias else 0
    leftL1Size = l1Size - (depthA1 * baseASize + depthB1 * baseBSize + baseBiasSize)
    scaleInit = max(leftL1Size, 0) // (max(depthA1, depthB1) * (baseScaleASize + baseScaleBSize))
    if scaleInit == 0:
        raise ConstraintError("CalScaleFactors: scaleFactor != 0", f"m {inp.mSize} / n {inp.nSize} / k {inp.kSize} / "
                              f"groupNum {inp.groupNum}: no L1 left for one MX scale load")
    scaleFactorAMax = min(MTE2_MIN_LOAD_SIZE_V120 // baseScaleASize, SCALER_FACTOR_MAX)
    scaleFactorBMax = min(MTE2_MIN_LOAD_SIZE_V120 // baseScaleBSize, SCALER_FACTOR_MAX)
    scaleFactorA = min(scaleFactorAMax, max(SCALER_FACTOR_MIN, CeilDiv(inp.kSize, stepKa * baseK)))
    scaleFactorB = min(scaleFactorBMax, max(SCALER_FACTOR_MIN, CeilDiv(inp.kSize, stepKb * baseK)))
    if scaleFactorA > scaleInit and scaleFactorB > scaleInit:
        if depthA1 >= depthB1:
            scaleFactorA, scaleFactorB = scaleInit, scaleInit * depthA1 // depthB1
        else:
            scaleFactorA, scaleFactorB = scaleInit * depthB1 // depthA1, scaleInit
    return scaleFactorA, scaleFactorB


def CalL1Depth(inp: GQmmInputInfo, baseM: int, baseN: int, baseK: int, leftL1Size: int, l1Size: int) -> L1Depths:
    baseASize = GetSizeWithDataType(baseM * baseK, inp.aDtype)
    baseBSize = GetSizeWithDataType(baseN * baseK, inp.bDtype)
    baseScaleASize = baseScaleBSize = 0
    if inp.bQuantMode is QuantMode.MX_PERGROUP_MODE:
        baseScaleASize, baseScaleBSize = CalcAlignedMxBaseScaleSize(inp, baseM, baseN, baseK)
    baseL1Size = baseASize + baseBSize + baseScaleASize + baseScaleBSize
    if leftL1Size < baseL1Size:
        raise ConstraintError("CalL1Depth: L1 overflow", f"free L1 {leftL1Size} bytes < one A+B+scale tile set "
                              f"{baseL1Size} bytes")
    depthInit = GetDepthA1B1(inp, baseK, leftL1Size, baseL1Size, 1)
    depthA1 = GetDepthWithHighBW(inp, baseK, min(inp.mSize, baseM))
    depthB1 = GetDepthWithHighBW(inp, baseK, min(inp.nSize, baseN))
    scaleAB = baseScaleASize + baseScaleBSize
    if depthA1 * baseASize + depthB1 * baseBSize + max(depthA1, depthB1) * scaleAB > leftL1Size:
        depthA1 = depthB1 = depthInit
    depthA1, depthB1 = ModifyDepthForUnalign(inp, depthA1, depthB1, leftL1Size, baseASize, baseBSize, scaleAB)
    stepKa, stepKb, depthA1, depthB1 = CalStepKs(inp, baseK, depthA1, depthB1)  # FinalizeStepAndScale
    sfA = sfB = 0
    if inp.bQuantMode is QuantMode.MX_PERGROUP_MODE:
        sfA, sfB = CalScaleFactors(inp, baseM, baseN, baseK, depthA1, depthB1, stepKa, stepKb, l1Size)
    return L1Depths(depthA1, depthB1, stepKa, stepKb, sfA, sfB)


def ScaleKL1(inp: GQmmInputInfo, baseK: int, d: L1Depths) -> int:
    return min(max(d.scaleFactorA * d.stepKa, d.scaleFactorB * d.stepKb) * baseK, inp.kSize)


def CanEnableThreeL1Buffer(inp: GQmmInputInfo, baseM: int, baseN: int, baseK: int, d: L1Depths,
                           l1Size: int) -> bool:
    """Three L1 buffers when one A (or B) load more still fits, with a full set of A, B, scales and bias, in half
    the L1 (MX and !transA only)."""
    if not IsMicroScaling(inp) or inp.transA:
        return False
    kAL1, kBL1 = d.stepKa * baseK, d.stepKb * baseK
    scaleKL1 = ScaleKL1(inp, baseK, d)
    if kAL1 == 0 or kBL1 == 0 or scaleKL1 == 0:
        return False
    aL1Size = GetSizeWithDataType(baseM * CeilAlign(kAL1, MX_GROUP_SIZE), inp.aDtype)
    bL1Size = GetSizeWithDataType(baseN * CeilAlign(kBL1, MX_GROUP_SIZE), inp.bDtype)
    scaleKSize = CeilDiv(scaleKL1, MXFP_BASEK_FACTOR) * MXFP_MULTI_BASE_SIZE
    scaleAL1Size = GetSizeWithDataType(baseM * scaleKSize, inp.perTokenScaleDtype)
    scaleBL1Size = GetSizeWithDataType(baseN * scaleKSize, inp.scaleDtype)
    biasL1Size = baseN * GetSizeByDataType(inp.biasDtype) if inp.hasBias else 0
    common = aL1Size + bL1Size + scaleAL1Size + scaleBL1Size + biasL1Size
    half = l1Size // NUM_HALF
    return common + aL1Size <= half and common + bL1Size <= half


def DoLibApiTiling(inp: GQmmInputInfo, l1Size: int, l0cSize: int) -> QuantBasicApiMMTiling:
    baseM, baseN, baseK = CalBasicBlock(inp)
    common = InitCommonL1TilingFields(inp, baseM, baseN, l0cSize)  # CalL1Tiling
    leftL1Size = CalcLeftL1Size(inp, baseN, l1Size)
    d = CalL1Depth(inp, baseM, baseN, baseK, leftL1Size, l1Size)
    scaleK = ScaleKL1(inp, baseK, d) if inp.bQuantMode is QuantMode.MX_PERGROUP_MODE else 0
    stage = TB_SIZE if CanEnableThreeL1Buffer(inp, baseM, baseN, baseK, d, l1Size) else DB_SIZE
    return QuantBasicApiMMTiling(
        m=inp.mSize, n=inp.nSize, k=inp.kSize, baseM=baseM, baseN=baseN, baseK=baseK, kAL1=d.stepKa * baseK,
        kBL1=d.stepKb * baseK, scaleKAL1=scaleK, scaleKBL1=scaleK, isBias=int(inp.hasBias), dbL0C=common["dbL0c"],
        l1BufferStage=stage, depthA1=d.depthA1, depthB1=d.depthB1, stepKa=d.stepKa, stepKb=d.stepKb,
        scaleFactorA=d.scaleFactorA, scaleFactorB=d.scaleFactorB)
