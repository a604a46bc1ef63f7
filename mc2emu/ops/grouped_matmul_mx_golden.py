"""CANN-style golden of the MX GroupedMatmul (GroupedMatmulV4 with E8M0 scales): per group, dequantize both
operands to FP32 (scales repeated x32 along K), one FP32 matmul, + the group's FP32 bias, cast (RNE).

Decodes through `numerics.golden` (ml_dtypes / np.ldexp), never the kernel's path. Layouts (the source's):

- split-M (group_type "split_m"): x [M, K], x_scale [M, ceil(K/64), 2], weight [g, K, N] (trans_b: [g, N, K]),
  weight_scale [g, ceil(K/64), N, 2] (trans_b: [g, N, ceil(K/64), 2]); group i (in list order) owns the next
  size_i rows of x and y and uses weight[group index]; y [M, N]; rows past the list's total stay 0.
- split-K (group_type "split_k", trans_a): x [K, M], x_scale [K/64 + g, M, 2], weight [K, N],
  weight_scale [K/64 + g, N, 2]; group i owns K rows [S_i, S_i + k_i) of x and weight and the scale rows
  from S_i // 64 + i (each group's scales start a fresh 64-block); y [g, M, N], zeros where k_i == 0.
- group_list: "cumsum" (running totals), "count" (sizes) or "sparse" ([E, 2] rows (group index, size)).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import MX_GROUP_SIZE, MXFP_DIVISOR_SIZE
from mc2emu.numerics.golden import golden_cast, golden_decode_elements, golden_decode_scales
from mc2emu.ops.quant_batch_matmul_mx_golden import infer_format


def group_entries(group_list: Any, group_list_type: str) -> list[tuple[int, int]]:
    """(group index, size) per list entry, in list order (sizes of a cumsum list are its differences)."""
    gl = np.asarray(group_list, dtype=np.int64)
    if group_list_type == "sparse":
        return [(int(g), int(s)) for g, s in gl.reshape(-1, 2)]
    if group_list_type == "count":
        return [(i, int(s)) for i, s in enumerate(gl.reshape(-1))]
    prev, out = 0, []
    for i, c in enumerate(gl.reshape(-1)):
        out.append((i, int(c) - prev))
        prev = int(c)
    return out


def split_m_segments(entries: list[tuple[int, int]], group_list_type: str) -> list[tuple[int, int, int]]:
    """(group index, first row, rows) of every split-M group that has rows, in list order. A sparse list stops
    at its first empty entry before the last; the last entry still runs, on the rows right after those read."""
    out: list[tuple[int, int, int]] = []
    start = 0
    last = len(entries) - 1
    for i, (g, rows) in enumerate(entries):
        if rows <= 0:
            if group_list_type == "sparse" and i < last:
                g_last, rows_last = entries[last]
                if rows_last > 0:
                    out.append((g_last, start, rows_last))
                break
            continue
        out.append((g, start, rows))
        start += rows
    return out


def _per_element(scale_rows_k: np.ndarray, k: int) -> np.ndarray:
    """float32 (rows, k) per-element scales from decoded (rows, pairs, 2) scales."""
    s = scale_rows_k.reshape(scale_rows_k.shape[0], int(np.prod(scale_rows_k.shape[1:])))  # rows may be 0
    return np.repeat(s, MX_GROUP_SIZE, axis=1)[:, :k]


def golden_grouped_matmul_mx(x: Any, x_scale: Any, weight: Any, weight_scale: Any, group_list: Any, *,
                             group_type: str = "split_m", group_list_type: str = "cumsum", trans_b: bool = False,
                             bias: Any = None, out_dtype: Any = "bfloat16", x_format: ElemFormat | str | None = None,
                             weight_format: ElemFormat | str | None = None) -> np.ndarray:
    """y of the MX GroupedMatmul (see the module docstring)."""
    fx = infer_format(x, x_format, "x")
    fw = infer_format(weight, weight_format, "weight")
    xv = golden_decode_elements(np.asarray(x), fx)
    wv = golden_decode_elements(np.asarray(weight), fw)
    sx = golden_decode_scales(np.asarray(x_scale))
    sw = golden_decode_scales(np.asarray(weight_scale))
    entries = group_entries(group_list, group_list_type)
    if group_type == "split_k":
        m = xv.shape[1]
        n = wv.shape[0] if trans_b else wv.shape[1]
        acc = np.zeros((len(entries), m, n), dtype=np.float32)
        start = 0
        for i, (g, k) in enumerate(entries):
            if k <= 0:
                continue
            r0 = start // MXFP_DIVISOR_SIZE + i
            pairs = -(-k // MXFP_DIVISOR_SIZE)
            a = xv[start:start + k].T * _per_element(np.swapaxes(sx[r0:r0 + pairs], 0, 1), k)
            b_nk = wv[:, start:start + k] if trans_b else wv[start:start + k].T
            sb = sw[:, r0:r0 + pairs] if trans_b else np.swapaxes(sw[r0:r0 + pairs], 0, 1)
            acc[g] = a @ (b_nk * _per_element(sb, k)).T
            start += k
        if bias is not None:
            acc = acc + np.asarray(bias, dtype=np.float32)[:, None, :]
        return golden_cast(acc, out_dtype)
    m_total, k = xv.shape
    n = wv.shape[1] if trans_b else wv.shape[2]
    acc = np.zeros((m_total, n), dtype=np.float32)
    a_all = xv * _per_element(sx, k)
    for g, start, rows in split_m_segments(entries, group_list_type):
        b_nk = wv[g] if trans_b else wv[g].T
        sb = sw[g] if trans_b else np.swapaxes(sw[g], 0, 1)
        acc[start:start + rows] = a_all[start:start + rows] @ (b_nk * _per_element(sb, k)).T
        if bias is not None:
            acc[start:start + rows] += np.asarray(bias, dtype=np.float32)[g]
    return golden_cast(acc, out_dtype)
