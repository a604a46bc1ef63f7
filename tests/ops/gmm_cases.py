"""Inputs for grouped_matmul_mx tests: CANN ST style elements (uniform(1, 8) -> E4M3, or random FP4 codes) and
E8M0 scale codes 2^-1 .. 2^1, in the source's layouts (see golden_grouped_matmul_mx)."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE

E8M0_BIAS = 127  # code of 2^0


@dataclass
class GmmCase:
    x: np.ndarray
    x_scale: np.ndarray
    weight: np.ndarray
    weight_scale: np.ndarray
    group_list: np.ndarray
    kw: dict

    def args(self) -> tuple:
        return self.x, self.x_scale, self.weight, self.weight_scale, self.group_list


def _elems(rng: np.random.Generator, shape: tuple[int, ...], fp4: bool) -> np.ndarray:
    if fp4:
        return rng.integers(0, 16, size=shape, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    signs = rng.choice([-1.0, 1.0], size=shape)
    return (rng.uniform(1, 8, size=shape) * signs).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)


def _scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(E8M0_BIAS - 1, E8M0_BIAS + 2, size=shape, dtype=np.uint8)


def split_m_case(sizes, n: int, k: int, *, m: int | None = None, trans_b: bool = False, fp4: bool = False,
                 group_list_type: str = "count", groups: int | None = None, seed: int = 0) -> GmmCase:
    """x [M, K] (M = sum(sizes) unless given); `sizes` are per-entry rows ((group, rows) pairs when sparse)."""
    rng = np.random.default_rng(seed)
    rows = [s for _g, s in sizes] if group_list_type == "sparse" else list(sizes)
    g = groups if groups is not None else len(sizes)
    m = sum(rows) if m is None else m
    pairs = -(-k // MXFP_DIVISOR_SIZE)
    x = _elems(rng, (m, k), fp4)
    w = _elems(rng, (g, n, k) if trans_b else (g, k, n), fp4)
    sx = _scales(rng, (m, pairs, 2))
    sw = _scales(rng, (g, n, pairs, 2) if trans_b else (g, pairs, n, 2))
    gl = np.cumsum(rows).astype(np.int64) if group_list_type == "cumsum" else np.asarray(sizes, dtype=np.int64)
    return GmmCase(x, sx, w, sw, gl, {"group_list_type": group_list_type, "trans_b": trans_b})


def split_k_case(ks, m: int, n: int, *, seed: int = 0, group_list_type: str = "count") -> GmmCase:
    """x [K, M] (transA), weight [K, N], scales [K/64 + g, ., 2]; `ks` are the groups' K extents."""
    rng = np.random.default_rng(seed)
    k, g = sum(ks), len(ks)
    rows = k // MXFP_DIVISOR_SIZE + g
    x = _elems(rng, (k, m), False)
    w = _elems(rng, (k, n), False)
    sx = _scales(rng, (rows, m, 2))
    sw = _scales(rng, (rows, n, 2))
    gl = np.cumsum(ks).astype(np.int64) if group_list_type == "cumsum" else np.asarray(ks, dtype=np.int64)
    return GmmCase(x, sx, w, sw, gl, {"group_list_type": group_list_type, "group_type": "split_k",
                                      "trans_a": True})
