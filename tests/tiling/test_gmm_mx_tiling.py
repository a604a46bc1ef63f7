"""GroupedMatmul MX host tiling (TilingGMM / GroupedQmmBasicApiTiling): worked examples, the source's UT goldens,
every refusal rule.

Goldens: issue 16 item 5 and SPEC §7.3 (L1 512 KiB, L0C 256 KiB); the MX rows of ops-transformer
`gmm/grouped_matmul/tests/ut/op_host/test_grouped_quant_arch35_tiling.csv` (hicann/ops-transformer 40533aaa),
reproduced word for word with the UT stub's sizes (L1 512 KiB, L0C 128 KiB, 32 AIC / 64 AIV).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mc2emu.ops import grouped_matmul_mx_tiling
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.tiling.grouped_matmul_tiling import TilingGMM
from mc2emu.tiling.grouped_matmul_tiling_context import (
    UT_STUB_COMPILE_INFO,
    GeDataType,
    GMMCompileInfo,
    GmmTilingContext,
)
from mc2emu.tiling.grouped_quant_basic_api_matmul_tiling import GetDepthWithHighBW
from mc2emu.tiling.grouped_quant_matmul_shape_attrs import GetShapeAttrsInfo

KIB = 1024

# (m, n, k, kwargs) -> baseM, baseN, baseK, kAL1, kBL1, scaleKAL1, dbL0C, l1BufferStage, tilingKey
WORKED = [
    ((100, 700, 4096, {}), (112, 256, 128, 1024, 256, 4096, 2, 2, 0)),
    ((600, 700, 4096, {}), (256, 256, 128, 256, 256, 4096, 1, 3, 0)),
    ((2048, 7168, 2048, {"trans_b": True}), (256, 256, 128, 256, 256, 2048, 1, 3, 1)),
    ((300, 512, 1000, {}), (256, 256, 128, 512, 256, 1000, 1, 2, 0)),
    ((512, 1024, 2048, {"x_dtype": "float4_e2m1", "w_dtype": "float4_e2m1"}), (256, 256, 256, 512, 512, 2048, 1, 3, 0)),
    ((128, 768, 1024, {"trans_a": True, "group_type": "split_k", "group_num": 2, "l0c_size": 128 * KIB}),
     (128, 256, 128, 512, 256, 1024, 1, 2, 4)),
]


@pytest.mark.parametrize(("shape", "expected"), WORKED, ids=[str(s[:3]) for s, _ in WORKED])
def test_worked_examples(shape: tuple, expected: tuple) -> None:
    m, n, k, kw = shape
    kw = {"group_num": 4, **kw}
    r = grouped_matmul_mx_tiling(m, n, k, **kw)
    mm = r.mmTilingData
    got = (mm.baseM, mm.baseN, mm.baseK, mm.kAL1, mm.kBL1, mm.scaleKAL1, mm.dbL0C, mm.l1BufferStage, r.tilingKey)
    assert got == expected
    assert mm.scaleKBL1 == mm.scaleKAL1
    assert (mm.m, mm.n, mm.k) == (m, n, k)  # M is the total row count of x


def test_seed_002_depth_example_is_really_4_4() -> None:
    """Seed 002 §2.12 illustrates depthA1 8 / depthB1 4 for (600, 700, 4096); the formulas give 4 / 4."""
    mm = grouped_matmul_mx_tiling(600, 700, 4096, group_num=4).mmTilingData
    assert (mm.depthA1, mm.depthB1, mm.stepKa, mm.stepKb) == (4, 4, 2, 2)
    assert (mm.scaleFactorA, mm.scaleFactorB) == (16, 16)


def test_m100_depths_and_scale_factors() -> None:
    """(100, 700, 4096): high-bandwidth depths 16 / 4 (64 KiB per read), stepK 8 / 2, scale factors 4 / 16."""
    mm = grouped_matmul_mx_tiling(100, 700, 4096, group_num=4).mmTilingData
    assert (mm.depthA1, mm.depthB1, mm.stepKa, mm.stepKb, mm.scaleFactorA, mm.scaleFactorB) == (16, 4, 8, 2, 4, 16)


def test_high_bandwidth_depths_over_l1_fall_back_to_depth_init() -> None:
    """(8, 8, 16384): 64 KiB reads want depth 128 on both sides (8-row tiles), 128 * (2 KiB + 4 KiB + scales)
    exceeds L1, so both take depthInit = 64 (the largest power of two with 64 * 6336 B < 512 KiB)."""
    assert GetDepthWithHighBW(GetShapeAttrsInfo(GmmTilingContext.mx(8, 8, 16384, group_num=1)), 128, 8) == 128
    mm = grouped_matmul_mx_tiling(8, 8, 16384, group_num=1).mmTilingData
    assert (mm.baseM, mm.baseN, mm.depthA1, mm.depthB1, mm.kAL1, mm.kBL1) == (16, 32, 64, 64, 4096, 4096)


def test_dbl0c_follows_the_l0c_parameter() -> None:
    """dbL0C = 2 iff baseM * baseN * 4 * 2 <= L0C: 128 x 256 tiles double-buffer at 256 KiB, not at 128 KiB."""
    assert grouped_matmul_mx_tiling(128, 768, 1024, group_num=2).mmTilingData.dbL0C == 2
    assert grouped_matmul_mx_tiling(128, 768, 1024, group_num=2, l0c_size=128 * KIB).mmTilingData.dbL0C == 1


def test_unaligned_k_grows_depth_a() -> None:
    """K % 128 != 0 runs ModifyDepthForUnalign: (300, 512, 1000) grows depthA1 4 -> 8 (kAL1 512); K 1024 does not."""
    assert grouped_matmul_mx_tiling(300, 512, 1000, group_num=4).mmTilingData.depthA1 == 8
    assert grouped_matmul_mx_tiling(300, 512, 1024, group_num=4).mmTilingData.depthA1 == 4


def test_mxfp4_fp32_bias_reserves_l1_and_sets_isbias() -> None:
    r = grouped_matmul_mx_tiling(190, 60, 18030, group_num=7, trans_b=True, x_dtype="float4_e2m1",
                                 w_dtype="float4_e2m1", has_bias=True, bias_dtype="float32")
    assert r.mmTilingData.isBias == 1 and r.gmmQuantParams.hasBias == 1
    assert r.tilingKey == 1


# --- the source's UT CSV (MX rows) --------------------------------------------------------------------------------
UT_ROWS = (Path(__file__).parent / "gmm_mx_ut_rows.csv").read_text()
# Left out: the three NZ-weight successes (mxfp8_weight_nz_notrans, fp4e1m2_weight_nz_success,
# mxfp4_same_dtype_weight_nz_success: the NZ 3-buffer search is not emulated, see test_nz_weight_is_refused) and
# fp8_splitk_pertensor_1d_groupnum_eq_m (FP32 scales: template 1, not emulated).

EXPECTED_RULES = {
    "mxfp8_weight_nz_splitk_error": "split-K needs an ND weight",
    "mxfp8_basic_api_splitk_transx_required": "split-K needs transA",
    "mxfp8_basic_api_splitk_transw_forbidden": "split-K forbids transB",
    "mxfp8_basic_api_weightnz_splitk_invalid": "split-K needs an ND weight",
    "mxfp8_basic_api_bias_dtype_invalid": "CheckBiasDtype",
    "mxfp8_basic_api_splitk_transx_bias_unsupported": "CheckBiasDtype",
    "mxfp8_basic_api_nd_notrans_bias_unsupported": "CheckBiasDtype",
    "mxfp8e5m2_weight_nz_notrans": "CheckDtypeForWeightNz",
    "mxfp8_basic_api_invalid_group_type": "AnalyzeAttrs: groupType",
    "mxfp8_basic_api_groupnum_zero": "split-M rejects an empty x or weight",
    "fp4e1m2_weight_nd_error": "FLOAT4_E1M2 needs an NZ weight",
}


def _ut_context(row: list[str]) -> GmmTilingContext:
    _, m, k, n, g, tx, tw, gt, fmt, xd, wd, bd, hb = row[:13]
    return GmmTilingContext.mx(int(m), int(n), int(k), group_num=int(g), trans_a=tx == "true",
                               trans_b=tw == "true", x_dtype=xd, w_dtype=wd, group_type=int(gt),
                               has_bias=hb == "true", bias_dtype=bd, weight_format=fmt,
                               compile_info=UT_STUB_COMPILE_INFO)


UT = [line.split(",") for line in UT_ROWS.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("row", UT, ids=[r[0] for r in UT])
def test_ut_csv_rows(row: list[str]) -> None:
    name, result, block_dim, key, data = row[0], row[13], row[14], row[15], row[16]
    ctx = _ut_context(row)
    if result == "false":
        with pytest.raises(ConstraintError) as err:
            TilingGMM(ctx)
        assert EXPECTED_RULES[name] in err.value.rule
        return
    r = TilingGMM(ctx)
    if data:
        assert r.tilingData.words() == [int(w) for w in data.split()]
        assert (r.blockDim, r.tilingKey) == (int(block_dim), int(key))


def test_ut_stub_l0c_is_what_the_goldens_need() -> None:
    """With the chip's 256 KiB L0C the 128 x 256 UT rows would double-buffer L0C; the goldens say dbL0C 1."""
    row = next(r for r in UT if r[0] == "mxfp8_basic_api_nd_transw")
    ctx = dataclasses.replace(_ut_context(row), compile_info=GMMCompileInfo())
    assert TilingGMM(ctx).mmTilingData.dbL0C == 2


@pytest.mark.parametrize(("trans_b", "dtype", "m", "n", "k"), [
    (False, "float8_e4m3fn", 256, 512, 1024), (True, "float8_e4m3fn", 100, 700, 4096),
    (False, "float4_e2m1", 64, 130, 250), (True, "float4_e2m1", 600, 700, 4096), (False, "float8_e4m3fn", 7, 33, 77)])
def test_nz_weight_tiles_as_its_nd_weight(trans_b: bool, dtype: str, m: int, n: int, k: int) -> None:
    """Split-M with an NZ weight: the Basic-API tiling reads bFormat only in ModifyDepthForUnalign's transA branch
    (grouped_quant_basic_api_matmul_tiling.cpp:194 at 5778144), so every field equals the ND weight's."""
    kw = {"group_num": 3, "trans_b": trans_b, "x_dtype": dtype, "w_dtype": dtype}
    nd = TilingGMM(GmmTilingContext.mx(m, n, k, **kw))
    nz_ctx = GmmTilingContext.mx(m, n, k, weight_format="NZ", **kw)
    c0 = 64 if "float4" in dtype else 32
    inner = (-(-k // c0), -(-n // 16), 16, c0) if trans_b else (-(-n // c0), -(-k // 16), 16, c0)
    assert nz_ctx.weight_storage == (3, *inner)
    nz = TilingGMM(nz_ctx)
    assert nz.tilingData.words() == nd.tilingData.words()
    assert (nz.blockDim, nz.tilingKey) == (nd.blockDim, nd.tilingKey)


# --- every refusal rule ---------------------------------------------------------------------------------------------
def _ctx(**kw: object) -> GmmTilingContext:
    base = {"m": 256, "n": 512, "k": 1024, "group_num": 4}
    shape = {key: kw.pop(key) for key in ("m", "n", "k", "group_num") if key in kw}
    return GmmTilingContext.mx(**{**base, **shape}, **kw)


def _with(ctx: GmmTilingContext, **fields: object) -> GmmTilingContext:
    return dataclasses.replace(ctx, **fields)


FP4 = {"x_dtype": "float4_e2m1", "w_dtype": "float4_e2m1"}
REFUSALS = [
    ("npuArch", _with(_ctx(), compile_info=GMMCompileInfo(npuArch="DAV_2201")), "TilingGMM: npuArch"),
    ("bf16 x", _with(_ctx(), x_dtype=GeDataType.DT_BF16, weight_dtype=GeDataType.DT_BF16), "quant registry only"),
    ("int4 x", _with(_ctx(), x_dtype=GeDataType.DT_INT4), "AnalyzeDtype: x dtype"),
    ("fp16 weight", _with(_ctx(**FP4), weight_dtype=GeDataType.DT_FLOAT16), "AnalyzeDtype: weight dtype"),
    ("e1m2 nd", _ctx(x_dtype="float4_e1m2", w_dtype="float4_e1m2"), "FLOAT4_E1M2 needs an NZ weight"),
    ("nz e4m3 x e5m2", _ctx(w_dtype="float8_e5m2", weight_format="NZ"), "CheckDtypeForWeightNz"),
    ("nz y int8", _ctx(weight_format="NZ", y_dtype="int8"), "CheckDtypeForWeightNz"),
    ("nz scale not e8m0", _with(_ctx(weight_format="NZ"), per_token_scale_dtype=GeDataType.DT_FLOAT),
     "CheckPertokenScaleDtypeForWeightNz"),
    ("nz storage 4-D", _with(_ctx(weight_format="NZ"), weight_storage_shape=(16, 64, 16, 32)),
     "CheckWeightNzDimNum"),
    ("nz last dim 64 for fp8", _with(_ctx(weight_format="NZ"), weight_storage_shape=(4, 8, 64, 16, 64)),
     "CheckWeightNzLastDim"),
    ("nz last dim 32 for fp4", _with(_ctx(**FP4, weight_format="NZ"), weight_storage_shape=(4, 16, 64, 16, 32)),
     "CheckWeightNzLastDim"),
    ("nz second-last 32", _with(_ctx(weight_format="NZ"), weight_storage_shape=(4, 16, 32, 32, 32)),
     "CheckWeightNzSecondLastDim"),
    ("nz k1 short", _with(_ctx(weight_format="NZ"), weight_storage_shape=(4, 16, 63, 16, 32)),
     "CheckWeightNzTransposedDims"),
    ("nz n1 short", _with(_ctx(weight_format="NZ"), weight_storage_shape=(4, 15, 64, 16, 32)),
     "CheckWeightNzTransposedDims"),
    ("nz transB dims swapped", _with(_ctx(weight_format="NZ", trans_b=True), weight_storage_shape=(4, 16, 64, 16, 32)),
     "CheckWeightNzTransposedDims"),
    ("nz n 1", _ctx(n=1, weight_format="NZ"), "NZ needs N > 1 and K > 1"),
    ("nz k 1", _ctx(k=1, weight_format="NZ"), "NZ needs N > 1 and K > 1"),
    ("nz transB n 1", _ctx(n=1, k=64, trans_b=True, weight_format="NZ"), "NZ needs N > 1 and K > 1"),
    ("mxfp8 bias", _ctx(has_bias=True), "CheckBiasDtype"),
    ("mxfp4 bf16 bias", _ctx(**FP4, has_bias=True, bias_dtype="bfloat16"), "CheckBiasDtype"),
    ("groupListType 3", _with(_ctx(), group_list_type=3), "AnalyzeAttrs: groupListType"),
    ("groupType 1", _with(_ctx(), group_type=1), "AnalyzeAttrs: groupType"),
    ("fp4 split-K", _ctx(**FP4, trans_a=True, group_type="split_k"), "FP4 x needs split-M"),
    ("split-M transA", _ctx(trans_a=True), "split-M forbids transA"),
    ("split-K no transA", _ctx(group_type="split_k"), "split-K needs transA"),
    ("split-K transB", _ctx(group_type="split_k", trans_a=True, trans_b=True), "split-K forbids transB"),
    ("split-K NZ", _ctx(group_type="split_k", trans_a=True, weight_format="NZ"), "split-K needs an ND weight"),
    ("actType", _with(_ctx(), act_type=2), "AnalyzeAttrs: actType"),
    ("sparse 1-D", _with(_ctx(group_list_type="sparse"), group_list_shape=(4,)), "sparse groupList is [E, 2]"),
    ("sparse [E, 3]", _with(_ctx(group_list_type="sparse"), group_list_shape=(4, 3)), "sparse groupList is [E, 2]"),
    ("cumsum 2-D", _with(_ctx(), group_list_shape=(4, 1)), "groupList is 1-D"),
    ("groupNum 1025", _ctx(group_num=1025), "groupNum <= 1024"),
    ("x 1-D", _with(_ctx(), x_shape=(1024,)), "x dims >= 2"),
    ("weight 1-D", _with(_ctx(), weight_shape=(512,)), "weight dims >= 2"),
    ("split-M m 0", _ctx(m=0), "split-M rejects an empty x or weight"),
    ("split-M k 0", _ctx(k=0), "split-M rejects an empty x or weight"),
    ("split-M scale dims", _with(_ctx(), scale_shape=(4, 16, 512)), "CheckQuantParamsForMXTypeM: scale dims"),
    ("split-M scale k", _with(_ctx(), scale_shape=(4, 15, 512, 2)), "CheckQuantParamsForMXTypeM: scale shape"),
    ("split-M scale g", _with(_ctx(), scale_shape=(3, 16, 512, 2)), "CheckQuantParamsForMXTypeM: scale shape"),
    ("split-M scale pair", _with(_ctx(), scale_shape=(4, 16, 512, 1)), "CheckQuantParamsForMXTypeM: scale shape"),
    ("split-M pertoken dims", _with(_ctx(), per_token_scale_shape=(256, 32)),
     "CheckQuantParamsForMXTypeM: pertokenScale dims"),
    ("split-M pertoken m", _with(_ctx(), per_token_scale_shape=(255, 16, 2)),
     "CheckQuantParamsForMXTypeM: pertokenScale shape"),
    ("no pertoken", _with(_ctx(), per_token_scale_shape=None), "CheckQuantParamsForMxQuantMode: pertokenScale"),
    ("split-K scale dims", _with(_ctx(group_type="split_k", trans_a=True), scale_shape=(20, 512, 2, 1)),
     "CheckQuantParamsForMXTypeK: scale dims"),
    ("split-K scale k", _with(_ctx(group_type="split_k", trans_a=True), scale_shape=(16, 512, 2)),
     "CheckQuantParamsForMXTypeK: scale shape"),
    ("split-K pertoken dims", _with(_ctx(group_type="split_k", trans_a=True), per_token_scale_shape=(20, 256)),
     "CheckQuantParamsForMXTypeK: pertokenScale dims"),
    ("split-K pertoken k", _with(_ctx(group_type="split_k", trans_a=True), per_token_scale_shape=(16, 256, 2)),
     "CheckQuantParamsForMXTypeK: pertokenScale shape"),
    ("fp4 odd k", _ctx(**FP4, k=1023), "FP4 K even"),
    ("fp4 k 2", _ctx(**FP4, k=2), "FP4 K != 2"),
    ("fp4 odd n", _ctx(**FP4, n=511), "FP4 N even unless transB"),
    ("fp4 bias shape", _with(_ctx(**FP4, has_bias=True), bias_shape=(4, 256)), "CheckBiasShape"),
    ("split-K core ratio", _with(_ctx(group_type="split_k", trans_a=True),
                                 compile_info=GMMCompileInfo(aicNum=32, aivNum=32)), "aicNum:aivNum 1:2"),
    ("fp32 scales", _with(_ctx(), scale_dtype=GeDataType.DT_FLOAT, per_token_scale_dtype=GeDataType.DT_FLOAT),
     "template 0 (GroupedQmmBasicApiTiling) only"),
    ("int8 x e8m0", _ctx(x_dtype="int8", w_dtype="int8"), "template 0 (GroupedQmmBasicApiTiling) only"),
    ("bias fills L1", _ctx(**FP4, has_bias=True, compile_info=GMMCompileInfo(l1Size=1024)), "CalcLeftL1Size"),
    ("tile set over L1", _ctx(compile_info=GMMCompileInfo(l1Size=64 * KIB)), "CalL1Depth: L1 overflow"),
    ("no L1 for scales", _ctx(m=256, n=256, k=4096, group_num=1, compile_info=GMMCompileInfo(l1Size=131 * KIB)),
     "CalScaleFactors"),
    ("split-K K 0", _ctx(group_type="split_k", trans_a=True, k=0), "GetDepthA1B1: K == 0"),
]


@pytest.mark.parametrize(("ctx", "rule"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_rule(ctx: GmmTilingContext, rule: str) -> None:
    with pytest.raises(ConstraintError) as err:
        TilingGMM(ctx)
    assert rule in err.value.rule, err.value


def test_fp4_odd_n_is_fine_with_trans_b() -> None:
    assert TilingGMM(_ctx(**FP4, n=511, trans_b=True)).tilingKey == 1


def test_split_k_total_k_zero_refused_through_the_api() -> None:
    with pytest.raises(ConstraintError, match="never ends"):
        grouped_matmul_mx_tiling(128, 256, 0, group_num=2, trans_a=True, group_type="split_k")


def test_api_rejects_negative_sizes() -> None:
    with pytest.raises(ConstraintError, match="n >= 0"):
        grouped_matmul_mx_tiling(128, -1, 256, group_num=2)


def test_debug_fields_and_json_names() -> None:
    r = grouped_matmul_mx_tiling(600, 700, 4096, group_num=4)
    d = r.debug_fields()
    assert d["aQuantMode"] == d["bQuantMode"] == "MX_PERGROUP_MODE"
    assert (d["depthA1"], d["kAL1"], d["tilingKey"], d["blockDim"]) == (4, 256, 0, 32)
    j = r.as_dict()
    assert set(j["mmTilingData"]) >= {"m", "n", "k", "baseM", "baseN", "baseK", "kAL1", "kBL1", "scaleKAL1",
                                      "scaleKBL1", "isBias", "dbL0C", "l1BufferStage"}
    assert j["gmmQuantParams"]["groupNum"] == 4


def test_tiling_api_takes_the_weight_format() -> None:
    """grouped_matmul_mx_tiling(weight_format="NZ"): FLOAT4_E1M2 tiles (and is refused without it)."""
    kw = {"group_num": 4, "x_dtype": "float4_e2m1", "w_dtype": "float4_e1m2"}
    r = grouped_matmul_mx_tiling(600, 700, 4096, weight_format="NZ", **kw)
    assert (r.blockDim, r.mmTilingData.baseM, r.mmTilingData.baseN, r.mmTilingData.baseK) == (32, 256, 256, 256)
    with pytest.raises(ConstraintError, match="FLOAT4_E1M2 needs an NZ weight"):
        grouped_matmul_mx_tiling(600, 700, 4096, **kw)
