"""Host tiling (above blaze and apace, below ops): the apace SWAT quant-matmul tiling.

`QuantMatmulTilingSwat(platform).GetTilingData(m, n, k, transA, transB, aType, bType)` returns a frozen
`QuantMatmulTilingData`; `can_implement(QuantMatmulArgs(...))` lists the rules an input breaks.
`WeightQuantTilingSwat(platform).GetTilingData(m, n, k, transB, hasOffset, hasBias)` tiles the weight-quant
matmul (seed 001); `weight_quant_layout_findings(tiling)` reports its L1 / UB overlaps.
"""

from mc2emu.tiling.quant_matmul_tiling_swat import (
    QuantMatmulArgs,
    QuantMatmulPlatformInfo,
    QuantMatmulRunInfo,
    QuantMatmulTilingData,
    QuantMatmulTilingSwat,
    can_implement,
)
from mc2emu.tiling.weight_quant_tiling_swat import (
    WeightQuantArgs,
    WeightQuantMatmulTilingData,
    WeightQuantPlatformInfo,
    WeightQuantTilingSwat,
)
from mc2emu.tiling.weight_quant_tiling_swat import can_implement as weight_quant_can_implement
from mc2emu.tiling.weight_quant_tiling_swat import layout_findings as weight_quant_layout_findings

__all__ = [
    "QuantMatmulArgs", "QuantMatmulPlatformInfo", "QuantMatmulRunInfo", "QuantMatmulTilingData",
    "QuantMatmulTilingSwat", "WeightQuantArgs", "WeightQuantMatmulTilingData", "WeightQuantPlatformInfo",
    "WeightQuantTilingSwat", "can_implement", "weight_quant_can_implement", "weight_quant_layout_findings",
]
