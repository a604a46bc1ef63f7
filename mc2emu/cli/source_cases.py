"""`python -m mc2emu.run --source-cases OP [--scale M_DIV] [--case NAME]`: the source's case tables replayed.

Each replayed operator has one `SourceReplay` in `REPLAYS`: its tables, gen_data recipe and verify rule, and
how --scale may shrink a case. A2A: ST cases.csv, UDMA localMatmul 0, the ST head-tile rule, allclose 1e-2.
AG: ST cases.csv (seed kernel, in-order waits) and the URMA slot ring's (buffer_count -> slot_num), <= 1 bf16
ULP. QMRS: the ubmem ST cases.csv, per-block kernel with the launcher's NZ B and tiling, <= 1 bf16 ULP of the
FP32 golden. GMM: the tiling UT rows (result, blockDim, tilingKey, tilingData equal), serial, no ranks; a row
the UT tiles also runs its shape through the kernel (NZ rows with their NZ weight) within 1 bf16 ULP of the
golden (full size only: --scale replays the tiling).
One row per case: case, shape, R, verdict, ULP / max error, wall (`--case NAME` keeps the named ones). A case
whose R is not the job's is listed with the R it needs, never failed. `--scale M_DIV` divides m only when the
case keeps its structure: the same communication tiles per rank and the same tail (A2A head tile / M_DIV,
AG tileM / M_DIV with the tail rows kept, passed as the op's `head_tile_size` / `tile_m`; AG also needs the
tiling's baseM to start a block on every region boundary). Otherwise the row says why and the case does not
run (replay it without --scale). The full-size replay is the reference.
Verdicts: PASS, FAIL (the verify rule), REFUSED (the emulator refuses a case the source runs), HAZARD,
NEEDS R<r>, NOT SCALED, NOT EMULATED (a path the emulator does not follow). Exit 1 on FAIL, REFUSED or HAZARD.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ml_dtypes
import numpy as np

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510
from mc2emu.cases.source_tables import SourceTable, load
from mc2emu.cli.operators.grouped_matmul_mx import run_ut_shape
from mc2emu.cli.options import OptionError, RunOptions
from mc2emu.numerics import ElemFormat, a2a_allclose, max_abs_error, ulp_distance
from mc2emu.numerics.golden import gen_ag_scales, gen_st_elements
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.nz_format import nd_to_nz
from mc2emu.ops import (
    all_gather_quant_matmul,
    all_to_all_quant_matmul,
    gen_ag_st_inputs,
    golden_all_gather_quant_matmul,
    quant_matmul_reduce_scatter,
)
from mc2emu.ops.all_gather_quant_matmul_golden import ag_st_verify
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a
from mc2emu.ops.all_to_all_quant_matmul_op import LaunchMode
from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_qmrs_partial, golden_reduce_scatter
from mc2emu.runtime.hazards import HazardError
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_matmul_tiling, make_ag_comm_tiling
from mc2emu.tiling.all_to_all_quant_matmul_tiling import a2a_tiling
from mc2emu.tiling.grouped_matmul_tiling import TilingGMM
from mc2emu.tiling.grouped_matmul_tiling_context import SPLIT_K, UT_STUB_COMPILE_INFO, GmmTilingContext
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import per_block_tiling

ROW_ALIGN = 16  # a communication tile is whole 16-row fractals (the kernels' M alignment)
QMRS_ST_SEED = 42  # quant_matmul_reduce_scatter ubmem gen_data.py BASE_SEED


@dataclass(frozen=True)
class SourceCase:
    """One table row as the replay runs it: its 1-based row number, shape, R and the row's other columns."""

    index: int
    m: int
    k: int
    n: int
    rank_num: int
    extra: dict[str, str] = field(default_factory=dict)
    label: str = ""
    scale_note: str = ""

    @property
    def name(self) -> str:
        return self.label or f"#{self.index}"

    def shape(self) -> str:
        return f"{self.m}x{self.k}x{self.n}"


@dataclass(frozen=True)
class Outcome:
    """A case's verdict and figures (`metric`: the verify rule's figure, e.g. max ULP or max error)."""

    verdict: str
    metric: str = ""
    note: str = ""
    worst: tuple[float, ...] = ()   # orders the ranks' outcomes: the table shows the worst rank's metric

    @property
    def bad(self) -> bool:
        return self.verdict in ("FAIL", "REFUSED", "HAZARD")


@dataclass(frozen=True)
class SourceReplay:
    """How one operator's tables are replayed.

    - `tables`: source_tables keys replayed in order; `cases(table)` turns a table into `SourceCase`s;
    - `recipe` / `verify`: what the replay follows, with the source file (printed above the table);
    - `scale(case, m_div)`: the scaled case, or a str saying why the case cannot be scaled;
    - `run(case, comm)`: the case on this job's ranks (collective; `comm` None for a host-only replay)."""

    tables: tuple[str, ...]
    recipe: str
    verify: str
    cases: Callable[[SourceTable], list[SourceCase]]
    scale: Callable[[SourceCase, int], SourceCase | str]
    run: Callable[[SourceCase, Any], Outcome]
    needs_ranks: bool = True
    api_note: str = ""   # where the product API's documentation is narrower than the kernel (printed, --list)


# -- AllToAll + MXFP8 QuantMatmul (ST all_to_all_quant_matmul) ------------------------------------------------------
def _st_cases(table: SourceTable) -> list[SourceCase]:
    extra_cols = [c for c in table.columns if c not in ("m", "k", "n", "rank_num")]
    out = []
    for i, rec in enumerate(table.records(), start=1):
        m, k, n, r = (int(rec[c]) for c in ("m", "k", "n", "rank_num"))
        out.append(SourceCase(i, m, k, n, r, {c: rec[c] for c in extra_cols},
                              label=f"{table.op}#{i}"))
    return out


def _a2a_head(case: SourceCase) -> tuple[int, int, int]:
    """(head tile rows, head tiles, tail rows) of the full-size case by the ST rule (main.cpp)."""

    t = a2a_tiling(DAV_3510, ori_m=case.m, ka=case.k // case.rank_num, n=case.n, rank_size=case.rank_num,
                   elem=ElemFormat.E4M3, b_elem=ElemFormat.E4M3, aiv_served=True, wait_order=WaitOrder.MASK,
                   block_dim=None, head_tile_size=None, source_launch=True)
    ct = t.comm
    return ct.splitAxisTileSize, ct.splitAxisTileCnt, ct.splitAxisTailSize


def _structure_scale(case: SourceCase, m_div: int, head: int, tiles: int, tail: int) -> SourceCase | str:
    """m / m_div keeping `tiles` head tiles of head / m_div rows and a tail of tail / m_div rows (16-row
    fractals, the same alignment as the full size's)."""
    why = []
    if head % m_div or (head // m_div) % ROW_ALIGN:
        why.append(f"head tile {head} / {m_div} is not whole {ROW_ALIGN}-row fractals")
    if tail % m_div or (tail and tail // m_div == 0) or ((tail // m_div) % ROW_ALIGN == 0) != (tail % ROW_ALIGN == 0):
        why.append(f"tail {tail} / {m_div} does not keep the tail")
    if why:
        return f"not scaled: {'; '.join(why)} ({tiles} x {head} + {tail} rows)"
    m = tiles * (head // m_div) + tail // m_div
    extra = dict(case.extra, head_tile_size=str(head // m_div))
    return SourceCase(case.index, m, case.k, case.n, case.rank_num, extra, case.label,
                      scale_note=f"m {case.m} -> {m}: {tiles} x {head // m_div} + {tail // m_div} rows "
                                 f"(full size {tiles} x {head} + {tail})")


def _a2a_scale(case: SourceCase, m_div: int) -> SourceCase | str:
    head, tiles, tail = _a2a_head(case)
    return _structure_scale(case, m_div, head, tiles, tail)


def _a2a_run(case: SourceCase, comm: Any) -> Outcome:

    rank, size = comm.Get_rank(), comm.Get_size()
    ka = case.k // size
    inputs = gen_st_inputs(rank, size, case.m, ka, case.n)
    head = case.extra.get("head_tile_size") if case.scale_note else None
    c = all_to_all_quant_matmul(inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], impl="udma",
                                local_matmul=0, head_tile_size=int(head) if head else None,
                                launch=LaunchMode.SOURCE, comm=comm)
    ref = golden_a2a(comm.allgather(inputs["x1"]), comm.allgather(inputs["x1_scale"]), inputs["x2"],
                     inputs["x2_scale"], rank, ElemFormat.E4M3)
    ok = a2a_allclose(c, ref, equal_nan=True)
    err, ulp = max_abs_error(c, ref), ulp_distance(c, ref, ml_dtypes.bfloat16)
    note = (f"head_m_size {case.extra['head_m_size']} ignored (main.cpp @ 57781440 parses, does not use it)"
            if case.extra.get("head_m_size") not in (None, "512") else "")
    return Outcome("PASS" if ok else "FAIL", f"max err {err:.3g}, {ulp} ULP", note, worst=(err, ulp))


A2A = SourceReplay(
    tables=("a2a",),
    recipe="ST gen_data.py (all_to_all_quant_matmul/scripts): elements and scales uniform(1, 8), E4M3 / E8M0 "
           "truncated (gen_st_inputs: numpy's Generator seeded 42 + rank, not np.random.seed(42)); m = rows "
           "per rank, Ka = k / R; main.cpp: UDMA, localMatmul 0, headMSize = ceil(usedCoreNum / ceil(n / "
           "baseN)) * baseM, usedCoreNum blocks",
    verify="ST verify_result.py: torch.allclose(golden, npu, rtol=1e-2, atol=1e-2, equal_nan=True) per rank",
    cases=_st_cases,
    scale=_a2a_scale,
    run=_a2a_run,
    api_note=("product API: the Ascend 950 torch API documentation lists 2, 4, 8 and 16 ranks for the MX AllToAll "
              "matmul (issue 35 item 4); this kernel runs what its source's host accepts (A2A-5 R <= 64)"),
)


# -- AllGather + MXFP8 QuantMatmul (ST all_gather_quant_matmul, URMA slot ring) --------------------------------------
def _ag_scale(case: SourceCase, m_div: int) -> SourceCase | str:
    """tileM / m_div rows a tile (the op's `tile_m`), the same tiles per rank and the same tail rows, when the
    scaled tiling's baseM still starts a block on every region boundary (else a block would cross a region:
    FRAGMENT_OUT_OF_RANGE, a shape the full size does not have)."""
    full = make_ag_comm_tiling(case.m, case.k)
    tile = full.tileM // m_div
    if full.tileM % m_div or tile % ROW_ALIGN or tile <= full.tailM:
        return (f"not scaled: tileM {full.tileM} / {m_div} = {full.tileM / m_div:g} rows is not whole "
                f"{ROW_ALIGN}-row fractals above the tail {full.tailM}")
    m = full.tileCnt * tile + full.tailM
    ct = make_ag_comm_tiling(m, case.k, tile)
    mm = ag_matmul_tiling(ct, case.rank_num, case.n, ElemFormat.E4M3)
    main = (case.rank_num - 1) * ct.tileM
    total = ct.total_logical_m(case.rank_num)
    bounds = [ct.headRows + r * main for r in range(ct.tileCnt + 1)]
    crossing = [b for b in bounds if b < total and b % mm.baseM]
    if crossing:
        return (f"not scaled: at tileM {tile} the tiling's baseM {mm.baseM} would put a block across the region "
                f"boundary at logical row {crossing[0]} (FRAGMENT_OUT_OF_RANGE; the full size has none)")
    return SourceCase(case.index, m, case.k, case.n, case.rank_num, dict(case.extra, tile_m=str(tile)), case.label,
                      scale_note=f"m {case.m} -> {m}: {full.tileCnt} x {tile} + {full.tailM} rows (full size "
                                 f"{full.tileCnt} x {full.tileM} + {full.tailM}), baseM {mm.baseM}")


def _ag_run(case: SourceCase, comm: Any) -> Outcome:

    rank = comm.Get_rank()
    inputs = gen_ag_st_inputs(case.m, case.k, case.n, rank)
    ring = "buffer_count" in case.extra
    c, info = all_gather_quant_matmul(inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"],
                                wait_order="in_order", protocol="slot_ring" if ring else "seed",
                                slot_num=int(case.extra["buffer_count"]) if ring else 0,
                                tile_m=int(case.extra["tile_m"]) if "tile_m" in case.extra else None,
                                comm=comm, return_stats=True)
    ref = golden_all_gather_quant_matmul(comm.allgather(inputs["x1"]), comm.allgather(inputs["x1_scale"]),
                                         inputs["x2"], inputs["x2_scale"])
    ok, ulp, differing = ag_st_verify(c, ref)
    err = max_abs_error(c, ref)
    return Outcome("PASS" if ok else "FAIL", f"{ulp} ULP ({differing} differ), max err {err:.3g}",
                   note=f"block_dim {info.block_dim}, base {info.base}", worst=(ulp, err))


AG = SourceReplay(
    tables=("ag", "ag_urma"),
    recipe="ST gen_data.py (all_gather_quant_matmul/scripts @ 57781440; urma @ 67a83540): np.random.RandomState("
           "42 + rank), A (m, K) / B (K, N) uniform(1, 8) as E4M3 (ml_dtypes RNE where the ST clips the "
           "mantissa), scales E8M0 randint(127, 129); main.cpp: tileM = min(512, m), seed kernel with in-order "
           "waits (ag) / the slot ring with slotNum = buffer_count (ag_urma); the op's default launch",
    verify="ST verify_result.py: per rank bit-exact or max |bf16 difference| <= 1 ULP (ag_st_verify)",
    cases=_st_cases,
    scale=_ag_scale,
    run=_ag_run,
    api_note=("product API: the Ascend 950 torch API documentation lists 2, 4, 8 and 16 ranks for the MX AllGather "
              "matmul (issue 35 item 4); this kernel runs what its source accepts (AG-3: R <= 8 on the seed "
              "protocol, MAX_RANK_SIZE 16 on the slot ring)"),
)


# -- QuantMatmul + ReduceScatter (ST quant_matmul_reduce_scatter ubmem: the shipped per-block kernel) ---------------
def _qmrs_inputs(case: SourceCase, rank: int) -> dict[str, np.ndarray]:
    """gen_data.py (recursion-ascend a093e954): np.random.seed(42 + rank); A (M, K) and B (K, N) uniform(1, 8) as
    E4M3 (ml_dtypes RNE where the ST clips the mantissa, as the AG recipe), scaleA (M, ceil(K/64), 2) and scaleB
    (ceil(K/64), N, 2) randint(127, 129); B written in FRACTAL_NZ. Returns the NZ operands the kernel reads and
    the ND ones (N, K) / (N, ceil(K/64), 2) the golden takes."""
    rng = np.random.RandomState(QMRS_ST_SEED + rank)
    pairs = CeilDiv(case.k, 64)
    a = gen_st_elements((case.m, case.k), rng)
    a_scale = gen_ag_scales((case.m, pairs, 2), rng)
    b = gen_st_elements((case.k, case.n), rng)
    b_scale = gen_ag_scales((pairs, case.n, 2), rng)
    return {"x1": a, "x1_scale": a_scale, "x2_nz": nd_to_nz(b, b.dtype), "x2_scale_nz": b_scale,
            "x2": np.ascontiguousarray(b.T), "x2_scale": np.ascontiguousarray(b_scale.transpose(1, 0, 2))}


def _qmrs_structure(m: int, k: int, n: int, R: int) -> tuple[int, int, bool]:
    """(baseM, M blocks per rank segment, whether a segment ends in a partial block) of the launcher's tiling."""
    t = per_block_tiling(m, n, k, R, ElemFormat.E4M3, ElemFormat.E4M3, True)
    seg = m // R
    return t.baseM, CeilDiv(seg, t.baseM), seg % t.baseM != 0


def _qmrs_scale(case: SourceCase, m_div: int) -> SourceCase | str:
    """m / m_div when every rank segment keeps its count of baseM blocks and its partial last block (the
    launcher's baseM cap min(256, floor16(M / R)) scales with M)."""
    R = case.rank_num
    if case.m % (R * m_div):
        return f"not scaled: M {case.m} / {m_div} is not a multiple of R {R}"
    m = case.m // m_div
    full, scaled = _qmrs_structure(case.m, case.k, case.n, R), _qmrs_structure(m, case.k, case.n, R)
    if full[1:] != scaled[1:]:
        return (f"not scaled: a rank segment of {case.m // R} rows is {full[1]} block(s) of baseM {full[0]}"
                f"{' with a partial last' if full[2] else ''}; at M {m} it would be {scaled[1]} of {scaled[0]}"
                f"{' with a partial last' if scaled[2] else ''}")
    return SourceCase(case.index, m, case.k, case.n, R, dict(case.extra), case.label,
                      scale_note=f"m {case.m} -> {m}: {scaled[1]} block(s) of baseM {scaled[0]} a rank segment "
                                 f"(full size {full[1]} of {full[0]})")


def _qmrs_run(case: SourceCase, comm: Any) -> Outcome:
    rank = comm.Get_rank()
    inp = _qmrs_inputs(case, rank)
    leftover = 0
    try:
        c, info = quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], inp["x2_nz"], inp["x2_scale_nz"],
                                              impl="per_block", weight_format="NZ", comm=comm, return_stats=True)
    except HazardError as exc:   # the shipped single-batch path leaves flag 9 (documented); any other is a verdict
        if exc.names() != {"UNCONSUMED_FLAG"}:
            raise
        c, info, leftover = exc.output, exc.stats, len(exc.hazards)
    al = {key: comm.allgather(inp[key]) for key in ("x1", "x1_scale", "x2", "x2_scale")}
    f32 = [golden_qmrs_partial(al["x1"][j], al["x1_scale"][j], al["x2"][j], al["x2_scale"][j], out_dtype="float32")
           for j in range(comm.Get_size())]
    ref = golden_reduce_scatter(f32, rank)   # gen_data.py: FP32 sum of the FP32 products, then bf16
    ok, ulp, differing = ag_st_verify(c, ref)
    err = max_abs_error(c, ref)
    t = info.round_tilings[0]
    note = f"block_dim {info.block_dim}, base ({t.baseM}, {t.baseN}, {t.baseK})"
    if leftover:
        note += f"; UNCONSUMED_FLAG flag 9 x {leftover} (the single-batch path, docs)"
    return Outcome("PASS" if ok else "FAIL", f"{ulp} ULP ({differing} differ), max err {err:.3g}", note,
                   worst=(ulp, err))


QMRS = SourceReplay(
    tables=("qmrs",),
    recipe="ST gen_data.py (quant_matmul_reduce_scatter/ubmem/scripts @ recursion-ascend a093e954): np.random."
           "seed(42 + rank), A (M, K) / B (K, N) uniform(1, 8) as E4M3 (ml_dtypes RNE where the ST clips the "
           "mantissa), scales E8M0 randint(127, 129), B in FRACTAL_NZ, scaleB (ceil(K/64), N, 2); main.cpp "
           "(hicann 0f2296ba): the per-block kernel, SetMaxBaseM(min(256, floor16(M / R))), GetTilingData(M, n, "
           "k, false, false), usedCoreNum blocks; golden: FP32 products summed in FP32, then bf16",
    verify="ST verify_result.py: per rank bit-exact or max |raw uint16 difference| <= 1 (1 bf16 ULP)",
    cases=_st_cases,
    scale=_qmrs_scale,
    run=_qmrs_run,
    api_note=("product API: aclnnMatmulReduceScatterV2 (hicann/ops-transformer b01d25b2 mc2/matmul_reduce_scatter_"
              "v2/docs/aclnnMatmulReduceScatterV2.md, 约束说明) lists 2, 4, 8, 16, 32, 64 ranks on Ascend 950, an ND "
              "x2 only and, for MX, a transposed x2; the kernel's ST host takes 1..64 ranks (MAX_RANK_NUM) and the "
              "NZ B replayed here"),
)


# -- GroupedMatmul MX tiling UT (test_grouped_quant_arch35_tiling.csv) ----------------------------------------------
def _gmm_cases(table: SourceTable) -> list[SourceCase]:
    out = []
    for i, rec in enumerate(table.records(), start=1):
        out.append(SourceCase(i, int(rec["m"]), int(rec["k"]), int(rec["n"]), 0, rec, label=rec["caseName"]))
    return out


def _gmm_scale(case: SourceCase, m_div: int) -> SourceCase | str:
    """The tiling is host arithmetic, replayed at the row's size (the UT's verdict); the kernel run, whose cost is
    K and N (M is often already small), is left to the full-size replay."""
    return replace(case, extra={**case.extra, "kernel": "no"}, scale_note="tiling only (--scale)")


GMM_ELEM = {"FLOAT8-E4M3": ElemFormat.E4M3, "FLOAT8-E5M2": ElemFormat.E5M2, "FLOAT4_E2M1": ElemFormat.E2M1,
            "FLOAT4_E1M2": ElemFormat.E1M2}
GMM_Y = {"BF16": "bfloat16", "FLOAT16": "float16", "FLOAT": "float32"}


def _gmm_tiling(case: SourceCase) -> Outcome:
    """The UT's verdict: result, and with a golden blockDim, tilingKey and the 18 tilingData words."""
    rec = case.extra
    expect_ok = rec["result"] == "true"
    try:
        ctx = GmmTilingContext.mx(case.m, case.n, case.k, group_num=int(rec["groupNum"]),
                                  trans_a=rec["transposeX"] == "true", trans_b=rec["transposeWeight"] == "true",
                                  x_dtype=rec["xDtype"], w_dtype=rec["weightDtype"], group_type=int(rec["groupType"]),
                                  has_bias=rec["hasBias"] == "true", bias_dtype=rec["biasDtype"],
                                  weight_format=rec["weightFormat"], compile_info=UT_STUB_COMPILE_INFO)
        r = TilingGMM(ctx)
    except ConstraintError as exc:
        if "not emulated" in str(exc):
            return Outcome("NOT EMULATED", note=str(exc)[:90])
        if expect_ok:
            return Outcome("FAIL", "refused, UT expects success", note=str(exc)[:90])
        return Outcome("PASS", "refused as the UT", note=exc.rule)
    if not expect_ok:
        return Outcome("FAIL", "tiled, UT expects failure")
    if not rec["tilingData"]:
        return Outcome("PASS", "tiled (no golden)")
    want = [int(w) for w in rec["tilingData"].split()]
    got = r.tilingData.words()
    diff = [i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b]
    same = not diff and len(got) == len(want) and (r.blockDim, r.tilingKey) == (int(rec["blockDim"]),
                                                                                   int(rec["tilingKey"]))
    if same:
        return Outcome("PASS", f"{len(want)} fields equal, blockDim {r.blockDim}, key {r.tilingKey}")
    return Outcome("FAIL", f"fields {diff} differ; blockDim {r.blockDim}/{rec['blockDim']}, key "
                           f"{r.tilingKey}/{rec['tilingKey']}", note=" ".join(map(str, got)))


def _gmm_run(case: SourceCase, comm: Any) -> Outcome:
    """The UT row's tiling verdict; a row the UT tiles also runs its shape through the kernel against the golden
    (`run_ut_shape`: <= 1 bf16 ULP), so an NZ row runs its NZ weight."""
    rec = case.extra
    if rec["scaleDtype"] != "FLOAT8-E8M0":
        return Outcome("NOT EMULATED", note=f"scaleDtype {rec['scaleDtype']}: not an MX row (template 1)")
    tiled = _gmm_tiling(case)
    if tiled.verdict != "PASS" or rec["result"] != "true" or rec.get("kernel") == "no":
        return tiled
    split_k = int(rec["groupType"]) == SPLIT_K
    cmp = run_ut_shape(case.m, case.k, case.n, int(rec["groupNum"]), split_k=split_k,
                       trans_b=rec["transposeWeight"] == "true", x_fmt=GMM_ELEM[rec["xDtype"]],
                       w_fmt=GMM_ELEM[rec["weightDtype"]], weight_nz=rec["weightFormat"] == "NZ",
                       bias=rec["hasBias"] == "true", out_dtype=GMM_Y[rec["yDtype"]])
    run = f"y {cmp.max_ulp} ULP vs golden"
    return Outcome("PASS" if cmp.ok else "FAIL", f"{tiled.metric}; {run}", note=tiled.note,
                   worst=(float(cmp.max_ulp or 0),))


GMM = SourceReplay(
    tables=("gmm_mx",),
    recipe="UT driver test_grouped_quant_arch35_tiling.cpp: the row's shapes, dtypes, format and groupType, "
           "the UT stub platform (L0C 128 KiB)",
    verify="UT: result equal; with a tilingData golden, blockDim, tilingKey and the 18 tilingData words equal; "
           "a row the UT tiles also runs its shape (even cumsum groups, device tiling) within 1 bf16 ULP of the golden",
    cases=_gmm_cases,
    scale=_gmm_scale,
    run=_gmm_run,
    needs_ranks=False,
)

REPLAYS: dict[str, SourceReplay] = {
    "all_to_all_quant_matmul": A2A,
    "all_gather_quant_matmul": AG,
    "grouped_matmul_mx": GMM,
    "quant_matmul_reduce_scatter": QMRS,
}


def api_note(op: str) -> str:
    """The product-API note of an operator with a replay ("" when none: `--list`)."""
    spec = REPLAYS.get(op)
    return spec.api_note if spec is not None else ""


def replay_of(op: str) -> SourceReplay:
    try:
        return REPLAYS[op]
    except KeyError:
        raise OptionError(f"--source-cases {op!r}: replayed operators: {', '.join(REPLAYS)}") from None


def needs_ranks(opts: RunOptions) -> bool:
    """Whether the replay asked for runs on MPI ranks (False: a host-only replay, run serially)."""
    assert opts.source_cases is not None
    return replay_of(opts.source_cases).needs_ranks


# -- the replay loop and its table ----------------------------------------------------------------------------------
COLUMNS = ("case", "shape", "R", "verdict", "ULP / max error", "wall s", "note")


def format_table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in (COLUMNS, *rows)) for i in range(len(COLUMNS))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (COLUMNS, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def replay(opts: RunOptions, comm: Any, say: Callable[[str], None]) -> int:
    """Replay every case of the operator's tables on this job (`comm` None: host only); rank 0 says the table."""
    assert opts.source_cases is not None
    spec = replay_of(opts.source_cases)
    size = comm.Get_size() if comm is not None else 1
    m_div = opts.scale
    rows: list[tuple[str, ...]] = []
    bad = 0
    for key in spec.tables:
        table = load(key)
        say(f"{opts.source_cases} [{key}] {table.provenance.cite()} ({len(table)} cases)")
        for case in spec.cases(table):
            if opts.case and case.name not in opts.case:
                continue
            shown = case
            outcome: Outcome
            wall = ""
            if spec.needs_ranks and case.rank_num != size:
                outcome = Outcome(f"NEEDS R{case.rank_num}", note=f"run with mpirun -n {case.rank_num}")
            else:
                try:
                    scaled = spec.scale(case, m_div) if m_div > 1 else case
                except ConstraintError as exc:   # the full-size host tiling refuses the case
                    scaled = f"not scaled: the full-size tiling refuses it: {exc}"
                if isinstance(scaled, str):
                    outcome = Outcome("NOT SCALED", note=scaled)
                else:
                    shown = scaled
                    t0 = time.perf_counter()
                    outcome = _guarded(spec, scaled, comm)
                    seconds = time.perf_counter() - t0
                    if comm is not None:
                        seconds = max(comm.allgather(seconds))
                    wall = f"{seconds:.2f}"
            bad += outcome.bad
            note = "; ".join(x for x in (shown.scale_note, outcome.note) if x)
            rows.append((shown.name, shown.shape(), str(case.rank_num or "-"), outcome.verdict, outcome.metric, wall,
                         note))
            say(f"  {shown.name}: {outcome.verdict} {outcome.metric}".rstrip())
    say(f"source cases of {opts.source_cases} on {size} rank(s)" + (f", m / {m_div}" if m_div > 1 else ", full size"))
    say(format_table(rows))
    say(f"recipe: {spec.recipe}\nverify: {spec.verify}" + (f"\nnote: {spec.api_note}" if spec.api_note else ""))
    return 1 if bad else 0


def _guarded(spec: SourceReplay, case: SourceCase, comm: Any) -> Outcome:
    """The case, a refusal (raised alike on every rank) as the REFUSED verdict; a FAIL on any rank fails all."""

    try:
        outcome = spec.run(case, comm)
    except ConstraintError as exc:   # raised alike on every rank (the hosts refuse on every rank)
        outcome = Outcome("REFUSED", note=str(exc)[:160])
    except HazardError as exc:
        outcome = Outcome("HAZARD", note=str(exc)[:160])
    if comm is None:
        return outcome
    every = comm.allgather(outcome)
    failed = [r for r, o in enumerate(every) if o.verdict == "FAIL"]
    worst_rank = max(range(len(every)), key=lambda r: every[r].worst)
    worst = every[worst_rank]
    notes = [worst.note] + ([f"FAIL on rank(s) {failed}"] if failed else [])
    return Outcome("FAIL" if failed else worst.verdict, f"{worst.metric} (rank {worst_rank})",
                   "; ".join(x for x in notes if x), worst.worst)


def check_options(opts: RunOptions) -> None:
    """--scale only with --source-cases; the operator must have a replay."""
    if opts.source_cases is None:
        if opts.scale != 1 or opts.case:
            raise OptionError("--scale / --case: only with --source-cases")
        return
    spec = replay_of(opts.source_cases)
    names = {c.name for key in spec.tables for c in spec.cases(load(key))}
    unknown = [c for c in opts.case if c not in names]
    if unknown:
        raise OptionError(f"--case {', '.join(unknown)}: not a case of {opts.source_cases}'s tables "
                          f"({', '.join(spec.tables)})")
    if opts.inputs is not None or opts.predict or opts.dump is not None:
        raise OptionError("--source-cases: replays the source's tables; --inputs, --dump and --predict do not apply")


__all__ = ["REPLAYS", "Outcome", "SourceCase", "SourceReplay", "api_note", "check_options", "needs_ranks", "replay"]
