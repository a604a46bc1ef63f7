"""CANN golden of the MX quant batch matmul (QBMM MX), the reference `quant_batch_matmul_mx` is checked against.

The CANN recipe (SPEC §4): decode both operands to FP32, repeat each E8M0 scale x32 along K, multiply,
ONE float32 matmul per batch (numpy broadcasting over the batch dimensions), add the FP32 bias, cast to the
output type (round to nearest even). Decode and cast are the goldens' own (`numerics.golden`: ml_dtypes /
np.ldexp), never the kernel's numerics path. It is deliberately not K-ordered like the device; the difference is
what the compare rules absorb (`numerics.ag_compare`: bit-exact or <= 1 bf16 ULP).

Shapes (as the op takes them): x1 (..., m, k) or, transposed, (..., k, m); x2 (..., k, n) or (..., n, k);
scales in the Ascend layouts with the operand's batch dimensions in front: x1_scale (..., m, ceil(k/64), 2)
or (..., ceil(k/64), m, 2); x2_scale (..., ceil(k/64), n, 2) or (..., n, ceil(k/64), 2); bias (n,),
(1, n) or (batchC, 1, n). Elements are ml_dtypes arrays (float8_e4m3fn, float8_e5m2, float4_e2m1fn) or
uint8 codes with an explicit `x1_format` / `x2_format` (E1M2 has no ml_dtypes type).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import MX_GROUP_SIZE, SCALE_C0
from mc2emu.numerics.golden import golden_cast, golden_decode_elements, golden_decode_scales


def infer_format(x: np.ndarray, fmt: ElemFormat | str | None, param: str) -> ElemFormat:
    """The element format of an operand: explicit, or from its ml_dtypes dtype."""
    if fmt is not None:
        return ElemFormat.parse(fmt, f"{param}_format")
    return ElemFormat.parse(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype, f"{param}.dtype")


def _scale_rows_k(scale: np.ndarray, k: int, k_pairs_axis_first: bool) -> np.ndarray:
    """float32 (..., rows, k) per-element scales from an Ascend scale array with the pair axis last.

    k_pairs_axis_first: the layout is (..., ceil(k/64), rows, 2), else (..., rows, ceil(k/64), 2)."""
    s = golden_decode_scales(np.asarray(scale))
    if k_pairs_axis_first:
        s = np.swapaxes(s, -3, -2)  # (..., rows, pairs, 2)
    s = s.reshape(*s.shape[:-2], s.shape[-2] * SCALE_C0)[..., : -(-k // MX_GROUP_SIZE)]
    return np.repeat(s, MX_GROUP_SIZE, axis=-1)[..., :k]


def golden_quant_batch_matmul_mx(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                                 bias: np.ndarray | None = None, trans_a: bool = False, trans_b: bool = False,
                                 out_dtype: Any = "bfloat16", x1_format: ElemFormat | str | None = None,
                                 x2_format: ElemFormat | str | None = None) -> np.ndarray:
    """C = cast(dequant(x1) @ dequant(x2) + bias): the CANN QBMM MX golden (FP32 accumulation)."""
    fa = infer_format(x1, x1_format, "x1")
    fb = infer_format(x2, x2_format, "x2")
    a = golden_decode_elements(np.asarray(x1), fa)
    b = golden_decode_elements(np.asarray(x2), fb)
    a_mk = np.swapaxes(a, -1, -2) if trans_a else a  # (..., m, k)
    b_nk = b if trans_b else np.swapaxes(b, -1, -2)  # (..., n, k)
    k = a_mk.shape[-1]
    a_deq = a_mk * _scale_rows_k(x1_scale, k, k_pairs_axis_first=trans_a)
    b_deq = b_nk * _scale_rows_k(x2_scale, k, k_pairs_axis_first=not trans_b)
    c = np.matmul(a_deq, np.swapaxes(b_deq, -1, -2))
    if bias is not None:
        bias32 = np.asarray(bias).astype(np.float32)
        if bias32.ndim == 3:  # (batchC, 1, n): one row per flattened batch of C
            bias32 = bias32.reshape(*c.shape[:-2], 1, c.shape[-1])
        c = c + bias32
    return golden_cast(c, out_dtype)
