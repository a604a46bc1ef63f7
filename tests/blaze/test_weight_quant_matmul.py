"""weight_quant_matmul (seed 001): the V+C kernel against the golden (one NPU, no MPI).

B_dequant is compared bit for bit with the ml_dtypes golden (mode "dequant_only", and through C in exact
cases); C with at most one ULP of its dtype, or, under cancellation, within the float32 accumulation bound
(the golden's matmul is one BLAS call, the kernel's L0C accumulates per baseK step). Every call runs with the
checkers on: an unpaired or undrained flag, a read of unwritten GM, a deadlock would raise. Shapes are small
but cover several tiles per core, tails on M / N / K, several K-L1 chunks with an odd chunk count (the running
L1 buffer counter crosses tiles), an AIV with an empty share (curN < 32 when transB) and both AIVs' halves.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mc2emu.blaze.gemm.block.block_scheduler_matmul_swat_with_tail_split import (
    BlockSchedulerMatmulSwatParams,
    BlockSchedulerMatmulSwatWithTailSplit,
)
from mc2emu.numerics.compare import ulp_distances
from mc2emu.ops import golden_weight_dequant, golden_weight_quant_matmul, weight_quant_matmul
from mc2emu.ops.weight_quant_matmul_host import WqmmProblem, wqmm_tiling
from mc2emu.runtime.event_bus import EventRecorder
from mc2emu.runtime.events import FlagSet, HazardReported, Mmad, Vector
from mc2emu.runtime.hazards import ConstraintError, Hazard, HazardError
from mc2emu.runtime.perturb import PerturbPolicy

BF16 = np.dtype(ml_dtypes.bfloat16)
FP16 = np.dtype(np.float16)
TIMEOUT = 20.0


def _u16(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).view(np.uint16).astype(np.int64)


def _inputs(rng, m, n, k, wd, dt, trans_b, offset, bias, scale_mag=0.02):
    x = rng.standard_normal((m, k)).astype(dt)
    shape = (n, k) if trans_b else (k, n)
    if wd == "int8":
        w = rng.integers(-128, 128, shape).astype(np.int8)
    else:
        w = (rng.standard_normal(shape) * 4).astype(np.dtype(wd))
    s = (rng.random(n) * scale_mag + scale_mag / 8).astype(dt)
    o = (rng.standard_normal(n) * 3).astype(dt) if offset else None
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    return x, w, s, o, b


def _check_c(c, g, x=None, b_dequant=None):
    """At most one ULP of C's dtype; with the operands given, an element further off must be within the
    float32 accumulation bound K * 2^-24 * sum|x||B_dequant| (the golden sums in BLAS order, the kernel per
    baseK step: under cancellation the two orders may land several 16-bit ULPs apart) plus one ULP."""
    assert c.dtype == g.dtype and c.shape == g.shape
    if c.dtype == np.float32:
        np.testing.assert_allclose(c, g, rtol=1e-5, atol=1e-5)
        return
    ulp = ulp_distances(c, g)   # on the ordered-integer line: +0 and -0 both 0, adjacent values 1 apart
    far = ulp > 1
    if far.any() and x is not None:
        k = x.shape[1]
        bound = k * 2.0 ** -24 * (np.abs(x.astype(np.float64)) @ np.abs(b_dequant.astype(np.float64)))
        one_ulp = np.abs(np.spacing(np.maximum(np.abs(c), np.abs(g)).astype(c.dtype)).astype(np.float64))
        err = np.abs(c.astype(np.float64) - g.astype(np.float64))
        assert (err <= bound + one_ulp)[far].all(), f"{int(far.sum())} elements beyond the accumulation bound"
    else:
        assert int(ulp.max()) <= 1, f"{int(far.sum())} elements more than 1 ULP off"
    assert (ulp == 0).mean() > 0.9


# every weight dtype x trans_b x offset x bias, x dtype alternating; a tail on every axis, several tiles
COMBOS = [(wd, tb, off, bias) for wd in ("int8", "float8_e4m3fn", "float8_e5m2") for tb in (False, True)
          for off in (False, True) for bias in (False, True)]


@pytest.mark.parametrize(("wd", "trans_b", "offset", "bias"), COMBOS)
def test_full_matches_golden(wd, trans_b, offset, bias):
    i = COMBOS.index((wd, trans_b, offset, bias))
    dt = BF16 if i % 2 == 0 else FP16
    rng = np.random.default_rng(i)
    m, n, k = (70, 96, 176) if trans_b else (70, 90, 176)
    x, w, s, o, b = _inputs(rng, m, n, k, wd, dt, trans_b, offset, bias)
    c = weight_quant_matmul(x, w, s, o, bias=b, trans_b=trans_b, block_dim=3, timeout=TIMEOUT)
    gdq = golden_weight_dequant(w, s, o, trans_b=trans_b)
    _check_c(c, golden_weight_quant_matmul(x, w, s, o, bias=b, trans_b=trans_b), x, gdq.T if trans_b else gdq)
    bdq = weight_quant_matmul(x, w, s, o, bias=b, trans_b=trans_b, block_dim=3, mode="dequant_only", timeout=TIMEOUT)
    assert bdq.shape == w.shape and bdq.dtype == dt
    np.testing.assert_array_equal(_u16(bdq), _u16(gdq))


@pytest.mark.parametrize("trans_b", [False, True])
def test_several_k_chunks_odd_count_and_tiles_per_core(trans_b):
    """kL1 overridden small: 3 K-L1 chunks per tile (the last short), 2+ tiles per AI core, so L1 buffer 1
    starts the second tile; both AIVs have non-empty halves."""
    rng = np.random.default_rng(7)
    m, n, k = (100, 160, 208)
    x, w, s, o, b = _inputs(rng, m, n, k, "int8", BF16, trans_b, True, True)
    over = {"kL1": 80, "kUbSize": 80 if trans_b else 48, "baseM": 48, "baseN": 64, "nUbSize": 32 if trans_b else 128}
    td = wqmm_tiling(WqmmProblem(x, w, None, s, o, b, BF16, m, n, k, trans_b, None), 2, over)  # type: ignore[arg-type]
    bs = BlockSchedulerMatmulSwatWithTailSplit((m, n, k), BlockSchedulerMatmulSwatParams(
        td.baseM, td.baseN, td.mTailCnt, td.nTailCnt, td.mBaseTailSplitCnt, td.nBaseTailSplitCnt, td.mTailMain,
        td.nTailMain), block_num=td.usedCoreNum)
    assert bs.GetTileCount() >= 2 * td.usedCoreNum and -(-k // td.kL1) == 3
    rec = EventRecorder()
    c = weight_quant_matmul(x, w, s, o, bias=b, trans_b=trans_b, block_dim=2, tiling_overrides=over,
                            timeout=TIMEOUT, observers=[rec])
    _check_c(c, golden_weight_quant_matmul(x, w, s, o, bias=b, trans_b=trans_b))
    # both L1 buffers were used by the first tile's chunks and the second tile started on buffer 1
    dequant = [e for e in rec.of(Vector) if e.stage == "dequant" and e.core == "AIV0"]
    assert [e.ubBufId for e in dequant[:4]] == [0, 1, 0, 1]


def test_boundary_values_bit_exact():
    """int8 -128 / 127, fp8 max and subnormals, offsets beyond bf16's precision: B_dequant bit for bit."""
    n, k = 48, 32
    rng = np.random.default_rng(3)
    i8 = np.tile(np.array([-128, 127, 0, -1, 1, 64], dtype=np.int8), (k * n) // 6).reshape(k, n)
    e4 = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e4m3fn)
    e4 = np.tile(e4, (2, 3))  # every code: max 448, subnormals, NaN
    e5 = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e5m2)
    e5 = np.tile(e5, (2, 3))  # max 57344, subnormals, +-Inf, NaN
    for w in (i8, e4, e5):
        for dt in (BF16, FP16):
            s = (rng.random(n) * 4).astype(dt)
            s[0], s[1] = dt.type(1.0), dt.type(2.0 ** -7)
            o = (rng.standard_normal(n) * 1000.5).astype(dt)  # |offset| ~ 1e3: the Add rounds away B's bits
            o[2] = dt.type(0.0078125)
            x = np.ones((16, k), dtype=dt)
            got = weight_quant_matmul(x, w, s, o, mode="dequant_only", block_dim=2, timeout=TIMEOUT, check=False)
            want = golden_weight_dequant(w, s, o)
            np.testing.assert_array_equal(_u16(got), _u16(want))


def test_three_modes_agree_and_isolate():
    rng = np.random.default_rng(11)
    m, n, k = 40, 64, 96
    x, w, s, o, _ = _inputs(rng, m, n, k, "float8_e4m3fn", BF16, False, True, False)
    g = golden_weight_quant_matmul(x, w, s, o, out_dtype=np.float32)
    full = weight_quant_matmul(x, w, s, o, out_dtype=np.float32, block_dim=2, timeout=TIMEOUT)
    a_only = weight_quant_matmul(x, w, s, o, out_dtype=np.float32, block_dim=2, mode="a_only_mmad", timeout=TIMEOUT)
    np.testing.assert_array_equal(full, a_only)  # same B_dequant bits, same MMAD order
    _check_c(full, g)
    rec = EventRecorder()
    bdq = weight_quant_matmul(x, w, s, o, block_dim=2, mode="dequant_only", timeout=TIMEOUT, observers=[rec])
    np.testing.assert_array_equal(_u16(bdq), _u16(golden_weight_dequant(w, s, o)))
    assert not rec.of(Mmad) and not rec.of(FlagSet)  # zero MMADs, no CV flags
    rec = EventRecorder()
    weight_quant_matmul(x, w, s, o, block_dim=2, mode="a_only_mmad", timeout=TIMEOUT, observers=[rec])
    assert rec.of(Mmad) and not [e for e in rec.of(Vector) if e.stage == "dequant"]


def test_bitwise_reproducible_under_perturbation():
    rng = np.random.default_rng(5)
    x, w, s, o, b = _inputs(rng, 50, 80, 160, "int8", FP16, False, True, True)
    over = {"kL1": 64, "kUbSize": 32}
    ref = weight_quant_matmul(x, w, s, o, bias=b, block_dim=2, tiling_overrides=over, timeout=TIMEOUT)
    for seed in (1, 2):
        got = weight_quant_matmul(x, w, s, o, bias=b, block_dim=2, tiling_overrides=over, timeout=TIMEOUT,
                                  perturb=PerturbPolicy(seed, max_delay_s=0.002))
        np.testing.assert_array_equal(_u16(got), _u16(ref))


def test_empty_n_piece_skips_the_aiv_drain():
    """A hand-made tiling whose nTailMain takes the whole merged N edge: the last N tile is empty (0 columns),
    the AIC returns, the AIVs return before Cleanup and the AIC's last Sets of flags 8 and 9 stay pending."""
    rng = np.random.default_rng(2)
    m, n, k = 16, 96, 32
    x, w, s, _, _ = _inputs(rng, m, n, k, "int8", BF16, False, False, False)
    over = {"baseN": 32, "nBaseTailSplitCnt": 2, "nTailMain": 64}
    rec = EventRecorder()
    with pytest.raises(HazardError) as ei:
        weight_quant_matmul(x, w, s, block_dim=1, tiling_overrides=over, timeout=TIMEOUT, observers=[rec])
    err = ei.value
    early = {e.core: e.message for e in rec.of(HazardReported) if e.hazard is Hazard.EMPTY_TAIL_EARLY_RETURN}
    assert set(early) == {"AIC0", "AIV0", "AIV1"}
    assert all("tile 2 has an empty extent (curM 16, curN 0)" in msg for msg in early.values())
    assert "skipping Cleanup" in early["AIV0"] and "skipping Cleanup" in early["AIV1"]
    left = {(h.core, h.message.split(" at launch end")[0]) for h in err.hazards if h.hazard is Hazard.UNCONSUMED_FLAG}
    assert left == {(aiv, f"flag id {fid} (mode 4) holds 1 unconsumed round(s)")
                    for aiv in ("AIV0", "AIV1") for fid in (8, 9)}
    # tile 0 ran intact; tile 1 (64 merged columns > baseN) overran its L1 B buffer into A's, as on the device:
    # why a consistent tiling never makes nTailMain > baseN, and so never an empty piece
    g = golden_weight_quant_matmul(x, w, s)
    np.testing.assert_array_equal(_u16(err.output[:, :32]), _u16(g[:, :32]))


def test_layout_findings_are_reported():
    """A kUbSize past the UB bound (the tiling's own §3 formula and bOut's padding): LAYOUT_OVERLAP warnings
    with the numbers, and the kernel's UB slots overlap (UB_OVERLAP: bOut0 / scale0 over bIn1). The tiles
    are only 32 K rows (k = 64), far from the slots' ends, so no live byte is overwritten: the run still
    matches the golden."""
    rng = np.random.default_rng(4)
    x, w, s, _, _ = _inputs(rng, 16, 128, 64, "int8", BF16, False, False, False)
    rec = EventRecorder()
    c = weight_quant_matmul(x, w, s, block_dim=1, tiling_overrides={"kUbSize": 336, "nUbSize": 128},
                            timeout=TIMEOUT, observers=[rec])
    _check_c(c, golden_weight_quant_matmul(x, w, s))
    msgs = [e.message for e in rec.of(HazardReported) if e.hazard is Hazard.LAYOUT_OVERLAP]
    assert any("bOut with +1 bank padding" in msg for msg in msgs)
    assert any("by the tiling's own formula" in msg for msg in msgs)
    ub = [e.message for e in rec.of(HazardReported) if e.hazard is Hazard.UB_OVERLAP]
    assert any("'bIn1' [126976, 169984) overlaps slot 'bOut0' [43008, 129280)" in msg for msg in ub), ub


@pytest.mark.parametrize(("kwargs", "rule"), [
    ({"x": np.zeros((4, 32), np.float32)}, "x.dtype"),
    ({"weight": np.zeros((32, 16), np.int16)}, "weight.dtype"),
    ({"weight": np.zeros((48, 16), np.int8)}, "x.k == weight.k"),
    ({"antiquant_scale": np.ones(16, np.float16)}, "antiquant_scale.dtype"),
    ({"antiquant_scale": np.ones(8, BF16)}, "antiquant_scale.shape"),
    ({"antiquant_offset": np.ones(15, BF16)}, "antiquant_offset.shape"),
    ({"bias": np.ones(16, BF16)}, "bias"),
    ({"out_dtype": np.int8}, "out_dtype"),
    ({"mode": "half"}, "mode"),
    ({"block_dim": 33}, "block_dim"),
    ({"weight": np.zeros((8, 32), np.int8), "trans_b": True, "antiquant_scale": np.ones(8, BF16)}, "can_implement"),
    ({"x": np.zeros((4, 40), BF16), "weight": np.zeros((40, 16), np.int8)}, "can_implement"),
])
def test_refusals_name_the_rule(kwargs, rule):
    args = {"x": np.zeros((4, 32), BF16), "weight": np.zeros((32, 16), np.int8),
            "antiquant_scale": np.ones(16, BF16), "antiquant_offset": None}
    args.update({key: v for key, v in kwargs.items() if key in args})
    extra = {key: v for key, v in kwargs.items() if key not in args}
    with pytest.raises(ConstraintError) as ei:
        weight_quant_matmul(**args, **extra)
    assert ei.value.rule == rule


def test_upper_a_buffer_over_bias_corrupts_a_tile_that_starts_on_buffer_1():
    """kL1 = 256 with baseM = baseN = 256: A1 ends at the L1's last byte, over the bias (L1 - 1024). The
    second tile of the core starts on L1 buffer 1 (one chunk per tile, running counter): its bias copy
    lands on A1's tail after A was loaded, so that tile's C is wrong, as on the device; the finding names
    the bytes. The first tile (buffer 0) is right."""
    rng = np.random.default_rng(9)
    m, n, k = 256, 512, 256
    x, w, s, _, b = _inputs(rng, m, n, k, "int8", BF16, False, False, True)
    rec = EventRecorder()
    c = weight_quant_matmul(x, w, s, bias=b, block_dim=1, tiling_overrides={"kL1": 256, "kUbSize": 128},
                            timeout=TIMEOUT, observers=[rec])
    msgs = [e.message for e in rec.of(HazardReported) if e.hazard is Hazard.LAYOUT_OVERLAP]
    assert any("overwrites the first 1024 bias bytes" in msg for msg in msgs), msgs
    g = golden_weight_quant_matmul(x, w, s, bias=b)
    first = next(e.tile for e in rec.of(Mmad))
    lo = first[1]
    hi = 256 - lo  # the other N tile
    _check_c(c[:, lo: lo + 256], g[:, lo: lo + 256])
    bad = np.abs(_u16(c[:, hi: hi + 256]) - _u16(g[:, hi: hi + 256])) > 1
    assert bad.any() and not bad[:, :].all(axis=1).all()  # some rows of the second tile, not everything


# The tiling of (M, N, K) = (64, 7168, 2048) int8 transB that a 256 KiB UB query gives (the emulator's host
# before it followed asc-devkit's TOTAL_UB_SIZE = 248 KiB): one UB half needs 130 016 B of the 126 976 B
# TOTAL_UB_SIZE / 2 holds.
UB256_TILING = {"kL1": 384, "kUbSize": 384, "nUbSize": 112}


def test_default_tiling_follows_total_ub_size():
    """GetCoreMemSize(UB) = TOTAL_UB_SIZE = 248 KiB: (64, 7168, 2048) int8 transB tiles to kL1 = kUbSize = 256,
    and its UB halves fit (no UB_OVERLAP, no layout finding)."""
    from mc2emu.arch.platform import DAV_3510
    from mc2emu.tiling.weight_quant_tiling_layout import layout_findings
    from mc2emu.tiling.weight_quant_tiling_swat import WeightQuantTilingSwat

    td = WeightQuantTilingSwat(DAV_3510).GetTilingData(64, 7168, 2048, True, False, False)
    assert (td.kL1, td.kUbSize, td.nUbSize) == (256, 256, 112)
    assert layout_findings(td) == []


def test_ub_halves_that_overrun_corrupt_the_scale_as_on_the_device():
    """The 256 KiB tiling on the 248 KiB UB: half 0 ([bIn0 43008 | bOut0 86784 | scale0 224] = 130 016 B) runs
    3040 B into half 1 at 126 976: UB_OVERLAP names bOut0 / scale0 over bIn1 (and half 1 over the runtime's
    reserve). In program order the load of bIn1 (K chunk 1, 3) overwrites scale0, loaded only at K chunk 0:
    chunks 2 and 4 dequantize with bytes 2816..3039 of bIn1 (weight row 7, K columns 128..351 of the chunk
    before) read as bf16 scales. Chunks 0, 1, 3, 5 are the golden's, bit for bit."""
    rng = np.random.default_rng(35)
    m, n, k = 64, 7168, 2048
    x, w, s, _, _ = _inputs(rng, m, n, k, "int8", BF16, True, False, False)
    rec = EventRecorder()
    bdq = weight_quant_matmul(x, w, s, trans_b=True, mode="dequant_only", tiling_overrides=UB256_TILING,
                              timeout=120.0, observers=[rec])
    ub = [e.message for e in rec.of(HazardReported) if e.hazard is Hazard.UB_OVERLAP]
    assert any("'bIn1' [126976, 169984) overlaps slot 'bOut0' [43008, 129792) in bytes [126976, 129792)" in msg
               for msg in ub), ub[:4]
    assert any("'bIn1' [126976, 169984) overlaps slot 'scale0' [129792, 130016)" in msg for msg in ub)
    assert any("'runtime reserved' [253952, 262144)" in msg for msg in ub)
    g = golden_weight_dequant(w, s, None, trans_b=True)
    kL1, nUb = 384, 112
    for chunk in range(6):
        cols = slice(chunk * kL1, min(k, (chunk + 1) * kL1))
        if chunk not in (2, 4):
            np.testing.assert_array_equal(_u16(bdq[:, cols]), _u16(g[:, cols]))
            continue
        src = (chunk - 1) * kL1 + 128   # bIn1 of the chunk before: row 7, bytes 128.. of its K columns
        for nS in range(0, n, nUb):
            bad_scale = np.ascontiguousarray(w[nS + 7, src: src + 2 * nUb]).view(BF16)
            want = golden_weight_dequant(w[nS: nS + nUb, cols], bad_scale, None, trans_b=True)
            got = bdq[nS: nS + nUb, cols]
            nan = np.isnan(want.astype(np.float32))
            assert (np.isnan(got.astype(np.float32)) == nan).all()
            np.testing.assert_array_equal(_u16(got)[~nan], _u16(want)[~nan])
