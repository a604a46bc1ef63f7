"""Host tiling (above blaze and apace, below ops): the apace SWAT quant-matmul tiling.

`QuantMatmulTilingSwat(platform).GetTilingData(m, n, k, transA, transB, aType, bType)` returns a frozen
`QuantMatmulTilingData`; `can_implement(QuantMatmulArgs(...))` lists the rules an input breaks.
"""

from mc2emu.tiling.quant_matmul_tiling_swat import (
    QuantMatmulArgs,
    QuantMatmulPlatformInfo,
    QuantMatmulRunInfo,
    QuantMatmulTilingData,
    QuantMatmulTilingSwat,
    can_implement,
)

__all__ = [
    "QuantMatmulArgs", "QuantMatmulPlatformInfo", "QuantMatmulRunInfo", "QuantMatmulTilingData",
    "QuantMatmulTilingSwat", "can_implement",
]
