"""BlockMmadMx (block_mmad_qbmm_mx.h) on one core: numerics, splitK protocol, atomics, capacities, events."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from blaze_cases import (
    Tile,
    abs_bound64,
    dequant_logical,
    grid_tiles,
    ref_float64,
    run_block_mmad,
    signed_operands,
    st_operands,
)

from mc2emu.blaze import A_FULL_LOAD_MODE
from mc2emu.numerics import ag_compare, bf16_ulp_distance, mmad_k_ordered
from mc2emu.ops import golden_quant_batch_matmul_mx
from mc2emu.runtime import CapacityError, ConstraintError, Hazard
from mc2emu.runtime.events import Fixpipe, GmRead, Mmad

BF16 = np.dtype(ml_dtypes.bfloat16)
BF16_UNIT_ROUNDOFF = 2.0 ** -8  # RNE to bf16: relative error <= 2^-8
FP32_EPS = 2.0 ** -23


def golden(ops, bias=None, out=BF16):
    return golden_quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, bias=bias, trans_a=ops.trans_a,
                                        trans_b=ops.trans_b, out_dtype=out, x1_format=ops.fa, x2_format=ops.fb)


SHAPES = [(17, 33, 20), (33, 17, 64), (40, 50, 70), (16, 24, 3584)]
FORMATS = [("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e2m1", "e2m1")]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
@pytest.mark.parametrize(("fa", "fb"), FORMATS)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, False), (False, True), (True, False), (True, True)])
def test_matches_cann_golden_on_st_data(m, n, k, fa, fb, trans_a, trans_b):
    if fa == "e2m1" and (trans_a or not trans_b):
        m, n = m + m % 2, n + n % 2  # FP4 is packed along the stored rows: those extents must be even
    ops = st_operands(m, n, k, fa, fb, trans_a=trans_a, trans_b=trans_b)
    tm = 16 if fa == "e2m1" else 32
    res = run_block_mmad(ops, grid_tiles(m, n, tm, 32), baseM=32, baseN=32, baseK=64, kL1=128, scaleKL1=256)
    assert not res.hazards
    assert ag_compare(res.c, golden(ops)), bf16_ulp_distance(res.c, golden(ops))
    # FP32 output is bit-exact against the K-ordered reference (kL1 chunks of baseK steps, FP32 L0C).
    res32 = run_block_mmad(ops, grid_tiles(m, n, tm, 32), out_dtype=np.float32, baseM=32, baseN=32, baseK=64,
                           kL1=128, scaleKL1=256)
    a, b = dequant_logical(ops)
    np.testing.assert_array_equal(res32.c, mmad_k_ordered(a, b, 128, 64))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1"])
def test_signed_data_within_fp32_accumulation_bound(fmt):
    ops = signed_operands(24, 40, 700, fmt)
    res = run_block_mmad(ops, grid_tiles(24, 40, 16, 32), out_dtype=np.float32, baseM=16, baseN=32, baseK=128,
                         kL1=256, scaleKL1=512)
    ref = ref_float64(ops)
    # Any FP32 summation of K products errs by at most ~K * eps * sum|a||b| (here kL0 steps of baseK add up).
    bound = ops.k * FP32_EPS * abs_bound64(ops)
    assert np.all(np.abs(res.c - ref) <= bound)
    res16 = run_block_mmad(ops, grid_tiles(24, 40, 16, 32), baseM=16, baseN=32, baseK=128, kL1=256, scaleKL1=512)
    assert np.all(np.abs(res16.c.astype(np.float64) - ref) <= bound + BF16_UNIT_ROUNDOFF * np.abs(ref))


def test_bias_loaded_on_split_zero_only():
    ops = st_operands(20, 36, 128)
    bias = np.random.default_rng(3).uniform(-50, 50, 36).astype(np.float32)
    res = run_block_mmad(ops, grid_tiles(20, 36, 32, 32), bias=bias)
    assert ag_compare(res.c, golden(ops, bias))
    # splitK 2: the bias enters with index 0 and once only.
    res2 = run_block_mmad(ops, grid_tiles(20, 36, 32, 32, splitKNum=2), bias=bias, splitKNum=2, segments=2)
    assert not res2.hazards
    assert bf16_ulp_distance(res2.c, golden(ops, bias)) <= 1


@pytest.mark.parametrize("splitKNum", [1, 2, 3, 4])
def test_split_k_sum_over_calls(splitKNum):
    k = 64 * splitKNum * 2
    ops = st_operands(18, 34, k, seed=splitKNum)
    res = run_block_mmad(ops, grid_tiles(18, 34, 32, 32, splitKNum), splitKNum=splitKNum, segments=splitKNum)
    assert not res.hazards
    assert ag_compare(res.c, golden(ops))


def _split_hazards(res):
    return [h for h in res.hazards if h.hazard is Hazard.SPLITK_SEQUENCE]


def test_fewer_calls_leave_c_unwritten_and_are_reported():
    ops = st_operands(16, 32, 128)
    res = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0)], splitKNum=2, segments=2,
                         c_init=np.full((16, 32), 7, BF16))
    assert np.all(res.c == BF16.type(7))  # the fixpipe never ran
    assert len(_split_hazards(res)) == 1 and "never written" in _split_hazards(res)[0].message


def test_calls_beyond_split_k_num_go_to_the_other_half_and_are_discarded():
    ops = st_operands(16, 64, 128)
    good = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0), Tile(0, 0, 16, 32, 1, 1), Tile(0, 32, 16, 32, 0, 0),
                                Tile(0, 32, 16, 32, 1, 1)], splitKNum=2, segments=2)
    extra = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0), Tile(0, 0, 16, 32, 1, 1), Tile(0, 0, 16, 32, 2, 0),
                                 Tile(0, 32, 16, 32, 0, 0), Tile(0, 32, 16, 32, 1, 1)], splitKNum=2, segments=2)
    np.testing.assert_array_equal(extra.c.view(np.uint16), good.c.view(np.uint16))
    hz = _split_hazards(extra)
    assert len(hz) == 1 and "beyond splitKNum" in hz[0].message
    assert ag_compare(good.c, golden(ops))


def test_reset_mid_tile_discards_the_partial_sum():
    ops = st_operands(16, 32, 128)
    res = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0), Tile(0, 0, 16, 32, 0, 1), Tile(0, 0, 16, 32, 1, 1)],
                         splitKNum=2, segments=2)
    hz = _split_hazards(res)
    assert len(hz) == 1 and "discarded" in hz[0].message
    # What remains is segment 1 twice (the device's behaviour): index 0 on segment 1, then index 1 again.
    a, b = dequant_logical(ops)
    seg1 = a[:, 64:] @ b[64:, :]
    assert bf16_ulp_distance(res.c, (seg1 + seg1).astype(BF16)) <= 1


def test_no_index_zero_accumulates_onto_what_l0c_holds():
    ops = st_operands(16, 64, 128)
    # dbL0C off: the second tile's lone splitKIdx 1 lands in half 0, which still holds the first tile's sum.
    res = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0), Tile(0, 0, 16, 32, 1, 1), Tile(0, 32, 16, 32, 1, 1)],
                         splitKNum=2, segments=2, dbL0C=False, out_dtype=np.float32)
    hz = _split_hazards(res)
    assert len(hz) == 1 and "no splitKIdx 0" in hz[0].message
    a, b = dequant_logical(ops)
    first = (a[:, :64] @ b[:64, :32]) + (a[:, 64:] @ b[64:, :32])
    np.testing.assert_allclose(res.c[:, 32:], first + a[:, 64:] @ b[64:, 32:], rtol=1e-6)


def test_split_k_num_zero_never_fixpipes():
    ops = st_operands(16, 32, 64)
    res = run_block_mmad(ops, [Tile(0, 0, 16, 32, 0, 0)], splitKNum=0, c_init=np.full((16, 32), 3, BF16))
    assert np.all(res.c == BF16.type(3))
    assert any("splitKNum 0" in h.message for h in _split_hazards(res))


def test_atomic_write_out_adds_with_one_rounding_per_write():
    ops = st_operands(16, 32, 128)
    c0 = np.random.default_rng(5).uniform(-100, 100, (16, 32)).astype(BF16)
    res = run_block_mmad(ops, grid_tiles(16, 32, 16, 32), atomic=True, c_init=c0)
    tile = golden(ops, out=np.float32).astype(BF16)  # the fixpipe rounds the FP32 tile to bf16 ...
    want = (c0.astype(np.float32) + tile.astype(np.float32)).astype(BF16)  # ... then the add rounds again
    assert bf16_ulp_distance(res.c, want) <= 1
    assert not res.hazards


def test_a_full_load_reads_a_once_per_core():
    ops = st_operands(32, 96, 256)
    tiles = grid_tiles(32, 96, 32, 32)
    res = run_block_mmad(ops, tiles, fullLoadMode=A_FULL_LOAD_MODE, record=True, baseM=32, baseN=32)
    assert ag_compare(res.c, golden(ops))
    reads_a = [e for e in res.events if isinstance(e, GmRead) and e.buffer == "A"]
    assert len(reads_a) == 256 // 128  # the first tile's K chunks only; later tiles use the resident A


def test_mmad_and_fixpipe_events_carry_tile_coordinates():
    ops = st_operands(40, 40, 192)
    res = run_block_mmad(ops, grid_tiles(40, 40, 32, 32), record=True, baseM=32, baseN=32, baseK=64, kL1=128)
    mmads = [e for e in res.events if isinstance(e, Mmad)]
    fix = [e for e in res.events if isinstance(e, Fixpipe)]
    assert len(fix) == 4 and {e.origin for e in fix} == {(0, 0), (0, 32), (32, 0), (32, 32)}
    assert len(mmads) == 4 * 3  # ceil(192 / 64) baseK steps per tile
    assert {e.tile for e in mmads} == {(0, 0), (0, 32), (32, 0), (32, 32)}
    assert [e.l0 for e in mmads[:4]] == [0, 1, 0, 1]  # L0A/L0B ping-pong per baseK step
    assert [e.unitFlag for e in mmads[:3]] == [2, 2, 3]  # FINAL on the tile's last step


def test_bad_scale_kl1_is_refused_with_the_rule():
    ops = st_operands(16, 32, 256)
    with pytest.raises(ConstraintError, match=r"scaleKL1 % kL1 == 0"):
        run_block_mmad(ops, [Tile(0, 0, 16, 32)], kL1=128, scaleKL1=192)


@pytest.mark.parametrize(("kw", "what"), [
    ({"baseM": 256, "baseN": 256, "dbL0C": True}, "L0C"),  # two 256 x 256 fp32 tiles do not fit 256 KiB
    ({"baseM": 256, "baseN": 256, "kL1": 2048, "dbL0C": False}, "L1"),  # A and B buffers overflow L1
    ({"baseM": 256, "baseN": 32, "baseK": 256, "kL1": 256, "dbL0C": False}, "L0A"),  # 64 KiB step > 32 KiB half
])
def test_capacity_overflow_is_a_clear_error(kw, what):
    ops = st_operands(256, 256, 2048)
    with pytest.raises(CapacityError, match=what):
        # two tiles: with dbL0C the second one lands in the upper L0C half
        run_block_mmad(ops, [Tile(0, 0, kw["baseM"], kw["baseN"])] * 2, **kw)


def test_tile_larger_than_the_l1_buffers_is_refused():
    ops = st_operands(64, 32, 64)
    with pytest.raises(CapacityError, match=r"exceeds the \(baseM, baseN\)") as err:
        run_block_mmad(ops, [Tile(0, 0, 64, 32)], baseM=32, baseN=32)
    assert "AIC0" in "".join(getattr(err.value, "__notes__", []))


def test_l0c_keeps_nz_storage_across_tile_shapes():
    """A half reused with another tile shape sees the previous tile's floats in NZ order (16 x 16 fractals,
    N-block major), as the device would; the same shape reuses the working tile as is."""
    from mc2emu.blaze.gemm.block.l0c_buffer import L0CBuffer
    from mc2emu.runtime import Device

    box = {}

    def kernel(ctx):
        l0c = L0CBuffer(ctx)
        t = l0c.tile(0, 20, 20)
        t[...] = np.arange(400, dtype=np.float32).reshape(20, 20)
        assert l0c.tile(0, 20, 20) is t
        box["reshaped"] = l0c.tile(0, 16, 40).copy()
        box["nz"] = l0c.nz_snapshot()[: 32 * 48]

    Device().launch(kernel, 1, "AIC_ONLY")
    first = np.arange(400, dtype=np.float32).reshape(20, 20)
    nz = np.zeros(32 * 48, np.float32)
    for r in range(20):
        for c in range(20):
            nz[(c // 16) * 32 * 16 + r * 16 + c % 16] = first[r, c]  # Align16(20) = 32 rows per N block
    want = np.array([[nz[(c // 16) * 16 * 16 + r * 16 + c % 16] for c in range(40)] for r in range(16)])
    np.testing.assert_array_equal(box["reshaped"], want)
