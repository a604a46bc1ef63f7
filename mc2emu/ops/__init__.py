"""Operators: one entry per operator, each with its golden beside it (the layer below check / run).

- `quant_batch_matmul_mx(x1, x1_scale, x2, x2_scale, *, ...)` -> C, one NPU; golden `golden_quant_batch_matmul_mx`.
- `all_to_all_quant_matmul(x1, x1_scale, x2, x2_scale, *, impl, local_matmul, wait_order, hccl_server, ...)`
  -> this rank's C, collective; golden `golden_a2a`.
- `all_gather_quant_matmul(x1, x1_scale, x2, x2_scale, *, wait_order, protocol, slot_num, ...)` -> this
  rank's C (R * m, N), collective; golden `golden_all_gather_quant_matmul`, ST inputs `gen_ag_st_inputs`.
- `grouped_matmul_mx(x, x_scale, weight, weight_scale, group_list, *, ...)` -> y, one emulated NPU; golden
  `golden_grouped_matmul_mx`; `grouped_matmul_mx_tiling` (TilingGMM), `grouped_matmul_mx_schedule`.
- `quant_matmul_reduce_scatter(x1, x1_scale, x2, x2_scale, *, split, impl, head_m_size, ...)` -> this rank's
  y (M/R, N), collective (matmul, then reduce-scatter along M); golden `golden_quant_matmul_reduce_scatter`.
- `weight_quant_matmul(x, weight, antiquant_scale, antiquant_offset, *, mode, ...)` -> C (or B_dequant),
  one emulated NPU (seed 001); goldens `golden_weight_quant_matmul`, `golden_weight_dequant`.

One convention: tensors positional, the operator's keywords, then `check`, `timeout`, `perturb`, `observers`,
`faults` (and `comm` when it communicates: an MPI communicator, or a persistent `Communicator` that runs the
calls back to back on one HCCL buffer) with one set of defaults (`mc2emu.host.call_options`) and
`return_stats` (True: `(output, frozen <Op>LaunchInfo)`); enum keywords take the member or its string
(`mc2emu.arch.parse_enum`). Modules: `<op>_op.py` the entry, `<op>_host.py` the host program, `<op>_golden.py`
the golden (docs/adding-an-operator.md).
"""

from mc2emu.comm.communicator import Communicator
from mc2emu.ops.all_gather_quant_matmul_golden import gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.ops.all_gather_quant_matmul_op import all_gather_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import golden_a2a
from mc2emu.ops.all_to_all_quant_matmul_op import all_to_all_quant_matmul
from mc2emu.ops.grouped_matmul_mx_golden import golden_grouped_matmul_mx
from mc2emu.ops.grouped_matmul_mx_op import grouped_matmul_mx
from mc2emu.ops.grouped_matmul_mx_tiling_api import grouped_matmul_mx_schedule, grouped_matmul_mx_tiling
from mc2emu.ops.quant_batch_matmul_mx_golden import golden_quant_batch_matmul_mx
from mc2emu.ops.quant_batch_matmul_mx_op import quant_batch_matmul_mx
from mc2emu.ops.quant_matmul_reduce_scatter_golden import gen_qmrs_st_inputs, golden_quant_matmul_reduce_scatter
from mc2emu.ops.quant_matmul_reduce_scatter_op import quant_matmul_reduce_scatter
from mc2emu.ops.weight_quant_matmul_golden import golden_weight_dequant, golden_weight_quant_matmul
from mc2emu.ops.weight_quant_matmul_op import weight_quant_matmul

__all__ = [
    "Communicator", "all_gather_quant_matmul",
    "all_to_all_quant_matmul", "gen_ag_st_inputs", "gen_qmrs_st_inputs", "golden_a2a",
    "golden_all_gather_quant_matmul", "golden_grouped_matmul_mx", "golden_quant_batch_matmul_mx",
    "golden_quant_matmul_reduce_scatter", "golden_weight_dequant", "golden_weight_quant_matmul", "grouped_matmul_mx",
    "grouped_matmul_mx_schedule", "grouped_matmul_mx_tiling", "quant_batch_matmul_mx", "quant_matmul_reduce_scatter",
    "weight_quant_matmul",
]
