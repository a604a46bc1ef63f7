"""GroupedQmmTiling (A5 quant GroupedMatmul): input analysis and the shared basic-block / L1 helpers.

Emulates ops-transformer `gmm/grouped_matmul/op_host/op_tiling/arch35/grouped_quant_matmul_tiling.{h,cpp}`
(cannmirror/ops-transformer master 25fb6b92), the parts the MX Basic-API template (priority 0) runs:

    GQmmInputInfo, QuantMode, the GmmConstant constants, GetSizeWithDataType / GetShapeWithDataType,
    CalBasicBlock, InitCommonL1TilingFields, CalcLeftL1Size, CalcAlignedMxBaseScaleSize, GetDepthA1B1,
    CalStepKs, GetTilingKey

Each step is a pure function of the analyzed inputs (`GQmmInputInfo`, the source's `inputParams_`) returning
plain values. The input analysis (GetShapeAttrsInfo) lives in grouped_quant_matmul_shape_attrs.py.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mc2emu.arch.errors import ConstraintError
from mc2emu.numerics.constants import CUBE_BLOCK, FLOAT32_BYTES, MX_GROUP_SIZE, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.int_math import Align as CeilAlign
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.tiling.grouped_matmul_tiling_context import (
    GeDataType,
    GetSizeByDataType,
)

# --- grouped_quant_matmul_tiling.h, namespace GmmConstant -------------------------------------------------------
DB_SIZE = 2  # double buffering: an L1 depth counts two stages per stepK
TB_SIZE = 3  # l1BufferStage with three L1 buffers
NUM_HALF = 2
EVEN_FACTOR = 2
POWER_OF_TWO = 2
BASIC_BLOCK_SIZE_512 = 512
BASIC_BLOCK_SIZE_256 = 256
BASIC_BLOCK_SIZE_128 = 128
L1_ALIGN_SIZE = 32  # bytes: contiguous L1 rows are 32-byte granules
CUBE_REDUCE_BLOCK = 32  # bytes: the K granule of a cube fractal
DATA_SIZE_L0C = FLOAT32_BYTES  # bytes of one float32 accumulator
SCALER_FACTOR_MAX = 127
SCALER_FACTOR_MIN = 1
MTE2_MIN_LOAD_SIZE_V120 = 64 * 1024  # bytes one GM read should move to reach bandwidth
GMM_MAX_GROUP_LIST_SIZE = 1024
PER_BLOCK_GROUP_SIZE = 128
MXFP_BASEK_FACTOR = MXFP_DIVISOR_SIZE  # mx_mmad needs baseK aligned to 64 (one scale pair)
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
# CheckShapeForWeightNz (grouped_quant_matmul_tiling.h): a single-tensor NZ weight is 5-D (g, x1, y1, 16, C0)
WEIGHTNZ_DIM_NUM = 5
WEIGHTNZ_SECOND_DIM = 1  # offsets from nzDimOffset = dims - (WEIGHTNZ_DIM_NUM - 1)
WEIGHTNZ_THIRD_DIM = 2
WEIGHTNZ_FORTH_DIM = 3
WEIGHTNZ_16 = 16  # rows of a fractal
WEIGHTNZ_32 = 32  # C0 of an 8-bit weight (32 bytes)
WEIGHTNZ_64 = 64  # C0 of a 4-bit weight (32 bytes)


class QuantMode(enum.IntEnum):
    """`optiling::QuantMode` (bit flags; serialized as uint32 in GMMQuantParams)."""

    DEFAULT = 0x0
    PERTENSOR_MODE = 0x1
    PERCHANNEL_MODE = 0x1 << 1
    PERTOKEN_MODE = 0x1 << 2
    MX_PERGROUP_MODE = 0x1 << 3
    PERGROUP_MODE = 0x1 << 4
    PERBLOCK_MODE = 0x1 << 5


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
