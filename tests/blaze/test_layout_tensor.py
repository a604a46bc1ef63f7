"""Tensor API layouts and GM tensors: layout functions, zero-copy slices, loads / stores through a core."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mc2emu.blaze import (
    CacheMode,
    DNExtLayoutPtn,
    FrameLayoutFormat,
    LayoutError,
    MakeFrameLayout,
    MakeMemPtr,
    MakeTensor,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import FP4_STORAGE_DTYPE
from mc2emu.numerics import ElemFormat, to_ascend_scale_a, to_ascend_scale_b
from mc2emu.runtime import Device, EventRecorder, Hazard
from mc2emu.runtime.events import L2Hint

FP4 = FP4_STORAGE_DTYPE


def on_core(fn, *, check=True):
    """Run fn(ctx) on one AIC of a fresh device; returns (result, device, hazards)."""
    dev = Device(check=check)
    box = {}

    def kernel(ctx):
        box["out"] = fn(ctx, dev)

    res = dev.launch(kernel, 1, "AIC_ONLY")
    return box.get("out"), dev, res.hazards


def test_operand_layout_functions():
    nd = MakeFrameLayout(NDExtLayoutPtn, 5, 7)
    dn = MakeFrameLayout(DNExtLayoutPtn, 5, 7)
    assert nd.offset((2, 3)) == 2 * 7 + 3
    assert dn.offset((2, 3)) == 2 + 3 * 5


@pytest.mark.parametrize("trans", [False, True])
def test_scale_layouts_match_the_ascend_arrays(trans):
    """Element (r, c) of the logical scale matrix sits where numerics.to_ascend_scale_* stores it."""
    rng = np.random.default_rng(0)
    m, k = 6, 200
    nb = -(-k // 32)
    sa = rng.integers(0, 255, (nb, m) if trans else (m, nb), dtype=np.uint8)
    a_flat = to_ascend_scale_a(sa, trans=trans).reshape(-1)
    la = MakeFrameLayout(ScaleADNLayoutPtn if trans else ScaleANDLayoutPtn, m, -(-k // 64) * 2, 2)
    sb = rng.integers(0, 255, (m, nb) if trans else (nb, m), dtype=np.uint8)
    b_flat = to_ascend_scale_b(sb, trans=trans).reshape(-1)
    lb = MakeFrameLayout(ScaleBDNLayoutPtn if trans else ScaleBNDLayoutPtn, -(-k // 64) * 2, m, 2)
    for r in range(m):
        for c in range(nb):
            assert a_flat[la.offset((r, c))] == (sa[c, r] if trans else sa[r, c])
            assert b_flat[lb.offset((c, r))] == (sb[r, c] if trans else sb[c, r])


def test_scale_pairs_cannot_be_split():
    la = MakeFrameLayout(ScaleADNLayoutPtn, 8, 10, 2)
    la.slice((0, 2), (8, 4))
    with pytest.raises(LayoutError, match="SCALE_C0"):
        la.slice((0, 1), (8, 4))
    with pytest.raises(LayoutError, match="leaves the tensor"):
        la.slice((0, 8), (8, 4))
    with pytest.raises(LayoutError, match="multiple of SCALE_C0"):
        MakeFrameLayout(ScaleBNDLayoutPtn, 7, 4, 2)


@pytest.mark.parametrize("pattern", [NDExtLayoutPtn, DNExtLayoutPtn])
@pytest.mark.parametrize("dtype", [np.dtype(ml_dtypes.float8_e4m3fn), FP4, np.dtype(np.float32)])
def test_slice_is_zero_copy_and_loads_the_right_elements(pattern, dtype):
    rows, cols = 12, 20
    rng = np.random.default_rng(1)
    logical = rng.integers(0, 16, (rows, cols), dtype=np.uint8)
    stored = logical.T.copy() if pattern is DNExtLayoutPtn else logical.copy()
    if dtype == np.float32:
        stored = stored.astype(np.float32)
        logical = logical.astype(np.float32)

    def fn(ctx, dev):
        addr = dev.gm.alloc(-(-stored.size // 2) if dtype == FP4 else stored.nbytes, "t")
        dev.gm.write(addr, stored.view(np.uint8).view(dtype) if dtype != np.float32 else stored)
        t = MakeTensor(MakeMemPtr(addr, dtype), FrameLayoutFormat(pattern)(rows, cols), name="t")
        s = t.Slice((2, 4), (6, 10))
        assert s.addr.alloc is addr.alloc and s.origin == (2, 4)  # same allocation, no copy
        return s.load(ctx)

    out, _, hz = on_core(fn)
    assert not hz
    np.testing.assert_array_equal(out.view(np.uint8) if dtype != np.float32 else out, logical[2:8, 4:14])


def test_fp4_odd_offset_along_packed_axis_is_refused():
    dev = Device()
    addr = dev.gm.alloc(64, "t")
    t = MakeTensor(addr, FrameLayoutFormat(NDExtLayoutPtn)(8, 16), FP4)
    with pytest.raises(LayoutError, match="even element offsets"):
        t.Slice((0, 1), (8, 4))


def test_store_and_atomic_store_through_a_core():
    def fn(ctx, dev):
        addr = dev.gm.alloc(0, "c", data=np.full((4, 6), 1.5, ml_dtypes.bfloat16))
        t = MakeTensor(MakeMemPtr(addr, ElemFormat.E4M3), FrameLayoutFormat(NDExtLayoutPtn)(4, 6))
        del t  # ElemFormat is accepted as the element type (its FP8 storage dtype)
        c = MakeTensor(addr, FrameLayoutFormat(NDExtLayoutPtn)(4, 6), ml_dtypes.bfloat16, name="c")
        blk = c.Slice((1, 2), (2, 3))
        blk.store(ctx, np.full((2, 3), 2.0, ml_dtypes.bfloat16))
        ctx.SetAtomicAdd(ml_dtypes.bfloat16)
        c.Slice((0, 0), (1, 6)).store(ctx, np.full((1, 6), 0.25, ml_dtypes.bfloat16))
        ctx.SetAtomicNone()
        return dev.gm.view(addr, ml_dtypes.bfloat16, (4, 6)).astype(np.float32)

    out, _, hz = on_core(fn)
    assert not hz
    want = np.full((4, 6), 1.5, np.float32)
    want[1:3, 2:5] = 2.0
    want[0] += 0.25
    np.testing.assert_array_equal(out, want)


def test_dn_store_round_trip():
    def fn(ctx, dev):
        addr = dev.gm.alloc(4 * 5 * 4, "d", zero=True)
        t = MakeTensor(addr, FrameLayoutFormat(DNExtLayoutPtn)(4, 5), np.float32)
        v = np.arange(6, dtype=np.float32).reshape(2, 3)
        t.Slice((1, 1), (2, 3)).store(ctx, v)
        return dev.gm.view(addr, np.float32, (5, 4)).T.copy(), t.load(ctx)

    (stored_t, loaded), _, _ = on_core(fn)
    np.testing.assert_array_equal(stored_t[1:3, 1:4], np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(loaded, stored_t)


def test_reading_never_written_gm_is_reported():
    def fn(ctx, dev):
        addr = dev.gm.alloc(64, "scale")  # never written: poison
        return MakeTensor(addr, FrameLayoutFormat(ScaleANDLayoutPtn, 2)(4, 16), np.uint8).load(ctx)

    out, _, hz = on_core(fn)
    assert [h.hazard for h in hz] == [Hazard.READ_UNWRITTEN]
    assert np.all(out == 0xFF)


def test_l2_hint_is_an_event():
    dev = Device()
    rec = EventRecorder()
    dev.events.subscribe(rec)
    addr = dev.gm.alloc(64, "B", zero=True)

    def kernel(ctx):
        MakeTensor(addr, FrameLayoutFormat(NDExtLayoutPtn)(8, 8), np.uint8, name="B").SetL2CacheHint(
            ctx, CacheMode.CACHE_MODE_DISABLE)

    dev.launch(kernel, 1, "AIC_ONLY")
    hints = rec.of(L2Hint)
    assert len(hints) == 1 and hints[0].tensor == "B" and hints[0].mode == "CACHE_MODE_DISABLE"


@pytest.mark.parametrize(("k", "n", "c0"), [(37, 70, 32), (16, 32, 32), (100, 130, 64), (1, 2, 64)])
def test_nz_layouts_address_the_format_casts_storage(k, n, c0):
    """NZLayoutPtn (B (k, n)) and ZNLayoutPtn (B^T: its (n, k) in NZ) put every logical element where
    nd_to_nz_codes stores it; the layouts cover the padded matrix; the C0 axis slices at whole blocks only."""
    from mc2emu.blaze.tensor_api.layout import IsNz, IsTrans, MakeFrameLayout, NZLayoutPtn, ZNLayoutPtn
    from mc2emu.numerics.nz_format import nd_to_nz_codes

    codes = np.arange(k * n, dtype=np.int64).reshape(k, n) % 251 + 1
    fmt = "e2m1" if c0 == 64 else "e4m3"
    nz = nd_to_nz_codes(codes.astype(np.uint8), fmt).reshape(-1)
    zn = nd_to_nz_codes(np.ascontiguousarray(codes.T).astype(np.uint8), fmt).reshape(-1)
    lay, layT = MakeFrameLayout(NZLayoutPtn, k, n, c0), MakeFrameLayout(ZNLayoutPtn, k, n, c0)
    assert lay.shape == (-(-k // 16) * 16, -(-n // c0) * c0) and layT.shape == (-(-k // c0) * c0, -(-n // 16) * 16)
    assert IsNz(NZLayoutPtn) and IsNz(ZNLayoutPtn) and IsTrans(ZNLayoutPtn) and not IsTrans(NZLayoutPtn)
    for r in range(k):
        for c in range(n):
            assert nz[lay.offset((r, c))] == codes[r, c] % 256
            assert zn[layT.offset((r, c))] == codes[r, c] % 256
    if n > c0:
        with pytest.raises(LayoutError, match="groups of"):
            lay.slice((0, 1), (1, c0))
    sub, off = lay.slice((1, c0), (3, c0)) if n > c0 else lay.slice((1, 0), (3, c0))
    assert sub.shape == (3, c0) and off == lay.offset((1, c0 if n > c0 else 0))
    with pytest.raises(LayoutError, match="needs C0"):
        MakeFrameLayout(NZLayoutPtn, k, n)
