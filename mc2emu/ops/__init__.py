"""Operators: one entry per operator, each with its golden beside it (the top layer below check / run).

- `quant_batch_matmul_mx(x1, x1_scale, x2, x2_scale, *, bias, trans_a, trans_b, out_dtype, atomic, block_dim,
  check, timeout, ...)` -> C, one emulated NPU; golden: `golden_quant_batch_matmul_mx`.
- `grouped_matmul_mx_tiling(m, n, k, *, group_num, ...)` -> the GroupedMatmul MX host tiling (TilingGMM);
  `grouped_matmul_mx_schedule(group_sizes, n, k, *, m, split, block_num, ...)` -> every tile each core runs.
"""

from mc2emu.ops.grouped_matmul_mx_tiling_api import grouped_matmul_mx_schedule, grouped_matmul_mx_tiling
from mc2emu.ops.quant_batch_matmul_mx import quant_batch_matmul_mx
from mc2emu.ops.quant_batch_matmul_mx_golden import golden_quant_batch_matmul_mx

__all__ = [
    "golden_quant_batch_matmul_mx", "grouped_matmul_mx_schedule", "grouped_matmul_mx_tiling", "quant_batch_matmul_mx",
]
