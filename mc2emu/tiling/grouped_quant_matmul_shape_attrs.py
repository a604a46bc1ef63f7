"""GroupedQmmTiling::GetShapeAttrsInfo: the A5 quant GroupedMatmul input analysis and its refusals.

Emulates ops-transformer `gmm/grouped_matmul/op_host/op_tiling/arch35/grouped_quant_matmul_tiling.cpp`
(cannmirror/ops-transformer master 25fb6b92; the NZ weight checks at libochao-huawei 5778144), the checks the
MX Basic-API template (priority 0) runs:

    GetShapeAttrsInfo = AnalyzeDtype -> AnalyzeAttrs -> AnalyzeInputs
        AnalyzeInputs = SetGroupNum -> SetMKN -> SetQuantMode -> CheckQuantParams (MX: CheckQuantParamsForMXTypeM
                        / CheckQuantParamsForMXTypeK) -> [NZ] CheckShapeForWeightNz -> [FP4] CheckFp4Shape,
                        CheckBiasShape -> SetKernelType -> CheckCoreNum

Each step is a pure function returning a new frozen `GQmmInputInfo`; every `OP_CHECK_IF` that rejects an
input raises `ConstraintError` naming the step and the rule. Facts (SPEC §7.3): M is the total row count of
x; MXFP8 takes no bias, MXFP4 an FP32 one; split-M forbids transA, split-K needs transA && !transB && an ND
weight; FP4 x only with split-M; groupNum <= 1024; split-M refuses an empty x or weight; an NZ weight is
E4M3 x E4M3 or FP4 x FP4 (FLOAT4_E1M2 needs one), 5-D storage (g, ., ., 16, C0) matching K and N, N, K > 1.
Not emulated (refused with the rule named): activation epilogues, multi-tensor weights (also the NZ
single-multi-single layout) and every non-MX quant mode (template 1, `GroupedQmmTiling` itself).
"""

from __future__ import annotations

from dataclasses import replace

from mc2emu.arch.errors import ConstraintError
from mc2emu.tiling.grouped_matmul_tiling_context import (
    GROUPLIST_TYPE_COUNT,
    GROUPLIST_TYPE_CUMSUM,
    GROUPLIST_TYPE_SPARSE_M,
    SPLIT_K,
    SPLIT_M,
    GeDataType,
    GmmTilingContext,
)
from mc2emu.tiling.grouped_quant_matmul_tiling import (
    BIAS_DIMS,
    CORE_RATIO,
    EVEN_FACTOR,
    FRACTAL_NZ,
    GMM_MAX_GROUP_LIST_SIZE,
    GROUP_LIST_SPARSE_DIMS,
    LEGAL_INPUT_DTYPES,
    MIN_ND_DIM,
    MXFP_BASEK_FACTOR,
    MXFP_MULTI_BASE_SIZE,
    MXFP_PER_TOKEN_SCALE_DIM_NUM,
    MXFP_TYPE_K_SCALE_DIM_NUM,
    MXFP_TYPE_M_SCALE_DIM_NUM,
    WEIGHTNZ_16,
    WEIGHTNZ_32,
    WEIGHTNZ_64,
    WEIGHTNZ_DIM_NUM,
    WEIGHTNZ_FORTH_DIM,
    WEIGHTNZ_SECOND_DIM,
    WEIGHTNZ_THIRD_DIM,
    CeilDiv,
    GQmmInputInfo,
    IsFp4,
    IsMicroScaling,
    QuantMode,
)


def _shape_size(shape: tuple[int, ...] | None) -> int:
    out = 1
    for d in shape or ():
        out *= int(d)
    return out


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
    if min(*x, *w) < 0:  # the framework's shapes are counts; CalBasicBlock would divide by a negative size
        raise ConstraintError("SetMKN: dims >= 0", f"x {x}, weight {w}")
    mSize = x[-1] if inp.transA else x[-2]
    kSize = x[-2] if inp.transA else x[-1]
    nSize = w[-2] if inp.transB else w[-1]
    if (_shape_size(x) == 0 or _shape_size(w) == 0) and inp.groupType == SPLIT_M:
        raise ConstraintError("SetMKN: split-M rejects an empty x or weight",
                              f"x {x}, weight {w}: unsupported empty tensor, please check k dimension")
    if mSize == 0 or nSize == 0:
        raise ConstraintError("framework: M == 0 or N == 0 returns an empty y without tiling",
                              f"x {x}, weight {w}: M {mSize}, N {nSize} (TQ:1107; the op returns the empty y, the "
                              f"source's tiling would divide by zero in CalScaleFactors)")
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
        want: tuple[int, ...] = ((inp.groupNum, inp.nSize, expectedK, 2) if inp.transB
                                 else (inp.groupNum, expectedK, inp.nSize, 2))
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


def CheckShapeForWeightNz(inp: GQmmInputInfo, wShape: tuple[int, ...]) -> None:
    """`CheckShapeForWeightNz(weightNzStorageShape)` (grouped_quant_matmul_tiling.cpp:644-672 at libochao-huawei
    5778144): 5 storage dims (the multi-tensor 4-dim layout is not emulated), last dim C0 (64 for a 4-bit weight,
    else 32), second-last 16, dims 1 / 2 = (ceil(n/C0), ceil(k/16)) or, transB, (ceil(k/C0), ceil(n/16)); then the
    logical N and K must both exceed 1."""
    if len(wShape) != WEIGHTNZ_DIM_NUM:
        raise ConstraintError("CheckWeightNzDimNum: NZ weight dims == 5", f"weight storage shape {wShape} has "
                              f"{len(wShape)} dims, expected {WEIGHTNZ_DIM_NUM} (g, ., ., 16, C0)")
    isFp4 = IsFp4(inp.bDtype)
    weightNzLastDim = WEIGHTNZ_64 if isFp4 else WEIGHTNZ_32
    nzDimOffset = len(wShape) - (WEIGHTNZ_DIM_NUM - 1)
    if wShape[nzDimOffset + WEIGHTNZ_FORTH_DIM] != weightNzLastDim:
        raise ConstraintError("CheckWeightNzLastDim: NZ last dim == C0", f"weight storage shape {wShape}: the last "
                              f"storage dimension of an NZ weight must be {weightNzLastDim} for "
                              f"{'fp4' if isFp4 else 'fp8'}; actual value is "
                              f"{wShape[nzDimOffset + WEIGHTNZ_FORTH_DIM]}")
    if wShape[nzDimOffset + WEIGHTNZ_THIRD_DIM] != WEIGHTNZ_16:
        raise ConstraintError("CheckWeightNzSecondLastDim: NZ second-last dim == 16", f"weight storage shape "
                              f"{wShape}: the second-last storage dimension of an NZ weight must be 16; actual value "
                              f"is {wShape[nzDimOffset + WEIGHTNZ_THIRD_DIM]}")
    wShapeDimThird = wShape[nzDimOffset + WEIGHTNZ_SECOND_DIM]
    wShapeDimSecond = wShape[nzDimOffset]
    k, n = inp.kSize, inp.nSize
    if not inp.transB:
        checks = ((wShapeDimThird, CeilDiv(k, WEIGHTNZ_16), "third", "ceil(kSize/16)"),
                  (wShapeDimSecond, CeilDiv(n, weightNzLastDim), "second", f"ceil(nSize/{weightNzLastDim})"))
    else:
        checks = ((wShapeDimThird, CeilDiv(n, WEIGHTNZ_16), "third", "ceil(nSize/16)"),
                  (wShapeDimSecond, CeilDiv(k, weightNzLastDim), "second", f"ceil(kSize/{weightNzLastDim})"))
    for got, want, which, formula in checks:
        if got != want:
            raise ConstraintError("CheckWeightNzTransposedDims: NZ dims match K and N", f"weight storage shape "
                                  f"{wShape}: when the format of weight is FRACTAL_NZ, {which} dimension must be "
                                  f"equal to {formula} = {want} (transB {inp.transB}, k {k}, n {n})")
    if k == 1 or n == 1:
        raise ConstraintError("CheckShapeForWeightNz: NZ needs N > 1 and K > 1", f"For an NZ weight, logical N and K "
                              f"must both be greater than 1; actual N={n}, K={k}")


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
        CheckShapeForWeightNz(inp, ctx.weight_storage)
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
