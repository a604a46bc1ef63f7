"""The structs of the apace SWAT quant-matmul tiling: what it reads and what it returns.

Emulates ops-transformer `mc2/common/op_kernel/apace/tiling/quant_matmul_tiling_common.h` (`DataType`, the
platform info, the args, the run info) and `quant_matmul_tiling_data.h` (`QuantMatmulTilingData`, frozen;
`kL1` and `block_dim` are derived properties), with the source's field names. The tiling that fills them is
`quant_matmul_tiling_swat.py`; the kernels take `QuantMatmulTilingData`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import PlatformSpec
from mc2emu.numerics import ElemFormat


class DataType(enum.Enum):
    """`mm::DataType`: the tiling only distinguishes 4-bit and 8-bit MX elements."""

    DT_FLOAT4_E2M1 = "fp4"
    DT_FLOAT8_E4M3FN = "fp8"

    @classmethod
    def of(cls, elem: ElemFormat | str) -> DataType:
        return cls.DT_FLOAT4_E2M1 if ElemFormat.parse(elem).is_fp4 else cls.DT_FLOAT8_E4M3FN


def GetShapeWithDataType(dt: DataType, size: int) -> int:
    """Elements that `size` bytes hold."""
    return size << 1 if dt is DataType.DT_FLOAT4_E2M1 else size


def GetSizeWithDataType(dt: DataType, shape: int) -> int:
    """Bytes that `shape` elements take."""
    return (shape + 1) >> 1 if dt is DataType.DT_FLOAT4_E2M1 else shape


@dataclass(frozen=True)
class QuantMatmulPlatformInfo:
    """`QuantMatmulPlatformInfo`: what the tiling reads from the platform."""

    aicNum: int
    aivNum: int
    ubSize: int
    l1Size: int
    l0cSize: int
    l0aSize: int
    l0bSize: int
    btSize: int

    @classmethod
    def from_platform(cls, platform: PlatformSpec, aic_num: int | None = None) -> QuantMatmulPlatformInfo:
        aic = platform.aic_count if aic_num is None else int(aic_num)
        if aic < 1:  # the tiling divides by it (tailBlockCnt = totalBlockCnt % aicNum)
            raise ConstraintError("aic_num >= 1", f"cannot tile for {aic_num} AI cores")
        return cls(aic, platform.aiv_count, platform.ub_size, platform.l1_size, platform.l0c_size,
                   platform.l0a_size, platform.l0b_size, platform.bias_table_size)


@dataclass(frozen=True)
class QuantMatmulArgs:
    """`QuantMatmulArgs`, plus the element formats the template parameters carry in the source."""

    m: int
    n: int
    k: int
    batch: int = 1
    transA: bool = False
    transB: bool = True
    aType: ElemFormat = ElemFormat.E4M3
    bType: ElemFormat = ElemFormat.E4M3


@dataclass
class QuantMatmulRunInfo:
    """`QuantMatmulRunInfo`: the intermediate state the tiling steps build."""

    baseM: int = 0
    baseN: int = 0
    baseK: int = 0
    stepKa: int = 0
    stepKb: int = 0
    depthA1: int = 0
    depthB1: int = 0
    dbL0c: int = 0
    mBlockCnt: int = 0
    nBlockCnt: int = 0
    totalBlockCnt: int = 0
    mTailTile: int = 1
    nTailTile: int = 1
    mTailSize: int = 0
    nTailSize: int = 0
    tailBlockCnt: int = 0
    mBaseTailSplitCnt: int = 1
    mTailMain: int = 0
    nBaseTailSplitCnt: int = 1
    nTailMain: int = 0
    scaleFactorA: int = 0
    scaleFactorB: int = 0


@dataclass(frozen=True)
class QuantMatmulTilingData:
    """`QuantMatmulTilingData`: the serialized tiling result (source field names and order)."""

    m: int
    n: int
    k: int
    baseM: int
    baseN: int
    baseK: int
    scaleKL1: int
    mTailTile: int = 1
    nTailTile: int = 1
    mBaseTailSplitCnt: int = 1
    nBaseTailSplitCnt: int = 1
    mTailMain: int = 0
    nTailMain: int = 0
    usedCoreNum: int = 0
    stepK: int = 0
    nBufferNum: int = 0
    dbL0c: int = 0
    runInfo: QuantMatmulRunInfo | None = field(default=None, compare=False, repr=False)

    @property
    def kL1(self) -> int:
        """`l1Params.kL1 = stepK * baseK` (seed 000 §9 item 7)."""
        return self.stepK * self.baseK

    @property
    def block_dim(self) -> int:
        """The launch's block_dim: usedCoreNum."""
        return self.usedCoreNum
