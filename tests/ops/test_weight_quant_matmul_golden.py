"""The whole-op golden of weight_quant_matmul: FP32 accumulation of x @ B_dequant (+ fp32 bias), cast to C.

Values are checked against float64 arithmetic on the golden's own B_dequant (the dequant itself is
checked bit for bit in tests/numerics/test_weight_dequant.py): exactly where the inputs make every FP32
sum exact, within the FP32 accumulation bound elsewhere.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics.weight_dequant import dequant_weight
from mc2emu.ops.weight_quant_matmul_golden import golden_weight_dequant, golden_weight_quant_matmul

BF16 = np.dtype(ml_dtypes.bfloat16)


def _exact_case(rng, m, k, n, dt, weight_dtype):
    """Small integers and power-of-two scales: every product and every FP32 partial sum is exact."""
    x = rng.integers(-8, 9, (m, k)).astype(np.float32).astype(dt)
    if weight_dtype == "int8":
        w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    else:
        w = rng.integers(-16, 17, (k, n)).astype(np.float32).astype(getattr(ml_dtypes, weight_dtype))
    scale = np.ldexp(1.0, rng.integers(-3, 2, n)).astype(np.float32).astype(dt)
    offset = rng.integers(-4, 5, n).astype(np.float32).astype(dt)
    bias = rng.integers(-100, 101, n).astype(np.float32)
    return x, w, scale, offset, bias


@pytest.mark.parametrize("weight_dtype", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("dt", [BF16, np.dtype(np.float16)])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("with_offset", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_golden_is_exact_where_fp32_accumulation_is_exact(weight_dtype, dt, trans_b, with_offset, with_bias):
    rng = np.random.default_rng(hash((weight_dtype, str(dt), trans_b, with_offset, with_bias)) % 2**32)
    m, k, n = 17, 48, 40
    x, w, scale, offset, bias = _exact_case(rng, m, k, n, dt, weight_dtype)
    off = offset if with_offset else None
    b = bias if with_bias else None
    weight = np.ascontiguousarray(w.T) if trans_b else w
    c = golden_weight_quant_matmul(x, weight, scale, off, bias=b, trans_b=trans_b, out_dtype=np.float32)
    b_deq = ((w.astype(np.float64) + (offset.astype(np.float64) if with_offset else 0.0))
             * scale.astype(np.float64))  # exact here: |B + offset| <= 132 times a power of two
    want = x.astype(np.float64) @ b_deq + (bias if with_bias else 0.0)
    assert c.dtype == np.float32 and c.shape == (m, n)
    np.testing.assert_array_equal(c, want)
    c16 = golden_weight_quant_matmul(x, weight, scale, off, bias=b, trans_b=trans_b)
    assert c16.dtype == dt
    np.testing.assert_array_equal(c16.view(np.uint16), want.astype(np.float32).astype(dt).view(np.uint16))


@pytest.mark.parametrize("dt", [BF16, np.dtype(np.float16)])
def test_golden_uses_the_rounded_dequant_and_fp32_accumulation(dt):
    rng = np.random.default_rng(8)
    m, k, n = 9, 256, 24
    x = rng.standard_normal((m, k)).astype(np.float32).astype(dt)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    scale = (rng.standard_normal(n) * 0.01).astype(np.float32).astype(dt)
    offset = (rng.standard_normal(n) * 300).astype(np.float32).astype(dt)  # B + offset rounds in 16 bits
    bias = rng.standard_normal(n).astype(np.float32)
    c = golden_weight_quant_matmul(x, w, scale, offset, bias=bias, out_dtype=np.float32)
    b_deq = golden_weight_dequant(w, scale, offset).astype(np.float64)
    assert (golden_weight_dequant(w, scale, offset).view(np.uint16)
            == dequant_weight(w, scale, offset).view(np.uint16)).all()
    want = x.astype(np.float64) @ b_deq + bias
    bound = k * np.finfo(np.float32).eps * (np.abs(x.astype(np.float64)) @ np.abs(b_deq) + np.abs(bias))
    assert (np.abs(c - want) <= bound).all()
    # the FP32 simulation of the dequant (no 16-bit rounding after the Add) is measurably different
    fused = (w.astype(np.float64) + offset.astype(np.float64)) * scale.astype(np.float64)
    assert np.abs(x.astype(np.float64) @ fused + bias - c).max() > bound.max()


def test_out_dtype_defaults_to_x_and_bad_inputs_are_refused():
    x = np.ones((2, 16), BF16)
    w = np.ones((16, 8), np.int8)
    s = np.ones(8, BF16)
    assert golden_weight_quant_matmul(x, w, s).dtype == BF16
    with pytest.raises(TypeError, match="antiquant_scale must have x's dtype"):
        golden_weight_quant_matmul(x, w, np.ones(8, np.float16))
    with pytest.raises(ValueError, match="K = 16 columns"):
        golden_weight_quant_matmul(x, np.ones((8, 8), np.int8), s)
    with pytest.raises(ValueError, match="bias must be float32"):
        golden_weight_quant_matmul(x, w, s, bias=np.ones(8, BF16))
    with pytest.raises(TypeError, match="weight must have dtype"):
        golden_weight_quant_matmul(x, w.astype(np.int16), s)
