"""Ascend MX scale layouts: per-32-block scales <-> the (.., ceil(K/64), .., SCALE_C0 = 2) GM layouts.

Emulates the `MakeLayoutScaleA` / `MakeLayoutScaleB` layouts of the Blaze MX kernels (seed 000 §5.1-5.2,
seed 004, SPEC §4). A row of K elements has ceil(K/32) scales; GM stores them as ceil(K/64) pairs
(`scaleKLen = CeilDiv(K, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE`), an odd block count padded with a
0x00 code. The pair is always the innermost dimension:

    A      (m, k) -> scale (m, nb)  -> (m, ceil(k/64), 2)
    A^T    (k, m) -> scale (nb, m)  -> (ceil(k/64), m, 2)
    B      (k, n) -> scale (nb, n)  -> (ceil(k/64), n, 2)
    B^T    (n, k) -> scale (n, nb)  -> (n, ceil(k/64), 2)

The input of every `to_ascend_*` is the scale array quantize_mx returns for the operand in its stored
layout (K replaced by nb = ceil(k/32) blocks, K axis in the same position). Arrays may be uint8 codes or
float8_e8m0fnu; the dtype is preserved and padding is the code 0x00 (2^-127, never read for data since
the K tail is zero-padded).
"""

from __future__ import annotations

import numpy as np

from mc2emu.numerics.constants import MX_GROUP_SIZE, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE, SCALE_C0
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE
from mc2emu.numerics.int_math import CeilDiv

SCALE_PAD_CODE = 0x00  # code written into the unused half of the last pair when ceil(K/32) is odd.


def scale_blocks(k: int) -> int:
    """Per-row MX scale count: ceil(k / MX_GROUP_SIZE)."""
    return CeilDiv(k, MX_GROUP_SIZE)


def scale_k_len(k: int) -> int:
    """Per-row stored scale count (`scaleKLen`): ceil(k / MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE."""
    return CeilDiv(k, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE


def _codes(arr: np.ndarray, param: str, ndim: int) -> np.ndarray:
    if arr.dtype not in (np.dtype(np.uint8), E8M0_DTYPE):
        raise MxTypeError(f"{param} must be uint8 E8M0 codes or float8_e8m0fnu, got {arr.dtype}")
    if arr.ndim != ndim:
        raise MxValueError(f"{param} must be {ndim}-D, got shape {arr.shape}")
    return arr.view(np.uint8)


def _pad_even(codes: np.ndarray, block_axis: int) -> np.ndarray:
    """Append one SCALE_PAD_CODE block along block_axis when the block count is odd."""
    if codes.shape[block_axis] % SCALE_C0 == 0:
        return codes
    pad_shape = list(codes.shape)
    pad_shape[block_axis] = 1
    return np.concatenate([codes, np.full(pad_shape, SCALE_PAD_CODE, np.uint8)], axis=block_axis)


def _pairs_last(scale: np.ndarray) -> np.ndarray:
    """(rows, nb) -> (rows, ceil(nb/2), 2)."""
    arr = np.asarray(scale)
    c = _pad_even(_codes(arr, "scale", 2), 1)
    return np.ascontiguousarray(c.reshape(c.shape[0], -1, SCALE_C0)).view(arr.dtype)


def _pairs_first(scale: np.ndarray) -> np.ndarray:
    """(nb, cols) -> (ceil(nb/2), cols, 2)."""
    arr = np.asarray(scale)
    c = _pad_even(_codes(arr, "scale", 2), 0)
    paired = c.reshape(-1, SCALE_C0, c.shape[1]).transpose(0, 2, 1)
    return np.ascontiguousarray(paired).view(arr.dtype)


def _check_ascend(ascend: np.ndarray, k: int, pair_axis_pos: int) -> np.ndarray:
    c = _codes(ascend, "ascend", 3)
    if c.shape[2] != SCALE_C0:
        raise MxValueError(f"ascend last dimension must be SCALE_C0={SCALE_C0}, got shape {c.shape}")
    want = scale_k_len(k) // SCALE_C0
    if c.shape[pair_axis_pos] != want:
        raise MxValueError(
            f"ascend dimension {pair_axis_pos} must be ceil(k/{MXFP_DIVISOR_SIZE}) = {want} for k={k}, "
            f"got shape {c.shape}"
        )
    return c


def _unpair_last(ascend: np.ndarray, k: int) -> np.ndarray:
    """(rows, ceil(k/64), 2) -> (rows, ceil(k/32))."""
    arr = np.asarray(ascend)
    c = _check_ascend(arr, k, 1)
    out = c.reshape(c.shape[0], -1)[:, : scale_blocks(k)]
    return np.ascontiguousarray(out).view(arr.dtype)


def _unpair_first(ascend: np.ndarray, k: int) -> np.ndarray:
    """(ceil(k/64), cols, 2) -> (ceil(k/32), cols)."""
    arr = np.asarray(ascend)
    c = _check_ascend(arr, k, 0)
    out = c.transpose(0, 2, 1).reshape(-1, c.shape[1])[: scale_blocks(k)]
    return np.ascontiguousarray(out).view(arr.dtype)


def to_ascend_scale_a(scale: np.ndarray, trans: bool = False) -> np.ndarray:
    """A scales to GM layout: (m, nb) -> (m, ceil(k/64), 2); trans: (nb, m) -> (ceil(k/64), m, 2)."""
    return _pairs_first(scale) if trans else _pairs_last(scale)


def from_ascend_scale_a(ascend: np.ndarray, k: int, trans: bool = False) -> np.ndarray:
    """Inverse of to_ascend_scale_a: drops the pad block; k is A's reduction length."""
    return _unpair_first(ascend, k) if trans else _unpair_last(ascend, k)


def to_ascend_scale_b(scale: np.ndarray, trans: bool = False) -> np.ndarray:
    """B scales to GM layout: (nb, n) -> (ceil(k/64), n, 2); trans: (n, nb) -> (n, ceil(k/64), 2)."""
    return _pairs_last(scale) if trans else _pairs_first(scale)


def from_ascend_scale_b(ascend: np.ndarray, k: int, trans: bool = False) -> np.ndarray:
    """Inverse of to_ascend_scale_b: drops the pad block; k is B's reduction length."""
    return _unpair_last(ascend, k) if trans else _unpair_first(ascend, k)
