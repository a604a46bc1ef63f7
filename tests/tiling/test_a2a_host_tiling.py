"""all_to_all_quant_matmul host tiling: each constraint on both sides of its edge, the exact reasons, and
`a2a_tiling` end to end (launch raise to R blocks, the source launch, hcomm, an explicit head tile)."""

import dataclasses

import pytest

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch import ConstraintError
from mc2emu.arch.platform import DAV_3510
from mc2emu.numerics.formats import ElemFormat
from mc2emu.tiling.all_to_all_quant_matmul_tiling import (
    CommTilingData,
    a2a_tiling,
    comm_constraint_violations,
    make_comm_tiling,
    st_head_tile_size,
)
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

A2A2 = "A2A-2 at most one tail tile, no larger than a head tile"
A2A3 = "A2A-3 totalTiles == commTurn"
A2A5 = "A2A-5 R <= AIV blocks, R <= 64"


def violations(ct, **kw):
    args = {"ori_m": ct.splitAxisTileCnt * ct.splitAxisTileSize + ct.splitAxisTailCnt * ct.splitAxisTailSize,
            "ka": 128, "rank_size": 2, "aiv_blocks": 32, "wait_order": WaitOrder.IN_ORDER}
    args.update(kw)
    return comm_constraint_violations(ct, **args)


def rules(ct, **kw):
    return [r for r, _ in violations(ct, **kw)]


def test_comm_tiling_fields_and_tile_rows():
    ct = make_comm_tiling(100, 192, 32)   # 3 heads of 32 rows, one tail of 4
    assert ct == CommTilingData(32, 3, 4, 1, 192)
    assert (ct.headTileSize, ct.commTurn, ct.total_tiles(100)) == (32, 4, 4)
    assert [ct.tile_rows(t) for t in range(4)] == [(0, 32), (32, 32), (64, 32), (96, 4)]
    exact = make_comm_tiling(96, 64, 32)
    assert exact == CommTilingData(32, 3, 0, 0, 64)
    assert exact.tile_rows(2) == (64, 32)


def test_head_tile_size_edges():
    assert make_comm_tiling(5, 64, 1) == CommTilingData(1, 5, 0, 0, 64)   # 1 is a valid head
    for bad in (0, -4):
        with pytest.raises(ConstraintError, match="head_tile_size: head tile size must be positive") as ei:
            make_comm_tiling(5, 64, bad)
        assert ei.value.rule == "head_tile_size"
        assert str(bad) in str(ei.value)


def test_st_head_tile_rule_rounds_both_divisions_up():
    # n = 257 is 3 N tiles of 128; ceil(32 / 3) = 11 M tiles of 16 rows
    assert st_head_tile_size(32, 257, 16, 128) == 176
    assert st_head_tile_size(1, 64, 48, 128) == 48


def test_ka_edge_and_reason():
    ct = make_comm_tiling(64, 64, 64)
    assert violations(ct, ka=64) == []
    assert violations(ct, ka=192) == []
    assert violations(ct, ka=65) == [("A2A-1 Ka % 64 == 0", "Ka = 65 is not a multiple of 64: scale rows and "
                                      "the per-rank B segments would not line up")]


@pytest.mark.parametrize("ct, ok", [
    (CommTilingData(32, 2, 32, 1, 128), True),     # tail == head: allowed
    (CommTilingData(32, 2, 33, 1, 128), False),    # tail one row larger than the head
    (CommTilingData(32, 2, 0, 0, 128), True),      # no tail
    (CommTilingData(32, 2, 1, 0, 128), False),     # a tail size without a tail tile
    (CommTilingData(32, 2, 16, 2, 128), False),    # two tail tiles
])
def test_tail_rule_edges(ct, ok):
    assert (A2A2 in rules(ct)) is not ok


def test_tail_rule_reason():
    ct = CommTilingData(32, 2, 16, 2, 128)
    assert violations(ct, ori_m=96)[0] == (A2A2, "tail count 2, tail size 16, head size 32: the PUT source "
                                                 "formula src + idx * tileMax assumes it")


@pytest.mark.parametrize("ct, ori_m, ok", [
    (CommTilingData(32, 3, 4, 1, 128), 100, True),
    (CommTilingData(32, 3, 4, 1, 128), 101, False),    # covers 100 of 101 rows, ceil(101/32) = 4 tiles
    (CommTilingData(32, 3, 4, 1, 128), 99, False),     # covers 100 of 99
    (CommTilingData(32, 3, 0, 0, 128), 97, False),     # 5 tiles by ceil, 3 rounds
    (CommTilingData(32, 2, 32, 1, 128), 96, True),
])
def test_tiles_pair_with_rounds_edges(ct, ori_m, ok):
    assert (A2A3 in rules(ct, ori_m=ori_m)) is not ok


def test_tiles_pair_reason():
    got = violations(CommTilingData(32, 3, 0, 0, 128), ori_m=97)
    assert got == [(A2A3, "kernel waits on ceil(oriM / head) = 4 tiles but the AIVs run 3 rounds covering 96 "
                          "of 97 rows: Waits and Sets would not pair")]


def test_sixteen_rounds_fit_seventeen_do_not():
    assert violations(make_comm_tiling(16 * 8, 64, 8), ka=64) == []
    assert violations(make_comm_tiling(15 * 8 + 1, 64, 8), ka=64) == []     # 15 heads + 1 tail = 16
    got = violations(make_comm_tiling(17 * 8, 64, 8), ka=64)
    assert got == [("A2A-4 commTurn <= 16", "17 communication rounds but only 16 cross-core flag ids carry the "
                                            "round index")]


def test_mask_order_tracks_at_most_its_bits():
    # hcomm (no flag-id limit) isolates the waitedMask limit: 32 tiles fit, 33 do not
    kw = {"ka": 64, "aiv_blocks": None, "hcomm": True, "wait_order": WaitOrder.MASK}
    assert violations(make_comm_tiling(32, 64, 1), **kw) == []
    assert violations(make_comm_tiling(33, 64, 1), **kw) == [
        ("A2A-4 tiles <= 32 (mask)", "33 tiles do not fit the uint32 waitedMask")]
    assert violations(make_comm_tiling(33, 64, 1), **dict(kw, wait_order=WaitOrder.IN_ORDER)) == []


def test_hccl_repeat_edges_and_reasons():
    kw = {"ka": 64, "aiv_blocks": None, "hcomm": True}
    assert violations(make_comm_tiling(255, 64, 1), **kw) == []
    assert violations(make_comm_tiling(256, 64, 1), **kw) == [
        ("A2A-4 (hcomm) HCCL repeat <= 255", "256 head tiles are the repeat of one HCCL AlltoAll, a uint8_t: "
                                             "the device would wrap it to 0")]
    # the tail count is checked too (a hand-built tiling: A2A-2 and A2A-3 also fire)
    got = violations(CommTilingData(1, 1, 1, 256, 64), ori_m=257, **kw)
    assert ("A2A-4 (hcomm) HCCL repeat <= 255", "256 tail tiles are the repeat of one HCCL AlltoAll, a "
                                                "uint8_t: the device would wrap it to 0") in got
    # the default is the UDMA rule (flag ids)
    assert rules(make_comm_tiling(17, 64, 1), ka=64, aiv_blocks=None) == ["A2A-4 commTurn <= 16"]


def test_rank_edges_and_reasons():
    ct = make_comm_tiling(64, 64, 64)
    assert violations(ct, ka=64, rank_size=4, aiv_blocks=4) == []
    assert violations(ct, ka=64, rank_size=5, aiv_blocks=4) == [
        (A2A5, "5 ranks but 4 AIV blocks (AIV block r serves peer r; some peers would never be served)")]
    assert violations(ct, ka=64, rank_size=64, aiv_blocks=64) == []
    assert violations(ct, ka=64, rank_size=64, aiv_blocks=None) == []
    assert violations(ct, ka=64, rank_size=65, aiv_blocks=None) == [(A2A5, "65 ranks > 64")]
    assert violations(ct, ka=64, rank_size=65, aiv_blocks=80) == [(A2A5, "65 ranks > 64")]


def test_violations_come_in_rule_order():
    ct = CommTilingData(8, 17, 9, 1, 96)
    got = rules(ct, ori_m=8 * 17 + 9, ka=96, rank_size=70, aiv_blocks=4, wait_order=WaitOrder.MASK)
    assert got == ["A2A-1 Ka % 64 == 0", A2A2, A2A3, "A2A-4 commTurn <= 16", A2A5]


E4 = ElemFormat.E4M3


def tile(**kw):
    args = {"ori_m": 200, "ka": 128, "n": 256, "rank_size": 2, "elem": E4, "b_elem": E4, "aiv_served": True,
            "wait_order": WaitOrder.MASK, "block_dim": None, "head_tile_size": None}
    args.update(kw)
    return a2a_tiling(DAV_3510, **args)


def swat(ori_m, n, ka, block_dim=None, elem=E4, b_elem=E4):
    return QuantMatmulTilingSwat(DAV_3510, aic_num=block_dim).GetTilingData(ori_m, n, ka, False, True, elem,
                                                                            b_elem)


@pytest.mark.parametrize("aiv_served", [True, False])
def test_a2a_tiling_default_head_from_the_st_rule(aiv_served):
    t = tile(aiv_served=aiv_served)
    mm = swat(200, 256, 128)
    assert t.mm == mm
    assert (t.usedCoreNum, t.note) == (mm.usedCoreNum, "")
    head = st_head_tile_size(mm.usedCoreNum, 256, mm.baseM, mm.baseN)
    assert t.comm == make_comm_tiling(200, 128, head)
    assert (mm.usedCoreNum, mm.baseM, mm.baseN, head) == (32, 32, 64, 256)   # ceil(32 / 4) * 32


def test_a2a_tiling_explicit_head_and_formats():
    t = tile(ori_m=64, ka=128, n=128, head_tile_size=48, elem=ElemFormat.E5M2, b_elem=ElemFormat.E4M3)
    assert t.comm == CommTilingData(48, 1, 16, 1, 128)
    assert t.mm == swat(64, 128, 128, elem=ElemFormat.E5M2, b_elem=ElemFormat.E4M3)


def test_a2a_tiling_block_dim_sets_the_cores():
    t = tile(ori_m=64, ka=128, n=128, rank_size=2, block_dim=2)
    assert t.mm == swat(64, 128, 128, block_dim=2)
    assert (t.usedCoreNum, t.note) == (2, "")
    assert t.comm.splitAxisTileSize == st_head_tile_size(2, 128, t.mm.baseM, t.mm.baseN)
    with pytest.raises(ConstraintError) as ei:
        tile(ori_m=64, ka=128, n=128, rank_size=4, block_dim=2)
    assert (ei.value.rule, ei.value.reason) == (A2A5, "4 ranks but 2 AIV blocks (AIV block r serves peer r; "
                                                      "some peers would never be served)")
    # hcomm: no AIV serves a peer, the launch keeps block_dim
    assert tile(ori_m=64, ka=128, n=128, rank_size=4, block_dim=2, aiv_served=False).usedCoreNum == 2


def test_a2a_tiling_raises_the_launch_to_r_blocks_and_says_so():
    mm = swat(64, 128, 128)
    assert mm.usedCoreNum == 32
    t = tile(ori_m=64, ka=128, n=128, rank_size=40)
    assert t.usedCoreNum == 40
    assert t.note == ("launched 40 blocks where the tiling's usedCoreNum is 32: AIV block r serves peer r; the "
                      "source host launches usedCoreNum (launch='source', CLI --launch source: refused by A2A-5)")
    assert t.comm.splitAxisTileSize == st_head_tile_size(40, 128, mm.baseM, mm.baseN)
    assert tile(ori_m=64, ka=128, n=128, rank_size=32).note == ""   # used == R: no raise
    with pytest.raises(ConstraintError, match="40 ranks but 32 AIV blocks"):
        tile(ori_m=64, ka=128, n=128, rank_size=40, source_launch=True)
    hcomm = tile(ori_m=64, ka=128, n=128, rank_size=40, aiv_served=False)
    assert (hcomm.usedCoreNum, hcomm.note) == (32, "")


def test_a2a_tiling_refuses_with_the_first_rule():
    with pytest.raises(ConstraintError) as ei:
        tile(ori_m=17 * 8, ka=96, n=128, head_tile_size=8)
    assert ei.value.rule == "A2A-1 Ka % 64 == 0"
    assert ei.value.reason.startswith("Ka = 96 is not a multiple of 64")
    with pytest.raises(ConstraintError) as ei:
        tile(ori_m=17 * 8, ka=128, n=128, head_tile_size=8)
    assert ei.value.rule == "A2A-4 commTurn <= 16"
    # hcomm counts HCCL repeats: 17 rounds pass with the in-order wait
    t = tile(ori_m=17 * 8, ka=128, n=128, head_tile_size=8, aiv_served=False, wait_order=WaitOrder.IN_ORDER)
    assert t.comm.commTurn == 17


@pytest.mark.parametrize("elem, b_elem", [(ElemFormat.E2M1, ElemFormat.E4M3), (ElemFormat.E4M3, ElemFormat.E2M1)])
def test_a2a_tiling_refuses_an_fp4_fp8_pair(elem, b_elem):
    """One C0_SIZE and one L1 size rule serve both operands: an FP4 x FP8 pair overflowed L0B (the SWAT rule)."""
    with pytest.raises(ConstraintError, match="both FP8 or both FP4"):
        tile(ori_m=256, ka=4096, n=512, elem=elem, b_elem=b_elem)


def test_a2a_tiling_passes_the_formats_and_fp4_doubles_the_k_step():
    fp4 = tile(ori_m=256, ka=4096, n=512, elem=ElemFormat.E2M1, b_elem=ElemFormat.E2M1)
    fp8 = tile(ori_m=256, ka=4096, n=512, elem=ElemFormat.E4M3, b_elem=ElemFormat.E5M2)
    assert fp4.mm == swat(256, 512, 4096, elem=ElemFormat.E2M1, b_elem=ElemFormat.E2M1)
    assert fp8.mm == swat(256, 512, 4096, elem=ElemFormat.E4M3, b_elem=ElemFormat.E5M2)
    assert (fp4.mm.baseK, fp8.mm.baseK) == (1024, 512)   # an FP4 A doubles the K step


def test_a2a_tiling_takes_the_cores_from_the_platform():
    small = dataclasses.replace(DAV_3510, name="small", aic_count=8, aiv_count=16)
    t = a2a_tiling(small, ori_m=64, ka=128, n=128, rank_size=2, elem=E4, b_elem=E4, aiv_served=True,
                   wait_order=WaitOrder.MASK, block_dim=None, head_tile_size=None)
    assert (t.mm.usedCoreNum, t.usedCoreNum, t.note) == (8, 8, "")
    assert t.comm.splitAxisTileSize == st_head_tile_size(8, 128, t.mm.baseM, t.mm.baseN)
    raised = a2a_tiling(small, ori_m=64, ka=128, n=128, rank_size=12, elem=E4, b_elem=E4, aiv_served=True,
                        wait_order=WaitOrder.MASK, block_dim=None, head_tile_size=None)
    assert raised.usedCoreNum == 12
    assert raised.note.startswith("launched 12 blocks where the tiling's usedCoreNum is 8:")
