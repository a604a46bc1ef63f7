"""Golden of the weight-quant matmul (seed 001, Blaze weight-dequant prologue fusion).

Follows the seed's golden contract (pitfalls-and-diagnosis.md §5): the dequant is done in bf16 / fp16
arithmetic, never as an FP32 simulation of it,

    int8:  B_bf16 = B.astype(float16).astype(bfloat16)       (two casts, as the device chain)
           B_fp16 = B.astype(float16)
    fp8:   B_16   = B.astype(float32).astype(bfloat16 | float16)
    B_dequant = (B_16 + offset) * scale                       (each op in the 16-bit type; no Add without offset)
    C = cast(float32(A) @ float32(B_dequant) + bias_fp32)     (FP32 accumulation, then C's type)

with ml_dtypes / numpy 16-bit arithmetic (each ufunc rounds its result to bf16 / half, nearest even). It
shares nothing with the emulator's dequant path (`mc2emu.numerics.weight_dequant`, an integer rounding of
float32 bits), so the two checking each other bit for bit on B_dequant means something. The matmul part is
one float32 matmul (BLAS order), not K-ordered like L0C: compare C with a tolerance, B_dequant exactly.

Shapes: x (M, K) bf16 / fp16; weight (K, N), or (N, K) when `trans_b`, int8 / float8_e4m3fn / float8_e5m2;
antiquant_scale and antiquant_offset (N,) in x's dtype; bias (N,) float32; out_dtype defaults to x's dtype.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
FP16 = np.dtype(np.float16)
WEIGHT_DTYPES = ("int8", "float8_e4m3fn", "float8_e5m2")
OUT_DTYPES = (BF16, FP16, np.dtype(np.float32))


def _dequant_type(scale: np.ndarray) -> np.dtype:
    dt = scale.dtype if hasattr(scale, "dtype") else np.asarray(scale).dtype
    if dt not in (BF16, FP16):
        raise TypeError(f"antiquant_scale must be bfloat16 or float16 (x's dtype), got {dt}")
    return dt


def golden_cast_weight(weight: np.ndarray, dequant_dtype: Any) -> np.ndarray:
    """B in the dequant type by the seed's host casts (int8 via float16; fp8 via float32)."""
    w = np.asarray(weight)
    dt = np.dtype(dequant_dtype)
    if w.dtype.name == "int8":
        h = w.astype(np.float16)
        return h.astype(dt) if dt == BF16 else h
    if w.dtype.name in ("float8_e4m3fn", "float8_e5m2"):
        return w.astype(np.float32).astype(dt)
    raise TypeError(f"weight must have dtype {', '.join(WEIGHT_DTYPES)}, got {w.dtype}")


def golden_weight_dequant(weight: np.ndarray, antiquant_scale: np.ndarray,
                          antiquant_offset: np.ndarray | None = None, *, trans_b: bool = False) -> np.ndarray:
    """B_dequant = (B + offset) * scale in the scale's 16-bit type, in weight's layout ((K, N) or (N, K))."""
    dt = _dequant_type(antiquant_scale)
    w = np.asarray(weight)
    if w.ndim != 2:
        raise ValueError(f"weight must be 2-D, got shape {w.shape}")
    n = w.shape[0] if trans_b else w.shape[1]
    scale = np.asarray(antiquant_scale)
    if scale.shape != (n,):
        raise ValueError(f"antiquant_scale must have shape ({n},), got {scale.shape}")
    per_channel = (slice(None), None) if trans_b else (None, slice(None))
    b = golden_cast_weight(w, dt)
    if antiquant_offset is not None:
        offset = np.asarray(antiquant_offset)
        if offset.dtype != dt or offset.shape != (n,):
            raise ValueError(f"antiquant_offset must be {dt} of shape ({n},), got {offset.dtype} {offset.shape}")
        with np.errstate(over="ignore", invalid="ignore"):
            b = b + offset[per_channel]
    with np.errstate(over="ignore", invalid="ignore"):  # +-Inf and NaN are the 16-bit results, as on the device
        return b * scale[per_channel]


def golden_weight_quant_matmul(x: np.ndarray, weight: np.ndarray, antiquant_scale: np.ndarray,
                               antiquant_offset: np.ndarray | None = None, *, bias: np.ndarray | None = None,
                               trans_b: bool = False, out_dtype: Any = None) -> np.ndarray:
    """C = cast(float32(x) @ float32(B_dequant) + bias) with the golden B_dequant; (M, N) in out_dtype."""
    a = np.asarray(x)
    if a.dtype not in (BF16, FP16) or a.ndim != 2:
        raise TypeError(f"x must be a 2-D bfloat16 / float16 array, got {a.dtype} {a.shape}")
    if np.asarray(antiquant_scale).dtype != a.dtype:
        raise TypeError(f"antiquant_scale must have x's dtype {a.dtype}, got {np.asarray(antiquant_scale).dtype}")
    out = a.dtype if out_dtype is None else np.dtype(out_dtype)
    if out not in OUT_DTYPES:
        raise TypeError(f"out_dtype must be bfloat16, float16 or float32, got {out}")
    b_kn = golden_weight_dequant(weight, antiquant_scale, antiquant_offset, trans_b=trans_b)
    if trans_b:
        b_kn = b_kn.T
    if b_kn.shape[0] != a.shape[1]:
        raise ValueError(f"x has K = {a.shape[1]} columns but the weight has K = {b_kn.shape[0]}")
    c = np.matmul(a.astype(np.float32), b_kn.astype(np.float32))
    if bias is not None:
        bias32 = np.asarray(bias)
        if bias32.dtype != np.float32 or bias32.shape != (b_kn.shape[1],):
            raise ValueError(f"bias must be float32 of shape ({b_kn.shape[1]},), got {bias32.dtype} {bias32.shape}")
        c = c + bias32[None, :]
    with np.errstate(over="ignore"):
        return c.astype(out)
