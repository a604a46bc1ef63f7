"""What GroupedMatmul's host tiling reads: dtypes, shapes, attributes and the platform (`gert::TilingContext`).

The source reads these from a `gert::TilingContext` (ops-transformer
`gmm/grouped_matmul/op_host/op_tiling/grouped_matmul_tiling.cpp`, `TilingGMM`, and
`arch35/grouped_quant_matmul_tiling.cpp`, `GroupedQmmTiling::Analyze*`; cannmirror/ops-transformer master
25fb6b92). Here it is one frozen dataclass, `GmmTilingContext`, so the tiling stays a pure function of it.
`GmmTilingContext.mx(m, n, k, group_num=...)` builds the tensor shapes the way the source's unit test does
(`gmm/grouped_matmul/tests/ut/op_host/test_grouped_quant_arch35_tiling.cpp`): x [M, K] ([K, M] when
transposed), weight [g, K, N] ([g, N, K] with transB) for split-M or [K, N] for split-K, pertoken scale
[M, ceil(K/64), 2] (split-K: [K/64 + g, M, 2]), scale [g, ceil(K/64), N, 2] ([g, N, ceil(K/64), 2] with
transB; split-K: [K/64 + g, N, 2]), groupList [g], y [M, N].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE
from mc2emu.numerics.int_math import CeilDiv

# GroupedMatmul attribute values (`grouped_matmul_tiling.h`, namespace GroupedMatmul).
SPLIT_M = 0
SPLIT_K = 2
GROUPLIST_TYPE_CUMSUM = 0
GROUPLIST_TYPE_COUNT = 1
GROUPLIST_TYPE_SPARSE_M = 2
NZ_FRACTAL = 16  # rows of an NZ fractal
NZ_C0_8BIT = 32  # C0 of an NZ weight in elements: 32 bytes of 8-bit data
NZ_C0_4BIT = 64  # ... or of 4-bit data

_GROUP_TYPES = {"split_m": SPLIT_M, "m": SPLIT_M, "split_k": SPLIT_K, "k": SPLIT_K}
_GROUP_LIST_TYPES = {"cumsum": GROUPLIST_TYPE_CUMSUM, "count": GROUPLIST_TYPE_COUNT,
                     "sparse": GROUPLIST_TYPE_SPARSE_M, "sparse_m": GROUPLIST_TYPE_SPARSE_M}


class GeDataType(enum.Enum):
    """`ge::DataType` members the GroupedMatmul quant tiling distinguishes; the value is the element's bits."""

    DT_INT4 = ("int4", 4)
    DT_INT8 = ("int8", 8)
    DT_HIFLOAT8 = ("hifloat8", 8)
    DT_FLOAT8_E4M3FN = ("float8_e4m3fn", 8)
    DT_FLOAT8_E5M2 = ("float8_e5m2", 8)
    DT_FLOAT8_E8M0 = ("float8_e8m0fnu", 8)
    DT_FLOAT4_E2M1 = ("float4_e2m1fn", 4)
    DT_FLOAT4_E1M2 = ("float4_e1m2", 4)
    DT_FLOAT16 = ("float16", 16)
    DT_BF16 = ("bfloat16", 16)
    DT_FLOAT = ("float32", 32)
    DT_INT32 = ("int32", 32)
    DT_INT64 = ("int64", 64)
    DT_UINT64 = ("uint64", 64)

    @property
    def bits(self) -> int:
        return self.value[1]

    @property
    def is_4bit(self) -> bool:
        return self.bits == 4

    @classmethod
    def parse(cls, name: GeDataType | str, what: str = "dtype") -> GeDataType:
        """Accept a member, its numpy-style name ("float8_e4m3fn") or the UT CSV spelling ("FLOAT8-E4M3")."""
        if isinstance(name, GeDataType):
            return name
        key = str(name).strip().lower().replace("-", "_")
        for member in cls:
            aliases = {member.value[0], member.name.lower(), member.name.lower().removeprefix("dt_")}
            if key in aliases:
                return member
        extra = {"float8_e4m3": cls.DT_FLOAT8_E4M3FN, "e4m3": cls.DT_FLOAT8_E4M3FN, "e5m2": cls.DT_FLOAT8_E5M2,
                 "float4_e2m1": cls.DT_FLOAT4_E2M1, "e2m1": cls.DT_FLOAT4_E2M1, "e1m2": cls.DT_FLOAT4_E1M2,
                 "float8_e8m0": cls.DT_FLOAT8_E8M0, "e8m0": cls.DT_FLOAT8_E8M0, "fp32": cls.DT_FLOAT,
                 "bf16": cls.DT_BF16, "fp16": cls.DT_FLOAT16, "half": cls.DT_FLOAT16}
        if key in extra:
            return extra[key]
        raise ConstraintError(f"{what} dtype", f"unknown data type {name!r}")


def GetSizeByDataType(dtype: GeDataType) -> int:
    """`ge::GetSizeByDataType`: bytes per element; sub-byte types never compare equal to 1 (they return 0 here)."""
    return dtype.bits // 8


@dataclass(frozen=True)
class GMMCompileInfo:
    """`GMMCompileInfo`: the platform numbers the tiling reads (`GetPlatformInfo`)."""

    npuArch: str = "DAV_3510"
    aicNum: int = 32
    aivNum: int = 64
    ubSize: int = 256 * 1024
    l1Size: int = 512 * 1024
    l0CSize: int = 256 * 1024
    l0ASize: int = 64 * 1024
    l0BSize: int = 64 * 1024

    @classmethod
    def from_platform(cls, platform: PlatformSpec = DAV_3510, *, l1_size: int | None = None,
                      l0c_size: int | None = None, aic_num: int | None = None) -> GMMCompileInfo:
        aic = platform.aic_count if aic_num is None else int(aic_num)
        if aic < 1:  # the block dim of the launch
            raise ConstraintError("aic_num >= 1", f"cannot tile for {aic_num} AI cores")
        aiv = platform.aiv_count if aic_num is None else 2 * aic
        return cls("DAV_3510", aic, aiv, platform.ub_size,
                   platform.l1_size if l1_size is None else int(l1_size),
                   platform.l0c_size if l0c_size is None else int(l0c_size),
                   platform.l0a_size, platform.l0b_size)


# The source's UT stub (`test_grouped_quant_arch35_tiling.cpp`): its goldens only hold with an L0C smaller than
# 256 KiB (baseM 128 x baseN 256 gives dbL0C 1); the issue states 128 KiB.
UT_STUB_COMPILE_INFO = GMMCompileInfo(l0CSize=128 * 1024)


def parse_group_type(group_type: int | str) -> int:
    if isinstance(group_type, str):
        key = group_type.strip().lower()
        if key not in _GROUP_TYPES:
                raise ConstraintError("AnalyzeAttrs: groupType", f"group_type {group_type!r} is not split_m or split_k")
        return _GROUP_TYPES[key]
    return int(group_type)


def parse_group_list_type(group_list_type: int | str) -> int:
    if isinstance(group_list_type, str):
        key = group_list_type.strip().lower()
        if key not in _GROUP_LIST_TYPES:
                raise ConstraintError("AnalyzeAttrs: groupListType",
                                  f"group_list_type {group_list_type!r} is not cumsum, count or sparse")
        return _GROUP_LIST_TYPES[key]
    return int(group_list_type)


@dataclass(frozen=True)
class GmmTilingContext:
    """Everything `TilingGMM` reads from its `gert::TilingContext`: origin shapes, and the weight's storage
    shape (`weight_storage_shape`; None: the origin shape, an ND weight)."""

    x_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    scale_shape: tuple[int, ...]
    per_token_scale_shape: tuple[int, ...] | None
    group_list_shape: tuple[int, ...]
    bias_shape: tuple[int, ...] | None = None
    x_dtype: GeDataType = GeDataType.DT_FLOAT8_E4M3FN
    weight_dtype: GeDataType = GeDataType.DT_FLOAT8_E4M3FN
    y_dtype: GeDataType = GeDataType.DT_BF16
    scale_dtype: GeDataType = GeDataType.DT_FLOAT8_E8M0
    per_token_scale_dtype: GeDataType = GeDataType.DT_FLOAT8_E8M0
    bias_dtype: GeDataType = GeDataType.DT_FLOAT
    weight_format: str = "ND"  # "ND" or "FRACTAL_NZ"
    transpose_x: bool = False
    transpose_weight: bool = False
    group_type: int = SPLIT_M
    group_list_type: int = GROUPLIST_TYPE_CUMSUM
    split_item: int = 3
    act_type: int = 0
    compile_info: GMMCompileInfo = GMMCompileInfo()
    weight_storage_shape: tuple[int, ...] | None = None

    @property
    def weight_storage(self) -> tuple[int, ...]:
        """`wStorageShape->GetStorageShape()`: the NZ storage dims, or the origin shape of an ND weight."""
        return self.weight_shape if self.weight_storage_shape is None else tuple(self.weight_storage_shape)

    @classmethod
    def mx(cls, m: int, n: int, k: int, *, group_num: int, trans_a: bool = False, trans_b: bool = False,
           x_dtype: GeDataType | str = "float8_e4m3fn", w_dtype: GeDataType | str = "float8_e4m3fn",
           group_type: int | str = "split_m", group_list_type: int | str = "cumsum", has_bias: bool = False,
           bias_dtype: GeDataType | str = "float32", y_dtype: GeDataType | str = "bfloat16",
           weight_format: str = "ND", compile_info: GMMCompileInfo = GMMCompileInfo()) -> GmmTilingContext:
        """The shapes of an MX GroupedMatmul call with total rows M, N, total K and g groups (as the UT builds,
        test_grouped_quant_arch35_tiling.cpp at libochao-huawei/ops-transformer 5778144: an "NZ" weight_format
        gets the storage dims (g, ceil(n/C0), ceil(k/16), 16, C0), transB (g, ceil(k/C0), ceil(n/16), 16, C0),
        C0 64 for a 4-bit weight else 32)."""
        m, n, k, g = int(m), int(n), int(k), int(group_num)
        gt = parse_group_type(group_type)
        glt = parse_group_list_type(group_list_type)
        k_scale = CeilDiv(k, MXFP_DIVISOR_SIZE)
        x_shape = (k, m) if trans_a else (m, k)
        weight_shape: tuple[int, ...]
        pertoken: tuple[int, ...]
        scale: tuple[int, ...]
        if gt == SPLIT_K:
            split_k_scale = k // MXFP_DIVISOR_SIZE + g
            weight_shape = (n, k) if trans_b else (k, n)
            pertoken = (split_k_scale, m, 2)
            scale = (n, split_k_scale, 2) if trans_b else (split_k_scale, n, 2)
        else:
            weight_shape = (g, n, k) if trans_b else (g, k, n)
            pertoken = (k_scale, m, 2) if trans_a else (m, k_scale, 2)
            scale = (g, n, k_scale, 2) if trans_b else (g, k_scale, n, 2)
        group_list_shape = (g, 2) if glt == GROUPLIST_TYPE_SPARSE_M else (g,)
        wdt = GeDataType.parse(w_dtype, "weight")
        storage: tuple[int, ...] | None = None
        if weight_format.strip().upper() in ("NZ", "FRACTAL_NZ"):
            c0 = NZ_C0_4BIT if wdt.is_4bit else NZ_C0_8BIT
            inner = (CeilDiv(k, c0), CeilDiv(n, NZ_FRACTAL), NZ_FRACTAL, c0) if trans_b else \
                (CeilDiv(n, c0), CeilDiv(k, NZ_FRACTAL), NZ_FRACTAL, c0)
            storage = (*weight_shape[:-2], *inner)
        return cls(x_shape=x_shape, weight_shape=weight_shape, scale_shape=scale, per_token_scale_shape=pertoken,
                   group_list_shape=group_list_shape, bias_shape=(g, n) if has_bias else None,
                   x_dtype=GeDataType.parse(x_dtype, "x"), weight_dtype=wdt,
                   y_dtype=GeDataType.parse(y_dtype, "y"), bias_dtype=GeDataType.parse(bias_dtype, "bias"),
                   weight_format=weight_format, transpose_x=bool(trans_a), transpose_weight=bool(trans_b),
                   group_type=gt, group_list_type=glt, compile_info=compile_info, weight_storage_shape=storage)
