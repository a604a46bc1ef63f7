"""mc2emu.ops.grouped_matmul_mx end to end (TilingGMM -> GmmCgmctMxKernel / KernelQGmmMx / CGMCT BlockMmadMx ->
y) against golden_grouped_matmul_mx (ml_dtypes / np.ldexp decode, one FP32 matmul per group): several groups,
empty groups, tails, ragged sizes, cumsum / count / sparse lists, split-M (NN, NT) and split-K (K = 0 groups
zero-filled by the AIVs), FP4; the kernel's tile trace against the schedule API; refusals; the write-count
hazard of the source's `UpdateOffset(0)` early return."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from gmm_cases import split_k_case, split_m_case

from mc2emu.numerics import ag_compare, ulp_distance
from mc2emu.ops import golden_grouped_matmul_mx, grouped_matmul_mx, grouped_matmul_mx_schedule, grouped_matmul_mx_tiling
from mc2emu.runtime import ConstraintError, HazardError
from mc2emu.runtime.events import Fixpipe, GmRead, GmWrite

BF16 = np.dtype(ml_dtypes.bfloat16)


def golden(c, **kw):
    gkw = {k: v for k, v in {**c.kw, **kw}.items() if k not in ("trans_a", "block_dim", "variant")}
    return golden_grouped_matmul_mx(*c.args(), **gkw)


def run(c, **kw):
    return grouped_matmul_mx(*c.args(), **{**c.kw, **kw})


def assert_close(y, ref):
    assert y.shape == ref.shape and y.dtype == ref.dtype
    assert ag_compare(y, ref), ulp_distance(y, ref)


@pytest.mark.parametrize(("sizes", "n", "k", "trans_b", "glt"), [
    ([25, 25, 25, 25], 700, 4096, False, "count"),       # seed 002 / 003: M 100 -> baseM 112, kAL1 1024 (A outer)
    ([150, 150, 150, 150], 700, 4096, False, "cumsum"),  # M 600 in 4 groups (tiling 256/256/128, dbL0C 1)
    ([10, 20, 0, 15], 512, 256, False, "cumsum"),        # seed 003 §2: cumsum [10, 30, 30, 45], group 2 empty
    ([0, 300, 0, 37, 1], 300, 1000, True, "count"),      # transB, K % 128 != 0 (the unalign step), 1-row group
    ([70, 230], 64, 2048, False, "count"),               # kBL1 > kAL1: B outer (IterBL1AL1)
])
def test_split_m_matches_golden(sizes, n, k, trans_b, glt):
    c = split_m_case(sizes, n, k, trans_b=trans_b, group_list_type=glt)
    assert_close(run(c), golden(c))


def test_seed_600_rows_balance_and_trace_follow_the_schedule():
    """M 600 in one group: tiles of 208 / 208 / 184 rows; every fixpipe of the kernel is a record of
    grouped_matmul_mx_schedule (same core, same piece, same order): one implementation of the schedule."""
    c = split_m_case([600], 700, 4096, seed=3)
    events = []
    y = run(c, observers=[lambda ev: isinstance(ev, Fixpipe) and events.append(ev)])
    assert_close(y, golden(c))
    mm = grouped_matmul_mx_tiling(600, 700, 4096, group_num=1).mmTilingData
    assert (mm.baseM, mm.baseN, mm.kAL1, mm.kBL1, mm.dbL0C) == (256, 256, 256, 256, 1)
    recs = grouped_matmul_mx_schedule([600], 700, 4096)
    assert sorted({r.m_piece for r in recs}) == [184, 208]
    want = {}
    for r in recs:
        want.setdefault(f"AIC{r.core}", []).append((r.m_offset, r.n_offset, r.m_piece, r.n_piece))
    got = {}
    for ev in events:
        got.setdefault(ev.core, []).append((*ev.origin, ev.m, ev.n))
    assert got == want
    # dbL0C 1: a core running several 256 x 256 tiles keeps L0C half 0 (the second half cannot hold one)
    np.testing.assert_array_equal(run(c, block_dim=2).view(np.uint16), y.view(np.uint16))


def test_tail_split_needs_half_the_cores_free():
    """Four groups of 25 rows, N 700 (3 tiles each): group 3 ends on core 11. With 32 cores 12 <= 16, so its
    tiles split (2 x 2 pieces on cores 9-20); with 20 cores 12 > 10, so they do not."""
    split = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096, block_num=32)
    assert sorted({(r.m_piece, r.n_piece) for r in split if r.group == 3}) == [(12, 60), (12, 128), (13, 60),
                                                                                (13, 128)]
    assert sorted({r.core for r in split if r.group == 3}) == list(range(9, 21))
    whole = grouped_matmul_mx_schedule([25, 25, 25, 25], 700, 4096, block_num=20)
    assert {r.m_piece for r in whole} == {25} and sorted(r.core for r in whole if r.group == 3) == [9, 10, 11]


def test_many_groups_tail_split_and_bitwise_reproducible():
    """Ragged groups where the last group is tail-split; the same y bit for bit for any block_dim and run."""
    c = split_m_case([25, 3, 0, 17, 25], 700, 512, seed=5)
    recs = grouped_matmul_mx_schedule([25, 3, 0, 17, 25], 700, 512)
    assert any(r.m_piece < 25 and r.group == 4 for r in recs)  # the last group is split
    fix = []
    ref = run(c, observers=[lambda ev: isinstance(ev, Fixpipe) and fix.append(ev)])
    # the trace names which core ran which group's tile in which round: exactly the schedule's records
    assert sorted((int(ev.core[3:]), ev.task.group, ev.task.round, ev.task.mTileIdx, ev.task.nTileIdx)
                  for ev in fix) == sorted((r.core, r.group, r.round, r.mi, r.ni) for r in recs)
    assert_close(ref, golden(c))
    for bd in (32, 7, 1):
        np.testing.assert_array_equal(run(c, block_dim=bd).view(np.uint16), ref.view(np.uint16))


def test_sparse_list_stops_at_first_empty_entry_but_runs_the_last():
    c = split_m_case([(0, 20), (2, 0), (1, 30), (3, 11)], 96, 320, group_list_type="sparse", groups=4, m=70)
    y = run(c)
    assert_close(y, golden(c))
    assert not y[31:].view(np.uint16).any()  # rows past those the kernel runs stay as allocated (0)
    np.testing.assert_array_equal(y[:20], golden(c)[:20])


def test_variant_blaze_sample_count_list_same_values_own_tail_split():
    """The sample kernel's SetTailAlign (16 rows for an ND A) is what runs: the split last group's fixpipes are
    16 | 9 rows (CGMCT's 13 | 12), the values are CGMCT's bit for bit (more in test_grouped_matmul_blaze.py)."""
    c = split_m_case([25, 25, 25, 25], 700, 512, seed=7)
    fix = []
    y = run(c, variant="blaze_sample", observers=[lambda ev: isinstance(ev, Fixpipe) and fix.append(ev)])
    assert {ev.m for ev in fix if ev.task.group == 3} == {16, 9}
    np.testing.assert_array_equal(y.view(np.uint16), run(c).view(np.uint16))


def test_fp4_with_bias_and_fp32_output():
    c = split_m_case([40, 0, 88], 128, 256, fp4=True, seed=2)
    bias = np.random.default_rng(1).uniform(-4, 4, (3, 128)).astype(np.float32)
    y = run(c, bias=bias, out_dtype="float32")
    ref = golden(c, bias=bias, out_dtype="float32")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-5)


def test_split_k_zero_groups_are_zero_filled_by_the_aivs():
    c = split_k_case([128, 0, 200, 0], 40, 300, seed=4, group_list_type="cumsum")
    writers = {}
    y = run(c, observers=[lambda ev: isinstance(ev, GmWrite) and ev.buffer == "y"
                          and writers.setdefault(ev.core[:3], []).append((ev.lo, ev.hi))])
    assert y.shape == (4, 40, 300)
    assert_close(y, golden(c))
    assert not y[1].view(np.uint16).any() and not y[3].view(np.uint16).any()
    group_bytes = 40 * 300 * 2  # one group's y in bf16
    assert {lo // group_bytes for lo, _hi in writers["AIV"]} == {1, 3}, "the AIVs zero-fill the K == 0 groups"
    assert {lo // group_bytes for lo, _hi in writers["AIC"]} == {0, 2}


def test_split_k_list_covering_less_than_k_runs_as_the_device():
    """Lifted refusal (issue 35 item 3): the kernel takes each group's K range from the running preOffset_
    (kernel_qgmm_mx.h UpdateOffset), so a list covering only a prefix of K runs; the K rows past it are never
    read. Here 128 + 64 of K = 320: poisoning x and weight past row 192 changes nothing."""
    c = split_k_case([128, 64, 128], 24, 96, seed=12)
    c.group_list = np.array([128, 64], dtype=np.int64)
    c.x_scale, c.weight_scale = c.x_scale[:-1], c.weight_scale[:-1]   # [K/64 + g, ., 2] for g = 2
    y = run(c)
    assert y.shape == (2, 24, 96)
    assert_close(y, golden(c))
    c.x[192:], c.weight[192:] = 0x7E, 0x7E   # NaN-free large codes: they would change every element if read
    np.testing.assert_array_equal(run(c).view(np.uint16), y.view(np.uint16))


@pytest.mark.parametrize(("m", "n"), [(0, 96), (24, 0)])
def test_split_k_with_m_or_n_zero_returns_the_empty_output(m, n):
    """The framework returns an empty y without tiling when M or N is 0 (ops-transformer 5778144
    grouped_quant_matmul_tiling.cpp:1107); the tiling itself, called directly, names that rule."""
    c = split_k_case([64, 64], max(m, 1), max(n, 1), seed=13)
    c.x, c.x_scale = c.x[:, :m], c.x_scale[:, :m]
    c.weight, c.weight_scale = c.weight[:, :n], c.weight_scale[:, :n]
    y = run(c)
    assert y.shape == (2, m, n) and y.size == 0
    assert golden(c).shape == (2, m, n)
    with pytest.raises(ConstraintError, match="M == 0 or N == 0 returns an empty y"):
        grouped_matmul_mx_tiling(m, n, 128, group_num=2, group_type="split_k", trans_a=True)


def test_split_k_ut_shape_and_scale_reload():
    """UT mxfp8_basic_api_splitk_transx_success shape (128, 768, 1024, g 2) and a K whose scales reload."""
    assert_close(run(c := split_k_case([512, 512], 128, 768, seed=8)), golden(c))
    c = split_m_case([512], 48, 8192, seed=9)  # scaleKL1 6144 < K: the L1 scale buffer flips mid-tile
    mm = grouped_matmul_mx_tiling(512, 48, 8192, group_num=1).mmTilingData
    assert mm.scaleKAL1 < 8192 and mm.kBL1 > mm.kAL1
    assert_close(run(c), golden(c))


def test_sparse_group0_after_another_group_reports_write_count():
    """The source's UpdateOffset returns at groupIdx 0, keeping the previous group's offsets: group 0's tiles
    land on group 1's rows. Reproduced; the report names the elements written twice and never."""
    c = split_m_case([(1, 10), (0, 20)], 64, 128, group_list_type="sparse", groups=2)
    with pytest.raises(HazardError) as ei:
        run(c)
    (rep,) = ei.value.hazards
    assert rep.hazard.value == "OUTPUT_WRITE_COUNT"
    assert rep.details["twice"] == 10 * 64 and rep.details["never"] == 10 * 64
    assert rep.details["element"] == (0, 0) and rep.details["count"] == 2 and len(rep.details["writers"]) == 2
    y = run(c, check=False)  # as the device: rows 20..29 never written, 0..19 hold group 0 (last writer)
    assert not y[20:].view(np.uint16).any()


def _x_transposed(c):
    """split-M operands with x given as [K, M] and its scale as [ceil(K/64), M, 2] (what transA would read)."""
    c.x, c.x_scale = np.ascontiguousarray(c.x.T), np.ascontiguousarray(np.swapaxes(c.x_scale, 0, 1))
    return c


@pytest.mark.parametrize(("case", "kw", "rule"), [
    (lambda: _x_transposed(split_m_case([10, 20], 64, 128)), {"trans_a": True}, "transpose"),
    (lambda: split_m_case([10, 20], 64, 128), {"bias": np.zeros((2, 64), np.float32)}, "bias"),
    (lambda: split_m_case([10, 20], 64, 128, m=25), {}, "split-M rows <= M"),
    (lambda: split_k_case([64, 64], 16, 32), {"group_list": np.array([64, 96])}, "split-K sizes <= K"),
    (lambda: split_m_case([10, 20], 64, 128), {"group_list_type": "bogus"}, "group_list_type"),
])
def test_refusals_name_the_rule(case, kw, rule):
    c = case()
    args = list(c.args())
    if "group_list" in kw:
        args[4] = kw.pop("group_list")
    with pytest.raises(ConstraintError, match=rule):
        grouped_matmul_mx(*args, **{**c.kw, **kw})


def test_scale_shape_refused_by_the_tiling():
    c = split_m_case([10, 20], 64, 128)
    with pytest.raises(ConstraintError, match="CheckQuantParamsForMXTypeM"):
        grouped_matmul_mx(c.x, c.x_scale[:, :1], c.weight, c.weight_scale, c.group_list, **c.kw)


def test_l1_chunk_order_follows_kal1_kbl1():
    """A outer iff kAL1 >= kBL1: per tile, M 100 (kAL1 1024, kBL1 256) loads 4 A chunks of 1024 and 16 B chunks
    of 256; 2 groups of 150 rows, N 64, K 2048 (kAL1 256 < kBL1 1024) load B outer: 2 B chunks, 8 A chunks."""
    for sizes, n, k, (a_loads, a_width, b_loads, b_width) in (([100], 700, 4096, (4, 1024, 16, 256)),
                                                                ([150, 150], 64, 2048, (8, 256, 2, 1024))):
        c = split_m_case(sizes, n, k, seed=11)
        reads: dict[str, list] = {"x": [], "weight": []}

        def record(ev, reads=reads):
            if isinstance(ev, GmRead) and ev.buffer in reads and ev.core == "AIC0":
                reads[ev.buffer].append(ev.shape)

        run(c, observers=[record])
        first = grouped_matmul_mx_schedule(sizes, n, k)
        tiles0 = sum(1 for r in first if r.core == 0)
        assert len(reads["x"]) == a_loads * tiles0 and len(reads["weight"]) == b_loads * tiles0
        assert {s[-1] for s in reads["x"]} == {a_width}           # x is [rows, K]: K innermost
        assert {s[0] for s in reads["weight"]} == {b_width}       # weight is [K, N]: K outermost


def test_chrome_trace_names_group_round_and_tile():
    """The trace (mc2emu.trace) shows each fixpipe span with the group, round and tile it wrote."""
    from mc2emu.trace import merge_traces

    c = split_m_case([25, 0, 17], 300, 256, seed=12)
    records = []
    run(c, observers=[lambda ev: records.append(ev.portable())])
    spans = [e for e in merge_traces({0: records})["traceEvents"] if e["ph"] == "X" and e["name"].startswith("fixpipe")]
    recs = grouped_matmul_mx_schedule([25, 0, 17], 300, 256)
    tasks = [s["args"]["task"] for s in spans]
    assert sorted((t["group"], t["round"], t["mTileIdx"], t["nTileIdx"]) for t in tasks) == \
        sorted((r.group, r.round, r.mi, r.ni) for r in recs)
