"""Host tiling of all_to_all_quant_matmul: the CANN ST head-tile rule and the five constraints of SPEC §6."""

import pytest

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch import ConstraintError, parse_enum
from mc2emu.tiling.all_to_all_quant_matmul_tiling import (
    CommTilingData,
    comm_constraint_violations,
    make_comm_tiling,
    st_head_tile_size,
)


def rules(ct, **kw):
    args = {"ori_m": 1024, "ka": 1792, "rank_size": 2, "aiv_blocks": 32, "wait_order": WaitOrder.MASK}
    args.update(kw)
    return [r for r, _ in comm_constraint_violations(ct, **args)]


@pytest.mark.parametrize("cores, n, base_m, base_n, expect", [
    (32, 4096, 256, 256, 512),    # 16 N tiles: 2 M tiles of 256 give every core a tile per round
    (32, 256, 128, 256, 4096),    # one N tile: 32 M tiles
    (24, 4096, 256, 256, 512),    # ceil(24/16) = 2
    (8, 4096, 64, 256, 64),
])
def test_st_head_tile_rule(cores, n, base_m, base_n, expect):
    assert st_head_tile_size(cores, n, base_m, base_n) == expect


def test_head_and_tail_split():
    ct = make_comm_tiling(4040 // 4, 2048, 256)
    assert (ct.splitAxisTileSize, ct.splitAxisTileCnt, ct.splitAxisTailSize, ct.splitAxisTailCnt) == (256, 3, 242, 1)
    assert ct.commTurn == 4 == ct.total_tiles(1010)
    assert ct.tile_rows(3) == (768, 242)
    assert rules(ct, ori_m=1010, ka=2048) == []


def test_head_larger_than_m_is_one_tail_tile():
    ct = make_comm_tiling(100, 64, 512)
    assert (ct.splitAxisTileCnt, ct.splitAxisTailSize, ct.splitAxisTailCnt, ct.commTurn) == (0, 100, 1, 1)
    assert rules(ct, ori_m=100, ka=64) == []


def test_ka_must_be_a_multiple_of_64():
    ct = make_comm_tiling(256, 96, 128)
    assert rules(ct, ori_m=256, ka=96) == ["A2A-1 Ka % 64 == 0"]


def test_more_than_one_tail_tile_is_refused():
    ct = CommTilingData(128, 2, 64, 2, 128)   # 2 tails: the PUT formula src + idx * tileMax breaks
    got = rules(ct, ori_m=384, ka=128)
    assert "A2A-2 at most one tail tile, no larger than a head tile" in got


def test_tiles_must_pair_with_rounds():
    ct = CommTilingData(128, 2, 0, 0, 128)    # covers 256 of 384 rows: Waits and Sets would not pair
    assert "A2A-3 totalTiles == commTurn" in rules(ct, ori_m=384, ka=128)


def test_at_most_16_rounds_and_32_mask_tiles():
    ct = make_comm_tiling(17 * 16, 64, 16)
    assert "A2A-4 commTurn <= 16" in rules(ct, ori_m=17 * 16, ka=64)
    assert "A2A-4 commTurn <= 16" in rules(ct, ori_m=17 * 16, ka=64, wait_order=WaitOrder.IN_ORDER)


def test_every_peer_needs_an_aiv_block():
    ct = make_comm_tiling(256, 128, 128)
    assert rules(ct, ori_m=256, ka=128, rank_size=8, aiv_blocks=4) == ["A2A-5 R <= AIV blocks, R <= 64"]


@pytest.mark.parametrize("bad", ["fifo", 3, None])
def test_wait_order_values(bad):
    with pytest.raises(ConstraintError, match="wait_order"):
        parse_enum(WaitOrder, bad, "wait_order")


def test_a_comm_policy_without_wait_tile_is_refused_when_the_kernel_is_built():
    from mc2emu.apace.quant_matmul_mx_kernel import QuantMatmulMxKernel
    from mc2emu.runtime import KernelError

    class NoWait:
        def Wait(self, tile):   # the wrong name: the C++ would not compile
            return tile

    with pytest.raises(KernelError, match="has no WaitTile"):
        QuantMatmulMxKernel(None, None, None, NoWait())


def test_hcomm_has_no_aiv_blocks_to_count():
    """hcomm launches AIC only (the HCCL server serves every peer): constraint 5 checks only R <= 64."""
    ct = make_comm_tiling(256, 128, 128)
    assert rules(ct, ori_m=256, ka=128, rank_size=8, aiv_blocks=None) == []
    assert rules(ct, ori_m=256, ka=128, rank_size=65, aiv_blocks=None) == ["A2A-5 R <= AIV blocks, R <= 64"]


def test_hcomm_counts_hccl_repeats_not_flag_ids():
    """hcomm waits on HCCL handles: 17 rounds are fine; its head AlltoAll's repeat is a uint8 (<= 255)."""
    ct = make_comm_tiling(17 * 16, 64, 16)
    assert rules(ct, ori_m=17 * 16, ka=64, aiv_blocks=None, wait_order=WaitOrder.IN_ORDER, hcomm=True) == []
    ct = make_comm_tiling(256 * 16, 64, 16)
    got = rules(ct, ori_m=256 * 16, ka=64, aiv_blocks=None, wait_order=WaitOrder.IN_ORDER, hcomm=True)
    assert got == ["A2A-4 (hcomm) HCCL repeat <= 255"]
    ct = make_comm_tiling(255 * 16 + 8, 64, 16)   # 255 head repeats and one tail: fits
    assert rules(ct, ori_m=255 * 16 + 8, ka=64, aiv_blocks=None, wait_order=WaitOrder.IN_ORDER, hcomm=True) == []


def test_a_comm_policy_missing_part_of_the_protocol_is_refused_naming_it():
    from mc2emu.apace.comm_policy import check_comm_policy
    from mc2emu.runtime import KernelError

    class WaitOnly:
        def WaitTile(self, tileIdx):
            pass

    with pytest.raises(KernelError, match=r"WaitOnly has no NotifyTile\(...\), Drain\(...\)"):
        check_comm_policy(WaitOnly(), "QuantMatmulMxKernel")


class _Recorder:
    def __init__(self):
        self.waited = []

    def WaitTile(self, tileIdx):
        self.waited.append(tileIdx)


@pytest.mark.parametrize("order, deps, want", [
    # seed: each dependency once in the order met, then the unwaited tiles in ascending order
    ("mask", [3, 1, 3, 0], [3, 1, 0, 2, 4]),
    # later source: every tile up to the dependency in order, then up to totalTiles - 1
    ("in_order", [3, 1, 3, 0], [0, 1, 2, 3, 4]),
    ("in_order", [], [0, 1, 2, 3, 4]),
    ("mask", [], [0, 1, 2, 3, 4]),
])
def test_wait_orders_as_policy_wrappers(order, deps, want):
    from mc2emu.apace.comm_policy import WAIT_ORDERS, TileWaitState

    rec = _Recorder()
    wo = WAIT_ORDERS[WaitOrder(order)](rec, TileWaitState())
    for d in deps:
        wo.WaitDep(d)
    wo.Drain(5)
    assert rec.waited == want
