"""GroupedMatmul MX (GroupedMatmulV4 on DAV_3510) as a user sees its plan: the host tiling and the tile schedule.

- `grouped_matmul_mx_tiling(m, n, k, *, group_num, ...)` runs `TilingGMM` (mc2emu/tiling/grouped_matmul_tiling.py)
  on the tensors an MX call with x [M, K] (M = all rows of x), weight [g, K, N] / [g, N, K] (split-M) or
  [K, N] (split-K, x [K, M]) would pass, and returns the `GmmTilingResult` (tilingData = GMMQuantParams +
  QuantBasicApiMMTiling with the source's field names, tilingKey, blockDim).
- `grouped_matmul_mx_schedule(group_sizes, n, k=None, *, m=None, split="M", block_num=32, ...)` returns every
  tile every core runs, as `GmmScheduleRecord`s ordered by core then execution order, from the kernel's own
  group loop (`KernelQGmmMx.Tiles` over `BlockSchedulerGmmAswtWithTailSplit`, mc2emu/blaze): the numbers the
  kernel uses, not a second implementation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import BlockIndex, TailSplitVariant
from mc2emu.blaze.gemm.kernel.kernel_qgmm_mx import GMMTiling, KernelQGmmMx
from mc2emu.tiling.grouped_matmul_tiling import GmmTilingResult, TilingGMM
from mc2emu.tiling.grouped_matmul_tiling_context import (
    GROUPLIST_TYPE_COUNT,
    GROUPLIST_TYPE_CUMSUM,
    GROUPLIST_TYPE_SPARSE_M,
    SPLIT_K,
    GeDataType,
    GMMCompileInfo,
    GmmTilingContext,
    parse_group_list_type,
)

MAX_BLOCK_NUM = 65535  # block dim of one launch (uint16 on the device)


def grouped_matmul_mx_tiling(m: int, n: int, k: int, *, group_num: int, trans_a: bool = False,
                             trans_b: bool = False, x_dtype: str = "float8_e4m3fn", w_dtype: str = "float8_e4m3fn",
                             group_type: str | int = "split_m", l1_size: int | None = None,
                             l0c_size: int | None = None, has_bias: bool = False,
                             bias_dtype: str = "float32", weight_format: str = "ND") -> GmmTilingResult:
    """The MX GroupedMatmul host tiling for x of M rows (all groups), N columns, K (total K for split-K);
    `weight_format` "NZ": the weight in FRACTAL_NZ (storage dims as the source's UT builds them).

    `l1_size` / `l0c_size` default to the DAV_3510 platform table (512 KiB / 256 KiB); the source's unit-test
    stub uses an L0C of 128 KiB. Bad input raises `ConstraintError` naming the source rule it breaks."""
    for name, v in (("m", m), ("n", n), ("k", k), ("group_num", group_num)):
        if int(v) < 0:
            raise ConstraintError(f"grouped_matmul_mx_tiling: {name} >= 0", f"{name} = {v}")
    info = GMMCompileInfo.from_platform(DAV_3510, l1_size=l1_size, l0c_size=l0c_size)
    ctx = GmmTilingContext.mx(m, n, k, group_num=group_num, trans_a=trans_a, trans_b=trans_b, x_dtype=x_dtype,
                              w_dtype=w_dtype, group_type=group_type, has_bias=has_bias, bias_dtype=bias_dtype,
                              weight_format=weight_format, compile_info=info)
    return TilingGMM(ctx)


@dataclass(frozen=True)
class GmmScheduleRecord:
    """One tile one core runs. m_piece x n_piece elements of the group's output starting at (m_offset, n_offset)
    (offsets inside the group's output: rows from the group's first row of y for split-M, y[group] for split-K);
    round is the scheduler's roundIdx_ within the group (0-based)."""

    group: int
    mi: int
    ni: int
    core: int
    round: int
    m_piece: int
    n_piece: int
    m_offset: int
    n_offset: int


def _flat_group_list(group_sizes: Sequence, group_list_type: int) -> list[int]:
    if group_list_type == GROUPLIST_TYPE_SPARSE_M:
        flat: list[int] = []
        for row in group_sizes:
            if len(row) != 2:
                raise ConstraintError("SetGroupNum: sparse groupList is [E, 2]", f"row {row!r} is not (group, size)")
            flat += [int(row[0]), int(row[1])]
        return flat
    return [int(v) for v in group_sizes]


def _group_lengths(flat: list[int], group_list_type: int) -> list[int]:
    if group_list_type == GROUPLIST_TYPE_COUNT:
        return flat
    if group_list_type == GROUPLIST_TYPE_SPARSE_M:
        return flat[1::2]
    return [b - a for a, b in zip([0, *flat[:-1]], flat, strict=True)]


def grouped_matmul_mx_schedule(group_sizes: Sequence, n: int, k: int | None = None, *, m: int | None = None,
                               split: str = "M", block_num: int = 32, trans_b: bool = False,
                               x_dtype: str = "float8_e4m3fn", group_list_type: str = "count",
                               l1_size: int | None = None, l0c_size: int | None = None,
                               variant: str = "cgmct") -> tuple[GmmScheduleRecord, ...]:
    """Every tile each of `block_num` cores runs for this group list, ordered by core then execution order.

    split "M": `group_sizes` are the groups' row counts (M of x defaults to their sum; K defaults to 64: the
    schedule does not depend on K). split "K": they are the groups' K extents, `m` is required and K is their
    sum (groups with K = 0 run no tile: their outputs are zero-filled by the AIV side). `group_list_type`
    "cumsum" / "sparse" ((group, size) rows) read `group_sizes` the way the kernel reads groupList.
    `variant` "cgmct" (default: ops-transformer's GmmCgmctMxKernel), "blaze" (the IS_BLAZE kernel, ops-tensor
    kernel_qgmm_mx.h) or "blaze_sample" (ops-tensor's sample kernel, count lists only) selects the tail split
    (see kernel_qgmm_mx.py and block_scheduler_gmm_aswt.py)."""
    split_k = str(split).strip().upper() == "K"
    if not split_k and str(split).strip().upper() != "M":
        raise ConstraintError("grouped_matmul_mx_schedule: split", f"split {split!r} is not 'M' or 'K'")
    if not 1 <= int(block_num) <= MAX_BLOCK_NUM:
        raise ConstraintError("grouped_matmul_mx_schedule: block_num", f"block_num {block_num} not in 1..65535")
    try:
        tail_variant = TailSplitVariant(str(variant).strip().lower())
    except ValueError:
        raise ConstraintError("grouped_matmul_mx_schedule: variant", f"variant {variant!r} is not 'cgmct', "
                              "'blaze' or 'blaze_sample'") from None
    glt = parse_group_list_type(group_list_type)
    flat = _flat_group_list(group_sizes, glt)
    lengths = _group_lengths(flat, glt)
    if not lengths:
        raise ConstraintError("KernelQGmmMx: groupNum >= 1", "an empty group list: the kernel reads "
                              "groupList[groupNum - 1] (groupNum_ - 1 underflows)")
    if glt == GROUPLIST_TYPE_COUNT and any(v < 0 for v in lengths):
        raise ConstraintError("grouped_matmul_mx_schedule: group sizes >= 0", f"group sizes {lengths}")
    covered = max(0, sum(max(v, 0) for v in lengths)) if glt != GROUPLIST_TYPE_CUMSUM else max(0, *flat)
    if split_k:
        if m is None:
            raise ConstraintError("grouped_matmul_mx_schedule: split-K needs m", "pass m (rows of y per group)")
        if k is not None and int(k) != covered:
            raise ConstraintError("grouped_matmul_mx_schedule: split-K k = sum of the group list",
                                  f"k {k} != {covered}")
        m_total, k_total = int(m), covered
    else:
        m_total = covered if m is None else int(m)
        if m_total < covered:
            raise ConstraintError("grouped_matmul_mx_schedule: m >= rows the group list covers",
                                  f"m {m_total} < {covered}")
        k_total = 64 if k is None else int(k)
    tiling = grouped_matmul_mx_tiling(m_total, n, k_total, group_num=len(lengths), trans_a=split_k,
                                      trans_b=trans_b, x_dtype=x_dtype, w_dtype=x_dtype,
                                      group_type=SPLIT_K if split_k else 0, l1_size=l1_size, l0c_size=l0c_size)
    mm, params = tiling.mmTilingData, tiling.gmmQuantParams
    gmm = GMMTiling(groupNum=params.groupNum, m=mm.m, n=mm.n, k=mm.k, baseM=mm.baseM, baseN=mm.baseN,
                    baseK=mm.baseK, kAL1=mm.kAL1, kBL1=mm.kBL1, scaleKAL1=mm.scaleKAL1, scaleKBL1=mm.scaleKBL1,
                    isBias=mm.isBias, dbL0C=mm.dbL0C, groupType=params.groupType, groupListType=glt)
    is_fp4 = GeDataType.parse(x_dtype, "x").is_4bit
    records: list[GmmScheduleRecord] = []
    for core in range(int(block_num)):
        kernel = KernelQGmmMx(gmm, transA=split_k, transB=bool(trans_b), isFp4=is_fp4, variant=tail_variant)
        for t in kernel.Tiles(flat, BlockIndex(core, int(block_num))):
            records.append(GmmScheduleRecord(t.group, t.mTileIdx, t.nTileIdx, core, t.roundIdx, t.singleCoreM,
                                             t.singleCoreN, t.mOffset, t.nOffset))
    return tuple(records)


def format_grouped_matmul_mx_tiling(result: GmmTilingResult, *, as_json: bool = False) -> str:
    """Seed 002 §15's debugging fields, one `name = value` per line, or JSON with the source's field names
    (gmmQuantParams, mmTilingData incl. the unserialized depthA1 / depthB1 / stepKa / stepKb, tilingKey, ...)."""
    if as_json:
        return json.dumps(result.as_dict(), indent=2, sort_keys=False)
    fields = result.debug_fields()
    width = max(len(k) for k in fields)
    return "\n".join(f"{k:<{width}} = {v}" for k, v in fields.items())


def format_grouped_matmul_mx_schedule(records: Sequence[GmmScheduleRecord], *, as_json: bool = False) -> str:
    """The schedule per core: `core c: g<group> (mi,ni) r<round> [m_off+m_piece, n_off+n_piece]` in run order."""
    if as_json:
        return json.dumps([asdict(r) for r in records], indent=1)
    by_core: dict[int, list[GmmScheduleRecord]] = {}
    for r in records:
        by_core.setdefault(r.core, []).append(r)
    lines = []
    for core in sorted(by_core):
        tiles = " ".join(f"g{r.group}({r.mi},{r.ni})r{r.round}[{r.m_offset}+{r.m_piece},{r.n_offset}+{r.n_piece}]"
                         for r in by_core[core])
        lines.append(f"core {core:2d}: {tiles}")
    return "\n".join(lines)


__all__ = ["GmmScheduleRecord", "format_grouped_matmul_mx_schedule", "format_grouped_matmul_mx_tiling",
           "grouped_matmul_mx_schedule", "grouped_matmul_mx_tiling"]
