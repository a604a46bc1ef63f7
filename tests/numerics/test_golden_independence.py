"""The goldens do not share the kernel's numerics path: a wrong decode planted in the kernel's tables (the
element LUTs of `formats`, the E8M0 table behind `block_scale.decode_scales`) changes the kernel's C and
fails the golden comparison, while every golden's output stays bit-identical. Also: the goldens' own
decoders agree with the kernel's tables on every code (two implementations, one answer)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mc2emu.blaze.gemm.tile import tile_mmad_mx
from mc2emu.numerics import ElemFormat, ag_compare, formats
from mc2emu.numerics.golden import golden_cast, golden_decode_elements, golden_decode_scales, golden_mx_matmul
from mc2emu.ops import golden_quant_batch_matmul_mx, quant_batch_matmul_mx
from mc2emu.ops.all_gather_quant_matmul_golden import gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a, golden_a2a_float64
from mc2emu.ops.weight_quant_matmul_golden import golden_weight_quant_matmul

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "blaze"))
from blaze_cases import ref_float64, st_operands


@contextlib.contextmanager
def wrong_kernel_decode(scale_factor: float = 2.0, elem_factor: float = 1.0):
    """Multiply the kernel path's decode tables in place (every E8M0 scale by `scale_factor`, every element
    value by `elem_factor`), then restore them. Whatever reads those tables (decode_scales,
    decode_elements, the pair table of tile_mmad_mx) decodes wrongly inside the block."""
    tables = [formats.E8M0_LUT, *(formats._LUTS[f] for f in ElemFormat)]
    saved = [t.copy() for t in tables]
    tile_mmad_mx.pair_table.cache_clear()
    try:
        for t in tables:
            t.flags.writeable = True
        with np.errstate(over="ignore"):   # 2^127 * 2 -> Inf: the wrong decode is meant to be wrong
            formats.E8M0_LUT *= np.float32(scale_factor)
            for f in ElemFormat:
                formats._LUTS[f][...] *= np.float32(elem_factor)
        yield
    finally:
        for t, s in zip(tables, saved, strict=True):
            t[...] = s
            t.flags.writeable = False
        tile_mmad_mx.pair_table.cache_clear()


def _goldens() -> dict[str, np.ndarray]:
    """Every golden of the package on small ST data (A2A for R = 3 ranks, computed in-process)."""
    ops = st_operands(24, 40, 192, trans_b=True)
    e1 = st_operands(16, 32, 128, "e1m2", "e2m1")
    out = {
        "golden_mx_matmul": golden_mx_matmul(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, "e4m3", "bfloat16",
                                             trans_b=True),
        "golden_mx_matmul e1m2 x e2m1": golden_mx_matmul(e1.x1, e1.x1_scale, e1.x2, e1.x2_scale, "e1m2",
                                                         "float32", b_elem="e2m1"),
        "golden_quant_batch_matmul_mx": golden_quant_batch_matmul_mx(
            ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, trans_b=True, bias=np.arange(40, dtype=np.float32)),
        "blaze_cases.ref_float64": ref_float64(ops),
    }
    ag = [gen_ag_st_inputs(16, 128, 32, r) for r in range(2)]
    out["golden_all_gather_quant_matmul"] = golden_all_gather_quant_matmul(
        [i["x1"] for i in ag], [i["x1_scale"] for i in ag], ag[0]["x2"], ag[0]["x2_scale"])
    wq = np.arange(-8, 8, dtype=np.float32).reshape(4, 4).astype(ml_dtypes.float8_e4m3fn)
    out["golden_weight_quant_matmul (fp8 weight)"] = golden_weight_quant_matmul(
        np.ones((2, 4), ml_dtypes.bfloat16), wq, np.full((4,), 0.5, ml_dtypes.bfloat16))
    inps = [gen_st_inputs(r, 3, 32, 64, 48) for r in range(3)]
    x1s, x1ss = [i["x1"] for i in inps], [i["x1_scale"] for i in inps]
    for r in range(3):
        out[f"golden_a2a rank {r}"] = golden_a2a(x1s, x1ss, inps[r]["x2"], inps[r]["x2_scale"], r, "e4m3")
        out[f"golden_a2a_float64 rank {r}"] = golden_a2a_float64(x1s, x1ss, inps[r]["x2"], inps[r]["x2_scale"],
                                                                 r, "e4m3")
    return out


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


@pytest.mark.parametrize(("scale_factor", "elem_factor"), [(2.0, 1.0), (1.0, 0.5)])
def test_goldens_are_unchanged_by_a_wrong_kernel_decode(scale_factor, elem_factor):
    before = _goldens()
    with wrong_kernel_decode(scale_factor, elem_factor):
        during = _goldens()
    for name, ref in before.items():
        np.testing.assert_array_equal(_bits(during[name]), _bits(ref), err_msg=f"{name} follows the kernel decode")


@pytest.mark.parametrize(("scale_factor", "elem_factor"), [(2.0, 1.0), (1.0, 0.5)])
def test_a_wrong_kernel_decode_fails_the_golden_comparison(scale_factor, elem_factor):
    ops = st_operands(40, 64, 256, trans_b=True)
    kw = dict(trans_a=ops.trans_a, trans_b=ops.trans_b, x1_format=ops.fa, x2_format=ops.fb)
    gold = golden_quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, **kw)
    assert ag_compare(quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, **kw), gold)
    with wrong_kernel_decode(scale_factor, elem_factor):
        c = quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, **kw)
    # scales x2 on both operands: C x4; elements x0.5 on both: C x0.25 (exact power-of-two factors)
    expect = (scale_factor * elem_factor) ** 2
    assert not ag_compare(c, gold)
    np.testing.assert_array_equal(c.astype(np.float32), (gold.astype(np.float32) * expect))


@pytest.mark.parametrize("fmt", list(ElemFormat))
def test_golden_element_decode_agrees_with_the_kernel_tables_on_every_code(fmt):
    codes = np.arange(fmt.lut.size, dtype=np.uint8)
    got = golden_decode_elements(codes, fmt)
    np.testing.assert_array_equal(got.view(np.uint32), fmt.lut.view(np.uint32))


def test_golden_element_decode_known_values():
    # E1M2 (no ml_dtypes type): |v| = 0.25 * code, sign bit 3 (SPEC §4)
    e1m2 = golden_decode_elements(np.arange(16, dtype=np.uint8), "e1m2")
    np.testing.assert_array_equal(e1m2[:8], np.arange(8) * 0.25)
    np.testing.assert_array_equal(e1m2[8:], -np.arange(8) * 0.25)
    e2m1 = golden_decode_elements(np.arange(8, dtype=np.uint8), "e2m1")
    np.testing.assert_array_equal(e2m1, [0, 0.5, 1, 1.5, 2, 3, 4, 6])
    assert golden_decode_elements(np.array([0x7E], np.uint8), "e4m3")[0] == 448.0
    assert golden_decode_elements(np.array([0x7B], np.uint8), "e5m2")[0] == 57344.0
    with pytest.raises(ValueError, match="E2M1 codes must be < 16"):
        golden_decode_elements(np.array([16], np.uint8), "e2m1")


def test_golden_scale_decode_every_code():
    codes = np.arange(256, dtype=np.uint8)
    got = golden_decode_scales(codes)
    assert np.isnan(got[255])
    np.testing.assert_array_equal(got[:255], [2.0 ** (c - 127) for c in range(255)])
    np.testing.assert_array_equal(got.view(np.uint32), formats.E8M0_LUT.view(np.uint32))
    np.testing.assert_array_equal(got, codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32))


def test_golden_cast_is_rne():
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 65520.0], np.float32)   # ties to even; fp16 overflow
    np.testing.assert_array_equal(golden_cast(x, "bfloat16").astype(np.float32), [1.0, 1 + 2 ** -6, 65536.0])
    assert np.isinf(golden_cast(x, "float16")[2])
