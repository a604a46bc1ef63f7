"""Operators: one entry per operator, each with its golden beside it (the top layer below check / run).

- `quant_batch_matmul_mx(x1, x1_scale, x2, x2_scale, *, bias, trans_a, trans_b, out_dtype, atomic, block_dim,
  check, timeout, ...)` -> C, one emulated NPU; golden: `golden_quant_batch_matmul_mx`.
"""

from mc2emu.ops.quant_batch_matmul_mx import quant_batch_matmul_mx
from mc2emu.ops.quant_batch_matmul_mx_golden import golden_quant_batch_matmul_mx

__all__ = ["golden_quant_batch_matmul_mx", "quant_batch_matmul_mx"]
