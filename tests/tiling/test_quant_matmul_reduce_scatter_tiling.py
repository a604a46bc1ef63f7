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
    rounds_alignment_violations,
    rounds_bias_violations,
    rounds_violations,
    rs_round_tiling,
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
