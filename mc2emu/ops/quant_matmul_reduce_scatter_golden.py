"""Golden and input recipes of quant_matmul_reduce_scatter (compute-first MC2, seed 000 §4.6-4.8 / §7.2).

Semantics (seed 000 §4.7 "完整输入", SPEC §7.2): every rank j holds its own full A_j (M, K) and its own B_j
stored transposed as x2 (N, K). The kernels stage C_j = bf16(deq(A_j) @ deq(B_j) (+ bias_j)) (FP32 in L0C,
fixpipe RNE to bf16), all-to-all the M segments and reduce them on the AIV in FP32:

    y_r = bf16_RNE( sum_{j = 0, 1, ..., R - 1 in this order} fp32( C_j[r * M/R : (r + 1) * M/R] ) )

The ST golden of the shipped kernel (`tests/st/quant_matmul_reduce_scatter/ubmem`, main.cpp's contract
"y_j = sum_i(C_i)[j*M/R : (j+1)*M/R, :]") sums the FP32 partial products; the reduction here is the one
both kernels run: the staged C_j are bf16, so each term is rounded before the FP32 sum (§4.6 item 4: "BF16 ->
Cast float32 -> Add -> Cast back BF16 (CAST_RINT)"). The order of the FP32 sum matters for signed data with
cancellation: `order` lets a test build a golden that sums in another order and show the difference.

The K-split (tensor-parallel) reading (§4.7 "K 轴切分"): rank j holds the K columns [j * K/R, (j + 1) * K/R)
of a logical A (M, K) and the matching rows of B; its C_j is a partial sum over its K slice and y_r is the
same reduce-scatter of the bf16 partials. `golden_qmrs_tp_reference` gives the one-matmul value of the
logical problem for comparison (it differs from y_r by the bf16 roundings of the partials).

Everything decodes through `numerics.golden` (ml_dtypes / np.ldexp), never the kernel's numerics path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np

from mc2emu.numerics import ElemFormat, golden_mx_matmul
from mc2emu.numerics.golden import gen_ag_scales, gen_st_elements, golden_cast
from mc2emu.numerics.int_math import CeilDiv

# `MXFP_DIVISOR_SIZE`: one stored scale pair per 64 elements of K.
SCALE_PAIR_K = 64
E8M0_BIAS = 127
# ST recipe seed (the AG ST recipe: 42 + rank).
ST_SEED_BASE = 42
# Signed recipe: integer elements in [-SIGNED_ELEM_MAX, SIGNED_ELEM_MAX] (exact in E4M3, so every FP32 matmul
# is exact whatever its accumulation order), and a large scale exponent on the even ranks: their C_j are
# ~2^SIGNED_BIG_EXP larger than the odd ranks', so the FP32 sum over ranks drops low bits depending on order.
SIGNED_ELEM_MAX = 8
SIGNED_BIG_EXP = 20


def _layout(a: np.ndarray, a_scale: np.ndarray, b: np.ndarray, b_scale: np.ndarray) -> dict[str, np.ndarray]:
    return {"x1": a, "x1_scale": a_scale, "x2": np.ascontiguousarray(b.T),
            "x2_scale": np.ascontiguousarray(b_scale.transpose(2, 0, 1))}


def gen_qmrs_st_inputs(m: int, k: int, n: int, rank: int, *, seed_base: int = ST_SEED_BASE) -> dict[str, np.ndarray]:
    """One rank's inputs by the ST recipe (seed 42 + rank): A (m, k) and B (k, n) uniform(1, 8) as E4M3,
    scales 2^0 or 2^1; B stored transposed (N, K), scaleB as (N, ceil(K/64), 2)."""
    rng = np.random.RandomState(seed_base + rank)
    pairs = CeilDiv(k, SCALE_PAIR_K)
    a = gen_st_elements((m, k), rng)
    a_scale = gen_ag_scales((m, pairs, 2), rng)
    b = gen_st_elements((k, n), rng)
    b_scale = gen_ag_scales((pairs, 2, n), rng)
    return _layout(a, a_scale, b, b_scale)


def gen_qmrs_signed_inputs(m: int, k: int, n: int, rank: int, *, seed_base: int = ST_SEED_BASE
                           ) -> dict[str, np.ndarray]:
    """Signed inputs with cancellation across ranks (module docstring): integer E4M3 elements in [-8, 8],
    x1 scales 2^SIGNED_BIG_EXP on even ranks and 2^0 on odd ranks, x2 scales 2^0."""
    rng = np.random.RandomState(seed_base + 1000 + rank)
    pairs = CeilDiv(k, SCALE_PAIR_K)
    a = rng.randint(-SIGNED_ELEM_MAX, SIGNED_ELEM_MAX + 1, size=(m, k)).astype(np.float32)
    b = rng.randint(-SIGNED_ELEM_MAX, SIGNED_ELEM_MAX + 1, size=(k, n)).astype(np.float32)
    exp = SIGNED_BIG_EXP if rank % 2 == 0 else 0
    a_scale = np.full((m, pairs, 2), E8M0_BIAS + exp, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    b_scale = np.full((pairs, 2, n), E8M0_BIAS, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    return _layout(a.astype(ml_dtypes.float8_e4m3fn), a_scale, b.astype(ml_dtypes.float8_e4m3fn), b_scale)


def golden_qmrs_partial(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                        bias: np.ndarray | None = None, out_dtype: Any = "bfloat16",
                        elem: ElemFormat | str | None = None, x2_elem: ElemFormat | str | None = None) -> np.ndarray:
    """One rank's staged C_j (M, N): deq(x1) @ deq(x2)^T in FP32 (+ bias, FP32), cast RNE to `out_dtype`."""
    fa = ElemFormat.parse(np.asarray(x1).dtype if elem is None else elem)
    fb = ElemFormat.parse(np.asarray(x2).dtype if x2_elem is None else x2_elem)
    c = golden_mx_matmul(x1, x1_scale, x2, x2_scale, fa, "float32", trans_b=True, b_elem=fb)
    if bias is not None:
        c = c + np.asarray(bias, dtype=np.float32).reshape(1, -1)
    return golden_cast(c, out_dtype)


def golden_reduce_scatter(partials: Sequence[np.ndarray], rank: int, *, out_dtype: Any = "bfloat16",
                          order: Sequence[int] | None = None) -> np.ndarray:
    """y_rank = cast_RNE(sum over j in `order` (default 0, 1, ..., R - 1) of fp32(partials[j][rank segment]))."""
    R = len(partials)
    m = np.asarray(partials[0]).shape[0]
    seg = m // R
    acc = np.zeros((seg, np.asarray(partials[0]).shape[1]), dtype=np.float32)
    for j in (range(R) if order is None else order):
        acc = acc + np.asarray(partials[j])[rank * seg:(rank + 1) * seg].astype(np.float32)
    return golden_cast(acc, out_dtype)


def golden_quant_matmul_reduce_scatter(x1_all: Sequence[np.ndarray], x1_scale_all: Sequence[np.ndarray],
                                       x2_all: Sequence[np.ndarray], x2_scale_all: Sequence[np.ndarray],
                                       rank: int, *, bias_all: Sequence[np.ndarray | None] | None = None,
                                       out_dtype: Any = "bfloat16", order: Sequence[int] | None = None
                                       ) -> np.ndarray:
    """The golden of one rank, from every rank's inputs (rank order). Both splits use it: for split="k" the
    per-rank x1 / x2 are the K slices, and C_j is rank j's partial product (module docstring)."""
    R = len(x1_all)
    biases = [None] * R if bias_all is None else list(bias_all)
    partials = [golden_qmrs_partial(x1_all[j], x1_scale_all[j], x2_all[j], x2_scale_all[j], bias=biases[j])
                for j in range(R)]
    return golden_reduce_scatter(partials, rank, out_dtype=out_dtype, order=order)


def golden_qmrs_tp_reference(x1_all: Sequence[np.ndarray], x1_scale_all: Sequence[np.ndarray],
                             x2_all: Sequence[np.ndarray], x2_scale_all: Sequence[np.ndarray], rank: int, *,
                             out_dtype: Any = "bfloat16") -> np.ndarray:
    """The K-split reading as one logical matmul: concat_K(x1) @ concat_K(x2)^T in FP32, this rank's M segment,
    cast once (no per-rank bf16 partials). For comparison with the kernel's y_r, not bit-exact to it."""
    a = np.concatenate([np.asarray(x) for x in x1_all], axis=1)
    sa = np.concatenate([np.asarray(s) for s in x1_scale_all], axis=1)
    b = np.concatenate([np.asarray(x) for x in x2_all], axis=1)
    sb = np.concatenate([np.asarray(s) for s in x2_scale_all], axis=1)
    fa = ElemFormat.parse(a.dtype)
    c = golden_mx_matmul(a, sa, b, sb, fa, "float32", trans_b=True, b_elem=ElemFormat.parse(b.dtype))
    seg = c.shape[0] // len(x1_all)
    return golden_cast(c[rank * seg:(rank + 1) * seg], out_dtype)
