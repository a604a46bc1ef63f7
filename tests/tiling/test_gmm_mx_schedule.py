"""GroupedMatmul MX schedule (KernelQGmmMx group loop over BlockSchedulerGmmAswtWithTailSplit): the worked
examples of issue 16 / SPEC §7.3, the source's rules one by one, and the exactly-once property.

The coverage checker below rebuilds each group's output extent from the group list on its own (not through the
kernel's SetMNK / BaseMBalance) and counts how often every output element is written.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import BlockIndex, BlockSchedulerGmmAswtWithTailSplit
from mc2emu.ops import grouped_matmul_mx_schedule, grouped_matmul_mx_tiling
from mc2emu.ops.grouped_matmul_mx_tiling_api import format_grouped_matmul_mx_schedule, format_grouped_matmul_mx_tiling
from mc2emu.runtime.hazards import ConstraintError


def coverage(records: tuple, extents: dict[int, tuple[int, int]]) -> dict[int, np.ndarray]:
    """How often each element of each group's output (rows x n) is written; pieces outside a group raise."""
    count = {g: np.zeros(shape, dtype=np.int64) for g, shape in extents.items()}
    for r in records:
        rows, cols = extents[r.group]
        assert r.m_piece > 0 and r.n_piece > 0, r
        assert r.m_offset + r.m_piece <= rows and r.n_offset + r.n_piece <= cols, r
        count[r.group][r.m_offset:r.m_offset + r.m_piece, r.n_offset:r.n_offset + r.n_piece] += 1
    return count


def assert_exactly_once(records: tuple, extents: dict[int, tuple[int, int]]) -> None:
    for g, c in coverage(records, extents).items():
        assert c.size == 0 or (c.min() == 1 and c.max() == 1), (g, int(c.min()), int(c.max()))


def test_coverage_checker_catches_a_duplicate_and_a_hole() -> None:
    recs = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096)
    ext = {g: (25, 700) for g in range(4)}
    assert_exactly_once(recs, ext)
    with pytest.raises(AssertionError):
        assert_exactly_once((*recs, recs[0]), ext)
    with pytest.raises(AssertionError):
        assert_exactly_once(recs[1:], ext)


def test_one_group_2048x7168_transb_core0() -> None:
    recs = grouped_matmul_mx_schedule([2048], 7168, 2048, trans_b=True)
    core0 = [(r.mi, r.ni) for r in recs if r.core == 0]
    assert core0 == [(0, 0), (0, 8), (0, 16), (0, 24), (4, 23), (4, 15), (4, 7)]
    assert [r.round for r in recs if r.core == 0] == list(range(7))
    assert {r.m_piece for r in recs} == {256} and {r.n_piece for r in recs} == {256}
    assert_exactly_once(recs, {0: (2048, 7168)})


def test_last_window_takes_the_remaining_rows() -> None:
    """10 M tiles: window 0 = rows 0-3 (M fastest), the last window rows 4-9 (not 4-7 + 8-9), N reversed in it."""
    recs = grouped_matmul_mx_schedule([2560], 512, 1024, trans_b=True)  # 10 x 2 tiles on cores 0-19
    tile = {r.core: (r.mi, r.ni) for r in recs}
    assert [tile[c] for c in (0, 3, 4, 7)] == [(0, 0), (3, 0), (0, 1), (3, 1)]
    assert [tile[c] for c in (8, 13, 14, 19)] == [(4, 1), (9, 1), (4, 0), (9, 0)]
    assert len(recs) == 20


def test_four_groups_m25_tail_split() -> None:
    recs = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096)
    by_group = {g: sorted(r.core for r in recs if r.group == g) for g in range(4)}
    assert by_group[0] == [0, 1, 2] and by_group[1] == [3, 4, 5] and by_group[2] == [6, 7, 8]
    assert by_group[3] == list(range(9, 21))  # 3 tiles x 4 pieces on cores 9-20
    last = [r for r in recs if r.group == 3]
    assert sorted({r.m_piece for r in last}) == [12, 13]
    assert sorted({(r.n_offset, r.n_piece) for r in last if r.ni == 2}) == [(512, 128), (640, 60)]
    assert_exactly_once(recs, {g: (25, 700) for g in range(4)})


def test_base_m_balance_600() -> None:
    """BaseMBalance: m 600 with baseM 256 gives tiles 208 / 208 / 184, not 256 / 256 / 88."""
    recs = grouped_matmul_mx_schedule([600], 256, 4096, block_num=4)  # 3 tiles, no tail split
    assert sorted({(r.mi, r.m_offset, r.m_piece) for r in recs}) == [(0, 0, 208), (1, 208, 208), (2, 416, 184)]


def test_groups_continue_after_previous_last_core_and_empty_groups_do_not_move_it() -> None:
    recs = grouped_matmul_mx_schedule([100, 0, 100, 0], 512, 1024, block_num=8)
    assert sorted(r.core for r in recs if r.group == 0) == [0, 1]
    assert sorted(r.core for r in recs if r.group == 2) == [2, 3]
    assert not [r for r in recs if r.group in (1, 3)]


def test_wraps_past_the_last_core() -> None:
    recs = grouped_matmul_mx_schedule([64, 64, 0], 256 * 5, 1024, block_num=8)  # 5 tiles each, no tail split
    assert sorted(r.core for r in recs if r.group == 1) == [0, 1, 5, 6, 7]
    assert_exactly_once(recs, {0: (64, 1280), 1: (64, 1280)})
    # the last group wrapped to end at core 1: split; cores 5-7 run their whole tile, then a tail piece
    recs = grouped_matmul_mx_schedule([64, 64], 256 * 5, 1024, block_num=8)
    assert [(r.ni, r.round) for r in recs if r.group == 1 and r.core == 5] == [(0, 0), (4, 1)]
    assert_exactly_once(recs, {0: (64, 1280), 1: (64, 1280)})


@pytest.mark.parametrize(("block_num", "split"), [(25, False), (26, True), (24, False)])
def test_tail_split_needs_half_the_cores_free(block_num: int, split: bool) -> None:
    """IfNeedSplit: (end + 1) <= blockNum >> 1 (25 cores, end 12: no split)."""
    recs = grouped_matmul_mx_schedule([16], 13 * 256, 1024, block_num=block_num)  # 13 tiles on cores 0-12
    assert (len(recs) > 13) is split
    assert_exactly_once(recs, {0: (16, 13 * 256)})


def test_only_the_last_group_is_tail_split_and_never_when_empty() -> None:
    recs = grouped_matmul_mx_schedule([32, 32], 512, 1024)
    assert len([r for r in recs if r.group == 0]) == 2 and len([r for r in recs if r.group == 1]) > 2
    recs = grouped_matmul_mx_schedule([32, 32, 0], 512, 1024)
    assert len(recs) == 4


def test_tail_piece_past_the_edge_stops_the_core() -> None:
    """A rounded-up piece starting past the tile edge is 0 x 0 and its core runs nothing more of the group."""
    bs = BlockSchedulerGmmAswtWithTailSplit(32, 256, 128, BlockIndex(3, 32))
    bs.SetTailAlign(1, 32)
    bs.UpdateNextProblem((20, 130, 1024))
    bs.UpdateTailTile(1, 4)  # ceil(130 / 4) = 33 -> aligned to 128: piece 3 starts at 384 > 130
    tile = bs.GetTileIdx()
    assert tile == (0, 0) and bs.GetBlockShape(tile) == (0, 0, 0, 0)
    assert_exactly_once(grouped_matmul_mx_schedule([20], 130, 1024), {0: (20, 130)})


def test_split_k_zero_k_groups_run_no_tile() -> None:
    recs = grouped_matmul_mx_schedule([512, 0, 256, 0], 512, m=128, split="K")
    assert {r.group for r in recs} == {0, 2}
    assert_exactly_once(recs, {0: (128, 512), 2: (128, 512)})


def test_split_k_tail_split_aligns_m_to_128() -> None:
    recs = grouped_matmul_mx_schedule([1024], 256, m=300, split="K")
    assert {r.m_piece for r in recs} <= {128, 256, 44, 172} and all(r.m_offset % 128 == 0 for r in recs)
    assert_exactly_once(recs, {0: (300, 256)})


def test_sparse_list_stops_at_first_empty_entry_but_runs_the_last() -> None:
    recs = grouped_matmul_mx_schedule([(5, 40), (2, 0), (7, 40), (1, 40)], 256, 1024, group_list_type="sparse")
    assert {r.group for r in recs} == {5, 1}  # entry (7, 40) is after the break; the last entry still runs


def test_seed_003_example_cumsum_10_30_30_45() -> None:
    """Seed 003 §2: groupList [10, 30, 30, 45] (cumsum), N 512, K 4096. The seed assumes baseM 128; the tiling
    of x with 45 rows gives baseM 48 and BaseMBalance 16 / 32 / 16. Group 2 is empty; group 3 (last, ending on
    core 5 <= 16) is split 1 x 2 onto cores 4-7."""
    assert grouped_matmul_mx_tiling(45, 512, 4096, group_num=4).mmTilingData.baseM == 48
    recs = grouped_matmul_mx_schedule([10, 30, 30, 45], 512, 4096, group_list_type="cumsum")
    got = [(r.group, r.core, r.mi, r.ni, r.m_piece, r.n_piece, r.n_offset) for r in recs]
    assert got == [(0, 0, 0, 0, 10, 256, 0), (0, 1, 0, 1, 10, 256, 256), (1, 2, 0, 0, 20, 256, 0),
                   (1, 3, 0, 1, 20, 256, 256), (3, 4, 0, 0, 15, 128, 0), (3, 5, 0, 0, 15, 128, 128),
                   (3, 6, 0, 1, 15, 128, 256), (3, 7, 0, 1, 15, 128, 384)]
    assert_exactly_once(recs, {0: (10, 512), 1: (20, 512), 3: (15, 512)})


@pytest.mark.parametrize(("args", "kwargs", "rule"), [
    ([], {}, "groupNum >= 1"),
    ([5, -1], {}, "group sizes >= 0"),
    ([5], {"split": "N"}, "split"),
    ([5], {"block_num": 0}, "block_num"),
    ([5], {"split": "K"}, "split-K needs m"),
    ([5, 5], {"split": "K", "m": 8, "k": 11}, "split-K k = sum"),
    ([5, 5], {"m": 9}, "m >= rows the group list covers"),
    ([0, 0], {"split": "K", "m": 8}, "GetDepthA1B1: K == 0"),
    ([0, 0], {}, "split-M rejects an empty x or weight"),
])
def test_schedule_refusals(args: list, kwargs: dict, rule: str) -> None:
    with pytest.raises(ConstraintError) as err:
        grouped_matmul_mx_schedule(args, 256, **kwargs)
    assert rule in err.value.rule


def test_blaze_variant_tail_split() -> None:
    """Blaze sample (SetTailAlign 16 / 128): minimum pieces of 16 on both axes -> 2 x 3 pieces per tail tile; M
    pieces rounded to 16 (16 / 9), N pieces to 128, so the third N piece of a 256 tile starts past the edge and
    its core idles. The IS_BLAZE kernel (SetTailAlign 1 / C0 32): minimum pieces 1 x 16, the same 2 x 3, M
    pieces 13 / 12, N pieces rounded to 32: every core 9..26 gets a piece."""
    prod = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096, variant="blaze")
    assert sorted({r.m_piece for r in prod if r.group == 3}) == [12, 13]
    assert sorted(r.core for r in prod if r.group == 3) == list(range(9, 27))
    assert_exactly_once(prod, {g: (25, 700) for g in range(4)})
    recs = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096, variant="blaze_sample")
    last = [r for r in recs if r.group == 3]
    assert sorted({r.m_piece for r in last}) == [9, 16]
    assert sorted(r.core for r in last) == [9, 12, 13, 14, 15, 18, 19, 20, 21, 24, 25, 26]
    assert_exactly_once(recs, {g: (25, 700) for g in range(4)})
    cgmct = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096)
    assert [r for r in cgmct if r.group < 3] == [r for r in recs if r.group < 3]  # same walk before the split


def test_blaze_variant_reads_counts_only() -> None:
    with pytest.raises(ConstraintError, match="count group list"):
        grouped_matmul_mx_schedule([10, 30], 256, 1024, group_list_type="cumsum", variant="blaze_sample")
    assert grouped_matmul_mx_schedule([10, 30], 256, 1024, group_list_type="cumsum", variant="blaze") == \
        grouped_matmul_mx_schedule([10, 20], 256, 1024, variant="blaze")
    with pytest.raises(ConstraintError, match="variant"):
        grouped_matmul_mx_schedule([10, 30], 256, 1024, variant="catlass")


# --- exactly once, for random group lists -------------------------------------------------------------------------
group_lists = st.one_of(
    st.lists(st.integers(0, 700), min_size=1, max_size=12),                               # with empty groups
    st.lists(st.sampled_from([0, 0, 0, 1, 17, 300]), min_size=1, max_size=24),            # sparse-ish
    st.tuples(st.integers(1, 9000), st.lists(st.integers(0, 40), max_size=5)).map(lambda t: [t[0], *t[1]]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=group_lists, n=st.integers(1, 2100), block_num=st.sampled_from([1, 7, 20, 24, 25, 32]),
       trans_b=st.booleans(), fp4=st.booleans(), variant=st.sampled_from(["cgmct", "blaze", "blaze_sample"]))
def test_split_m_every_element_exactly_once(sizes: list[int], n: int, block_num: int, trans_b: bool,
                                            fp4: bool, variant: str) -> None:
    if sum(sizes) == 0:
        return
    if fp4 and not trans_b and n % 2:
        n += 1
    recs = grouped_matmul_mx_schedule(sizes, n, 1024, block_num=block_num, trans_b=trans_b,
                                      x_dtype="float4_e2m1" if fp4 else "float8_e4m3fn", variant=variant)
    assert_exactly_once(recs, {g: (s, n) for g, s in enumerate(sizes) if s > 0})
    for core in range(block_num):
        rounds = [(r.group, r.round) for r in recs if r.core == core]
        assert len(set(rounds)) == len(rounds)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ks=st.lists(st.integers(0, 3) .map(lambda v: 256 * v), min_size=1, max_size=8), m=st.integers(1, 1200),
       n=st.integers(1, 1500), block_num=st.sampled_from([1, 8, 24, 32]),
       variant=st.sampled_from(["cgmct", "blaze", "blaze_sample"]))
def test_split_k_every_element_exactly_once(ks: list[int], m: int, n: int, block_num: int, variant: str) -> None:
    if sum(ks) == 0:
        return
    recs = grouped_matmul_mx_schedule(ks, n, m=m, split="K", block_num=block_num, variant=variant)
    assert_exactly_once(recs, {g: (m, n) for g, k in enumerate(ks) if k > 0})


def test_schedule_and_tiling_printouts() -> None:
    recs = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096)
    text = format_grouped_matmul_mx_schedule(recs).splitlines()
    assert len(text) == 21 and text[18] == "core 18: g3(0,2)r0[0+13,640+60]"
    assert json.loads(format_grouped_matmul_mx_schedule(recs, as_json=True))[0]["n_piece"] == 256
    t = grouped_matmul_mx_tiling(600, 700, 4096, group_num=4)
    lines = dict(line.split(" = ") for line in format_grouped_matmul_mx_tiling(t).splitlines())
    assert {k.strip(): v for k, v in lines.items()}["depthA1"] == "4"
    j = json.loads(format_grouped_matmul_mx_tiling(t, as_json=True))
    assert j["mmTilingData"]["l1BufferStage"] == 3 and j["tilingKey"] == 0 and j["mmTilingData"]["stepKa"] == 2
