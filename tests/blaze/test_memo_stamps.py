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
