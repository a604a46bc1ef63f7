"""The rounds tiling of quant_matmul_reduce_scatter (headMSize choice, T, tail) and its host checks, and the
pure golden's reduction (bf16 terms, FP32 sum in the given order, RNE) on hand-made numbers."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.arch.platform import DAV_3510
from mc2emu.numerics import ElemFormat
from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_reduce_scatter
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    default_head_m_size,
    make_rs_comm_tiling,
    rounds_bias_violations,
    rounds_violations,
    rs_round_tiling,
)


@pytest.mark.parametrize(("m_seg", "R", "head"), [
    (4096, 2, 512),     # R <= 2: 512-row rounds, T = 8
    (1024, 4, 128),     # R >= 4: 128-row rounds, T = 8 (R * T = 32)
    (2048, 4, 256),     # 128 would give T = 16 > 15 and R * T > 32: raised to ceil(2048 / 8) = 256
    (512, 8, 128),      # R = 8: R * T <= 32 -> T <= 4 -> 128
    (100, 2, 100),      # one round when mSeg fits
    (6000, 2, 512),     # ceil(6000 / 15) = 400 -> 512 stays (T = 11 + tail)
    (10000, 2, 672),    # ceil(10000 / 15) = 667 -> 672 (R * T <= 32 alone would allow 640: T = 16)
])
def test_default_head_m_size(m_seg, R, head):
    assert default_head_m_size(m_seg, R) == head
    ct = make_rs_comm_tiling(m_seg * R, R, None)
    assert ct.commTurn <= 15 and R * ct.commTurn <= 32


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
    (2 * 32, 2, 16, 32, 2, "RS-7 block_dim >= R + 1"),
    (2 * 32, 2, 16, 32, 33, "RS-8 block_dim <= AIC count"),
])
def test_rounds_violations_name_the_rule(m, R, head, n, used, rule):
    errs = rounds_violations(make_rs_comm_tiling(m, R, head), n, R, used)
    assert errs and errs[0][0] == rule


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
