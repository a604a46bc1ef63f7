"""MX dequantization of an L1 chunk (tile_mmad_mx.py): bit-equal to numerics' decode + per-32 scale, every
format and orientation; the launch-wide memo reuses a decode only for byte-identical inputs."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.blaze.gemm.tile.tile_mmad_mx import dequant_chunk
from mc2emu.numerics import ElemFormat, decode_elements, decode_scales, dequant_cols, dequant_rows
from mc2emu.runtime.decode_cache import DecodeCache, same_bytes
from mc2emu.runtime.event_bus import EventBus

ALL_FORMATS = list(ElemFormat)


def _codes(fmt: ElemFormat, shape, rng):
    return rng.integers(0, 1 << fmt.bits, shape, dtype=np.uint8)  # every code, NaN / Inf included


def _same_f32(x, y):
    return np.array_equal(np.asarray(x, np.float32).view(np.uint32), np.asarray(y, np.float32).view(np.uint32))


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("k", [1, 20, 32, 64, 70, 256])
def test_rows_operand_bit_equal(fmt, k):
    rng = np.random.default_rng(k)
    codes = _codes(fmt, (9, k), rng)
    nb = -(-k // 32)
    scales = rng.integers(0, 256, (9, nb + nb % 2), dtype=np.uint8)  # stored pairs: one pad when nb is odd
    got = dequant_chunk(codes, scales, fmt, 1)
    want = dequant_rows(decode_elements(codes, fmt), decode_scales(scales[:, :nb]))
    assert _same_f32(np.nan_to_num(got, nan=7.0), np.nan_to_num(want, nan=7.0))
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("fmt", ALL_FORMATS)
@pytest.mark.parametrize("stored_transposed", [False, True])
def test_cols_operand_bit_equal_in_both_orientations(fmt, stored_transposed):
    rng = np.random.default_rng(3)
    k, n = 70, 11
    logical = _codes(fmt, (k, n), rng)
    codes = np.ascontiguousarray(logical.T).T if stored_transposed else logical  # DN loads are F-ordered
    scales = rng.integers(100, 150, (4, n), dtype=np.uint8)
    got = dequant_chunk(codes, scales, fmt, 0)
    want = dequant_cols(decode_elements(logical, fmt), decode_scales(scales[:3]))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert _same_f32(np.nan_to_num(got), np.nan_to_num(want))
    # B comes out row-major (k, n) in both orientations: each baseK step is a contiguous row block, the
    # layout OpenBLAS packs fastest (host time only; the bits above are the contract)
    assert got.flags.c_contiguous


def test_e8m0_nan_scale_poisons_its_block_only():
    codes = np.full((1, 64), 0x38, np.uint8)  # E4M3 1.0
    scales = np.array([[127, 0xFF]], np.uint8)
    out = dequant_chunk(codes, scales, ElemFormat.E4M3, 1)
    assert np.all(out[0, :32] == 1.0) and np.all(np.isnan(out[0, 32:]))


def test_same_bytes_compares_bytes_not_values():
    a = np.array([0x7F, 0x01], np.uint8)  # 0x7F is NaN in E4M3: float == would say unequal
    assert same_bytes(a, a.copy())
    assert not same_bytes(a, np.array([0x7F, 0x02], np.uint8))
    assert not same_bytes(a, a[:1].copy())
    big = np.zeros(1000, np.uint8)
    other = big.copy()
    other[-1] = 1  # beyond the probe: the full compare must catch it
    assert not same_bytes(big, other)


def test_memo_reuses_only_identical_data_and_resets_per_launch():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 256, (16, 64), dtype=np.uint8)
    scales = rng.integers(120, 130, (16, 2), dtype=np.uint8)
    memo = DecodeCache(EventBus(0))

    def decode(c, s):
        return dequant_chunk(c, s, ElemFormat.E4M3, 1)

    first = memo.decoded("k", None, codes, scales, decode)
    again = memo.decoded("k", None, codes.copy(), scales.copy(), decode)
    assert again is first and memo.hits == 1
    changed = codes.copy()
    changed[5, 7] ^= 1
    fresh = memo.decoded("k", None, changed, scales, decode)
    assert fresh is not first and memo.misses == 2
    np.testing.assert_array_equal(fresh, dequant_chunk(changed, scales, ElemFormat.E4M3, 1))
    rescaled = memo.decoded("k", None, changed, scales + 1, decode)
    np.testing.assert_array_equal(rescaled, fresh * 2)
    memo.reset()   # a new launch (`Device.launch`)
    other_launch = memo.decoded("k", None, changed, scales + 1, decode)
    assert other_launch is not rescaled and memo.hits == 0
