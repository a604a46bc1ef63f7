"""WeightQuantTilingSwat (seed 001; Blaze asset op_tiling/weight_quant/weight_quant_tiling.h).

The seed gives the rules but no worked numbers; the worked examples below are derived by hand in the
comments from the source's formulas (DAV_3510: 32 AICs, L1 512 KiB, L0A 64 KiB, L0C 256 KiB, UB 256 KiB).
"""

from __future__ import annotations

import dataclasses

import pytest

from mc2emu.arch import DAV_3510, ConstraintError
from mc2emu.tiling import WeightQuantTilingSwat, weight_quant_can_implement
from mc2emu.tiling.weight_quant_tiling_layout import (
    FINDING_A_FRACTAL,
    FINDING_A_OVER_BIAS,
    FINDING_B_FRACTAL,
    FINDING_BIAS_BYTES,
    FINDING_UB_PADDING,
    FINDING_UB_SEED,
    FINDING_UB_USABLE,
    l1_layout,
    layout_findings,
    ub_bytes_seed_formula,
    ub_layout,
)
from mc2emu.tiling.weight_quant_tiling_swat import (
    RULE_BASE_K,
    RULE_K_ALIGN,
    RULE_L1_BIAS,
    RULE_N_ALIGN,
    RULE_SHAPE,
    RULE_UB_SCALE,
    RULE_UINT32,
    BuildTilingData,
    CalL1AndUbTiling,
    GetTilingData,
    WeightQuantArgs,
    WeightQuantPlatformInfo,
    WeightQuantRunInfo,
)

PLAT = WeightQuantPlatformInfo.from_platform(DAV_3510)


def tile(m, n, k, **kw):
    return GetTilingData(WeightQuantArgs(m, n, k, **kw), PLAT)


def rules(td, plat=PLAT, **kw):
    return {f.rule for f in layout_findings(td, plat, **kw)}


# --- worked examples ----------------------------------------------------------------------------------------------


def test_worked_example_256x4096x4096_nn():
    # base 256 x 256 gives 1 x 16 = 16 tiles < 32 AICs -> CalcBasicBlock: mCore 1 <= nCore 16 keeps baseM 256,
    # nCore = 32 / 1, baseN = Align16(4096 / 32) = 128. dbL0c: 256 * 128 * 4 * 2 = 256 KiB <= L0C -> 2.
    # baseK = min(4096, FloorAlign16(65536 / 2 / 2 / 256)) = 64. 32 tiles: no tail split.
    # kL1 from L1: 524288 / (2 * 384 * 2) = 341 -> 336; from UB: nUbSize = Align128(128) = 128,
    # (262144 - 128 * 2 * 2) / (2 * 128 * 3) = 340 -> FloorAlign16(680) = 672; kL1 = 336,
    # kUbSize = CeilDiv(336, 32) * 16 = 176.
    td = tile(256, 4096, 4096)
    assert (td.baseM, td.baseN, td.baseK, td.l0cDB, td.usedCoreNum) == (256, 128, 64, 2, 32)
    assert (td.kL1, td.nUbSize, td.kUbSize, td.mL1, td.nL1) == (336, 128, 176, 256, 128)
    assert (td.mTailCnt, td.nTailCnt, td.mBaseTailSplitCnt, td.nBaseTailSplitCnt) == (1, 1, 1, 1)
    assert (td.l1BufferNum, td.transB, td.hasOffset, td.hasBias, td.block_dim) == (2, 0, 0, 0, 32)
    assert layout_findings(td, PLAT) == []


def test_worked_example_256x4096x4096_trans_b():
    # Same base and kL1 from L1 (336); transB: nUbSize = 128 - (128 / 32) * 16 = 64 (AIV1's N share),
    # UB: (262144 - 64 * 4) / (2 * 64 * 3) = 682 -> FloorAlign128 = 640; kL1 = 336; kUbSize = Align128(336) = 384.
    td = tile(256, 4096, 4096, transB=True)
    assert (td.baseM, td.baseN, td.kL1, td.nUbSize, td.kUbSize) == (256, 128, 336, 64, 384)


def test_worked_example_4096_cube_with_bias():
    # 16 x 16 = 256 tiles: no shrink, baseM = baseN = 256, dbL0c 1 (512 KiB > L0C), no tail (256 % 32 = 0).
    # bias reserve Align64(256 * 4) = 1024: kL1 from L1 = 523264 / 2048 = 255 -> 240; UB: nUbSize 256,
    # (262144 - 1024) / 1536 = 170 -> 336; kL1 240, kUbSize = CeilDiv(240, 32) * 16 = 128.
    td = tile(4096, 4096, 4096, hasBias=True)
    assert (td.baseM, td.baseN, td.baseK, td.l0cDB, td.kL1, td.nUbSize, td.kUbSize) == (256, 256, 64, 1, 240, 256,
                                                                                           128)
    assert layout_findings(td, PLAT) == []


def test_edge_merge_and_tail_split():
    # m = 1124, n = 2048: 5 x 8 = 40 tiles of 256 x 256 -> OptimizeEdgeBasicBlock on M (tail 100, N has none):
    # perf unmerged 2 * 256 = 512; mergeLen 1: tailMain Align16(356 / 2) = 192, 1 main round + 1 tail round:
    # 256 + 192 = 448 (best; mergeLen 2, 3, 4 give 464, 480, 480). Tail: 40 % 32 = 8 tiles in the last round:
    # mCnt 2 (2 * 8 <= 32) then nCnt 2 (2 * 2 * 8 <= 32), 3 * 2 * 8 > 32 stops.
    td = tile(1124, 2048, 4096)
    assert (td.baseM, td.baseN, td.mBaseTailSplitCnt, td.mTailMain, td.nBaseTailSplitCnt) == (256, 256, 2, 192, 1)
    assert (td.mTailCnt, td.nTailCnt) == (2, 2)


def test_n_edge_merge_keeps_the_first_of_equal_costs():
    # m = 1024, n = 2000: 4 x 8 = 32 tiles, M has no tail -> N edge (208). Unmerged cost 1 window * 256.
    # mergeLen 1: tailMain Align16(464 / 2) = 240, main rounds CeilDiv(32 % 32, 32) = 0, tail round 1: 240 < 256.
    # mergeLen 2: tailMain Align16(720 / 3) = 240, cost 240 again: on N only a strictly better cost replaces.
    td = tile(1024, 2000, 4096)
    assert (td.nBaseTailSplitCnt, td.nTailMain, td.mBaseTailSplitCnt, td.mTailMain) == (2, 240, 1, 0)


def test_no_n_tail_split_when_trans_b():
    # transB: only M splits: mCnt grows while (mCnt + 1) * 8 <= 32 -> 4; nCnt stays 1.
    td = tile(1124, 2048, 4096, transB=True)
    assert (td.mTailCnt, td.nTailCnt) == (4, 1)
    for m, n in [(5 * 256, 7 * 256), (33 * 256, 512), (1124, 2048)]:  # 3, 2 and 8 tiles in the last round
        assert tile(m, n, 1024, transB=True).nTailCnt == 1
        assert tile(m, n, 1024, transB=False).nTailCnt > 1


def test_shrink_only_when_tiles_fewer_than_aics():
    assert tile(256, 4096, 4096).baseN == 128
    sixteen = WeightQuantTilingSwat(DAV_3510, aic_num=16).GetTilingData(256, 4096, 4096)
    assert (sixteen.baseM, sixteen.baseN, sixteen.usedCoreNum) == (256, 256, 16)  # 16 tiles = 16 AICs
    # tiles == AICs is no shrink: on 2 AICs, m = 300 gives 2 x 1 tiles; shrinking would make baseM 160
    two = WeightQuantTilingSwat(DAV_3510, aic_num=2).GetTilingData(300, 256, 64)
    assert (two.baseM, two.baseN, two.usedCoreNum) == (256, 256, 2)
    small = tile(100, 200, 64)  # 1 x 1 tile: CalcBasicBlock splits N over the AICs
    assert (small.baseM, small.baseN, small.usedCoreNum) == (112, 16, 13)


def test_small_tiles_take_a_long_kl1_and_baseK():
    # baseM = baseN = 16: baseK = FloorAlign16(65536 / 4 / 16) = 1024; kL1 from L1 = 524288 / 128 = 4096,
    # from UB (transB; GetCoreMemSize(UB) = 248 KiB): nUbSize 16, (253952 - 64) / 96 = 2644 -> 2560.
    td = tile(16, 16, 8192, transB=True)
    assert (td.baseK, td.kL1, td.kUbSize, td.nUbSize, td.usedCoreNum) == (1024, 2560, 2560, 16, 1)


# --- rules over a sweep -----------------------------------------------------------------------------------------


SHAPES = [(m, n, k) for m in (1, 15, 16, 100, 256, 600, 1124, 3000) for n in (16, 48, 128, 700 // 16 * 16, 2048, 5008)
          for k in (16, 64, 1008, 4096)]


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("has_bias", [False, True])
def test_rules_hold_over_a_sweep(trans_b, has_bias):
    for m, n, k in SHAPES:
        td = tile(m, n, k, transB=trans_b, hasBias=has_bias, hasOffset=True)
        assert td.baseM <= 256 and td.baseN <= 256 and td.baseM % 16 == 0 and td.baseN % 16 == 0
        assert (td.l0cDB == 2) == (td.baseM * td.baseN * 4 * 2 <= PLAT.l0cSize)
        assert td.baseK % 16 == 0 and td.baseK * max(td.baseM, td.baseN) * 2 * 2 <= PLAT.l0aSize
        bias = -(-td.baseN * 4 // 64) * 64 if has_bias else 0
        assert 2 * (td.baseM + td.baseN) * td.kL1 * 2 <= PLAT.l1Size - bias
        assert td.kL1 % 16 == 0 and 0 < td.kL1 <= k
        if trans_b:
            assert td.nTailCnt == 1 and td.nUbSize == td.baseN - td.baseN // 32 * 16 and td.kUbSize % 128 == 0
        else:
            assert td.nUbSize == -(-td.baseN // 128) * 128 and td.kUbSize == -(-td.kL1 // 32) * 16
        assert 1 <= td.usedCoreNum <= PLAT.aicNum
        assert td.mL1 == min(-(-m // 16) * 16, td.baseM)


# --- refused inputs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "rule"), [
    ((0, 16, 16), RULE_SHAPE),
    ((16, -1, 16), RULE_SHAPE),
    ((1 << 32, 16, 16), RULE_UINT32),
    ((16, 40, 64, True), RULE_N_ALIGN),
    ((16, 40, 72, False), RULE_K_ALIGN),
])
def test_bad_shapes_raise_naming_the_rule(args, rule):
    with pytest.raises(ConstraintError) as exc:
        WeightQuantTilingSwat().GetTilingData(*args)
    assert exc.value.rule == rule and str(exc.value).startswith(rule)
    assert weight_quant_can_implement(WeightQuantArgs(*args))[0].startswith(rule)


def test_alignment_rule_follows_the_fractal_axis():
    assert tile(16, 40, 64).n == 40  # n ragged is fine without transB
    assert tile(16, 48, 72, transB=True).k == 72  # k ragged is fine with transB
    assert weight_quant_can_implement(WeightQuantArgs(16, 48, 72, transB=True)) == []


@pytest.mark.parametrize(("override", "kw", "rule"), [
    ({"l0a_size": 8 * 1024}, {}, RULE_BASE_K),  # 8192 / 4 / 256 = 8 < 16
    ({"l1_size": 1024}, {"hasBias": True}, RULE_L1_BIAS),  # bias reserve Align64(256 * 4) = 1024
    ({"ub_usable_size": 1024}, {"hasOffset": True}, RULE_UB_SCALE),  # 256 * 2 * 2 * 2 = 1024
])
def test_platform_limits_raise_naming_the_rule(override, kw, rule):
    plat = WeightQuantPlatformInfo.from_platform(dataclasses.replace(DAV_3510, **override))
    with pytest.raises(ConstraintError) as exc:
        GetTilingData(WeightQuantArgs(4096, 4096, 4096, **kw), plat)
    assert exc.value.rule == rule


# --- the inferred overlaps ----------------------------------------------------------------------------------------


def test_layouts_follow_the_consumers():
    td = tile(4096, 4096, 4096, hasBias=True, hasOffset=True)
    l1 = l1_layout(td, PLAT)
    assert l1.bOffsets == (0, 262144) and l1.aOffsets == (256 * 240 * 2, 262144 + 256 * 240 * 2)
    assert l1.biasL1Offset == 524288 - 1024
    ub = ub_layout(td, PLAT)
    assert (ub.bInOneBuffer, ub.bOutOneBuffer, ub.scaleBuffer, ub.offsetBuffer) == (128 * 256, 129 * 256 * 2, 512,
                                                                                    512)
    assert ub_bytes_seed_formula(td) == 6 * 128 * 256 + 4 * 256 * 2


def test_upper_a_over_bias_never_on_dav_3510_but_on_a_256k_l1():
    # Exhaustive over (baseM, baseN) with kL1 from the L1 bound (k large): the tiling's FloorAlign16 always
    # leaves room on a 512 KiB L1. On a 256 KiB L1, baseM 16 / baseN 224 gives kL1 = FloorAlign16(
    # (262144 - 896) / 960) = 272, and A1 ends at 131072 + 240 * 272 * 2 = 261632 > 262144 - 896.
    def a_over_bias(plat):
        hits = []
        for bm in range(16, 257, 16):
            for bn in range(16, 257, 16):
                args = WeightQuantArgs(bm * 64, bn * 64, 1 << 16, hasBias=True)
                run = CalL1AndUbTiling(args, plat, WeightQuantRunInfo(baseM=bm, baseN=bn, baseK=64))
                if FINDING_A_OVER_BIAS in rules(BuildTilingData(args, run), plat):
                    hits.append((bm, bn, run.kL1))
        return hits

    assert a_over_bias(PLAT) == []
    small = WeightQuantPlatformInfo.from_platform(dataclasses.replace(DAV_3510, l1_size=256 * 1024))
    hits = a_over_bias(small)
    assert (16, 224, 272) in hits and len(hits) == 14
    msg = next(f.message for f in layout_findings(
        BuildTilingData(WeightQuantArgs(1024, 14336, 1 << 16, hasBias=True), CalL1AndUbTiling(
            WeightQuantArgs(1024, 14336, 1 << 16, hasBias=True), small,
            WeightQuantRunInfo(baseM=16, baseN=224, baseK=64))), small) if f.rule == FINDING_A_OVER_BIAS)
    assert "261632" in msg and str(262144 - 896) in msg


def test_ub_padding_overflow_is_reported_when_it_happens():
    # transB, 16 x 16 tiles: kUbSize 2560, nUbSize 16: seed §3 bound 6 * 2560 * 16 + 64 = 245824 <= 253952,
    # but a half needs 2560 * 16 + 2560 * 17 * 2 + 32 = 128032 > 126976 once bOut's +1 padding is in.
    td = tile(16, 16, 8192, transB=True)
    assert ub_bytes_seed_formula(td) == 245824 <= PLAT.ubSize
    found = {f.rule: f for f in layout_findings(td, PLAT)}
    assert FINDING_UB_PADDING in found and FINDING_UB_SEED not in found
    assert found[FINDING_UB_PADDING].details["half_used"] == 128032
    assert FINDING_UB_USABLE in found  # half 1 ends at 126976 + 128032 > 248 KiB
    # without transB bOut pads K instead: (kUbSize + 1) * nUbSize, no overflow (k 640: at k 8192 the 248 KiB
    # UB makes kL1 656 = 16 mod 32, the case of the next test)
    assert FINDING_UB_PADDING not in rules(tile(16, 16, 640))


def test_tiling_breaks_its_own_ub_bound_when_kl1_is_16_mod_32():
    # m 272, n 112 -> baseM 16, baseN 112; nUbSize = Align128(112) = 128; kUbSizeMax = (253952 - 512) / 768
    # = 330; kL1 = FloorAlign16(660) = 656 = 16 mod 32, so AIV1 takes 656 - 320 = 336 = kUbSize > 330.
    td = tile(272, 112, 8192)
    assert (td.baseN, td.nUbSize, td.kL1, td.kUbSize) == (112, 128, 656, 336)
    assert ub_bytes_seed_formula(td) == 6 * 336 * 128 + 4 * 128 > PLAT.ubSize
    assert {FINDING_UB_SEED, FINDING_UB_PADDING} <= rules(td)


def test_fractal_extents_past_a_short_kl1():
    # transB, k = 8: kL1 falls back to k = 8 (not 16-aligned): the 16-row fractals of a chunk need twice
    # bL1OneBuffer_ (16 * 8 * 2) and aL1OneBuffer_.
    td = tile(16, 32, 8, transB=True)
    assert td.kL1 == 8
    assert {FINDING_B_FRACTAL, FINDING_A_FRACTAL} <= rules(td)
    assert not {FINDING_B_FRACTAL, FINDING_A_FRACTAL} & rules(tile(16, 32, 16, transB=True))


def test_bias_bytes_mismatch_with_block_mmad():
    td = WeightQuantTilingSwat().GetTilingData(4096, 4096, 4096, hasBias=True, biasElemBytes=2)
    assert FINDING_BIAS_BYTES in rules(td, biasElemBytes=2)
    assert FINDING_BIAS_BYTES not in rules(tile(4096, 4096, 4096, hasBias=True))
