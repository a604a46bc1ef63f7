"""The decode memo's fast path: a read's stamp changes whenever this rank writes the allocation, and
windows (which peers write unseen) are never stamped, so a stamped hit always means identical bytes."""

import numpy as np

from mc2emu.blaze.gemm.block.block_mmad_host import read_stamp
from mc2emu.blaze.tensor_api.layout import MakeFrameLayout, NDExtLayoutPtn
from mc2emu.blaze.tensor_api.tensor import MakeMemPtr, MakeTensor
from mc2emu.runtime import Device


def test_stamp_changes_on_every_write_and_windows_have_none():
    dev = Device()
    addr = dev.gm.alloc(0, "B", data=np.arange(64, dtype=np.uint8))
    t = MakeTensor(MakeMemPtr(addr, np.uint8), MakeFrameLayout(NDExtLayoutPtn, 8, 8)).Slice((2, 0), (4, 8))
    s0 = read_stamp(t)
    assert s0 is not None and read_stamp(t) == s0
    dev.gm.write(addr + 63, np.array([7], dtype=np.uint8))      # any write to the allocation
    assert read_stamp(t) != s0
    win = dev.gm.adopt(np.zeros(64, dtype=np.uint8), "win:w", kind="window", written=True)
    tw = MakeTensor(MakeMemPtr(win, np.uint8), MakeFrameLayout(NDExtLayoutPtn, 8, 8))
    assert read_stamp(tw) is None


def test_a_stamped_hit_returns_the_decode_of_identical_bytes():
    from mc2emu.blaze.gemm.tile.tile_mmad_mx import DequantMemo
    from mc2emu.numerics import ElemFormat

    memo = DequantMemo()
    launch = object()
    codes = np.full((4, 64), 0x38, dtype=np.uint8)        # E4M3 1.0
    scales = np.full((4, 2), 127, dtype=np.uint8)          # 2^0
    first = memo.dequant(launch, ("A", 1, 0, 4, 64), codes, scales, ElemFormat.E4M3, 1, stamp=("s", 1))
    again = memo.dequant(launch, ("A", 1, 0, 4, 64), codes.copy(), scales, ElemFormat.E4M3, 1, stamp=("s", 1))
    assert again is first and memo.hits == 1
    codes2 = np.full((4, 64), 0x40, dtype=np.uint8)       # 2.0, a new stamp after a write
    other = memo.dequant(launch, ("A", 1, 0, 4, 64), codes2, scales, ElemFormat.E4M3, 1, stamp=("s", 2))
    assert float(other[0, 0]) == 2.0 and memo.misses == 2


def test_a_stamped_load_shares_the_earlier_array_until_a_write_moves_the_stamp():
    """BlockMmad's B / scale loads: a load with the stamp of an earlier one of the launch (the same bytes) is
    made with that load's array (no host copy, same GM_READ); after a write to the allocation the stamp moves
    and the load copies the new bytes."""
    import ml_dtypes

    from mc2emu.blaze import MatmulWithScaleMx
    from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx
    from mc2emu.numerics import ElemFormat
    from mc2emu.runtime import EventKind, EventRecorder

    dev = Device()
    rec = EventRecorder()
    dev.events.subscribe(rec, (EventKind.GM_READ,))
    codes = np.arange(64 * 32, dtype=np.uint8).reshape(64, 32) % 120
    b_addr = dev.gm.alloc(0, "B", data=codes)
    T = BlockMmadMx.template(MatmulWithScaleMx(0, False), ElemFormat.E4M3, NDExtLayoutPtn, ElemFormat.E4M3,
                             NDExtLayoutPtn, ml_dtypes.bfloat16)
    got = []

    def kernel(ctx):
        mm = T(ctx)
        gmB = MakeTensor(MakeMemPtr(b_addr, np.dtype(ml_dtypes.float8_e4m3fn)), MakeFrameLayout(NDExtLayoutPtn, 64, 32))
        chunk = gmB.Slice((16, 8), (16, 16))
        first = mm._load_stamped(chunk, read_stamp(chunk))
        again = mm._load_stamped(chunk, read_stamp(chunk))
        ctx.gm_write(b_addr + 16 * 32 + 8, np.full((1, 1), 0x7E, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn))
        after = mm._load_stamped(chunk, read_stamp(chunk))
        got.extend([first, again, after])

    dev.launch(kernel, 1, "AIC_ONLY")
    first, again, after = got
    assert again is first and not first.flags.writeable
    np.testing.assert_array_equal(first.view(np.uint8), codes[16:32, 8:24])
    assert after is not first and after.view(np.uint8)[0, 0] == 0x7E
    np.testing.assert_array_equal(after.view(np.uint8)[1:], codes[17:32, 8:24])
    reads = rec.of(EventKind.GM_READ)
    assert [e.value for e in reads] == [(16 * 32 + 8, 31 * 32 + 24)] * 3
    assert reads[1].extra["data"] is first and reads[2].extra["data"] is after
