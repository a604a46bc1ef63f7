"""QuantMatmulTilingSwat (apace quant_matmul_tiling_swat.h): worked numbers, invariants the kernel relies on,
and can_implement."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mc2emu.blaze import BlockMmadMx, DNExtLayoutPtn, L1Params, MatmulWithScaleMx, NDExtLayoutPtn, ProblemShape
from mc2emu.numerics import ElemFormat
from mc2emu.runtime import Device
from mc2emu.tiling import QuantMatmulArgs, QuantMatmulTilingSwat, can_implement


def test_bench_shape():
    t = QuantMatmulTilingSwat().GetTilingData(2048, 4096, 3584, False, False, ElemFormat.E4M3)
    assert (t.baseM, t.baseN, t.baseK) == (256, 256, 128)
    assert (t.stepK, t.kL1, t.scaleKL1, t.nBufferNum) == (2, 256, 3584, 2)
    assert t.dbL0c == 1  # 256 * 256 * 4 * 2 B = 512 KiB > 256 KiB L0C
    assert t.usedCoreNum == t.block_dim == 32
    assert (t.mTailTile, t.nTailTile) == (1, 1)  # 128 tiles: no tail round


def test_small_problem_rebalances_and_splits_the_tail():
    # 1 x 1 tile of 100 x 700 is rebalanced across AICs (AdjustBasicBlock) before the tail split.
    t = QuantMatmulTilingSwat().GetTilingData(100, 700, 4096, False, True, ElemFormat.E4M3)
    assert t.baseM % 16 == 0 and t.baseN % 16 == 0 and t.baseK % 64 == 0
    tiles = -(-100 // t.baseM) * -(-700 // t.baseN)
    assert tiles > 1
    assert t.dbL0c == 2


def test_fp4_base_k_is_256():
    t = QuantMatmulTilingSwat().GetTilingData(1024, 1024, 4096, False, True, ElemFormat.E2M1)
    assert t.baseK == 256


@pytest.mark.parametrize("fmt", [ElemFormat.E4M3, ElemFormat.E2M1])
def test_invariants_over_a_grid(fmt):
    """scaleKL1 % kL1 == 0 (BlockMmad's precondition), aligned bases, dbL0C rule; and the BlockMmad L1 layout of
    every tiling fits (Init on a real core raises otherwise)."""
    tilings = []
    for m, n, k, ta, tb in itertools.product((1, 30, 100, 256, 600, 2048), (16, 130, 700, 4096), (64, 200, 640, 4096),
                                             (False, True), (False, True)):
        if fmt.is_fp4 and ((m if ta else k) % 2 or (k if tb else n) % 2):
            continue
        t = QuantMatmulTilingSwat().GetTilingData(m, n, k, ta, tb, fmt)
        assert t.kL1 > 0 and t.scaleKL1 % t.kL1 == 0, t
        assert t.baseK % 64 == 0 and t.baseM % 16 == 0 and t.baseN % 16 == 0
        assert t.dbL0c == (2 if t.baseM * t.baseN * 4 * 2 <= 256 * 1024 else 1)
        assert 1 <= t.usedCoreNum <= 32
        tilings.append((t, ta, tb))

    def kernel(ctx):
        for t, ta, tb in tilings:
            T = BlockMmadMx.template(MatmulWithScaleMx(), fmt, DNExtLayoutPtn if ta else NDExtLayoutPtn, fmt,
                                     DNExtLayoutPtn if tb else NDExtLayoutPtn, np.float32)
            T(ctx).Init(ProblemShape(t.m, t.n, t.k), (t.baseM, t.baseN, t.baseK, 0),
                        L1Params(t.kL1, t.scaleKL1, t.nBufferNum), True, t.dbL0c > 1)

    Device().launch(kernel, 1, "AIC_ONLY")


def test_can_implement_names_the_rules():
    assert can_implement(QuantMatmulArgs(64, 64, 64)) == []
    r = can_implement(QuantMatmulArgs(0, 64, 64))
    assert len(r) == 1 and r[0].startswith("m = 0")
    r = can_implement(QuantMatmulArgs(64, 64, 63, transA=False, aType=ElemFormat.E2M1, bType=ElemFormat.E2M1))
    assert any("packed two per byte" in x for x in r)
    r = can_implement(QuantMatmulArgs(64, 64, 64, aType=ElemFormat.E4M3, bType=ElemFormat.E2M1))
    assert any("must be FP8 or both FP4" in x for x in r)


def test_aic_num_override_tiles_for_fewer_cores():
    t = QuantMatmulTilingSwat(aic_num=4).GetTilingData(512, 512, 256, False, True, ElemFormat.E4M3)
    assert t.usedCoreNum == 4
