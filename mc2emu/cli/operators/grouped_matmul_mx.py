"""CLI of grouped_matmul_mx: the host-only plan printouts (`--print-tiling`, `--print-schedule`).

    python -m mc2emu.run --op grouped_matmul_mx --print-tiling --shape 600,700,4096 [--trans-b] [--json]
    python -m mc2emu.run --op grouped_matmul_mx --print-schedule --shape 100,700,4096 --group-list 25,25,25,25

Both print without MPI. The operator's kernel (issue 16 items 3-6) is still to come. When it lands, this
module gains its `SPEC = OperatorSpec(...)` and joins `OPERATOR_MODULES`. Until then the module is not in
the suite registry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mc2emu.ops.grouped_matmul_mx_tiling_api import (
    format_grouped_matmul_mx_schedule,
    format_grouped_matmul_mx_tiling,
    grouped_matmul_mx_schedule,
    grouped_matmul_mx_tiling,
)

if TYPE_CHECKING:
    from mc2emu.cli.options import RunOptions

DEFAULT_BLOCK_NUM = 32  # DAV_3510 AIC count


def plan_text(opts: RunOptions) -> str:
    """The tiling or the schedule `opts` asks for, as text or JSON; raises ConstraintError on a bad shape."""
    assert opts.shape is not None  # parse_options requires --shape with the print modes
    m, n, k = opts.shape
    x_dtype = opts.dtype.value if opts.dtype is not None else "float8_e4m3fn"
    groups = opts.group_list if opts.group_list is not None else ((k,) if opts.split_k else (m,))
    if opts.print_tiling:
        tiling = grouped_matmul_mx_tiling(m, n, k, group_num=len(groups), trans_a=opts.split_k,
                                          trans_b=opts.trans_b, x_dtype=x_dtype, w_dtype=x_dtype,
                                          group_type="split_k" if opts.split_k else "split_m")
        return format_grouped_matmul_mx_tiling(tiling, as_json=opts.json)
    block_num = opts.block_dim if opts.block_dim is not None else DEFAULT_BLOCK_NUM
    if opts.split_k:
        records = grouped_matmul_mx_schedule(groups, n, k, m=m, split="K", block_num=block_num,
                                             trans_b=opts.trans_b, x_dtype=x_dtype)
    else:
        records = grouped_matmul_mx_schedule(groups, n, k, m=m, split="M", block_num=block_num,
                                             trans_b=opts.trans_b, x_dtype=x_dtype)
    return format_grouped_matmul_mx_schedule(records, as_json=opts.json)
