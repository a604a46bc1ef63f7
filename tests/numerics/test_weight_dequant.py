"""Weight dequant (seed 001): the emulator's AIV op chain, the ml_dtypes golden and a float64 model agree
bit for bit on B_dequant over every weight code, sweeps of scales and offsets and every special value.

Three implementations that share no rounding code:
- kernel path  `mc2emu.numerics.weight_dequant` (integer rounding of float32 bits, per vector op);
- golden       `mc2emu.ops.weight_quant_matmul_golden` (ml_dtypes / numpy 16-bit arithmetic);
- reference    `weight_dequant_reference` (float64 + explicit frexp / rint rounding).
The planted-bug tests show the reference catches a wrong kernel path and a wrong golden alike.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from weight_dequant_reference import FORMATS, decode16, decode_fp8, ref_dequant, round_to, same_values

import mc2emu.numerics.weight_dequant as wd
from mc2emu.numerics import MxTypeError, MxValueError
from mc2emu.numerics.weight_dequant import (
    DequantDtype,
    cast_weight_to_dequant,
    dequant_ub_tile,
    dequant_weight,
    round_float32_to,
)
from mc2emu.ops.weight_quant_matmul_golden import golden_cast_weight, golden_weight_dequant

WEIGHT_DTYPES = ("int8", "float8_e4m3fn", "float8_e5m2")
DEQUANT_DTYPES = ("bfloat16", "float16")
COMBOS = [(w, d) for w in WEIGHT_DTYPES for d in DEQUANT_DTYPES]


def all_codes(weight_dtype: str) -> np.ndarray:
    """Every one of the 256 codes of the weight type, as that type."""
    if weight_dtype == "int8":
        return np.arange(-128, 128).astype(np.int8)
    return np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, weight_dtype))


def sweep_16(dequant_dtype: str, rng: np.random.Generator, per_binade: int) -> np.ndarray:
    """Bit patterns of a 16-bit type: every exponent field (subnormals, Inf / NaN included) x both signs x
    mantissa 0, 1, the max and `per_binade` random ones."""
    fmt = FORMATS[dequant_dtype]
    mmax = (1 << fmt.mbits) - 1
    pats = []
    for sign in (0, 1):
        for e in range(1 << fmt.ebits):
            mans = np.concatenate([[0, 1, mmax], rng.integers(0, mmax + 1, per_binade)])
            pats.append((sign << 15) | (e << fmt.mbits) | mans)
    return np.unique(np.concatenate(pats)).astype(np.uint16).view(np.dtype(dequant_dtype if dequant_dtype ==
                                                                          "float16" else ml_dtypes.bfloat16))


def finite_part(x16: np.ndarray) -> np.ndarray:
    return x16[np.isfinite(x16.astype(np.float32))]


def bits_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bitwise equal, or NaN in both (NaN payloads are not modelled)."""
    na, nb = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    return (na & nb) | (~na & ~nb & (a.view(np.uint16) == b.view(np.uint16)))


def check_three_way(weight, scale, offset, trans_b=False):
    """Kernel path == golden bit for bit, and both == the float64 model; returns the kernel result."""
    fmt = FORMATS[np.asarray(scale).dtype.name]
    got = dequant_weight(weight, scale, offset, trans_b=trans_b)
    gold = golden_weight_dequant(weight, scale, offset, trans_b=trans_b)
    per_channel = (slice(None), None) if trans_b else (None, slice(None))
    ref = ref_dequant(weight, decode16(scale, fmt)[per_channel],
                      None if offset is None else decode16(offset, fmt)[per_channel], fmt)
    eq = bits_equal(got, gold)
    assert eq.all(), f"kernel path != golden at {np.argwhere(~eq)[:5].tolist()}"
    ok = same_values(got, ref, fmt)
    assert ok.all(), f"kernel path != float64 model at {np.argwhere(~ok)[:5].tolist()}"
    return got


# --- the rounding primitive ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dequant_dtype", DEQUANT_DTYPES)
def test_round_float32_to_matches_both_references_on_random_float32_bits(dequant_dtype):
    rng = np.random.default_rng(11)
    u = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    # ties and near-ties at the 16-bit grid of every binade, overflow edges, subnormals
    u[:4096] = (u[:4096] & ~np.uint32(0x1FFFF)) | np.uint32(0x8000)
    u[4096:8192] &= np.uint32(0x807FFFFF)  # float32 subnormals and zeros
    x = u.view(np.float32)
    fmt = FORMATS[dequant_dtype]
    got = round_float32_to(x, DequantDtype.parse(dequant_dtype))
    with np.errstate(over="ignore", invalid="ignore"):
        lib = x.astype(np.dtype(dequant_dtype if dequant_dtype == "float16" else ml_dtypes.bfloat16))
    assert bits_equal(got, lib).all()
    with np.errstate(invalid="ignore"):
        assert same_values(got, round_to(x.astype(np.float64), fmt), fmt).all()


def test_round_float32_to_ties_go_to_even():
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-133 * 1.5, 2**-133 * 0.5], dtype=np.float32)
    got = round_float32_to(x, DequantDtype.BF16).astype(np.float64)
    assert got.tolist() == [1.0, 1 + 2**-6, -1.0, 2**-132, 0.0]
    h = round_float32_to(np.array([2049.0, 2051.0, 65520.0, 65519.0], np.float32), DequantDtype.FP16)
    assert h.astype(np.float64).tolist() == [2048.0, 2052.0, np.inf, 65504.0]


# --- the cast chains ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("weight_dtype", "dequant_dtype"), COMBOS)
def test_every_code_casts_exactly_and_like_the_golden(weight_dtype, dequant_dtype):
    codes = all_codes(weight_dtype)
    out = DequantDtype.parse(dequant_dtype)
    got = cast_weight_to_dequant(codes, out)
    assert got.dtype == out.dtype
    assert bits_equal(got, golden_cast_weight(codes, out.dtype)).all()
    exact = (codes.astype(np.float64) if weight_dtype == "int8" else decode_fp8(codes.view(np.uint8), weight_dtype))
    assert same_values(got, exact, FORMATS[dequant_dtype]).all(), "a cast of the chain rounded"


def test_int8_boundaries_and_the_half_step():
    b = np.array([-128, -127, -1, 0, 1, 127], np.int8)
    h = wd.cast_int8_to_half(b)
    assert h.dtype == np.float16 and h.astype(np.float64).tolist() == [-128, -127, -1, 0, 1, 127]
    bf = wd.cast_half_to_bf16(h)
    assert bf.dtype == ml_dtypes.bfloat16 and bf.astype(np.float64).tolist() == [-128, -127, -1, 0, 1, 127]


@pytest.mark.parametrize("dequant_dtype", DEQUANT_DTYPES)
def test_fp8_max_subnormals_nan_and_inf(dequant_dtype):
    out = DequantDtype.parse(dequant_dtype)
    e4 = np.array([0x7E, 0xFE, 0x01, 0x81, 0x07, 0x08, 0x7F, 0xFF, 0x80], np.uint8).view(ml_dtypes.float8_e4m3fn)
    v = cast_weight_to_dequant(e4, out).astype(np.float64)
    assert v[:6].tolist() == [448.0, -448.0, 2.0**-9, -(2.0**-9), 7 * 2.0**-9, 2.0**-6]
    assert np.isnan(v[6:8]).all() and v[8] == 0 and np.signbit(v[8])
    e5 = np.array([0x7B, 0x01, 0x03, 0x04, 0x7C, 0xFC, 0x7D, 0x7F], np.uint8).view(ml_dtypes.float8_e5m2)
    v = cast_weight_to_dequant(e5, out).astype(np.float64)
    assert v[:6].tolist() == [57344.0, 2.0**-16, 3 * 2.0**-16, 2.0**-14, np.inf, -np.inf]
    assert np.isnan(v[6:]).all()


def test_fp8_through_dequant_keeps_specials():
    w = np.array([[0x7B, 0x7C, 0x7D, 0x01]], np.uint8).view(ml_dtypes.float8_e5m2)
    one = np.ones(4, np.float16)
    got = check_three_way(w, one, np.array([8192, 0, 0, 0], np.float16)).astype(np.float64)[0]
    assert got[0] == np.inf  # 57344 + 8192 = 65536 rounds past half's max
    assert got[1] == np.inf and np.isnan(got[2]) and got[3] == 2.0**-16


# --- the dequant, exhaustive over codes -------------------------------------------------------------------------


@pytest.mark.parametrize(("weight_dtype", "dequant_dtype"), COMBOS)
def test_dequant_without_offset_every_code_times_a_scale_sweep(weight_dtype, dequant_dtype):
    rng = np.random.default_rng(2)
    scales = sweep_16(dequant_dtype, rng, per_binade=3 if dequant_dtype == "bfloat16" else 40)
    w = np.broadcast_to(all_codes(weight_dtype)[:, None], (256, scales.size)).copy()
    check_three_way(w, scales, None)


@pytest.mark.parametrize(("weight_dtype", "dequant_dtype"), COMBOS)
def test_dequant_with_offset_every_code_times_offset_and_scale_sweeps(weight_dtype, dequant_dtype):
    rng = np.random.default_rng(3)
    offsets = sweep_16(dequant_dtype, rng, per_binade=1 if dequant_dtype == "bfloat16" else 12)
    dt = offsets.dtype
    scales = np.array([1.0, -1.0, 0.5, 1 / 3, 3.0, 1e-3, 2.0**-20, 7.25e3], np.float32).astype(dt)
    w = np.broadcast_to(all_codes(weight_dtype)[:, None], (256, offsets.size)).copy()
    for s in scales:
        check_three_way(w, np.full(offsets.size, s, dt), offsets)


def test_offsets_past_bf16_precision_round_after_the_add():
    # B + 256 >= 256 needs 9 significant bits for odd B: bf16 keeps 8, so the Add rounds before the Mul.
    w = np.arange(-128, 128).astype(np.int8)[:, None]
    offset = np.array([256.0], ml_dtypes.bfloat16)
    got = check_three_way(w, np.array([1.0], ml_dtypes.bfloat16), offset).astype(np.float64)[:, 0]
    exact = np.arange(-128, 128) + 256.0
    inexact = (np.arange(-128, 128) % 2 == 1) & (exact >= 256)
    assert (got[~inexact] == exact[~inexact]).all() and (got[inexact] != exact[inexact]).all()
    assert got[np.arange(-128, 128) == 1][0] == 256.0 and got[np.arange(-128, 128) == 3][0] == 260.0  # ties to even


def test_trans_b_takes_the_scale_per_row():
    rng = np.random.default_rng(5)
    w_kn = rng.integers(-128, 128, (48, 32)).astype(np.int8)
    scale = rng.standard_normal(32).astype(ml_dtypes.bfloat16)
    offset = (rng.standard_normal(32) * 300).astype(ml_dtypes.bfloat16)
    nk = check_three_way(np.ascontiguousarray(w_kn.T), scale, offset, trans_b=True)
    kn = check_three_way(w_kn, scale, offset)
    assert (nk.T.view(np.uint16) == kn.view(np.uint16)).all()
    assert not (kn.view(np.uint16) == check_three_way(w_kn, scale[::-1].copy(), offset).view(np.uint16)).all()


def test_ub_tiles_compose_to_the_whole_weight():
    rng = np.random.default_rng(6)
    w = rng.integers(0, 256, (96, 80), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    scale = rng.standard_normal(80).astype(np.float16)
    offset = rng.standard_normal(80).astype(np.float16)
    whole = dequant_weight(w, scale, offset)
    tiled = np.empty_like(whole)
    for k0 in range(0, 96, 32):
        for n0 in range(0, 80, 48):
            n1 = min(n0 + 48, 80)
            tiled[k0:k0 + 32, n0:n1] = dequant_ub_tile(w[k0:k0 + 32, n0:n1], scale[n0:n1], offset[n0:n1])
    assert bits_equal(tiled, whole).all()


def test_bad_inputs_name_the_rule():
    w = np.zeros((4, 8), np.int8)
    with pytest.raises(MxTypeError, match="bfloat16 or float16"):
        dequant_weight(w, np.ones(8, np.float32))
    with pytest.raises(MxValueError, match=r"per channel, shape \(8,\)"):
        dequant_weight(w, np.ones(4, np.float16))
    with pytest.raises(MxTypeError, match="offset must have B_dequant's dtype"):
        dequant_weight(w, np.ones(8, np.float16), np.ones(8, ml_dtypes.bfloat16))
    with pytest.raises(MxTypeError, match=r"b_in must have dtype int8"):
        dequant_weight(w.astype(np.int16), np.ones(8, np.float16))


# --- the float64 model catches a wrong kernel path and a wrong golden --------------------------------------------


def _sweep_inputs(dt):
    rng = np.random.default_rng(9)
    w = rng.integers(-128, 128, (64, 512)).astype(np.int8)
    scale = (rng.standard_normal(512) * 3).astype(np.float32).astype(dt)
    offset = (rng.standard_normal(512) * 700).astype(np.float32).astype(dt)
    return w, scale, offset


def _mismatches_vs_model(got, w, scale, offset):
    fmt = FORMATS[scale.dtype.name]
    ref = ref_dequant(w, decode16(scale, fmt)[None, :], decode16(offset, fmt)[None, :], fmt)
    return int((~same_values(got, ref, fmt)).sum())


@pytest.mark.parametrize("dequant_dtype", DEQUANT_DTYPES)
def test_model_agrees_with_both_then_flags_planted_kernel_bugs(dequant_dtype, monkeypatch):
    dt = np.dtype(dequant_dtype if dequant_dtype == "float16" else ml_dtypes.bfloat16)
    w, scale, offset = _sweep_inputs(dt)
    assert _mismatches_vs_model(dequant_weight(w, scale, offset), w, scale, offset) == 0
    assert _mismatches_vs_model(golden_weight_dequant(w, scale, offset), w, scale, offset) == 0

    # 1. FP32 simulation: the Add result stays float32 (no rounding between Add and Mul)
    def add_unrounded(a, b):
        return wd._widen(a) + wd._widen(b)

    def mul_any(a, b):
        a32 = a if a.dtype == np.float32 else wd._widen(a)
        return wd.round_float32_to(a32 * wd._widen(b), DequantDtype.parse(b.dtype))

    monkeypatch.setattr(wd, "vector_add", add_unrounded)
    monkeypatch.setattr(wd, "vector_mul", mul_any)
    assert _mismatches_vs_model(dequant_weight(w, scale, offset), w, scale, offset) > 0
    monkeypatch.undo()

    # 2. round toward zero instead of RINT in the vector unit's output stage
    def rtz(x, out):
        x = np.asarray(x, np.float32)
        if out is DequantDtype.BF16:
            return (x.view(np.uint32) >> 16).astype(np.uint16).view(out.dtype)
        return np.where(np.abs(x.astype(np.float16).astype(np.float32)) > np.abs(x),
                        np.nextafter(x.astype(np.float16), np.float16(0)), x.astype(np.float16))

    monkeypatch.setattr(wd, "round_float32_to", rtz)
    assert _mismatches_vs_model(dequant_weight(w, scale, offset), w, scale, offset) > 0
    monkeypatch.undo()

    # 3. Mul before Add
    def swapped(b_in, s, o, *, trans_b=False):
        return wd.vector_add(wd.vector_mul(wd.cast_weight_to_dequant(b_in, DequantDtype.parse(s.dtype)),
                                           np.broadcast_to(s, b_in.shape)), np.broadcast_to(o, b_in.shape))

    assert _mismatches_vs_model(swapped(w, scale, offset), w, scale, offset) > 0


@pytest.mark.parametrize("dequant_dtype", DEQUANT_DTYPES)
def test_model_flags_a_golden_that_simulates_the_dequant_in_fp32(dequant_dtype):
    dt = np.dtype(dequant_dtype if dequant_dtype == "float16" else ml_dtypes.bfloat16)
    w, scale, offset = _sweep_inputs(dt)
    fp32_sim = ((w.astype(np.float32) + offset.astype(np.float32)) * scale.astype(np.float32)).astype(dt)
    bad = _mismatches_vs_model(fp32_sim, w, scale, offset)
    assert bad > 0
    assert (~bits_equal(fp32_sim, golden_weight_dequant(w, scale, offset))).sum() == bad


@pytest.mark.parametrize("wd", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("trans_b", [False, True])
def test_channel_table_gather_is_the_vf_chain(wd, trans_b):
    """The kernel's fast path (the chain run once per channel on the 256 codes, then a gather) gives the
    per-element chain's bits for every code, both dequant types, with and without offset."""
    from mc2emu.numerics.weight_dequant import WeightDtype, channel_dequant_table, dequant_by_table

    rng = np.random.default_rng(17)
    codes = np.tile(np.arange(256, dtype=np.uint8), 3)
    for dt in (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16)):
        for with_offset in (False, True):
            n = 24
            b = rng.permutation(np.resize(codes, 64 * n)).reshape((n, 64) if trans_b else (64, n)).view(np.dtype(wd))
            s = (rng.standard_normal(n) * 8).astype(dt)
            o = (rng.standard_normal(n) * 300).astype(dt) if with_offset else None
            want = dequant_ub_tile(b, s, o, trans_b=trans_b)
            table = channel_dequant_table(WeightDtype(wd), s, o, trans_b=trans_b)
            got = dequant_by_table(b, table, DequantDtype.parse(dt), trans_b=trans_b)
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
