"""No input crashes a host tiling function (mc2emu.tiling), and every tiling it accepts fits the platform.

Every entry (SWAT `QuantMatmulTilingSwat` / `can_implement`, `a2a_tiling`, the AG and QMRS comm tilings and
their constraint lists, `TilingGMM`, `WeightQuantTilingSwat` / `layout_findings`) gets random shapes (negative,
0, 1, odd, past uint32), formats, layouts, core counts and options: it returns, or raises ConstraintError naming
a rule. An accepted tiling fits L1 (the BlockMmad's own L1 map), L0A / L0B (two baseK buffers), L0C (dbL0C
buffers of fp32) and UB as `mc2emu.arch.platform.DAV_3510` says, and its scheduler covers every element of C
exactly once. The @example rows are the crash classes found here (aic_num 0, R 0), kept as regressions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from property_cases import call_or_refusal, prop_settings

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQbmmParams, BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.numerics import ElemFormat
from mc2emu.tiling import (
    GMMCompileInfo,
    GmmTilingContext,
    QuantMatmulArgs,
    QuantMatmulTilingSwat,
    TilingGMM,
    WeightQuantArgs,
    WeightQuantTilingSwat,
    can_implement,
    weight_quant_can_implement,
    weight_quant_layout_findings,
)
from mc2emu.tiling import quant_matmul_reduce_scatter_tiling as rs
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_constraint_violations, ag_matmul_tiling, make_ag_comm_tiling
from mc2emu.tiling.all_to_all_quant_matmul_tiling import a2a_tiling
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import _RoundL1Map
from mc2emu.tiling.weight_quant_tiling_layout import ub_layout
from mc2emu.tiling.weight_quant_tiling_swat import WeightQuantPlatformInfo

P = DAV_3510
FP32 = 4
dims = st.one_of(st.integers(-2, 4), st.integers(0, 700), st.sampled_from([1023, 4097, 8192, 65536, 2**32, 2**33]))
cover_dims = st.one_of(st.integers(1, 40), st.integers(1, 1200))
formats = st.sampled_from(list(ElemFormat))
aic_nums = st.one_of(st.none(), st.none(), st.integers(-1, 40))


def elem_bytes(fmt: ElemFormat, count: int) -> int:
    return count // 2 if fmt.is_fp4 else count


class _Core:
    """What BlockSchedulerQuantBatchMatmulV3 reads of a core (no device, no thread)."""

    def __init__(self, idx: int, num: int) -> None:
        self.idx, self.num = idx, num

    def GetBlockIdx(self) -> int:
        return self.idx

    def GetBlockNum(self) -> int:
        return self.num

    def GetTaskRation(self) -> int:
        return 1


def swat_coverage(t, m: int, n: int, trans_a: bool, trans_b: bool, fmt: ElemFormat) -> np.ndarray:
    """How often each element of C is written by the kernel's tile loop (kernel_qbmm_mx ProcessSingleBatch, one
    batch) over the tiling's usedCoreNum cores."""
    count = np.zeros((m, n), dtype=np.int32)
    sch = BlockSchedulerQbmmParams(t.baseM, t.baseN, t.mTailTile, t.nTailTile, t.mBaseTailSplitCnt,
                                   t.nBaseTailSplitCnt, t.mTailMain, t.nTailMain)
    Sched = BlockSchedulerQuantBatchMatmulV3.template(layoutA=DNExtLayoutPtn if trans_a else NDExtLayoutPtn,
                                                      layoutB=DNExtLayoutPtn if trans_b else NDExtLayoutPtn, aType=fmt)
    for core in range(t.usedCoreNum):
        bs = Sched((m, n, t.k, 1), sch, _Core(core, t.usedCoreNum))
        if (bs.GetEndBlockIdx() + 1) * t.mTailTile * t.nTailTile <= t.usedCoreNum:
            bs.UpdateTailTile(t.mTailTile, t.nTailTile)
        for coord in bs.tiles():
            shape = bs.GetBlockShape(coord)
            if shape[0] <= 0 or shape[1] <= 0:
                break
            mPos, nPos = bs.GetTileCoord(coord)
            count[mPos:mPos + shape[0], nPos:nPos + shape[1]] += 1
    return count


def assert_swat_fits(t, a: ElemFormat, b: ElemFormat, platform=P) -> None:
    """L0A / L0B hold two baseK buffers, L0C dbL0c fp32 tiles, L1 the BlockMmad's map (no bias)."""
    assert min(t.baseM, t.baseN, t.baseK, t.stepK, t.scaleKL1, t.usedCoreNum) >= 1, t
    assert 2 * elem_bytes(a, t.baseM * t.baseK) <= platform.l0a_size, t
    assert 2 * elem_bytes(b, t.baseN * t.baseK) <= platform.l0b_size, t
    assert t.dbL0c * t.baseM * t.baseN * FP32 <= platform.l0c_size, t
    assert _RoundL1Map(t, a, platform).end(False) <= platform.l1_size, t
    assert t.scaleKL1 % (t.stepK * t.baseK) == 0, t  # BlockMmad's checked precondition (SPEC §5)


# --- SWAT (QBMM, A2A, AG and QMRS rounds) ---------------------------------------------------------------------
@prop_settings(200)
@given(m=dims, n=dims, k=dims, ta=st.booleans(), tb=st.booleans(), a=formats, b=formats, aic=aic_nums)
@example(m=87, n=87, k=631, ta=True, tb=False, a=ElemFormat.E2M1, b=ElemFormat.E4M3, aic=0)  # ZeroDivisionError
@example(m=1, n=129, k=1023, ta=False, tb=False, a=ElemFormat.E2M1, b=ElemFormat.E4M3, aic=None)  # L0B overflow
def test_swat_tiling_runs_or_refuses_and_fits(m, n, k, ta, tb, a, b, aic) -> None:
    t, err = call_or_refusal(lambda: QuantMatmulTilingSwat(aic_num=aic).GetTilingData(m, n, k, ta, tb, a, b))
    reasons, _ = call_or_refusal(can_implement, QuantMatmulArgs(m, n, k, 1, ta, tb, a, b))
    if t is not None:
        assert_swat_fits(t, a, b)
        assert t.usedCoreNum <= (P.aic_count if aic is None else aic)
    if aic is None and err is not None:
        assert reasons, err  # can_implement lists what GetTilingData refuses


@prop_settings(120)
@given(m=cover_dims, n=cover_dims, k=st.sampled_from([64, 128, 640]), ta=st.booleans(), tb=st.booleans(),
       fp4=st.booleans(), aic=st.sampled_from([1, 2, 3, 7, 20, 31, 32]), tail_align=st.booleans())
def test_swat_tiling_covers_every_element_once(m, n, k, ta, tb, fp4, aic, tail_align) -> None:
    fmt = ElemFormat.E2M1 if fp4 else ElemFormat.E4M3
    swat = QuantMatmulTilingSwat(aic_num=aic, isOpenOptimize=not tail_align, enableMTailAlign=tail_align)
    t = swat.GetTilingData(m, n, k, ta, tb, fmt)
    count = swat_coverage(t, m, n, ta, tb, fmt)
    assert count.min() == 1 and count.max() == 1, (t, int(count.min()), int(count.max()))


@prop_settings(300)
@given(m=dims, ka=dims, n=dims, R=st.integers(-1, 70), e=formats, aiv=st.booleans(),
       wo=st.sampled_from(list(WaitOrder)), bd=aic_nums, head=st.one_of(st.none(), st.integers(-3, 600)),
       src=st.booleans())
@example(m=1, ka=524288, n=1, R=25, e=ElemFormat.E5M2, aiv=True, wo=WaitOrder.IN_ORDER, bd=0, head=205, src=True)
@example(m=1, ka=8192, n=1, R=0, e=ElemFormat.E4M3, aiv=False, wo=WaitOrder.MASK, bd=None, head=None, src=False)  # R 0
def test_a2a_tiling_runs_or_refuses_and_fits(m, ka, n, R, e, aiv, wo, bd, head, src) -> None:
    t, _ = call_or_refusal(a2a_tiling, P, ori_m=m, ka=ka, n=n, rank_size=R, elem=e, b_elem=e, aiv_served=aiv,
                           wait_order=wo, block_dim=bd, head_tile_size=head, source_launch=src)
    if t is not None:
        assert_swat_fits(t.mm, e, e)
        ct = t.comm
        assert ct.splitAxisTileCnt * ct.splitAxisTileSize + ct.splitAxisTailCnt * ct.splitAxisTailSize == m
        assert ct.total_tiles(m) == ct.commTurn and 1 <= R <= 64, (ct, R)


@prop_settings(300)
@given(m=dims, k=dims, n=dims, R=st.integers(-1, 20), e=formats, tile=st.one_of(st.none(), st.integers(-3, 600)),
       slot=st.booleans(), aic=aic_nums)
@example(m=524288, k=524288, n=524288, R=3, e=ElemFormat.E4M3, tile=330, slot=False, aic=0)  # ZeroDivisionError
def test_ag_tiling_runs_or_refuses_and_fits(m, k, n, R, e, tile, slot, aic) -> None:
    violations, _ = call_or_refusal(ag_constraint_violations, m, k, n, R, slot_ring=slot)
    comm, _ = call_or_refusal(make_ag_comm_tiling, m, k, tile)
    if violations or comm is None or R < 1 or comm.tileM <= 0:
        return
    assert comm.tileCnt * comm.tileM + comm.tailM == m and comm.paddedTailM >= comm.tailM
    t, _ = call_or_refusal(ag_matmul_tiling, comm, R, n, e, aic_num=aic)
    if t is not None:
        assert_swat_fits(t, e, e)


@prop_settings(300)
@given(m=dims, k=dims, n=dims, R=st.integers(-1, 70), head=st.one_of(st.none(), st.integers(-3, 600)),
       used=st.one_of(st.none(), st.integers(-1, 40)), e=formats, bias=st.booleans())
@example(m=524288, k=179, n=317, R=0, head=202, used=None, e=ElemFormat.E5M2, bias=False)  # ZeroDivisionError
def test_qmrs_tiling_runs_or_refuses_and_fits(m, k, n, R, head, used, e, bias) -> None:
    shape, _ = call_or_refusal(rs.qmrs_shape_violations, m, k, n, R)
    if shape:
        return
    ct = rs.make_rs_comm_tiling(m, R, head, n)
    if rs.rounds_violations(ct, n, R, used):
        return
    assert ct.headCnt * ct.headMSize + ct.tailCnt * ct.tailMSize == ct.mSeg == m // R
    rounds = []
    for t in range(ct.commTurn):
        tiling, err = call_or_refusal(rs.rs_round_tiling, R * ct.tile_m(t), n, k, e, e, aic_num=used)
        if err is not None:
            return
        assert_swat_fits(tiling, e, e)
        rounds.append(tiling)
    if bias and not rs.rounds_bias_violations(tuple(rounds), e):
        for tiling in rounds:
            assert _RoundL1Map(tiling, e, P).end(True) <= P.l1_size
            assert 2 * tiling.baseN * FP32 <= P.bias_table_size


# --- GroupedMatmul (TilingGMM) --------------------------------------------------------------------------------
gmm_dtypes = st.sampled_from(["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float4_e1m2", "int8", "bfloat16",
                              "hifloat8"])


@prop_settings(200)
@given(m=dims, n=dims, k=dims, g=st.integers(-1, 1030), ta=st.booleans(), tb=st.booleans(), xd=gmm_dtypes,
       wd=gmm_dtypes, gt=st.sampled_from(["split_m", "split_k"]), glt=st.sampled_from(["cumsum", "count", "sparse"]),
       bias=st.booleans(), wf=st.sampled_from(["ND", "NZ"]), aic=aic_nums)
@example(m=600, n=700, k=4096, g=4, ta=False, tb=False, xd="float8_e4m3fn", wd="float8_e4m3fn", gt="split_m",
         glt="cumsum", bias=False, wf="ND", aic=0)  # blockDim 0 accepted
@example(m=-1, n=1, k=1, g=0, ta=True, tb=False, xd="float8_e4m3fn", wd="float8_e4m3fn", gt="split_k", glt="cumsum",
         bias=False, wf="ND", aic=None)  # ZeroDivisionError (a negative M)
def test_gmm_tiling_runs_or_refuses_and_fits(m, n, k, g, ta, tb, xd, wd, gt, glt, bias, wf, aic) -> None:
    def tile():
        info = GMMCompileInfo.from_platform(aic_num=aic)
        return TilingGMM(GmmTilingContext.mx(m, n, k, group_num=g, trans_a=ta, trans_b=tb, x_dtype=xd, w_dtype=wd,
                                             group_type=gt, group_list_type=glt, has_bias=bias, weight_format=wf,
                                             compile_info=info))
    r, _ = call_or_refusal(tile)
    if r is None:
        return
    mm, inp = r.mmTilingData, r.inputParams
    fx = ElemFormat.E2M1 if inp.aDtype.is_4bit else ElemFormat.E4M3
    fw = ElemFormat.E2M1 if inp.bDtype.is_4bit else ElemFormat.E4M3
    assert 1 <= r.blockDim <= (P.aic_count if aic is None else aic)
    assert min(mm.baseM, mm.baseN, mm.baseK, mm.stepKa, mm.stepKb) >= 1, mm
    assert 2 * elem_bytes(fx, mm.baseM * mm.baseK) <= P.l0a_size, mm
    assert 2 * elem_bytes(fw, mm.baseN * mm.baseK) <= P.l0b_size, mm
    assert mm.dbL0C * mm.baseM * mm.baseN * FP32 <= P.l0c_size, mm
    # one L1 stage: A (kAL1), B (kBL1), both scales (scaleKL1 as 64-element pairs), bias; 2 or 3 stages in L1
    scale_k = -(-mm.scaleKAL1 // 64) * 2
    a_l1, b_l1 = elem_bytes(fx, mm.baseM * mm.kAL1), elem_bytes(fw, mm.baseN * mm.kBL1)
    stage = a_l1 + b_l1 + (mm.baseM + mm.baseN) * scale_k + (mm.baseN * FP32 if mm.isBias else 0)
    assert 2 * stage + (max(a_l1, b_l1) if mm.l1BufferStage == 3 else 0) <= P.l1_size, (mm, stage)


# --- weight-quant matmul ----------------------------------------------------------------------------------------
@prop_settings(150)
@given(m=dims, n=dims, k=dims, tb=st.booleans(), off=st.booleans(), bias=st.booleans(), bb=st.integers(-1, 8),
       wb=st.integers(-1, 4), db=st.integers(-1, 4), aic=aic_nums)
@example(m=4096, n=4096, k=4096, tb=False, off=False, bias=False, bb=4, wb=1, db=2, aic=0)  # ZeroDivisionError
@example(m=4096, n=4096, k=4096, tb=False, off=False, bias=False, bb=4, wb=1, db=2, aic=-1)  # usedCoreNum 1 of -1
def test_weight_quant_tiling_runs_or_refuses_and_fits(m, n, k, tb, off, bias, bb, wb, db, aic) -> None:
    t, err = call_or_refusal(lambda: WeightQuantTilingSwat(aic_num=aic).GetTilingData(
        m, n, k, tb, off, bias, bb, weightElemBytes=wb, dequantBElemBytes=db))
    if aic is None and (bb, wb, db) == (4, 1, 2):
        reasons, _ = call_or_refusal(weight_quant_can_implement, WeightQuantArgs(m, n, k, tb, off, bias))
        assert bool(reasons) == (err is not None)
    if t is None:
        return
    plat = WeightQuantPlatformInfo.from_platform(P, aic)
    findings, _ = call_or_refusal(weight_quant_layout_findings, t, plat, weightElemBytes=wb, dequantBElemBytes=db,
                                  aElemBytes=db, biasElemBytes=bb)
    assert 1 <= t.usedCoreNum <= plat.aicNum
    assert 2 * t.baseM * t.baseK * db <= P.l0a_size or db != 2, t
    assert t.l0cDB * t.baseM * t.baseN * FP32 <= P.l0c_size, t
    if (bb, wb, db) == (4, 1, 2) and not findings:  # what the operator launches (weight_quant_matmul_host)
        ub = ub_layout(t, plat)
        assert ub.halfUbSize + ub.halfUsed <= P.ub_usable_size, t
        assert 2 * (t.baseM + t.baseN) * t.kL1 * db + (t.baseN * FP32 if bias else 0) <= P.l1_size, t


def test_refusal_rules_of_the_crash_classes() -> None:
    """The crash classes found here, each now a ConstraintError naming its rule."""
    cases = [
        (lambda: QuantMatmulTilingSwat(aic_num=0), "aic_num >= 1"),
        (lambda: WeightQuantTilingSwat(aic_num=0), "aic_num >= 1"),
        (lambda: GMMCompileInfo.from_platform(aic_num=-1), "aic_num >= 1"),
    ]
    for fn, rule in cases:
        with pytest.raises(ConstraintError) as ei:
            fn()
        assert ei.value.rule == rule
    assert rs.qmrs_shape_violations(64, 64, 64, 0)[0][0] == "QMRS-0 R >= 1"

