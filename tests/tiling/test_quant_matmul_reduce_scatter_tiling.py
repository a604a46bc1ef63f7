"""The rounds tiling of quant_matmul_reduce_scatter (headMSize choice, T, tail) and its host checks, and the
pure golden's reduction (bf16 terms, FP32 sum in the given order, RNE) on hand-made numbers."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.arch.platform import DAV_3510
from mc2emu.numerics import ElemFormat
from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_reduce_scatter
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    make_rs_comm_tiling,
    max_rounds,
    max_tile_m,
    per_block_max_base_m,
    per_block_tiling,
    rounds_alignment_violations,
    rounds_bias_violations,
    rounds_violations,
    rs_round_tiling,
    rs_round_tilings,
    search_rounds,
)


@pytest.mark.parametrize(("m", "n", "R", "head", "T"), [
    (1024, 1024, 2, 256, 2),      # maxTileM 256: T0 = 2 divides mSeg 512 (the example's 512 gave RS-6)
    (2048, 4096, 4, 64, 8),       # maxTileM 64: T0 = 8 = 32 / R (the example's 128 gave RS-6)
    (4000, 256, 4, 1000, 1),      # one round of 1000 rows: 512 000 B <= 512 KiB (the example's 128 gave RS-3)
    (2 * 4096, 512, 2, 512, 8),   # maxTileM 512: T0 = 8
    (2 * 96, 4096, 2, 48, 2),     # maxTileM 64: T0 = 2, 96 / 2 = 48 rows (16-aligned)
    (2 * 160, 4096, 2, 32, 5),    # T0 = 3, 4 do not divide 160 into 16-row rounds: T = 5
    (2 * 100, 48, 2, 100, 1),     # one round when mSeg fits: no 16-row rule for T = 1
])
def test_default_head_m_size_is_the_spec_search(m, n, R, head, T):
    """development.md §3.2 / fusion.md §6.2.7: the smallest T >= ceil(mSeg / maxTileM) within min(15, 32 / R)
    with T | mSeg and 16-row rounds; no tail by default."""
    ct = make_rs_comm_tiling(m, R, None, n)
    assert (ct.headMSize, ct.commTurn, ct.tailCnt, ct.unfit) == (head, T, 0, ())
    assert search_rounds(m // R, n, R) == T
    assert head <= max_tile_m(n) and max_rounds(R) >= T
    assert rounds_violations(ct, n, R, R + 1) == []


@pytest.mark.parametrize(("m", "n", "R", "rules"), [
    # tileM <= 128 for the 512 KiB chunk rule, so T >= 16 > 15 (R * T = 32 would still fit)
    (4096, 2048, 2, ["RS-4 T <= 15", "RS-6 tileM * N * 2 <= 512 KiB"]),
    # T >= 32: both round bounds bind
    (8192, 2048, 2, ["RS-4 T <= 15", "RS-5 R * T <= 32", "RS-6 tileM * N * 2 <= 512 KiB"]),
    # mSeg 1000 has no 16-row division and one round is 544 000 B > 512 KiB
    (4000, 272, 4, ["RS-6 tileM * N * 2 <= 512 KiB", "RS-13 T | mSeg, 16-row rounds"]),
    # mSeg 100: T in [2, 15] divides it (2, 4, 5, 10) only into rows that are not 16-aligned
    (2 * 100, 2688, 2, ["RS-6 tileM * N * 2 <= 512 KiB", "RS-13 T | mSeg, 16-row rounds"]),
    # mSeg 272 = 17 x 16: T = 17 is the first division, past both bounds
    (2 * 272, 4096, 2, ["RS-4 T <= 15", "RS-5 R * T <= 32", "RS-6 tileM * N * 2 <= 512 KiB",
                        "RS-13 T | mSeg, 16-row rounds"]),
])
def test_no_tiling_is_refused_naming_every_binding_rule(m, n, R, rules):
    ct = make_rs_comm_tiling(m, R, None, n)
    assert [rule for rule, _ in ct.unfit] == rules
    errs = rounds_violations(ct, n, R, None)
    assert len(errs) == 1
    rule, reason = errs[0]
    assert rule == f"RS-11 no rounds tiling ({', '.join(rules)})"
    assert all(r in reason for r in rules) and "development.md §3.2" in reason


def test_default_search_needs_n():
    with pytest.raises(ValueError, match="pass n"):
        make_rs_comm_tiling(64, 2, None)


def test_rounds_and_tail():
    ct = make_rs_comm_tiling(2 * 48, 2, 32)
    assert (ct.mSeg, ct.headMSize, ct.headCnt, ct.tailMSize, ct.tailCnt, ct.commTurn) == (48, 32, 1, 16, 1, 2)
    assert [ct.tile_m(t) for t in range(2)] == [32, 16]
    assert [ct.tile_m_offset(t) for t in range(2)] == [0, 32]


@pytest.mark.parametrize(("m", "R", "head", "n", "used", "rule"), [
    (2 * 40, 2, 24, 32, 4, "RS-2 head_m_size % 16 == 0"),
    (2 * 40, 2, 32, 32, 4, "RS-3 tail % 16 == 0"),
    (2 * 256, 2, 16, 32, 4, "RS-4 T <= 15"),
    (4 * 160, 4, 16, 32, 6, "RS-5 R * T <= 32"),
    (2 * 512, 2, 512, 1024, 4, "RS-6 tileM * N * 2 <= 512 KiB"),
    (2 * 32, 2, 16, 32, 2, "RS-7 usedCoreNum - R >= 1"),
    (4 * 32, 4, 16, 32, 3, "RS-10 usedCoreNum >= R"),
    (2 * 32, 2, 16, 32, 33, "RS-8 block_dim <= AIC count"),
])
def test_rounds_violations_name_the_rule(m, R, head, n, used, rule):
    errs = rounds_violations(make_rs_comm_tiling(m, R, head), n, R, used)
    assert errs and errs[0][0] == rule


@pytest.mark.parametrize(("rows", "n", "redUbM", "redUbN"), [
    (40, 1024, 13, 1024),        # 253 664 B / 18 = 14 092 elements: 13 rows of 1024
    (5, 1024, 5, 1024),          # capped at the core's rows
    (40, 14080, 1, 14080),       # one row still fits
    (40, 24576, 1, 14080),       # N segmented: 14 080 + 10 496 (was a UB CapacityError at 12 B an element)
])
def test_reduction_ub_tiling(rows, n, redUbM, redUbN):
    """development.md §5.4: 18 B an element (srcBuf[2] bf16, srcFP32[2], acc fp32, dst bf16) of the usable UB
    less the slack (the three bf16 slots' extra 32-byte block, the six slots' 32-byte alignment); N segmented
    in 16-element multiples when a row does not fit."""
    from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import (
        REDUCE_BYTES_PER_ELEM,
        REDUCE_UB_SLACK,
        ReduceUbTiling,
    )

    assert REDUCE_BYTES_PER_ELEM == 18 and REDUCE_UB_SLACK == 9 * 32
    assert ReduceUbTiling(rows, n, DAV_3510.ub_usable_size - REDUCE_UB_SLACK) == (redUbM, redUbN)


@pytest.mark.parametrize(("n", "ok"), [(16, True), (48, True), (4096, True), (40, False), (8, False), (300, False)])
def test_n_alignment_rule(n, ok):
    """development.md §3.1 #2: N % 16 == 0 (a bf16 row of whole 32-byte blocks)."""
    errs = rounds_alignment_violations(n)
    assert errs == [] if ok else [rule for rule, _ in errs] == ["RS-12 N % 16 == 0"]


@pytest.mark.parametrize(("rows", "n", "k", "used", "refused"), [
    (512, 512, 8192, 4, True),    # baseM = baseN = 256, kL1 256, scaleKL1 8192: the buffers end at the L1 size
    (512, 512, 4096, 4, False),   # scaleKL1 4096: 64 KiB to spare
    (256, 256, 8192, 4, False),   # one tile for 4 cores: AdjustBasicBlock halves the block, room again
])
def test_rounds_bias_needs_its_l1_buffers(rows, n, k, used, refused):
    """development.md §3.1 #6: with a bias the fragment block reserves baseN * 4 B of L1 after each ScaleB
    buffer; the host refuses a round tiling that leaves no room (the block's Init would overflow L1)."""
    t = rs_round_tiling(rows, n, k, ElemFormat.E4M3, ElemFormat.E4M3, DAV_3510, used)
    errs = rounds_bias_violations((t, t), ElemFormat.E4M3, DAV_3510)
    if not refused:
        assert errs == []
        return
    assert [rule for rule, _ in errs] == ["RS-9 bias L1/BT budget"]
    assert "round 0" in errs[0][1] and "end at 525312 B > L1 524288 B (without it at 524288)" in errs[0][1]


def test_golden_reduction_rounds_each_term_and_keeps_the_order():
    bf = ml_dtypes.bfloat16
    big, small = np.float32(2.0 ** 25), np.float32(1.0)
    parts = [np.array([[v], [0], [0]], dtype=bf) for v in (big, small, -big)]   # M = 3: one row per rank
    # 2^25 + 1 rounds to 2^25 in FP32, then - 2^25: 0; reversed the same; (0 then 2) first: 2^25 - 2^25 + 1 = 1
    assert float(golden_reduce_scatter(parts, 0)[0, 0]) == 0.0
    assert float(golden_reduce_scatter(parts, 0, order=[0, 2, 1])[0, 0]) == 1.0
    assert golden_reduce_scatter(parts, 0).dtype == np.dtype(bf)


# -- per_block: the ST launcher's host tiling (ubmem main.cpp 0f2296ba3e) -----------------------------------------
@pytest.mark.parametrize(("m", "R", "cap"), [
    (128, 1, 128), (128, 2, 64), (8192, 2, 256), (96, 4, 16),
    (48, 4, 16),     # floor16(12) = 0: falls back to floor16(M / 2) = 16
    (16, 2, 16),     # floor16(8) = floor16(8) = 0: falls back to min(256, M) = 16
    (8, 2, 8),
])
def test_per_block_max_base_m_is_the_launchers_dyn_max_base_m(m, R, cap):
    assert per_block_max_base_m(m, R) == cap


@pytest.mark.parametrize(("shape", "R", "nz", "base", "used"), [
    ((128, 256, 256), 1, True, (128, 256, 128), 32),   # the issue's example: the source's (128, 256, 128)
    ((128, 256, 256), 2, True, (64, 256, 128), 32),    # baseM capped at floor16(M / R) = 64
    ((128, 256, 256), 2, False, (32, 32, 256), 32),    # the (N, K) B: transB, AdjustBasicBlock re-balances
    ((512, 600, 640), 2, True, (112, 128, 256), 32),
    ((4096, 2048, 4096), 4, True, (256, 256, 128), 32),
])
def test_per_block_tiling_follows_the_launcher(shape, R, nz, base, used):
    """SetMaxBaseM(dynMaxBaseM), then GetTilingData(M, n, k, false, !nz) with optimization off and M-tail
    alignment on; without the cap the NZ tilings would keep baseM = min(M, 256)."""
    m, n, k = shape
    t = per_block_tiling(m, n, k, R, ElemFormat.E4M3, ElemFormat.E4M3, nz)
    assert (t.baseM, t.baseN, t.baseK, t.usedCoreNum) == (*base, used)
    assert t.m == m and t.n == n and t.k == k


# -- rounds: per-round tilings (development.md §5.5-5.7) ---------------------------------------------------------
def test_round_tilings_t1_full_head_sub_problem_tail_r_rows():
    E = ElemFormat.E4M3
    one = make_rs_comm_tiling(2 * 64, 2, None, 48)
    assert one.commTurn == 1
    (full,) = rs_round_tilings(one, 128, 48, 256, E, E)
    assert full == rs_round_tiling(128, 48, 256, E, E)
    # head 32 + a 16-row tail at R 2: head rounds tile headMSize = 32 rows, the tail R * 16 = 32
    ct = make_rs_comm_tiling(2 * 48, 2, 32)
    head, tail = rs_round_tilings(ct, 96, 64, 256, E, E)
    assert head.m == 32 and tail.m == 2 * 16
    ct3 = make_rs_comm_tiling(4 * 48, 4, 16)
    ts = rs_round_tilings(ct3, 192, 64, 256, E, E)
    assert len(ts) == 3 and all(t.m == 16 for t in ts)   # not R * 16 = 64 (seed 000 §4.6's reading)


def test_round_tilings_halve_a_256_base_m_when_128_divides_head_m_size():
    """§5.6 "baseM 联动": the SWAT baseM 256 of GetTilingData(headMSize = 512, ...) on 4 AICs becomes 128, the
    other fields kept; headMSize 400 (not a multiple of 128) keeps 256."""
    E = ElemFormat.E4M3
    ct = make_rs_comm_tiling(2 * 1024, 2, 512, 512)
    sub = rs_round_tiling(512, 512, 1024, E, E, aic_num=4)
    assert sub.baseM == 256
    ts = rs_round_tilings(ct, 2048, 512, 1024, E, E, aic_num=4)
    assert [t.baseM for t in ts] == [128, 128]
    assert all(t.baseN == sub.baseN and t.baseK == sub.baseK and t.stepK == sub.stepK for t in ts)
    ct400 = make_rs_comm_tiling(2 * 800, 2, 400)
    assert [t.baseM for t in rs_round_tilings(ct400, 1600, 512, 1024, E, E, aic_num=4)] == [256, 256]


@pytest.mark.parametrize(("m", "k", "n", "R", "head", "T", "rows"), [
    (1024, 4096, 1024, 2, 256, 2, 256),
    (2048, 4096, 4096, 4, 64, 8, 64),
])
def test_issue_shapes_default_rounds_and_their_tilings(m, k, n, R, head, T, rows):
    E = ElemFormat.E4M3
    ct = make_rs_comm_tiling(m, R, None, n)
    assert (ct.headMSize, ct.commTurn, ct.tailCnt) == (head, T, 0)
    full = rs_round_tiling(m, n, k, E, E)
    assert rounds_violations(ct, n, R, full.usedCoreNum) == []
    ts = rs_round_tilings(ct, m, n, k, E, E, aic_num=full.usedCoreNum)
    assert len(ts) == T and all(t.m == rows and t.n == n and t.k == k for t in ts)


def test_issue_shape_without_a_tiling_names_every_binding_rule():
    ct = make_rs_comm_tiling(4096, 2, None, 2048)
    (rule, reason), = rounds_violations(ct, 2048, 2, None)
    assert rule == "RS-11 no rounds tiling (RS-4 T <= 15, RS-6 tileM * N * 2 <= 512 KiB)"
    assert "tileM <= 512 KiB / (N * 2) = 128 rows" in reason and "T >= ceil(mSeg / 128) = 16" in reason


# -- RS-12 and weight_format at the entry (validate runs without MPI) --------------------------------------------
def _inputs(m, k, n):
    from mc2emu.ops.quant_matmul_reduce_scatter_golden import gen_qmrs_st_inputs

    return gen_qmrs_st_inputs(m, k, n, 0)


@pytest.mark.parametrize(("impl", "n", "ragged", "rules"), [
    ("rounds", 40, False, ["RS-12 N % 16 == 0"]),
    ("rounds", 40, True, []),
    ("rounds", 48, False, []),
    ("per_block", 40, False, []),     # the shipped host (ParseArgs) has no N rule
])
def test_rs12_refuses_a_ragged_n_on_the_rounds_kernel_only(impl, n, ragged, rules):
    from mc2emu.ops.quant_matmul_reduce_scatter_op import validate

    inp = _inputs(64, 128, n)
    problem, errs = validate(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], rank=0, rank_size=2, bias=None,
                             split="m", impl=impl, head_m_size=None, out_dtype="bfloat16", kernel_variant="source",
                             ragged_n=ragged)
    assert [rule for rule, _ in errs] == rules
    assert (problem is None) == bool(rules)
    if rules:
        assert "development.md §3.1 #2" in errs[0][1]


def test_nz_weight_is_validated_as_the_launchers_buffers():
    from mc2emu.numerics.nz_format import nd_to_nz
    from mc2emu.ops.quant_matmul_reduce_scatter_op import validate

    inp = _inputs(64, 256, 72)
    b_nz = nd_to_nz(np.ascontiguousarray(inp["x2"].T), inp["x2"].dtype)
    assert b_nz.shape == (3, 16, 16, 32)
    s_nz = np.ascontiguousarray(inp["x2_scale"].transpose(1, 0, 2))
    kw = {"rank": 0, "rank_size": 2, "bias": None, "split": "m", "head_m_size": None, "out_dtype": "bfloat16",
          "kernel_variant": "source", "weight_format": "NZ"}
    problem, errs = validate(inp["x1"], inp["x1_scale"], b_nz, s_nz, impl="per_block", **kw)
    assert errs == [] and problem is not None and problem.weight_nz and problem.n == 72
    _, errs = validate(inp["x1"], inp["x1_scale"], b_nz, s_nz, impl="rounds", **kw)
    assert errs[0][0] == "QMRS-NZ weight_format NZ: per_block only"
    _, errs = validate(inp["x1"], inp["x1_scale"], b_nz, inp["x2_scale"], impl="per_block", **kw)
    assert [rule for rule, _ in errs] == ["x2 shape", "x2_scale shape"]   # N read from a (N, ...) scale: 72 != 256
