"""Host tiling (above blaze, below apace and ops): the apace SWAT quant-matmul tiling and GroupedMatmul's MX tiling.

`QuantMatmulTilingSwat(platform).GetTilingData(m, n, k, transA, transB, aType, bType)` returns a frozen
`QuantMatmulTilingData`; `can_implement(QuantMatmulArgs(...))` lists the rules an input breaks.
`TilingGMM(GmmTilingContext.mx(m, n, k, group_num=...))` returns a `GmmTilingResult` (GMMQuantParams +
QuantBasicApiMMTiling, tiling key, block dim) or raises `ConstraintError` naming the rule.
`WeightQuantTilingSwat(platform).GetTilingData(m, n, k, transB, hasOffset, hasBias)` tiles the weight-quant
matmul (seed 001); `weight_quant_layout_findings(tiling)` reports its L1 / UB overlaps.
"""

from mc2emu.tiling.grouped_matmul_tiling import GmmTilingResult, TilingGMM
from mc2emu.tiling.grouped_matmul_tiling_context import GMMCompileInfo, GmmTilingContext
from mc2emu.tiling.grouped_quant_basic_api_matmul_tiling import (
    GMMQuantBasicApiTilingData,
    GMMQuantParams,
    QuantBasicApiMMTiling,
)
from mc2emu.tiling.quant_matmul_tiling_data import (
    QuantMatmulArgs,
    QuantMatmulPlatformInfo,
    QuantMatmulRunInfo,
    QuantMatmulTilingData,
)
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat, can_implement
from mc2emu.tiling.weight_quant_tiling_layout import layout_findings as weight_quant_layout_findings
from mc2emu.tiling.weight_quant_tiling_swat import (
    WeightQuantArgs,
    WeightQuantMatmulTilingData,
    WeightQuantPlatformInfo,
    WeightQuantTilingSwat,
)
from mc2emu.tiling.weight_quant_tiling_swat import can_implement as weight_quant_can_implement

__all__ = [
    "GMMCompileInfo", "GMMQuantBasicApiTilingData", "GMMQuantParams", "GmmTilingContext", "GmmTilingResult",
    "QuantBasicApiMMTiling", "QuantMatmulArgs", "QuantMatmulPlatformInfo", "QuantMatmulRunInfo",
    "QuantMatmulTilingData", "QuantMatmulTilingSwat", "TilingGMM", "WeightQuantArgs",
    "WeightQuantMatmulTilingData", "WeightQuantPlatformInfo", "WeightQuantTilingSwat", "can_implement",
    "weight_quant_can_implement", "weight_quant_layout_findings",
]
