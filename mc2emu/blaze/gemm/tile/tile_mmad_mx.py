"""MX operand dequantization on the L1 -> L0 path, as the cube's MX LoadData + MMAD apply it.

Emulates the numeric effect of `AscendC::LoadData(l0, l1Data, l1Scale, ..., LoadData2DMxParams)` and
`Mmad` with `Blaze::Gemm::Tile::MmadTraitMX` (ops-tensor `blaze/gemm/tile/tile_mmad_mx.h`, seed 003 §8.2):
the elements of one L1 chunk are decoded and multiplied by their E8M0 scale (one per 32 along K), exactly
in float32 (every scale is a power of two), before the FP32 products accumulate in L0C.

The emulator decodes a whole L1 chunk at once (vectorized; the device decodes per baseK LoadData), which
gives the same float32 operands. Fast path: a pair table `uint16 -> two float32` (512 KiB) halves the
number of gathers of `numerics.decode_elements`; scales go through `numerics.block_scale`'s
reshape-broadcast multiply. The test suite checks bit equality with `numerics.decode_elements` +
`dequant_rows` / `dequant_cols`. `dequant_l1` decodes an L1 chunk through the device's decode cache
(`runtime.decode_cache`), host time only.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.numerics import ElemFormat, decode_scales
from mc2emu.numerics.block_scale import apply_block_scale
from mc2emu.numerics.constants import MX_GROUP_SIZE
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.payload import Payload, is_payload

if TYPE_CHECKING:
    from mc2emu.blaze.tensor_api.tensor import L1Tensor
    from mc2emu.runtime.core import CoreContext

PAIR_TABLE_SIZE = 1 << 16  # one entry per pair of 8-bit codes (a uint16 index)
BYTE_CODES = 256  # FP8 code space; FP4 codes (< 16) index the same 256-entry row
FLOAT32_BITS = 32  # the high float of a pair sits in the upper 32 bits of the uint64 entry


@cache
def pair_table(elem: ElemFormat) -> np.ndarray:
    """uint64 [65536]: entry c0 | c1 << 8 holds float32 bits of (lut[c0], lut[c1]) as (low, high) halves.

    Cached per format: a pure constant table derived from the format's decode LUT (never mutated)."""
    lut = np.zeros(BYTE_CODES, dtype=np.float32)
    lut[: elem.lut.size] = elem.lut
    bits = lut.view(np.uint32).astype(np.uint64)
    idx = np.arange(PAIR_TABLE_SIZE, dtype=np.uint32)
    table = bits[idx & 0xFF] | (bits[idx >> 8] << np.uint64(FLOAT32_BITS))
    table.flags.writeable = False
    return table


def decode_codes(codes: np.ndarray, elem: ElemFormat) -> np.ndarray:
    """float32 values of a C-contiguous array of 1-byte element codes (FP4 unpacked, one code per byte)."""
    u8 = codes.view(np.uint8)
    # mode="clip": every index is in range by construction, and numpy's default bounds-checking "raise" mode
    # is 2x slower and holds the GIL (no scaling across core threads).
    if u8.size % 2 == 0 and u8.size:
        pairs = u8.reshape(-1).view(np.uint16)
        return np.take(pair_table(elem), pairs, mode="clip").view(np.float32).reshape(u8.shape)
    return np.take(elem.lut, u8, mode="clip")


def dequant_chunk(codes: np.ndarray, scale_codes: np.ndarray, elem: ElemFormat, k_axis: int) -> np.ndarray:
    """float32 dequantized operand chunk, logical shape of `codes`.

    codes: (rows, k) with k_axis = 1 (A) or (k, cols) with k_axis = 0 (B); 1-byte element codes, any of
    C- or F-contiguous (a DN tensor's load) or strided. scale_codes: E8M0 codes (uint8 or float8_e8m0fnu)
    with the same orientation and at least ceil(k/32) entries along K (the stored pairs; extra pad codes
    are ignored)."""
    k = codes.shape[k_axis]
    nb = CeilDiv(k, MX_GROUP_SIZE)
    scale = scale_codes[:, :nb] if k_axis == 1 else scale_codes[:nb, :]
    flipped = False
    if not codes.flags.c_contiguous and codes.T.flags.c_contiguous and k_axis == 1:
        codes, scale, k_axis, flipped = codes.T, scale.T, 1 - k_axis, True
    elif not codes.flags.c_contiguous:
        # B is decoded in (k, cols) row order whatever its storage (a DN load transposes its 1-byte codes
        # here): OpenBLAS packs a row-major (k, n) operand ~10-15 % faster than a transposed one,
        # and every baseK step of the chunk is then a contiguous row block. The bits are the same except at
        # small shapes: see `b_row_major_same`, which BlockMmad consults per step.
        codes = np.ascontiguousarray(codes)
    vals = decode_codes(codes, elem)
    s = decode_scales(np.ascontiguousarray(scale))
    if k_axis == 1:
        r = vals.shape[0]
        apply_block_scale(vals.reshape(r, k, 1), s.reshape(r, nb, 1), MX_GROUP_SIZE, out=vals.reshape(r, k, 1))
    else:
        c = vals.shape[1]
        apply_block_scale(vals.reshape(1, k, c), s.reshape(1, nb, c), MX_GROUP_SIZE, out=vals.reshape(1, k, c))
    return vals.T if flipped else vals


# Step shapes (m, k, n, A column-major) at which OpenBLAS gives A @ B the same bits with B row-major as with B
# column-major (probed once per shape, `b_row_major_same`).
_B_ROW_MAJOR_SAME: dict[tuple[int, int, int, bool], bool] = {}


def b_row_major_same(m: int, k: int, n: int, a_column_major: bool) -> bool:
    """Whether a float32 matmul of an (m, k) A (column-major or not) by a (k, n) B gives the same bits for B
    row-major as for B column-major. `dequant_chunk` hands B row-major (packed faster); a B stored transposed
    (DN) was column-major before, and its steps keep that layout where this is False: small shapes can take
    OpenBLAS's small-matrix kernels, whose summation order depends on the layout (e.g. the A2A 72 x 80
    cases). Probed once per shape on seeded random operands (host time only)."""
    key = (m, k, n, a_column_major)
    same = _B_ROW_MAJOR_SAME.get(key)
    if same is None:
        rng = np.random.default_rng([m, k, n])
        a = rng.standard_normal((m, k), dtype=np.float32)
        if a_column_major:
            a = np.asfortranarray(a)
        b = rng.standard_normal((k, n), dtype=np.float32)
        same = bool(np.array_equal(np.matmul(a, b).view(np.uint32),
                                   np.matmul(a, np.asfortranarray(b)).view(np.uint32)))
        _B_ROW_MAJOR_SAME[key] = same
    return same


def dequant_l1(ctx: CoreContext, tensorL1: L1Tensor, scaleL1: L1Tensor, elem: ElemFormat, k_axis: int) -> np.ndarray:
    """The fp32 operand the MX LoadData of L1 chunk `tensorL1` with scales `scaleL1` gives (`dequant_chunk`),
    through the device's decode cache: a chunk from the same place decoded earlier in the launch from
    byte-identical codes and scales is reused (equal stamps of both reads prove it without comparing)."""
    if is_payload(tensorL1.data) or is_payload(scaleL1.data):   # protocol-only run: no decode, the same shape
        return Payload(tensorL1.data.shape, np.float32)  # type: ignore[return-value]
    stamp = None if tensorL1.stamp is None or scaleL1.stamp is None else (tensorL1.stamp, scaleL1.stamp)
    key = (k_axis, elem, *tensorL1.where, *tensorL1.data.shape)
    return ctx.device.decode_cache.decoded(key, stamp, tensorL1.data, scaleL1.data,
                                           lambda codes, scales: dequant_chunk(codes, scales, elem, k_axis))
