"""GroupedQmmTiling (A5 quant GroupedMatmul): input analysis and the shared basic-block / L1 helpers.

Emulates ops-transformer `gmm/grouped_matmul/op_host/op_tiling/arch35/grouped_quant_matmul_tiling.{h,cpp}`
(cannmirror/ops-transformer master 25fb6b92), the parts the MX Basic-API template (priority 0) runs:

    GetShapeAttrsInfo = AnalyzeDtype -> AnalyzeAttrs -> AnalyzeInputs
        AnalyzeInputs = SetGroupNum -> SetMKN -> SetQuantMode -> CheckQuantParams (MX: CheckQuantParamsForMXTypeM
                        / CheckQuantParamsForMXTypeK) -> [FP4] CheckFp4Shape, CheckBiasShape -> SetKernelType
                        -> CheckCoreNum
    CalBasicBlock, InitCommonL1TilingFields, CalcLeftL1Size, CalcAlignedMxBaseScaleSize, GetDepthA1B1,
    CalStepKs, GetTilingKey

Each step is a pure function returning a new frozen `GQmmInputInfo` (the source's `inputParams_`) or plain
values; every `OP_CHECK_IF` that rejects an input raises `ConstraintError` naming the step and the rule.
Facts (SPEC §7.3): M is the total row count of x; MXFP8 takes no bias, MXFP4 an FP32 one; split-M forbids
transA, split-K needs transA && !transB && an ND weight; FP4 x only with split-M. Not emulated (refused with
the rule named): the FRACTAL_NZ weight shape checks and tiling, activation epilogues, multi-tensor weights and
every non-MX quant mode (template 1, `GroupedQmmTiling` itself).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from mc2emu.runtime.hazards import ConstraintError
from mc2emu.tiling.grouped_matmul_tiling_context import (
    GROUPLIST_TYPE_COUNT,
    GROUPLIST_TYPE_CUMSUM,
    GROUPLIST_TYPE_SPARSE_M,
    SPLIT_K,
    SPLIT_M,
    GeDataType,
    GetSizeByDataType,
    GmmTilingContext,
)

# --- grouped_quant_matmul_tiling.h, namespace GmmConstant -------------------------------------------------------
MX_GROUP_SIZE = 32  # K elements per E8M0 scale
DB_SIZE = 2  # double buffering: an L1 depth counts two stages per stepK
TB_SIZE = 3  # l1BufferStage with three L1 buffers
NUM_HALF = 2
EVEN_FACTOR = 2
POWER_OF_TWO = 2
BASIC_BLOCK_SIZE_512 = 512
BASIC_BLOCK_SIZE_256 = 256
BASIC_BLOCK_SIZE_128 = 128
CUBE_BLOCK = 16  # cube fractal edge (elements)
L1_ALIGN_SIZE = 32  # bytes: contiguous L1 rows are 32-byte granules
CUBE_REDUCE_BLOCK = 32  # bytes: the K granule of a cube fractal
DATA_SIZE_L0C = 4  # bytes of one float32 accumulator
SCALER_FACTOR_MAX = 127
SCALER_FACTOR_MIN = 1
MTE2_MIN_LOAD_SIZE_V120 = 64 * 1024  # bytes one GM read should move to reach bandwidth
GMM_MAX_GROUP_LIST_SIZE = 1024
PER_BLOCK_GROUP_SIZE = 128
MXFP_MULTI_BASE_SIZE = 2  # scales per stored pair
MXFP_BASEK_FACTOR = 64  # mx_mmad needs baseK aligned to 64
MXFP_TYPE_K_SCALE_DIM_NUM = 3
MXFP_TYPE_M_SCALE_DIM_NUM = 4
MXFP_PER_TOKEN_SCALE_DIM_NUM = 3
MIN_ND_DIM = 2
BIAS_DIMS = 2
GROUP_LIST_SPARSE_DIMS = 2
CORE_RATIO = 2  # AIV : AIC
LEGAL_INPUT_DTYPES = (GeDataType.DT_INT8, GeDataType.DT_HIFLOAT8, GeDataType.DT_FLOAT8_E4M3FN,
                      GeDataType.DT_FLOAT8_E5M2, GeDataType.DT_FLOAT4_E2M1, GeDataType.DT_FLOAT4_E1M2)
FP4_DTYPES = (GeDataType.DT_FLOAT4_E2M1, GeDataType.DT_FLOAT4_E1M2)
FRACTAL_NZ = "FRACTAL_NZ"


class QuantMode(enum.IntEnum):
    """`optiling::QuantMode` (bit flags; serialized as uint32 in GMMQuantParams)."""

    DEFAULT = 0x0
    PERTENSOR_MODE = 0x1
    PERCHANNEL_MODE = 0x1 << 1
    PERTOKEN_MODE = 0x1 << 2
    MX_PERGROUP_MODE = 0x1 << 3
    PERGROUP_MODE = 0x1 << 4
    PERBLOCK_MODE = 0x1 << 5


def CeilDiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def CeilAlign(a: int, b: int) -> int:
    return CeilDiv(a, b) * b


@dataclass(frozen=True)
class GQmmInputInfo:
    """`GQmmInputInfo` (`inputParams_`), with `GQmmInputInfo::Reset()`'s defaults."""

    mSize: int = 0
    kSize: int = 0
    nSize: int = 0
    groupNum: int = 0
    kernelType: int = 0
    aQuantMode: QuantMode = QuantMode.DEFAULT
    bQuantMode: QuantMode = QuantMode.DEFAULT
    groupType: int = -1  # GroupedMatmul::NO_SPLIT
    groupListType: int = 0
    splitItem: int = 0
    actType: int = 0
    aDtype: GeDataType = GeDataType.DT_INT8
    bDtype: GeDataType = GeDataType.DT_INT8
    cDtype: GeDataType = GeDataType.DT_FLOAT16
    biasDtype: GeDataType = GeDataType.DT_INT32
    scaleDtype: GeDataType = GeDataType.DT_UINT64
    perTokenScaleDtype: GeDataType = GeDataType.DT_FLOAT
    bFormat: str = "ND"
    transA: bool = False
    transB: bool = False
    hasBias: bool = False
    isSingleX: bool = True
    isSingleW: bool = True
    isSingleY: bool = True


def IsMicroScaling(inp: GQmmInputInfo) -> bool:
    return inp.scaleDtype is GeDataType.DT_FLOAT8_E8M0


def IsFp4(dtype: GeDataType) -> bool:
    return dtype in FP4_DTYPES


def GetSizeWithDataType(shapeSize: int, dtype: GeDataType) -> int:
    """Bytes of `shapeSize` elements; an odd 4-bit count is logged and gives 0 in the source (kept)."""
    if dtype.is_4bit:
        return 0 if shapeSize % 2 != 0 else shapeSize // 2
    return shapeSize * GetSizeByDataType(dtype)


def GetShapeWithDataType(size: int, dtype: GeDataType) -> int:
    """Elements that `size` bytes hold."""
    return size + size if dtype.is_4bit else size // GetSizeByDataType(dtype)


def _shape_size(shape: tuple[int, ...] | None) -> int:
    out = 1
    for d in shape or ():
        out *= int(d)
    return out


# --- GetShapeAttrsInfo --------------------------------------------------------------------------------------------
def AnalyzeDtype(ctx: GmmTilingContext, inp: GQmmInputInfo) -> GQmmInputInfo:
    """Dtypes, weight format and bias (`ValidateAAndWDtype`, `CheckDtypeForWeightNz`, `CheckBiasDtype`)."""
    if ctx.x_dtype not in LEGAL_INPUT_DTYPES:
        raise ConstraintError("AnalyzeDtype: x dtype", f"x dtype {ctx.x_dtype.name} is not one of INT8, HIFLOAT8, "
                              "FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT4_E2M1, FLOAT4_E1M2")
    if ctx.weight_dtype not in LEGAL_INPUT_DTYPES:
        raise ConstraintError("AnalyzeDtype: weight dtype", f"weight dtype {ctx.weight_dtype.name} is not one of "
                              "INT8, HIFLOAT8, FLOAT8_E4M3FN, FLOAT8_E5M2, FLOAT4_E2M1, FLOAT4_E1M2")
    bFormat = FRACTAL_NZ if ctx.weight_format.upper() in ("NZ", FRACTAL_NZ) else "ND"
    a, b = ctx.x_dtype, ctx.weight_dtype
    if (GeDataType.DT_FLOAT4_E1M2 in (a, b)) and bFormat != FRACTAL_NZ:
        raise ConstraintError("AnalyzeDtype: FLOAT4_E1M2 needs an NZ weight",
                              f"x {a.name} / weight {b.name} with a {bFormat} weight")
    hasBias = ctx.bias_shape is not None and _shape_size(ctx.bias_shape) != 0
    inp = replace(inp, aDtype=a, bDtype=b, bFormat=bFormat, hasBias=hasBias, cDtype=ctx.y_dtype,
                  biasDtype=ctx.bias_dtype if hasBias else inp.biasDtype,
                  scaleDtype=ctx.scale_dtype if ctx.y_dtype is not GeDataType.DT_INT32 else inp.scaleDtype,
                  perTokenScaleDtype=(ctx.per_token_scale_dtype if ctx.per_token_scale_shape is not None
                                      else inp.perTokenScaleDtype))
    if bFormat == FRACTAL_NZ:
        CheckDtypeForWeightNz(inp, ctx.per_token_scale_shape is None)
    if hasBias:
        CheckBiasDtype(inp)
    return inp


def CheckDtypeForWeightNz(inp: GQmmInputInfo, isPertokenScaleNull: bool) -> None:
    isA8W8Int = inp.aDtype is GeDataType.DT_INT8 and inp.bDtype is GeDataType.DT_INT8
    isA8W8Fp = inp.aDtype is GeDataType.DT_FLOAT8_E4M3FN and inp.bDtype is GeDataType.DT_FLOAT8_E4M3FN
    isA4W4Fp = IsFp4(inp.aDtype) and IsFp4(inp.bDtype)
    if not (isA8W8Int or isA8W8Fp or isA4W4Fp):
        raise ConstraintError("CheckDtypeForWeightNz", f"an NZ weight needs x/weight INT8, FLOAT8_E4M3FN or FLOAT4 "
                              f"pairs, got {inp.aDtype.name} / {inp.bDtype.name}")
    if inp.cDtype is GeDataType.DT_INT8:
        raise ConstraintError("CheckDtypeForWeightNz", "with an NZ weight the dtype of y cannot be INT8")
    if not isPertokenScaleNull and (isA8W8Fp or isA4W4Fp) and (
            inp.perTokenScaleDtype is not GeDataType.DT_FLOAT8_E8M0 or inp.scaleDtype is not GeDataType.DT_FLOAT8_E8M0):
        raise ConstraintError("CheckPertokenScaleDtypeForWeightNz", "FP8/FP4 with an NZ weight needs FLOAT8_E8M0 "
                              "pertokenScale and scale")


def CheckBiasDtype(inp: GQmmInputInfo) -> None:
    """FP4 x takes an FP32 bias; INT8 x the INT32/BF16/FP16/FP32 ones by y dtype; every other x (FP8) none."""
    if IsFp4(inp.aDtype):
        if inp.biasDtype is not GeDataType.DT_FLOAT:
            raise ConstraintError("CheckBiasDtype", f"FLOAT4 x needs a FLOAT bias, got {inp.biasDtype.name}")
    elif inp.aDtype is GeDataType.DT_INT8:
        allowed = {GeDataType.DT_BF16: (GeDataType.DT_INT32, GeDataType.DT_BF16, GeDataType.DT_FLOAT),
                   GeDataType.DT_FLOAT16: (GeDataType.DT_INT32, GeDataType.DT_FLOAT16, GeDataType.DT_FLOAT),
                   GeDataType.DT_INT8: (GeDataType.DT_INT32,), GeDataType.DT_INT32: (GeDataType.DT_INT32,)}
        if inp.cDtype not in allowed or inp.biasDtype not in allowed[inp.cDtype]:
            raise ConstraintError("CheckBiasDtype", f"INT8 x with y {inp.cDtype.name} does not take a "
                                  f"{inp.biasDtype.name} bias")
    else:
        raise ConstraintError("CheckBiasDtype", f"x dtype {inp.aDtype.name} takes no bias (MXFP8 rejects any bias)")


def AnalyzeAttrs(ctx: GmmTilingContext, inp: GQmmInputInfo) -> GQmmInputInfo:
    inp = replace(inp, transA=bool(ctx.transpose_x), transB=bool(ctx.transpose_weight), groupType=int(ctx.group_type),
                  splitItem=int(ctx.split_item), actType=int(ctx.act_type), groupListType=int(ctx.group_list_type))
    if inp.groupListType not in (GROUPLIST_TYPE_CUMSUM, GROUPLIST_TYPE_COUNT, GROUPLIST_TYPE_SPARSE_M):
        raise ConstraintError("AnalyzeAttrs: groupListType", f"groupListType {inp.groupListType} is not 0 (cumsum), "
                              "1 (count) or 2 (sparse)")
    if inp.groupType not in (SPLIT_M, SPLIT_K):
        raise ConstraintError("AnalyzeAttrs: groupType", f"groupType {inp.groupType} is not 0 (split M) or 2 (split K)")
    if IsFp4(inp.aDtype) and inp.groupType != SPLIT_M:
        raise ConstraintError("AnalyzeAttrs: FP4 x needs split-M", f"groupType {inp.groupType} with x "
                              f"{inp.aDtype.name}")
    if inp.groupType == SPLIT_M:
        if inp.transA:
            raise ConstraintError("AnalyzeAttrs: split-M forbids transA", "transpose_x must be false when groupType "
                                  "is 0 (split M)")
    else:  # CheckTransposeAndFormatByGroupType
        if not inp.transA:
            raise ConstraintError("CheckTransposeAndFormatByGroupType: split-K needs transA",
                                  "transpose_x must be true when groupType is 2 (split K)")
        if inp.transB:
            raise ConstraintError("CheckTransposeAndFormatByGroupType: split-K forbids transB",
                                  "transpose_weight must be false when groupType is 2 (split K)")
        if inp.bFormat == FRACTAL_NZ:
            raise ConstraintError("CheckTransposeAndFormatByGroupType: split-K needs an ND weight",
                                  "the weight format must be ND when groupType is 2 (split K)")
    if inp.actType != 0:
        raise ConstraintError("AnalyzeAttrs: actType", "activation epilogues (actType != 0) are not emulated")
    return replace(inp, isSingleX=True, isSingleW=True, isSingleY=inp.splitItem in (2, 3))


def SetGroupNum(ctx: GmmTilingContext, inp: GQmmInputInfo) -> GQmmInputInfo:
    shape = tuple(ctx.group_list_shape)
    if inp.groupListType == GROUPLIST_TYPE_SPARSE_M:
        if len(shape) != GROUP_LIST_SPARSE_DIMS or shape[1] != GROUP_LIST_SPARSE_DIMS:
            raise ConstraintError("SetGroupNum: sparse groupList is [E, 2]", f"groupList shape {shape}")
    elif len(shape) != 1:
        raise ConstraintError("SetGroupNum: groupList is 1-D", f"groupList shape {shape} (cumsum / count)")
    groupNum = int(shape[0])
    if groupNum > GMM_MAX_GROUP_LIST_SIZE:
        raise ConstraintError("SetGroupNum: groupNum <= 1024", f"group number {groupNum} is greater than 1024")
    return replace(inp, groupNum=groupNum)


def SetMKN(ctx: GmmTilingContext, inp: GQmmInputInfo) -> GQmmInputInfo:
    """M = total rows of x (not a group's), K = columns of x (total K for split-K), N from the weight."""
    x, w = tuple(ctx.x_shape), tuple(ctx.weight_shape)
    if len(w) < MIN_ND_DIM:
        raise ConstraintError("SetMKN: weight dims >= 2", f"weight shape {w}")
    if len(x) < MIN_ND_DIM:
        raise ConstraintError("SetMKN: x dims >= 2", f"x shape {x}")
    mSize = x[-1] if inp.transA else x[-2]
    kSize = x[-2] if inp.transA else x[-1]
    nSize = w[-2] if inp.transB else w[-1]
    if (_shape_size(x) == 0 or _shape_size(w) == 0) and inp.groupType == SPLIT_M:
        raise ConstraintError("SetMKN: split-M rejects an empty x or weight",
                              f"x {x}, weight {w}: unsupported empty tensor, please check k dimension")
    return replace(inp, mSize=int(mSize), kSize=int(kSize), nSize=int(nSize))


def SetQuantMode(inp: GQmmInputInfo) -> GQmmInputInfo:
    """E8M0 scales select MX_PERGROUP_MODE for A and B; the other modes belong to template 1 (not emulated)."""
    if IsMicroScaling(inp):
        return replace(inp, aQuantMode=QuantMode.MX_PERGROUP_MODE, bQuantMode=QuantMode.MX_PERGROUP_MODE)
    return inp


def CheckQuantParamsForMXTypeM(inp: GQmmInputInfo, xScale: tuple[int, ...], wScale: tuple[int, ...]) -> None:
    if len(wScale) != MXFP_TYPE_M_SCALE_DIM_NUM:
        raise ConstraintError("CheckQuantParamsForMXTypeM: scale dims", f"split M: scale has {len(wScale)} dims, "
                              f"expected {MXFP_TYPE_M_SCALE_DIM_NUM}")
    if len(xScale) != MXFP_PER_TOKEN_SCALE_DIM_NUM:
        raise ConstraintError("CheckQuantParamsForMXTypeM: pertokenScale dims", f"split M: pertokenScale has "
                              f"{len(xScale)} dims, expected 3")
    expectedK = CeilDiv(inp.kSize, MXFP_BASEK_FACTOR)
    eDim, nDim, kDim = wScale[0], (wScale[1] if inp.transB else wScale[2]), (wScale[2] if inp.transB else wScale[1])
    if kDim != 1 and nDim != 1 and (eDim != inp.groupNum or kDim != expectedK or nDim != inp.nSize
                                    or wScale[-1] != MXFP_MULTI_BASE_SIZE):
        want = ((inp.groupNum, inp.nSize, expectedK, 2) if inp.transB else (inp.groupNum, expectedK, inp.nSize, 2))
        raise ConstraintError("CheckQuantParamsForMXTypeM: scale shape", f"scale {wScale}, expected {want}")
    mDim, xkDim = (xScale[1], xScale[0]) if inp.transA else (xScale[0], xScale[1])
    if mDim != inp.mSize or xkDim != expectedK or xScale[-1] != MXFP_MULTI_BASE_SIZE:
        want = (expectedK, inp.mSize, 2) if inp.transA else (inp.mSize, expectedK, 2)
        raise ConstraintError("CheckQuantParamsForMXTypeM: pertokenScale shape", f"pertokenScale {xScale}, "
                              f"expected {want}")


def CheckQuantParamsForMXTypeK(inp: GQmmInputInfo, xScale: tuple[int, ...], wScale: tuple[int, ...]) -> None:
    if len(wScale) != MXFP_TYPE_K_SCALE_DIM_NUM:
        raise ConstraintError("CheckQuantParamsForMXTypeK: scale dims", f"split K: scale has {len(wScale)} dims, "
                              "expected 3")
    if len(xScale) != MXFP_PER_TOKEN_SCALE_DIM_NUM:
        raise ConstraintError("CheckQuantParamsForMXTypeK: pertokenScale dims", f"split K: pertokenScale has "
                              f"{len(xScale)} dims, expected 3")
    xk = xScale[0] if inp.transA else xScale[-2]
    xm = xScale[-2] if inp.transA else xScale[0]
    wn = wScale[0] if inp.transB else wScale[-2]
    wk = wScale[-2] if inp.transB else wScale[0]
    expectedK = inp.kSize // MXFP_BASEK_FACTOR + inp.groupNum
    if xk != 1 and xm != 1:
        if not inp.transA or inp.transB:
            raise ConstraintError("CheckQuantParamsForMXTypeK: transpose", "split K in MX mode needs transpose_x "
                                  "true and transpose_weight false")
        if xScale[-1] != MXFP_MULTI_BASE_SIZE or xk != expectedK or xm != inp.mSize:
            raise ConstraintError("CheckQuantParamsForMXTypeK: pertokenScale shape", f"pertokenScale {xScale}, "
                                  f"expected {(expectedK, inp.mSize, 2)}")
    if wScale[-1] != MXFP_MULTI_BASE_SIZE or wk != expectedK or wn != inp.nSize:
        want = (inp.nSize, expectedK, 2) if inp.transB else (expectedK, inp.nSize, 2)
        raise ConstraintError("CheckQuantParamsForMXTypeK: scale shape", f"scale {wScale}, expected {want}")


def CheckFp4Shape(inp: GQmmInputInfo) -> None:
    if inp.kSize % EVEN_FACTOR != 0:
        raise ConstraintError("CheckFp4Shape: FP4 K even", f"k {inp.kSize} must be even when x is FLOAT4")
    if inp.kSize == 2:
        raise ConstraintError("CheckFp4Shape: FP4 K != 2", "k cannot be 2 when x is FLOAT4")
    if not inp.transB and inp.nSize % EVEN_FACTOR != 0:
        raise ConstraintError("CheckFp4Shape: FP4 N even unless transB", f"n {inp.nSize} must be even when x is "
                              "FLOAT4 and the weight is not transposed")


def CheckBiasShape(ctx: GmmTilingContext, inp: GQmmInputInfo) -> None:
    bias = tuple(ctx.bias_shape or ())
    if len(bias) != BIAS_DIMS or bias[0] != inp.groupNum or bias[1] != inp.nSize:
        raise ConstraintError("CheckBiasShape", f"bias {bias}, expected {(inp.groupNum, inp.nSize)}")


def SetKernelType(inp: GQmmInputInfo) -> GQmmInputInfo:
    """0 = fixpipe dequant (MX always); the vector / per-block kernel types belong to template 1."""
    return replace(inp, kernelType=0)


def CheckCoreNum(ctx: GmmTilingContext, inp: GQmmInputInfo) -> None:
    info = ctx.compile_info
    if (inp.groupType == SPLIT_K or inp.kernelType in (1, 2)) and info.aivNum != CORE_RATIO * info.aicNum:
        raise ConstraintError("CheckCoreNum: aicNum:aivNum 1:2", f"split K (mix template) needs aivNum = 2 * aicNum, "
                              f"got {info.aicNum}:{info.aivNum}")


def AnalyzeInputs(ctx: GmmTilingContext, inp: GQmmInputInfo) -> GQmmInputInfo:
    inp = SetMKN(ctx, SetGroupNum(ctx, inp))
    if inp.cDtype is GeDataType.DT_INT32:
        return inp
    if len(ctx.scale_shape) < 1:
        raise ConstraintError("AnalyzeInputs: scale dims", "scale must have at least one dimension")
    inp = SetQuantMode(inp)
    if inp.bQuantMode is QuantMode.MX_PERGROUP_MODE:  # CheckQuantParams -> CheckQuantParamsForMxQuantMode
        if ctx.per_token_scale_shape is None:
            raise ConstraintError("CheckQuantParamsForMxQuantMode: pertokenScale", "MX mode needs a pertokenScale")
        xScale, wScale = tuple(ctx.per_token_scale_shape), tuple(ctx.scale_shape)
        if inp.groupType == SPLIT_M:
            CheckQuantParamsForMXTypeM(inp, xScale, wScale)
        else:
            CheckQuantParamsForMXTypeK(inp, xScale, wScale)
    if inp.bFormat == FRACTAL_NZ:
        raise ConstraintError("CheckShapeForWeightNz: not emulated", "FRACTAL_NZ weights (shape checks and the "
                              "3-buffer L1 search) are not emulated; use an ND weight")
    if IsFp4(inp.aDtype):
        CheckFp4Shape(inp)
        if inp.hasBias:
            CheckBiasShape(ctx, inp)
    inp = SetKernelType(inp)
    CheckCoreNum(ctx, inp)
    return inp


def GetShapeAttrsInfo(ctx: GmmTilingContext) -> GQmmInputInfo:
    """`GroupedQmmBasicApiTiling::GetShapeAttrsInfo`: Reset, then AnalyzeDtype, AnalyzeAttrs, AnalyzeInputs."""
    inp = AnalyzeDtype(ctx, GQmmInputInfo())
    inp = AnalyzeAttrs(ctx, inp)
    return AnalyzeInputs(ctx, inp)


# --- DoLibApiTiling helpers ---------------------------------------------------------------------------------------
def CalBasicBlock(inp: GQmmInputInfo) -> tuple[int, int, int]:
    """(baseM, baseN, baseK): M / N capped at 256 and aligned to 16 (outer axis) or 32 bytes (inner axis);
    baseK = 128 bytes of A capped at K, aligned to 32 bytes, then (MX) to 64; FP4 && !transB: baseN ru64."""
    baseM = min(inp.mSize, BASIC_BLOCK_SIZE_256)
    baseM = (CeilAlign(baseM, CUBE_BLOCK) if not inp.transA
             else CeilAlign(baseM, GetShapeWithDataType(L1_ALIGN_SIZE, inp.aDtype)))
    if inp.aQuantMode is QuantMode.PERGROUP_MODE and inp.bQuantMode is QuantMode.PERBLOCK_MODE:
        baseN = PER_BLOCK_GROUP_SIZE if (inp.nSize <= PER_BLOCK_GROUP_SIZE or baseM > PER_BLOCK_GROUP_SIZE) \
            else BASIC_BLOCK_SIZE_256
        return baseM, baseN, PER_BLOCK_GROUP_SIZE
    baseN = min(inp.nSize, BASIC_BLOCK_SIZE_256)
    baseN = (CeilAlign(baseN, CUBE_BLOCK) if inp.transB
             else CeilAlign(baseN, GetShapeWithDataType(L1_ALIGN_SIZE, inp.bDtype)))
    baseK = CeilAlign(min(GetShapeWithDataType(BASIC_BLOCK_SIZE_128, inp.aDtype), inp.kSize),
                      GetShapeWithDataType(CUBE_REDUCE_BLOCK, inp.aDtype))
    if inp.bQuantMode is QuantMode.MX_PERGROUP_MODE:
        baseK = CeilAlign(baseK, MXFP_BASEK_FACTOR)
        if IsFp4(inp.aDtype) and not inp.transB:
            baseN = CeilAlign(baseN, 64)
    return baseM, baseN, baseK


def InitCommonL1TilingFields(inp: GQmmInputInfo, baseM: int, baseN: int, l0cSize: int) -> dict[str, int]:
    """stepM / stepN 1, singleCore* = one tile over the full K, iterateOrder 0, dbL0c 2 iff two FP32 C tiles fit."""
    return {"stepM": 1, "stepN": 1, "singleCoreM": min(inp.mSize, baseM), "singleCoreN": min(inp.nSize, baseN),
            "singleCoreK": inp.kSize, "iterateOrder": 0,
            "dbL0c": DB_SIZE if baseM * baseN * DATA_SIZE_L0C * DB_SIZE <= l0cSize else 1}


def IsBiasInL1(inp: GQmmInputInfo) -> bool:
    if not inp.hasBias:
        return False
    mxFp4Fp32 = (inp.bQuantMode is QuantMode.MX_PERGROUP_MODE and IsFp4(inp.aDtype)
                 and inp.biasDtype is GeDataType.DT_FLOAT)
    return inp.biasDtype is GeDataType.DT_INT32 or mxFp4Fp32


def CalcLeftL1Size(inp: GQmmInputInfo, baseN: int, l1Size: int) -> int:
    """L1 left after the resident bias (INT32, or MXFP4's FP32: baseN x 4 bytes) and per-channel scale."""
    biasBytes = baseN * GetSizeByDataType(inp.biasDtype) if IsBiasInL1(inp) else 0
    scaleBytes = (baseN * GetSizeByDataType(inp.scaleDtype)
                  if (inp.bQuantMode is QuantMode.PERCHANNEL_MODE and inp.kernelType == 0
                      and inp.cDtype is not GeDataType.DT_INT32) else 0)
    used = biasBytes + scaleBytes
    if l1Size <= used:
        raise ConstraintError("CalcLeftL1Size: L1 overflow", f"L1 size {l1Size} <= reserved {used} bytes")
    return l1Size - used


def CalcAlignedMxBaseScaleSize(inp: GQmmInputInfo, baseM: int, baseN: int, baseK: int) -> tuple[int, int]:
    """Bytes of one A / B scale tile: ru2(ceil(baseK / 32)) scales per row."""
    kScales = CeilAlign(CeilDiv(baseK, MX_GROUP_SIZE), MXFP_MULTI_BASE_SIZE)
    return (GetSizeWithDataType(kScales * baseM, inp.perTokenScaleDtype),
            GetSizeWithDataType(kScales * baseN, inp.scaleDtype))


def GetDepthA1B1(inp: GQmmInputInfo, baseK: int, leftSize: int, perDepthSize: int, depthInit: int) -> int:
    """depthInit 1: the largest power of two p with p * perDepthSize < leftSize (1 when even 1 does not fit)."""
    if depthInit > 1 and perDepthSize > DB_SIZE * MTE2_MIN_LOAD_SIZE_V120:
        return depthInit
    if depthInit > 1:
        depthScale = leftSize // perDepthSize
        baseKSize = GetSizeWithDataType(baseK, inp.aDtype)
        while (depthScale * baseKSize) % BASIC_BLOCK_SIZE_512 != 0 and depthScale * baseKSize > BASIC_BLOCK_SIZE_512:
            depthScale -= 1
        if (depthScale * baseKSize) % BASIC_BLOCK_SIZE_512 != 0 and depthScale * baseKSize >= BASIC_BLOCK_SIZE_256:
            depthScale = BASIC_BLOCK_SIZE_256 // baseKSize
        return depthInit * max(depthScale, 1)
    if perDepthSize == 0:
        raise ConstraintError("GetDepthA1B1: K == 0", "total K is 0 (split-K with every group empty): the source's "
                              "host loop `while (depthScale * perDepthSize < leftSize)` never ends; refused")
    depthScale = 1
    while depthScale * perDepthSize < leftSize:
        depthScale *= 2
    return depthInit * (depthScale if depthScale == 1 else depthScale // 2)


def CalStepKs(inp: GQmmInputInfo, baseK: int, depthA1: int, depthB1: int) -> tuple[int, int, int, int]:
    """(stepKa, stepKb, depthA1, depthB1): half the depths, capped at ceil(K / baseK) (note the asymmetric `>` for
    A and `>=` for B), the larger a multiple of the smaller while it does not cover K; depths = 2 * stepK."""
    stepKa = 1 if depthA1 == 1 else depthA1 // DB_SIZE
    stepKb = 1 if depthB1 == 1 else depthB1 // DB_SIZE
    if stepKa * baseK > inp.kSize:
        stepKa = CeilDiv(inp.kSize, baseK)
    if stepKb * baseK >= inp.kSize:
        stepKb = CeilDiv(inp.kSize, baseK)
    if inp.aQuantMode is QuantMode.PERGROUP_MODE and inp.bQuantMode is QuantMode.PERBLOCK_MODE:
        stepKa, stepKb = min(stepKa, 4), min(stepKb, 4)
    if stepKa >= stepKb and stepKa * baseK < inp.kSize:
        stepKa = stepKa // stepKb * stepKb
    if stepKb > stepKa and stepKb * baseK < inp.kSize:
        stepKb = stepKb // stepKa * stepKa
    return stepKa, stepKb, stepKa * DB_SIZE, stepKb * DB_SIZE


def GetTilingKey(inp: GQmmInputInfo) -> int:
    """`GET_TPL_TILING_KEY(transB, transA, kernelType)` (`gqmm_tiling_key.h`: 2, 2 and 4 bits, low bits first)."""
    return int(inp.transB) + (int(inp.transA) << 2) + (inp.kernelType << 4)
