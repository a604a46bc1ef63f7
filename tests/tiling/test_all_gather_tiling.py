"""The all_gather_quant_matmul host tiling: the ST host's tile rule on the CANN AG cases, the SWAT switches
(edge merge off, M-tail alignment on) that keep baseM dividing the 512-row tiles, and the constraints."""

import pytest

from mc2emu.numerics import ElemFormat
from mc2emu.tiling.all_gather_quant_matmul_tiling import (
    TILE_M,
    ag_constraint_violations,
    ag_matmul_tiling,
    ag_unserved_peers,
    make_ag_comm_tiling,
    max_ranks,
)
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

# tests/st/all_gather_quant_matmul/cases.csv (commit 5778144076): m x n at k 4096, R 4
CANN_M = (2048, 2061, 3072, 3085, 4096, 4109, 8192, 8205)
CANN_N = (2560, 6144)
K, R = 4096, 4


@pytest.mark.parametrize("m", CANN_M)
def test_st_tile_rule(m):
    ct = make_ag_comm_tiling(m, K)
    assert ct.tileM == TILE_M
    assert ct.tileCnt == m // 512 and ct.tailM == m % 512 and ct.tailCnt == (m % 512 > 0)
    assert ct.paddedTailM == (-(-ct.tailM // 16) * 16 if ct.tailM else 0)
    assert ct.commTurn == ct.tileCnt + ct.tailCnt
    assert ct.headRows == ct.tileCnt * 512
    assert ct.total_logical_m(R) == R * (ct.headRows + ct.paddedTailM)


def test_small_m_is_one_tile():
    ct = make_ag_comm_tiling(300, K)
    assert (ct.tileM, ct.tileCnt, ct.tailCnt, ct.commTurn) == (300, 1, 0, 1)


@pytest.mark.parametrize("n", CANN_N)
@pytest.mark.parametrize("m", CANN_M)
def test_cann_cases_keep_blocks_inside_regions(m, n):
    """At 32 cores every CANN case tiles with baseM 256 and no merged edge tiles: HEAD (tileCnt * 512), each
    MAIN round ((R - 1) * 512) and the TAIL start are multiples of baseM."""
    ct = make_ag_comm_tiling(m, K)
    mm = ag_matmul_tiling(ct, R, n, ElemFormat.E4M3)
    assert mm.baseM == 256 and TILE_M % mm.baseM == 0
    assert mm.mBaseTailSplitCnt == 1 and mm.mTailMain == 0


@pytest.mark.parametrize("m", [m for m in CANN_M if m % 512])
def test_the_edge_merge_switch_is_what_keeps_them_inside(m):
    """With the SWAT default (OptimizeEdgeBasicBlock on) the ragged cases merge their last M tiles into
    240-row tiles, which would straddle the 512-row regions; the ST host switches it off."""
    ct = make_ag_comm_tiling(m, K)
    default = QuantMatmulTilingSwat().GetTilingData(ct.total_logical_m(R), 2560, K)
    assert default.mBaseTailSplitCnt > 1 and TILE_M % default.mTailMain != 0
    assert ag_matmul_tiling(ct, R, 2560, ElemFormat.E4M3).mBaseTailSplitCnt == 1


def test_m_tail_alignment_switch_is_on():
    swat_off = QuantMatmulTilingSwat(isOpenOptimize=False, enableMTailAlign=False)
    swat_on = QuantMatmulTilingSwat(isOpenOptimize=False, enableMTailAlign=True)
    ct = make_ag_comm_tiling(2061, K)
    mm = ag_matmul_tiling(ct, R, 2560, ElemFormat.E4M3)
    on = swat_on.GetTilingData(ct.total_logical_m(R), 2560, K)
    assert (mm.mTailTile, mm.nTailTile) == (on.mTailTile, on.nTailTile)
    off = swat_off.GetTilingData(ct.total_logical_m(R), 2560, K)
    assert mm.baseM == off.baseM  # the switch changes only how the tail round splits


@pytest.mark.parametrize("m, k, n, r, rule", [
    (64, 192, 64, 2, "AG-2 ceil(K/64) even"),
    (64, 80, 64, 2, "AG-1 K % 32 == 0"),
    (64, 128, 64, 9, "AG-3 R <= 8"),
    (0, 128, 64, 2, "AG-0 m, k, n > 0"),
])
def test_constraints_name_their_rule(m, k, n, r, rule):
    assert rule in [v[0] for v in ag_constraint_violations(m, k, n, r)]


@pytest.mark.parametrize("m, k, n, r, slot_ring, cites", [
    (64, 80, 64, 2, False, "main.cpp ParseArgs"),
    (64, 192, 64, 2, False, "main.cpp ParseArgs"),
    (64, 128, 64, 9, False, "5778144076 all_gather_qbmm_mx_kernel.h:206-208 cFragAddrs_[8]"),
    (64, 128, 64, 17, True, "67a83540d75e all_gather_qbmm_mx_kernel.h MAX_RANK_SIZE = 16U"),
])
def test_every_refusal_cites_the_source_check(m, k, n, r, slot_ring, cites):
    ((_, reason),) = ag_constraint_violations(m, k, n, r, slot_ring=slot_ring)
    assert cites in reason


@pytest.mark.parametrize("m, comm_turn", [(8192, 16), (8205, 17), (16 * 512 + 512 * 15, 31)])
@pytest.mark.parametrize("slot_ring", [False, True])
def test_no_round_limit(m, comm_turn, slot_ring):
    """The CANN AG ST m = 8192 / 8205 at R 4 (commTurn 16, 17; 5778144076 cases.csv, and the 67a83540d75e URMA
    table) tile and pass every rule on both protocols: the source has no commTurn limit (flag ids wrap)."""
    ct = make_ag_comm_tiling(m, K)
    assert ct.commTurn == comm_turn
    assert ag_constraint_violations(m, K, 2560, R, slot_ring=slot_ring) == []


def test_rank_limit_per_protocol():
    """Seed: `cFragAddrs_[8]` (5778144076), R <= 8; slot ring: `MAX_RANK_SIZE = 16U` (67a83540d75e), R <= 16."""
    assert ag_constraint_violations(64, 128, 64, 8) == []
    assert [v[0] for v in ag_constraint_violations(64, 128, 64, 9)] == ["AG-3 R <= 8"]
    assert "'slot_ring' takes up to 16" in ag_constraint_violations(64, 128, 64, 9)[0][1]
    for r in (9, 16):
        assert ag_constraint_violations(64, 128, 64, r, slot_ring=True) == []
    assert [v[0] for v in ag_constraint_violations(64, 128, 64, 17, slot_ring=True)] == ["AG-3 R <= 16"]
    assert (max_ranks(False), max_ranks(True)) == (8, 16)


def test_fewer_blocks_than_ranks_is_no_refusal_but_names_the_unserved_peers():
    """AIV block r serves peer r; the ST launcher launches usedCoreNum unchecked: the host refuses nothing, the
    impls report PEER_NOT_SERVED naming these peers."""
    assert ag_constraint_violations(64, 128, 64, 4) == []
    assert ag_unserved_peers(4, 3) == [3]
    assert ag_unserved_peers(4, 1) == [1, 2, 3]
    assert ag_unserved_peers(4, 4) == ag_unserved_peers(4, 32) == []
