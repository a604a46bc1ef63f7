"""Goldens and input generators of all_to_all_quant_matmul (apace ST `all_to_all_quant_matmul`).

Per rank j (R ranks, K per rank Ka):
    C_j = sum_s deq(A_s[j*oriM:(j+1)*oriM]) @ deq(B_j[s*Ka:(s+1)*Ka])
where A_s is rank s's x1 (R*oriM, Ka) and B_j is rank j's x2, stored transposed (N, R*Ka). Since the
row blocks of all ranks are concatenated along K, the CANN recipe is one FP32 matmul of the gathered
(oriM, R*Ka) operand with B_j, cast to the output type; `golden_a2a_float64` is the exact reference.
Both take the x1 / x1_scale of every rank (the host has them in the ST; here `gather_x1` collects them).
Both decode through `numerics.golden` (ml_dtypes / np.ldexp), never the kernel's numerics path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.numerics import (
    E8m0Cast,
    ElemFormat,
    from_ascend_scale_a,
    from_ascend_scale_b,
    gen_st_elements,
    gen_st_scales,
    golden_mx_matmul,
    quantize_mx,
    to_ascend_scale_a,
    to_ascend_scale_b,
)
from mc2emu.numerics.golden import golden_decode_elements, golden_decode_scales
from mc2emu.numerics.scale_layout import scale_blocks

# The CANN A2A ST generator seeds numpy with 42 on every rank.
ST_SEED = 42


def gathered_operand(x1_all: list[np.ndarray], x1_scale_all: list[np.ndarray], rank: int,
                     ori_m: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s logical A (oriM, R*Ka) and its Ascend scale (oriM, R*ceil(Ka/64), 2)."""
    rows = slice(rank * ori_m, (rank + 1) * ori_m)
    a = np.concatenate([x[rows] for x in x1_all], axis=1)
    sa = np.concatenate([s[rows] for s in x1_scale_all], axis=1)
    return a, sa


def golden_a2a(x1_all: list[np.ndarray], x1_scale_all: list[np.ndarray], x2: np.ndarray,
               x2_scale: np.ndarray, rank: int, elem: ElemFormat | str, out_dtype: Any = "bfloat16",
               x2_elem: ElemFormat | str | None = None) -> np.ndarray:
    """The CANN recipe: dequantize to FP32 (scales repeated x32 along K), one FP32 matmul, cast."""
    ori_m = x1_all[0].shape[0] // len(x1_all)
    a, sa = gathered_operand(x1_all, x1_scale_all, rank, ori_m)
    return golden_mx_matmul(a, sa, x2, x2_scale, elem, out_dtype, trans_b=True, b_elem=x2_elem)


def golden_a2a_float64(x1_all: list[np.ndarray], x1_scale_all: list[np.ndarray], x2: np.ndarray,
                       x2_scale: np.ndarray, rank: int, elem: ElemFormat | str,
                       x2_elem: ElemFormat | str | None = None) -> np.ndarray:
    """Exact reference: dequantized operands in float64 (exact), float64 matmul, no output cast."""
    ori_m = x1_all[0].shape[0] // len(x1_all)
    a, sa = gathered_operand(x1_all, x1_scale_all, rank, ori_m)
    fa = ElemFormat.parse(elem)
    fb = fa if x2_elem is None else ElemFormat.parse(x2_elem)
    k = a.shape[1]
    sa_blocks = from_ascend_scale_a(sa, k)                       # (m, nb)
    sb_blocks = from_ascend_scale_b(x2_scale, k, trans=True)     # (n, nb)
    a64 = golden_decode_elements(a, fa).astype(np.float64)
    b64 = golden_decode_elements(x2, fb).astype(np.float64)
    a64 *= np.repeat(golden_decode_scales(sa_blocks).astype(np.float64), 32, axis=1)[:, :k]
    b64 *= np.repeat(golden_decode_scales(sb_blocks).astype(np.float64), 32, axis=1)[:, :k]
    return a64 @ b64.T


def gen_st_inputs(rank: int, rank_size: int, ori_m: int, ka: int, n: int, *, seed: int = ST_SEED,
                  elem: ElemFormat | str = ElemFormat.E4M3,
                  e8m0_cast: E8m0Cast | str = E8m0Cast.TRUNC) -> dict[str, np.ndarray]:
    """ST-style inputs of one rank: elements uniform(1, 8) cast to the element format, scales uniform(1, 8)
    cast to E8M0 (truncation as the CANN A2A generator's en_dtypes does, or rounding as ml_dtypes does).
    The seed is offset by the rank so ranks hold different data."""
    fmt = ElemFormat.parse(elem)
    rng = np.random.default_rng(seed + rank)
    k_pairs = scale_blocks(ka) // 2 + scale_blocks(ka) % 2
    x1 = _cast_elements(gen_st_elements((rank_size * ori_m, ka), rng), fmt)
    x1_scale = gen_st_scales((rank_size * ori_m, k_pairs, 2), rng, e8m0_cast)
    x2 = _cast_elements(gen_st_elements((n, rank_size * ka), rng), fmt)
    x2_scale = gen_st_scales((n, rank_size * k_pairs, 2), rng, e8m0_cast)
    return {"x1": x1, "x1_scale": x1_scale, "x2": x2, "x2_scale": x2_scale}


def gen_signed_inputs(rank: int, rank_size: int, ori_m: int, ka: int, n: int, *, seed: int = 7,
                      elem: ElemFormat | str = ElemFormat.E4M3) -> dict[str, np.ndarray]:
    """Signed normal data quantized with the OCP rule: exercises signs, cancellation and varied scales."""
    fmt = ElemFormat.parse(elem)
    rng = np.random.default_rng([seed, rank])
    a = rng.standard_normal((rank_size * ori_m, ka)).astype(np.float32) * rng.choice(
        [0.25, 1.0, 8.0], size=(rank_size * ori_m, 1)).astype(np.float32)
    b = rng.standard_normal((n, rank_size * ka)).astype(np.float32)
    qa = quantize_mx(a, fmt, axis=1)
    qb = quantize_mx(b, fmt, axis=1)
    x1_scale = to_ascend_scale_a(qa.scale)
    x2_scale = to_ascend_scale_b(qb.scale, trans=True)
    return {"x1": qa.data, "x1_scale": x1_scale, "x2": qb.data, "x2_scale": x2_scale}


def _cast_elements(x: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    if fmt.ml_dtype is None:
        raise ValueError(f"ST generator needs an ml_dtypes element format, not {fmt.value}")
    return x.astype(fmt.ml_dtype)
