"""The device's decode cache (`runtime.decode_cache`): a read's stamp changes whenever this rank writes the
allocation, and windows (which peers write unseen) are never stamped, so a stamped hit always means identical
bytes; stamped GM -> L1 loads (`GmTensor.load_l1`) and fragment gathers (`FragmentCopyToL1`) are replayed only
when nothing can see or report them."""

import numpy as np
import pytest

from mc2emu.blaze.tensor_api.layout import MakeFrameLayout, NDExtLayoutPtn
from mc2emu.blaze.tensor_api.tensor import MakeMemPtr, MakeTensor
from mc2emu.runtime import Device
from mc2emu.runtime.decode_cache import DecodeCache, read_stamp
from mc2emu.runtime.event_bus import EventBus


def _stamp(t):
    return read_stamp(t.addr, t.shape)


def test_stamp_changes_on_every_write_and_windows_have_none():
    dev = Device()
    addr = dev.gm.alloc(0, "B", data=np.arange(64, dtype=np.uint8))
    t = MakeTensor(MakeMemPtr(addr, np.uint8), MakeFrameLayout(NDExtLayoutPtn, 8, 8)).Slice((2, 0), (4, 8))
    s0 = _stamp(t)
    assert s0 is not None and _stamp(t) == s0
    dev.gm.write(addr + 63, np.array([7], dtype=np.uint8))      # any write to the allocation
    assert _stamp(t) != s0
    win = dev.gm.adopt(np.zeros(64, dtype=np.uint8), "win:w", kind="window", written=True)
    tw = MakeTensor(MakeMemPtr(win, np.uint8), MakeFrameLayout(NDExtLayoutPtn, 8, 8))
    assert _stamp(tw) is None


def test_a_stamped_hit_returns_the_decode_of_identical_bytes():
    from mc2emu.blaze.gemm.tile.tile_mmad_mx import dequant_chunk
    from mc2emu.numerics import ElemFormat

    memo = DecodeCache(EventBus(0))

    def decode(c, s):
        return dequant_chunk(c, s, ElemFormat.E4M3, 1)

    codes = np.full((4, 64), 0x38, dtype=np.uint8)        # E4M3 1.0
    scales = np.full((4, 2), 127, dtype=np.uint8)          # 2^0
    first = memo.decoded((1, 1, 0, 4, 64), ("s", 1), codes, scales, decode)
    again = memo.decoded((1, 1, 0, 4, 64), ("s", 1), codes.copy(), scales, decode)
    assert again is first and memo.hits == 1
    codes2 = np.full((4, 64), 0x40, dtype=np.uint8)       # 2.0, a new stamp after a write
    other = memo.decoded((1, 1, 0, 4, 64), ("s", 2), codes2, scales, decode)
    assert float(other[0, 0]) == 2.0 and memo.misses == 2


# -- stamped reads: the same bytes as an earlier read hand out its array; replayed when nothing sees them ------
def _gather(ctx, t, shape):
    """`FragmentCopyToL1` of slice `t` (QmmMxBlockMmadFragment's A / scaleA copy): (buffer, stamp)."""
    from mc2emu.apace.basic.fragment_l1_copy import FragmentCopyToL1

    l1 = FragmentCopyToL1(ctx, t, shape)
    return l1.data, l1.stamp


def _count_reads(dev):
    """Record the allocation name of every `GlobalMemory.read` (the GM copy a replay skips)."""
    calls = []
    inner = dev.gm.read

    def read(addr, *args, **kwargs):
        calls.append(addr.alloc.name)
        return inner(addr, *args, **kwargs)

    dev.gm.read = read
    return calls


def _fp8_matrix(addr, rows, cols):
    import ml_dtypes

    return MakeTensor(MakeMemPtr(addr, np.dtype(ml_dtypes.float8_e4m3fn)), MakeFrameLayout(NDExtLayoutPtn, rows, cols))


@pytest.mark.parametrize("observer", ["all reads", "window reads", None])
def test_a_stamped_load_shares_the_earlier_array_until_a_write_moves_the_stamp(observer):
    """BlockMmad's B / scale loads: a load with the stamp of an earlier one of the launch (the same bytes) is
    made with that load's array; after a write to the allocation the stamp moves and the load copies the new
    bytes. Observed (a GM_READ observer of B), the load is made on GM (no host copy, same GM_READ event). When
    nothing can see it (no observer, or one of window reads only, as the happens-before check subscribes) and
    every byte of B is written, it is replayed: no GM read at all."""
    import ml_dtypes

    from mc2emu.runtime import EventRecorder
    from mc2emu.runtime.events import GmRead

    dev = Device()
    rec = EventRecorder()
    if observer == "all reads":
        dev.events.subscribe(rec, (GmRead,))
    elif observer == "window reads":
        dev.events.subscribe(rec, (GmRead,), prefixes={GmRead: "win:"})
    calls = _count_reads(dev)
    codes = np.arange(64 * 32, dtype=np.uint8).reshape(64, 32) % 120
    b_addr = dev.gm.alloc(0, "B", data=codes)
    got = []

    def kernel(ctx):
        chunk = _fp8_matrix(b_addr, 64, 32).Slice((16, 8), (16, 16))
        first = chunk.load_l1(ctx).data
        again = chunk.load_l1(ctx).data
        ctx.gm_write(b_addr + 16 * 32 + 8, np.full((1, 1), 0x7E, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn))
        after = chunk.load_l1(ctx).data
        got.extend([first, again, after])

    dev.launch(kernel, 1, "AIC_ONLY")
    first, again, after = got
    assert again is first and not first.flags.writeable
    np.testing.assert_array_equal(first.view(np.uint8), codes[16:32, 8:24])
    assert after is not first and after.view(np.uint8)[0, 0] == 0x7E
    np.testing.assert_array_equal(after.view(np.uint8)[1:], codes[17:32, 8:24])
    reads = rec.of(GmRead)
    if observer == "all reads":
        assert calls == ["B"] * 3
        assert [(e.lo, e.hi) for e in reads] == [(16 * 32 + 8, 31 * 32 + 24)] * 3
        assert reads[1].data is first and reads[2].data is after
    else:
        assert calls == ["B", "B"] and reads == []


def test_never_written_bytes_are_reported_by_every_core_that_reads_them():
    """B partly written (check mode): core 1's load of core 0's stamped chunk is not replayed, since the
    unwritten-byte report is per core; both cores report READ_UNWRITTEN and read the same bytes."""
    import threading

    from mc2emu.runtime import Hazard

    dev = Device(check=True)
    b_addr = dev.gm.alloc(64 * 32, "B")
    dev.gm.write(b_addr, np.full(32 * 32, 0x38, dtype=np.uint8))     # rows 0..31 written, 32..63 poison
    first_done = threading.Event()
    got = {}

    def kernel(ctx):
        if ctx.label != "AIC0" and not first_done.wait(30):
            raise TimeoutError("AIC0 never loaded")
        chunk = _fp8_matrix(b_addr, 64, 32).Slice((24, 0), (16, 32))
        got[ctx.label] = chunk.load_l1(ctx).data
        first_done.set()

    res = dev.launch(kernel, 2, "AIC_ONLY")
    unwritten = sorted(h.core for h in res.hazards if h.hazard is Hazard.READ_UNWRITTEN)
    assert unwritten == ["AIC0", "AIC1"]
    assert got["AIC1"] is got["AIC0"]          # the same bytes (shared array, read on GM by both)
    assert (got["AIC0"].view(np.uint8)[:8] == 0x38).all()


def _gather_bench(observe):
    """A checked device whose GM reads are counted (`_count_reads`), a recorder of the GM_READ events of
    allocations named `observe...` (None: nothing observes), and the bytes of three 4 x 64 fragments."""
    from mc2emu.runtime import EventRecorder
    from mc2emu.runtime.events import GmRead

    dev = Device(check=True)
    rec = EventRecorder()
    if observe is not None:
        dev.events.subscribe(rec, (GmRead,), prefixes={GmRead: observe})
    frags = [((np.arange(4 * 64) + 37 * f) % 120).astype(np.uint8).reshape(4, 64) for f in range(3)]
    return dev, rec, _count_reads(dev), frags


def _three_fragments(lst):
    """The FP8 fragment tensor "A" of the gather tests: 3 fragments of 4 rows x 64 along rows, addresses `lst`."""
    import ml_dtypes

    from mc2emu.apace.basic import FragmentParam, MakeFragmentTensor
    from mc2emu.blaze.tensor_api import FrameLayoutFormat

    return MakeFragmentTensor(FragmentParam((12, 64), 4, 4, 0, 3), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                              ElementType=ml_dtypes.float8_e4m3fn, name="A")


@pytest.mark.parametrize("observed", [False, True])
def test_a_fragment_gather_is_replayed_only_when_nothing_sees_it(observed):
    """QmmMxBlockMmadFragment's gathers (A and scaleA): rows 2..7 of fragments of 4 rows (two pieces).
    Unobserved, the second gather of the same stamp is the first's buffer with no GM read; observed (a GM_READ
    observer of one piece is enough), it reads every piece again into a new buffer. A write to a fragment, or an
    address-list update, changes the stamp: the next gather reads the new bytes."""

    from mc2emu.runtime.events import GmRead

    # observed: the reads of fragment 0 only, the first piece of every gather below
    dev, rec, calls, frags = _gather_bench("frag0" if observed else None)
    addrs = [dev.gm.alloc(0, f"frag{f}", data=frags[f]) for f in range(3)]
    got = []

    def kernel(ctx):
        lst = [*addrs, *([None] * 29)]
        ft = _three_fragments(lst)
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))
        ctx.gm_write(addrs[1] + 64, np.full((1, 64), 0x7E, dtype=np.uint8))          # fragment 1, row 1
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))
        lst[1] = addrs[2]
        ft.UpdateAddrList(lst)
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))

    dev.launch(kernel, 1, "AIC_ONLY")
    (first, s1), (again, s2), (written, s3), (moved, s4) = got
    want = np.concatenate([frags[0][2:], frags[1]])
    for buf in (first, again):
        np.testing.assert_array_equal(buf.view(np.uint8), want)
    assert s1 is not None and s2 == s1 and s3 not in (None, s1) and s4 not in (None, s1, s3)
    want[3] = 0x7E
    np.testing.assert_array_equal(written.view(np.uint8), want)
    np.testing.assert_array_equal(moved.view(np.uint8), np.concatenate([frags[0][2:], frags[2]]))
    pieces = ["frag0", "frag1"]
    if observed:
        assert again is not first and calls == pieces * 3 + ["frag0", "frag2"]
        assert [e.buffer for e in rec.of(GmRead)] == ["frag0"] * 4
    else:
        assert again is first and calls == pieces * 2 + ["frag0", "frag2"]


def test_fragment_gathers_of_one_allocation_are_told_apart_by_place():
    """Three fragments in one allocation (nothing observes it): gathers of the same shape that read other bytes
    of it, at another column of the same fragments or through an address moved inside the allocation, are read
    and not replayed; the same gather again is replayed. Every buffer holds its own bytes."""


    dev = Device(check=True)
    calls = _count_reads(dev)
    frags = [((np.arange(4 * 64) + 37 * f) % 120).astype(np.uint8).reshape(4, 64) for f in range(3)]
    base = dev.gm.alloc(0, "frags", data=np.concatenate(frags))
    got = []

    def kernel(ctx):
        lst = [base, base + 256, base + 512, *([None] * 29)]
        ft = _three_fragments(lst)
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 32)), (6, 32)))
        got.append(_gather(ctx, ft.Slice((2, 32), (6, 32)), (6, 32)))    # the same pieces' other columns
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 32)), (6, 32)))     # the first again: replayed
        lst[1] = base + 512                                              # fragment 1 now reads fragment 2
        ft.UpdateAddrList(lst)
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 32)), (6, 32)))

    dev.launch(kernel, 1, "AIC_ONLY")
    (first, s1), (right, s2), (again, s3), (moved, s4) = got
    np.testing.assert_array_equal(first.view(np.uint8), np.concatenate([frags[0][2:, :32], frags[1][:, :32]]))
    np.testing.assert_array_equal(right.view(np.uint8), np.concatenate([frags[0][2:, 32:], frags[1][:, 32:]]))
    np.testing.assert_array_equal(moved.view(np.uint8), np.concatenate([frags[0][2:, :32], frags[2][:, :32]]))
    assert None not in (s1, s2, s4) and len({s1, s2, s4}) == 3 and s3 == s1
    assert again is first
    assert calls == ["frags"] * 6   # two pieces per gather read; the replay reads nothing


@pytest.mark.parametrize("observed", [False, True])
@pytest.mark.parametrize("changed", [None, 0, 1])
def test_a_window_gather_is_read_again_and_returns_what_peers_put_since(changed, observed):
    """Window fragments (peers put into them unseen: never stamped, never replayed). A gather of a place gathered
    before returns the window's bytes as they are now: unchanged, or changed by a peer's put in between
    (`changed`: the piece of the first or the second fragment), while the earlier gather's buffer keeps its own.
    Every piece is read on GM each time, also when nothing observes the reads (a stamped gather would then be
    replayed), and each read's event carries exactly the bytes the gather returned."""

    from mc2emu.runtime.events import GmRead

    dev, rec, calls, frags = _gather_bench("win" if observed else None)
    wins = [dev.gm.adopt(frags[f].copy(), f"win{f}", kind="window", written=True) for f in range(3)]
    got = []

    def kernel(ctx):
        lst = [*wins, *([None] * 29)]
        ft = _three_fragments(lst)
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))
        got.append(_gather(ctx, ft.Slice((2, 32), (6, 32)), (6, 32)))     # another place of the same windows
        if changed is not None:   # a peer's put lands: the bytes change, this rank's GM sees no write
            wins[changed].alloc.buf[3 * 64 + 5] ^= 0x11
        got.append(_gather(ctx, ft.Slice((2, 0), (6, 64)), (6, 64)))

    dev.launch(kernel, 1, "AIC_ONLY")
    (first, s1), (other, _), (again, s3) = got
    assert s1 is None and s3 is None
    want = np.concatenate([frags[0][2:], frags[1]])
    np.testing.assert_array_equal(first.view(np.uint8), want)
    np.testing.assert_array_equal(other.view(np.uint8), want[:, 32:])
    if changed is None:
        np.testing.assert_array_equal(again.view(np.uint8), want)
    else:
        want2 = want.copy()
        want2[1 if changed == 0 else 5, 5] ^= 0x11      # window 0 holds rows 2..3 of the slice, window 1 rows 4..7
        np.testing.assert_array_equal(again.view(np.uint8), want2)
        np.testing.assert_array_equal(first.view(np.uint8), want)      # the kept buffer was never written
    assert calls == ["win0", "win1"] * 3
    if not observed:
        return
    reads = rec.of(GmRead)
    assert [e.buffer for e in reads] == ["win0", "win1"] * 3
    returned = [first[:2], first[2:], other[:2], other[2:], again[:2], again[2:]]
    for e, buf in zip(reads, returned, strict=True):
        np.testing.assert_array_equal(np.asarray(e.data).view(np.uint8), buf.view(np.uint8))


def test_the_device_empties_its_decode_cache_at_every_launch():
    """A stamped load of one launch shares the array of an earlier load of that launch, never one of an earlier
    launch (`Device.launch` resets `Device.decode_cache`)."""
    dev = Device()
    b_addr = dev.gm.alloc(0, "B", data=np.arange(64 * 32, dtype=np.uint8).reshape(64, 32) % 120)
    got = []

    def kernel(ctx):
        chunk = _fp8_matrix(b_addr, 64, 32).Slice((16, 0), (16, 32))
        got.append((chunk.load_l1(ctx).data, chunk.load_l1(ctx).data))

    dev.launch(kernel, 1, "AIC_ONLY")
    dev.launch(kernel, 1, "AIC_ONLY")
    (first, again), (second, _) = got
    assert again is first and second is not first
    np.testing.assert_array_equal(second.view(np.uint8), first.view(np.uint8))
