"""Golden and ST input recipe of all_gather_quant_matmul (apace ST `all_gather_quant_matmul`).

Per rank j (R ranks): C_j = cast(deq(concat_r x1_r) @ deq(x2_j)^T), shape (R * m, N), rank-major. The CANN
golden (`scripts/gen_data.py`, commit 5778144076) dequantizes both operands to FP32 (one scale per 32
elements along K), runs one FP32 matmul and casts to bf16; the verify rule (`scripts/verify_result.py`)
passes a rank when its output is bit-exact or within 1 bf16 ULP everywhere. The golden decodes through
`numerics.golden` (ml_dtypes / np.ldexp), never the kernel's numerics path.

Input recipe (gen_data.py): on rank r, `np.random.seed(42 + r)`, then in this order A (m, K) = uniform(1, 8)
as E4M3, scaleA (m, ceil(K/64), 2) = E8M0 codes randint(127, 129) (2^0 or 2^1), B (K, N) = uniform(1, 8) as
E4M3, scaleB (ceil(K/64), 2, N) likewise; B is stored transposed (N, K) and scaleB as (N, ceil(K/64), 2).
One difference: the ST encodes the elements with its own float_to_fp8_e4m3fn_vec, which clips the rounded
mantissa at 7 (a value within half an ULP below a power of two rounds down); here the cast is ml_dtypes'
round-to-nearest-even. Same draws, a few elements one code apart; the data stay in [1, 8].
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.numerics import ElemFormat, gen_st_elements, golden_mx_matmul
from mc2emu.numerics.compare import AG_MAX_ULP, ulp_stats
from mc2emu.numerics.golden import ag_st_seed, gen_ag_scales, golden_cast, golden_mx_operands
from mc2emu.numerics.int_math import CeilDiv

# `MXFP_DIVISOR_SIZE`: one stored scale pair per 64 elements of K.
SCALE_PAIR_K = 64


def gen_ag_st_inputs(m: int, k: int, n: int, rank: int, *, seed_base: int | None = None) -> dict[str, np.ndarray]:
    """One rank's inputs by the ST recipe (module docstring); `seed_base` replaces 42 (perturbed inputs)."""
    seed = ag_st_seed(rank) if seed_base is None else seed_base + rank
    rng = np.random.RandomState(seed)
    pairs = CeilDiv(k, SCALE_PAIR_K)
    a = gen_st_elements((m, k), rng)
    a_scale = gen_ag_scales((m, pairs, 2), rng)
    b = gen_st_elements((k, n), rng)
    b_scale = gen_ag_scales((pairs, 2, n), rng)
    return {"x1": a, "x1_scale": a_scale, "x2": np.ascontiguousarray(b.T),
            "x2_scale": np.ascontiguousarray(b_scale.transpose(2, 0, 1))}


def golden_all_gather_quant_matmul(x1_all: list[np.ndarray], x1_scale_all: list[np.ndarray], x2: np.ndarray,
                                   x2_scale: np.ndarray, *, out_dtype: Any = "bfloat16",
                                   elem: ElemFormat | str | None = None,
                                   x2_elem: ElemFormat | str | None = None,
                                   bias: np.ndarray | None = None) -> np.ndarray:
    """The CANN golden of one rank: the gathered x1 of every rank (rank order) times this rank's x2^T; `bias`
    ((N,) fp32, the slot ring's) is added once to every row of the FP32 product before the cast."""
    a = np.concatenate([np.asarray(x) for x in x1_all], axis=0)
    sa = np.concatenate([np.asarray(s) for s in x1_scale_all], axis=0)
    fa = ElemFormat.parse(a.dtype if elem is None else elem)
    fb = ElemFormat.parse(np.asarray(x2).dtype if x2_elem is None else x2_elem)
    if bias is None:
        return golden_mx_matmul(a, sa, x2, x2_scale, fa, out_dtype, trans_b=True, b_elem=fb)
    a_deq, b_deq = golden_mx_operands(a, sa, x2, x2_scale, fa, trans_b=True, b_elem=fb)
    acc = np.matmul(a_deq, b_deq) + np.asarray(bias, dtype=np.float32).reshape(1, -1)
    return golden_cast(acc.astype(np.float32), out_dtype)


def ag_st_verify(out: np.ndarray, golden: np.ndarray) -> tuple[bool, int, int]:
    """The ST verify rule on bf16 outputs: (pass, max ULP distance, count of differing elements); pass when
    bit-exact or every element within 1 ULP of the golden (`numerics.compare.ulp_stats`: +0 and -0 are 0
    apart, a sign crossing counts the values between)."""
    ulp_max, differing = ulp_stats(np.asarray(out), np.asarray(golden))
    return ulp_max <= AG_MAX_ULP, ulp_max, differing
