"""FragmentTensor (apace/basic/fragment_tensor): Validate rules, the fragment limit, the by-reference address
list, zero-copy nested slices, the head / body / tail split and the gather / scatter copies, checked against
a plain numpy model of the assembled tensor written here (row by row, no composition arithmetic)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mc2emu.apace.basic import (
    MAX_FRAGMENT_COUNT,
    FragmentParam,
    FragmentSliceCopy,
    MakeFragmentTensor,
)
from mc2emu.blaze.tensor_api import (
    CopyGM2L1,
    CopyL0C2GM,
    DNExtLayoutPtn,
    FixpipeParams,
    FrameLayoutFormat,
    LayoutError,
    NDExtLayoutPtn,
    ScaleANDLayoutPtn,
    SliceLocal,
)
from mc2emu.runtime import Device, Hazard
from mc2emu.runtime.hazards import ConstraintError, KernelError

F32 = np.dtype(np.float32)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- the plain model --------------------------------------------------------------------------------------------
def model_rows(fragmentSize: int, start: int, length: int) -> list[tuple[int, int, int, int]]:
    """(fragment, start inside it, rows, start inside the slice) of each run of consecutive slice rows that
    fall into one fragment, found by walking the rows one by one."""
    runs: list[list[int]] = []
    for i in range(length):
        g = start + i
        f, rel = divmod(g, fragmentSize)
        if runs and runs[-1][0] == f:
            runs[-1][2] += 1
        else:
            runs.append([f, rel, 1, i])
    return [tuple(r) for r in runs]


def model_gather(frags: list[np.ndarray], axis: int, coord: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
    assembled = np.concatenate(frags, axis=axis)
    return assembled[coord[0]:coord[0] + shape[0], coord[1]:coord[1] + shape[1]].copy()


def model_scatter(frags: list[np.ndarray], axis: int, real: int, coord: tuple[int, int], shape: tuple[int, int],
                  src: np.ndarray) -> list[np.ndarray]:
    """Every slice row (along `axis`) whose position inside its fragment is below `real` lands there."""
    out = [f.copy() for f in frags]
    fs = frags[0].shape[axis]
    other = 1 - axis
    lo, hi = coord[other], coord[other] + shape[other]
    for i in range(shape[axis]):
        f, rel = divmod(coord[axis] + i, fs)
        if rel >= real:
            continue
        if axis == 0:
            out[f][rel, lo:hi] = src[i, :]
        else:
            out[f][lo:hi, rel] = src[:, i]
    return out


# -- device plumbing ----------------------------------------------------------------------------------------------
def on_core(fn, *, check: bool = True):
    """Run fn(ctx) on one AIC of a fresh device; returns (result, device, hazards)."""
    dev = Device(check=check)
    box = {}

    def kernel(ctx):
        box["out"] = fn(ctx)

    res = dev.launch(kernel, 1, "AIC_ONLY")
    return box.get("out"), dev, res.hazards


def place_fragments(dev: Device, frags: list[np.ndarray], pattern, *, gap: int = 40, seed: int = 0,
                    list_len: int = MAX_FRAGMENT_COUNT):
    """Store each logical fragment in one window-like allocation, in a shuffled slot order with gaps; return
    the address list (list_len long, None past the fragments, as the kernels' [MAX_FRAG] arrays) and a
    reader of fragment f's logical content."""
    rng = np.random.default_rng(seed)
    nbytes = frags[0].nbytes
    slots = rng.permutation(len(frags))
    stride = nbytes + gap
    storage = [f.T.copy() if pattern is DNExtLayoutPtn else f.copy() for f in frags]
    buf = np.zeros(len(frags) * stride + gap, dtype=np.uint8)
    for f, s in enumerate(slots):
        buf[gap + s * stride: gap + s * stride + nbytes] = storage[f].view(np.uint8).reshape(-1)
    base = dev.gm.alloc(buf.size, "win", data=buf)
    addrs = [base + gap + int(s) * stride for s in slots]

    def read(f: int) -> np.ndarray:
        st_shape = storage[f].shape
        v = dev.gm.view(addrs[f], frags[f].dtype, st_shape)
        return (v.T if pattern is DNExtLayoutPtn else v).copy()

    return [*addrs, *([None] * (list_len - len(frags)))], read


def frag_param(fs: int, real: int, cnt: int, axis: int, other: int) -> FragmentParam:
    shape = (fs * cnt, other) if axis == 0 else (other, fs * cnt)
    return FragmentParam(shape, fs, real, axis, cnt)


def frag_shape(fs: int, axis: int, other: int) -> tuple[int, int]:
    return (fs, other) if axis == 0 else (other, fs)


# -- Validate and construction -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("param", "rule"), [
    (FragmentParam((8, 4), 4, 4, 2, 2), "assembleAxis < rank"),
    (FragmentParam((8, 4), 4, 4, -1, 2), "assembleAxis < rank"),
    (FragmentParam((9, 4), 4, 4, 0, 2), "assembledShape[assembleAxis] == fragmentSize * fragmentCnt"),
    (FragmentParam((4, 12), 4, 4, 1, 2), "assembledShape[assembleAxis] == fragmentSize * fragmentCnt"),
    (FragmentParam((0, 4), 0, 0, 0, 3), "fragmentSize > 0"),
    (FragmentParam((8, 4), 4, 0, 0, 2), "0 < realFragmentSize <= fragmentSize"),
    (FragmentParam((8, 4), 4, 5, 0, 2), "0 < realFragmentSize <= fragmentSize"),
    (FragmentParam((0, 4), 4, 4, 0, 0), "fragmentCnt > 0"),
    (FragmentParam((8, -1), 4, 4, 0, 2), "assembledShape >= 0"),
])
def test_validate_names_each_rule(param, rule):
    with pytest.raises(ConstraintError) as err:
        param.Validate()
    assert err.value.rule == f"FragmentParam: {rule}"
    with pytest.raises(ConstraintError) as err2:  # MakeFragmentTensor validates (the source never calls it)
        MakeFragmentTensor(param, [None] * MAX_FRAGMENT_COUNT)
    assert err2.value.rule == err.value.rule


@pytest.mark.parametrize("param", [
    FragmentParam((8, 4), 4, 4, 0, 2), FragmentParam((8, 4), 4, 1, 0, 2), FragmentParam((3, 6), 2, 2, 1, 3),
    FragmentParam((5,), 5, 3, 0, 1), FragmentParam((2, 3, 8), 4, 4, 2, 2),
])
def test_validate_accepts_valid_params(param):
    param.Validate()


def test_at_most_32_fragments():
    assert MAX_FRAGMENT_COUNT == 32
    MakeFragmentTensor(FragmentParam((32, 4), 1, 1, 0, 32), [None] * 32)
    with pytest.raises(ConstraintError) as err:
        MakeFragmentTensor(FragmentParam((33, 4), 1, 1, 0, 33), [None] * 33, name="tailFragA_")
    assert err.value.rule == "FragmentTensor: fragmentCnt <= MaxFragments (32)"
    assert "tailFragA_" in str(err.value) and "33" in str(err.value)
    with pytest.raises(ConstraintError, match=r"MaxFragments \(4\)"):
        MakeFragmentTensor(FragmentParam((5, 4), 1, 1, 0, 5), [None] * 8, MaxFragments=4)
    with pytest.raises(ConstraintError, match="addrList holds an address per fragment"):
        MakeFragmentTensor(FragmentParam((3, 4), 1, 1, 0, 3), [None] * 2)


def test_gather_over_32_fragments_of_one_row():
    frags = [np.full((1, 3), f, dtype=F32) for f in range(32)]

    def body(ctx):
        addrs, _ = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        ft = MakeFragmentTensor(frag_param(1, 1, 32, 0, 3), addrs, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32)
        out = np.zeros((32, 3), F32)
        FragmentSliceCopy(CopyGM2L1(ctx), out, ft, isScatter=False)
        return out

    out, _, hazards = on_core(body)
    assert hazards == []
    np.testing.assert_array_equal(out[:, 0], np.arange(32, dtype=F32))


# -- queries, the address list by reference, UpdateAddrList --------------------------------------------------------
def test_queries_and_the_list_held_by_reference():
    frags = [np.arange(12, dtype=F32).reshape(4, 3) + 100 * f for f in range(3)]

    def body(ctx):
        addrs, _ = place_fragments(ctx.device, frags, NDExtLayoutPtn, list_len=3)
        lst = list(addrs)
        ft = MakeFragmentTensor(frag_param(4, 4, 3, 0, 3), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32, name="A")
        assert ft.GetFragmentCnt() == 3 and ft.GetFragmentSize() == 4 and ft.GetSplitAxis() == 0
        assert ft.addrList is lst
        assert [ft.GetFragmentAddr(i) for i in range(3)] == addrs
        frag = ft.GetFragment(2)
        assert frag.shape == (4, 3) and frag.addr == addrs[2]
        np.testing.assert_array_equal(frag.load(ctx), frags[2])
        lst[2] = addrs[0]  # an in-place write is seen through the reference (as UpdateMainRoundAddrs relies on)
        assert ft.GetFragmentAddr(2) == addrs[0]
        view = ft.Slice((1, 0), (2, 3))
        other = list(addrs)
        ft.UpdateAddrList(other)  # this tensor only: the earlier slice keeps the old list, as a C++ copy does
        assert ft.addrList is other and view.addrList is lst
        ft.UpdateAddrList(None)
        assert ft.addrList is other
        with pytest.raises(KernelError, match="outside its address list"):
            ft.GetFragmentAddr(3)
        return True

    ok, _, hazards = on_core(body)
    assert ok and hazards == []


def test_fragment_of_axis_one_and_missing_address():
    ft = MakeFragmentTensor(FragmentParam((5, 12), 4, 3, 1, 3), [None] * 3, LayoutFactory=FrameLayoutFormat(
        NDExtLayoutPtn), ElementType=F32)
    with pytest.raises(KernelError, match="no GM address"):
        ft.GetFragment(0)
    dev = Device()
    base = dev.gm.alloc(5 * 4 * 4 * 3, "g", zero=True)
    ft.UpdateAddrList([base, base + 80, base + 160])
    assert ft.GetFragment(1).shape == (5, 4) and ft.GetFragment(1).addr == base + 80


def test_slices_compose_without_copying():
    lst = [None] * 4
    ft = MakeFragmentTensor(frag_param(8, 5, 4, 0, 64), lst)
    s1 = ft.Slice((3, 16), (20, 32))
    s2 = s1.Slice((6, 4), (9, 8))
    s3 = s2.Slice((1, 1), (2, 2))
    assert (s1.GetSliceCoord(0), s1.GetSliceCoord(1), s1.GetSliceShape(0), s1.GetSliceShape(1)) == (3, 16, 20, 32)
    assert (s2.GetSliceCoord(0), s2.GetSliceCoord(1), s2.GetSliceShape(0), s2.GetSliceShape(1)) == (9, 20, 9, 8)
    assert (s3.GetSliceCoord(0), s3.GetSliceCoord(1), s3.GetSliceShape(0), s3.GetSliceShape(1)) == (10, 21, 2, 2)
    assert s1.addrList is lst and s3.addrList is lst and s3.GetFragParam() is ft.GetFragParam()
    assert (ft.GetSliceCoord(0), ft.GetSliceShape(0)) == (0, 32)  # the parent is unchanged
    with pytest.raises(KernelError, match="rank-2"):
        ft.Slice((0,), (1,))
    with pytest.raises(KernelError, match="negative"):
        ft.Slice((-1, 0), (1, 1))


# -- head / body / tail ------------------------------------------------------------------------------------------
def pieces(ft, start: int, length: int) -> list[tuple[int, int, int, int]]:
    comp = ft.ComputeFragmentComposition(start, length)
    out = []
    for i in range(comp.totalFragmentCnt):
        info = ft.GetFragmentInfo(i, comp)
        out.append((info.fragmentIdx, info.fragCoord[0], info.copyShape[0], info.localCoord[0]))
    return out


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 17), st.integers(0, 90), st.integers(1, 90))
def test_composition_matches_the_row_model(fs, start, length):
    cnt = -(-(start + length) // fs)
    ft = MakeFragmentTensor(frag_param(fs, fs, cnt, 0, 2), [None] * cnt, MaxFragments=cnt)
    assert pieces(ft, start, length) == model_rows(fs, start, length)


def test_composition_source_rule_at_boundaries():
    ft = MakeFragmentTensor(frag_param(4, 4, 3, 0, 1), [None] * 3)
    # ends on a boundary: the empty tail becomes a whole fragment and the count drops by one
    c = ft.ComputeFragmentComposition(1, 7)
    assert (c.headSize, c.bodyCnt, c.tailSize, c.startFragmentIdx, c.endFragmentIdx, c.totalFragmentCnt) == \
        (3, 0, 4, 0, 1, 2)
    # one fragment reached only after that drop: bodyCnt is the source's uint32 wrap of -1 (never read)
    c = ft.ComputeFragmentComposition(1, 3)
    assert (c.headSize, c.totalFragmentCnt, c.bodyCnt) == (3, 1, 0xFFFF_FFFF)
    c = ft.ComputeFragmentComposition(2, 1)  # inside one fragment: head = tail = length
    assert (c.headSize, c.tailSize, c.bodyCnt, c.totalFragmentCnt) == (1, 1, 0, 1)
    c = ft.ComputeFragmentComposition(3, 6)  # head 1, body 4, tail 1
    assert (c.headSize, c.bodySize, c.bodyCnt, c.tailSize, c.totalFragmentCnt) == (1, 4, 1, 1, 3)


# -- random gather / scatter against the model -------------------------------------------------------------------
@st.composite
def cases(draw, *, scatter: bool):
    axis = draw(st.sampled_from([0, 1]))
    fs = draw(st.integers(1, 9))
    real = draw(st.integers(1, fs))
    cnt = draw(st.integers(1, 6))
    other = draw(st.integers(1, 5))
    pattern = draw(st.sampled_from([NDExtLayoutPtn, DNExtLayoutPtn]))
    total = fs * cnt
    extent = [0, 0]
    extent[axis], extent[1 - axis] = total, other

    def region(size_axis: int, size_other: int, min_len: int) -> tuple[tuple[int, int], tuple[int, int]]:
        coord, shape = [0, 0], [0, 0]
        coord[axis] = draw(st.integers(0, size_axis - min_len))
        shape[axis] = draw(st.integers(min_len, size_axis - coord[axis]))
        coord[1 - axis] = draw(st.integers(0, size_other - 1))
        shape[1 - axis] = draw(st.integers(1, size_other - coord[1 - axis]))
        return tuple(coord), tuple(shape)

    outer = region(total, other, 1)
    nested = draw(st.booleans())
    inner = region(outer[1][axis], outer[1][1 - axis], 1) if nested else None
    pad = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    seed = draw(st.integers(0, 2**16))
    return axis, fs, real if scatter else draw(st.integers(1, fs)), cnt, other, pattern, outer, inner, pad, seed


def absolute(outer, inner):
    if inner is None:
        return outer
    return (outer[0][0] + inner[0][0], outer[0][1] + inner[0][1]), inner[1]


def build(ctx, case, frags):
    axis, fs, real, cnt, other, pattern, outer, inner, _, seed = case
    addrs, read = place_fragments(ctx.device, frags, pattern, seed=seed)
    ft = MakeFragmentTensor(frag_param(fs, real, cnt, axis, other), addrs, LayoutFactory=FrameLayoutFormat(pattern),
                            ElementType=F32, name="frag")
    view = ft.Slice(*outer)
    if inner is not None:
        view = view.Slice(*inner)
    return view, read


@SETTINGS
@given(cases(scatter=False))
def test_gather_matches_the_model(case):
    """<false> copies every row of the slice, padded rows included, into the local tensor at the slice's
    own coordinates; the rest of the local buffer is untouched."""
    axis, fs, _, cnt, other, _, outer, inner, pad, seed = case
    rng = np.random.default_rng(seed)
    frags = [rng.standard_normal(frag_shape(fs, axis, other)).astype(F32) for _ in range(cnt)]
    coord, shape = absolute(outer, inner)
    local = np.full((shape[0] + pad[0], shape[1] + pad[1]), -7.5, F32)

    def body(ctx):
        view, _ = build(ctx, case, frags)
        FragmentSliceCopy(CopyGM2L1(ctx), local, view, isScatter=False)

    _, _, hazards = on_core(body)
    assert hazards == []
    expect = np.full_like(local, -7.5)
    expect[:shape[0], :shape[1]] = model_gather(frags, axis, coord, shape)
    np.testing.assert_array_equal(local, expect)


@SETTINGS
@given(cases(scatter=True))
def test_scatter_matches_the_model(case):
    """<true> writes exactly the slice rows whose place inside their fragment is below realFragmentSize;
    padded rows and everything outside the slice keep their bytes."""
    axis, fs, real, cnt, other, _, outer, inner, pad, seed = case
    rng = np.random.default_rng(seed)
    frags = [rng.standard_normal(frag_shape(fs, axis, other)).astype(F32) for _ in range(cnt)]
    coord, shape = absolute(outer, inner)
    l0c = rng.standard_normal((shape[0] + pad[0], shape[1] + pad[1])).astype(F32)

    def body(ctx):
        view, read = build(ctx, case, frags)
        FragmentSliceCopy(CopyL0C2GM(ctx).with_(FixpipeParams(3)), l0c, view, isScatter=True)
        return [read(f) for f in range(cnt)]

    got, _, hazards = on_core(body)
    assert hazards == []
    expect = model_scatter(frags, axis, real, coord, shape, l0c[:shape[0], :shape[1]])
    for f in range(cnt):
        np.testing.assert_array_equal(got[f], expect[f], err_msg=f"fragment {f}")


def test_gather_reads_padded_rows_and_scatter_skips_and_clips():
    """fs 4, real 2, rows 3..8 of three fragments: the gather returns padded rows 3, 6, 7; the scatter skips
    the head (row 3 of fragment 0 starts past real), writes rows 0-1 of fragment 1 and row 0 of fragment 2."""
    frags = [np.full((4, 2), 10 * f, F32) + np.arange(4, dtype=F32)[:, None] for f in range(3)]
    src = np.arange(12, dtype=F32).reshape(6, 2) + 1000

    def body(ctx):
        addrs, read = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        ft = MakeFragmentTensor(frag_param(4, 2, 3, 0, 2), addrs, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32, name="tailFragC_")
        view = ft.Slice((3, 0), (6, 2))
        got = np.zeros((6, 2), F32)
        FragmentSliceCopy(CopyGM2L1(ctx), got, view, isScatter=False)
        FragmentSliceCopy(CopyL0C2GM(ctx), src, view, isScatter=True)
        return got, [read(f) for f in range(3)]

    (got, after), _, hazards = on_core(body)
    assert hazards == []
    np.testing.assert_array_equal(got[:, 0], [3, 10, 11, 12, 13, 20])  # fragment rows 3 | 0 1 2 3 | 0
    np.testing.assert_array_equal(after[0], frags[0])
    np.testing.assert_array_equal(after[1][:2], src[1:3])
    np.testing.assert_array_equal(after[1][2:], frags[1][2:])
    np.testing.assert_array_equal(after[2][:1], src[5:6])
    np.testing.assert_array_equal(after[2][1:], frags[2][1:])


def test_scatter_converts_through_the_fixpipe():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    l0c = np.array([[1.0, 2.0], [3.0, -4.0], [5.0, 6.0]], F32)  # exact in bf16

    def body(ctx):
        base = ctx.device.gm.alloc(2 * 2 * 2 * 2, "c", zero=True)
        ft = MakeFragmentTensor(frag_param(2, 2, 2, 0, 2), [base, base + 8], LayoutFactory=FrameLayoutFormat(
            NDExtLayoutPtn), ElementType=bf16)
        FragmentSliceCopy(CopyL0C2GM(ctx), l0c, ft.Slice((1, 0), (3, 2)), isScatter=True)
        return ctx.device.gm.view(base, np.uint16, (4, 2)).copy()

    raw, _, hazards = on_core(body)
    assert hazards == []
    expect = np.zeros((4, 2), np.uint16)
    expect[1:] = (l0c.view(np.uint32) >> 16).astype(np.uint16)  # exact values: bf16 = the high half of fp32
    np.testing.assert_array_equal(raw, expect)


def test_copy_shapes_and_local_bounds_are_checked():
    buf = np.zeros((4, 4), F32)
    assert SliceLocal(buf, (1, 2), (3, 2)).shape == (3, 2)
    with pytest.raises(LayoutError, match="leaves the tensor"):
        SliceLocal(buf, (2, 0), (3, 1))

    def body(ctx):
        base = ctx.device.gm.alloc(64, "g", zero=True)
        ft = MakeFragmentTensor(frag_param(2, 2, 2, 0, 2), [base, base + 16], LayoutFactory=FrameLayoutFormat(
            NDExtLayoutPtn), ElementType=F32)
        with pytest.raises(LayoutError, match="leaves the tensor"):  # local buffer smaller than the slice
            FragmentSliceCopy(CopyGM2L1(ctx), np.zeros((3, 2), F32), ft, isScatter=False)
        with pytest.raises(LayoutError, match="CopyGM2L1 of float32 into a float16"):
            FragmentSliceCopy(CopyGM2L1(ctx), np.zeros((4, 2), np.float16), ft, isScatter=False)
        with pytest.raises(KernelError, match="no core context"):
            FragmentSliceCopy(lambda dst, src: None, np.zeros((4, 2), F32), ft, isScatter=False)
        return True

    ok, _, _ = on_core(body)
    assert ok


# -- hazards -----------------------------------------------------------------------------------------------------
class MutatingCopy:
    """A copy handle that, after piece `after` has been copied, rewrites address list entry `entry`."""

    def __init__(self, inner, lst, after: int, entry: int, new_addr) -> None:
        self.inner, self.ctx, self.lst = inner, inner.ctx, lst
        self.after, self.entry, self.new_addr, self.calls = after, entry, new_addr, 0

    def __call__(self, dst, src) -> None:
        self.inner(dst, src)
        if self.calls == self.after:
            self.lst[self.entry] = self.new_addr
        self.calls += 1


@pytest.mark.parametrize("scatter", [False, True])
def test_list_mutated_during_a_copy_is_reported(scatter):
    """Entry 1 changes while the copy of rows 2..7 (fragments 0, 1, 2 of 3 rows) is between pieces: the report
    names the fragment, both addresses and the copy; piece 1 still reads the list by reference (new address)."""
    frags = [np.full((3, 2), f, F32) for f in range(4)]
    src = np.full((6, 2), 9.0, F32)

    def body(ctx):
        addrs, read = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        lst = list(addrs)
        ft = MakeFragmentTensor(frag_param(3, 3, 3, 0, 2), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32, name="curMainA_")
        inner = CopyL0C2GM(ctx) if scatter else CopyGM2L1(ctx)
        handle = MutatingCopy(inner, lst, after=0, entry=1, new_addr=addrs[3])
        local = src.copy() if scatter else np.zeros((6, 2), F32)
        FragmentSliceCopy(handle, local, ft.Slice((2, 0), (6, 2)), isScatter=scatter)
        return local, [read(f) for f in range(4)], addrs

    (local, after, addrs), _, hazards = on_core(body)
    assert [h.hazard for h in hazards] == [Hazard.ADDR_LIST_MUTATED]
    rep = hazards[0]
    assert rep.core == "AIC0" and rep.details["fragments"] == [1] and rep.details["tensor"] == "curMainA_"
    assert rep.details["old"] == [addrs[1]] and rep.details["new"] == [addrs[3]]
    copy = f"FragmentSliceCopy<{'true' if scatter else 'false'}> of curMainA_ slice (2, 0) (6, 2)"
    assert rep.details["copy"] == copy and copy in rep.message and "fragment 1" in rep.message
    assert "before piece 1" in rep.message
    if scatter:  # rows of fragment 1 went to fragment 3's address; fragment 1 kept its bytes
        np.testing.assert_array_equal(after[1], frags[1])
        np.testing.assert_array_equal(after[3], np.full((3, 2), 9.0, F32))
    else:
        np.testing.assert_array_equal(local[:, 0], [0, 3, 3, 3, 2, 2])


def test_mutation_in_the_last_piece_and_of_unused_entries():
    frags = [np.full((2, 2), f, F32) for f in range(4)]

    def body(ctx):
        addrs, _ = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        lst = list(addrs)
        ft = MakeFragmentTensor(frag_param(2, 2, 3, 0, 2), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32, name="A")
        out = np.zeros((4, 2), F32)
        # entry 2 is outside the slice (rows 0..3 = fragments 0, 1): no report
        FragmentSliceCopy(MutatingCopy(CopyGM2L1(ctx), lst, 0, 2, addrs[3]), out, ft.Slice((0, 0), (4, 2)),
                          isScatter=False)
        assert ctx.device.hazards.peek() == []
        # entry 0 rewritten during the last piece: reported at the copy's end
        FragmentSliceCopy(MutatingCopy(CopyGM2L1(ctx), lst, 1, 0, addrs[3]), out, ft.Slice((0, 0), (4, 2)),
                          isScatter=False)
        # the kernels' pattern: rewrite in place between copies, UpdateAddrList with the same list: no report
        lst[0], lst[1] = addrs[2], addrs[3]
        ft.UpdateAddrList(lst)
        FragmentSliceCopy(CopyGM2L1(ctx), out, ft.Slice((0, 0), (4, 2)), isScatter=False)
        return out

    out, _, hazards = on_core(body)
    assert [h.hazard for h in hazards] == [Hazard.ADDR_LIST_MUTATED]
    assert hazards[0].details["fragments"] == [0] and "at its end" in hazards[0].message
    np.testing.assert_array_equal(out[:, 0], [2, 2, 3, 3])


def test_slice_past_the_last_fragment_is_reported_and_reproduced():
    """A block straddling the region end (HEAD of 1 fragment, a tile of 4 rows from row 2): piece 1 reads
    addrList[1]. With a stale address there it is copied from it; with none it is skipped."""
    frags = [np.full((4, 2), f + 1, F32) for f in range(2)]

    def body(ctx):
        addrs, _ = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        outs = []
        for stale in (addrs[1], None):
            lst = [addrs[0], stale]
            ft = MakeFragmentTensor(frag_param(4, 4, 1, 0, 2), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                    ElementType=F32, name="headFragA_")
            out = np.zeros((4, 2), F32)
            FragmentSliceCopy(CopyGM2L1(ctx), out, ft.Slice((2, 0), (4, 2)), isScatter=False)
            outs.append(out)
        return outs

    (stale, skipped), _, hazards = on_core(body)
    assert [h.hazard for h in hazards] == [Hazard.FRAGMENT_OUT_OF_RANGE] * 2
    assert all(h.details["fragment"] == 1 and h.details["fragmentCnt"] == 1 and h.details["piece"] == 1
               and "headFragA_" in h.details["copy"] for h in hazards)
    assert "piece skipped" in hazards[1].message and "piece skipped" not in hazards[0].message
    np.testing.assert_array_equal(stale[:, 0], [1, 1, 2, 2])
    np.testing.assert_array_equal(skipped[:, 0], [1, 1, 0, 0])


def test_slice_taken_before_an_in_place_rewrite_reads_the_new_addresses():
    """The list is shared by reference with every slice: a rewrite between Slice and copy is seen (no report)."""
    frags = [np.full((2, 2), f, F32) for f in range(4)]

    def body(ctx):
        addrs, _ = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        lst = list(addrs)
        ft = MakeFragmentTensor(frag_param(2, 2, 2, 0, 2), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32)
        view = ft.Slice((1, 0), (2, 2))
        lst[0], lst[1] = addrs[2], addrs[3]
        out = np.zeros((2, 2), F32)
        FragmentSliceCopy(CopyGM2L1(ctx), out, view, isScatter=False)
        return out

    out, _, hazards = on_core(body)
    assert hazards == []
    np.testing.assert_array_equal(out[:, 0], [2, 3])


def test_one_slice_copied_again_after_a_rewrite_reads_the_new_addresses():
    """The same slice object gathered, the list rewritten in place (and grown past fragmentCnt: an
    out-of-range piece gains an address), gathered and scattered again: every copy reads the entries of its
    own time (the slice's host-side copy plan keeps no address), reports included."""
    frags = [np.full((2, 2), f, F32) for f in range(5)]

    def body(ctx):
        addrs, read = place_fragments(ctx.device, frags, NDExtLayoutPtn)
        lst = [addrs[0], addrs[1], None]
        ft = MakeFragmentTensor(frag_param(2, 1, 2, 0, 2), lst, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32, name="A")
        view = ft.Slice((1, 0), (4, 2))     # rows 1..4: fragment 0 row 1, fragment 1, fragment 2 row 0
        outs = []
        for step in range(3):
            out = np.full((4, 2), -1.0, F32)
            FragmentSliceCopy(CopyGM2L1(ctx), out, view, isScatter=False)
            outs.append(out[:, 0].tolist())
            lst[0], lst[1], lst[2] = addrs[2 + step], addrs[3 - step], addrs[4 - step]
        FragmentSliceCopy(CopyL0C2GM(ctx), np.full((4, 2), 7.0, F32), view, isScatter=True)
        return outs, [read(f)[:, 0].tolist() for f in range(5)], addrs

    (outs, after, addrs), _, hazards = on_core(body)
    assert outs == [[0, 1, 1, -1], [2, 3, 3, 4], [3, 2, 2, 3]]
    assert [h.hazard for h in hazards] == [Hazard.FRAGMENT_OUT_OF_RANGE] * 4
    assert [h.details["piece"] for h in hazards] == [2, 2, 2, 2]
    assert ["piece skipped" in h.message for h in hazards] == [True, False, False, False]
    assert all(repr(a) in h.message for h, a in zip(hazards[1:], (addrs[4], addrs[3], addrs[2]), strict=True))
    assert [h.details["copy"] for h in hazards] == [f"FragmentSliceCopy<{b}> of A slice (1, 0) (4, 2)"
                                                   for b in ("false", "false", "false", "true")]
    # the scatter, after the last rewrite (entries 4, 1, 2; realFragmentSize 1): row 0 of fragment 4 is skipped
    # (row 1 of its fragment), row 1 lands in row 0 of fragment 1, rows 2..3 are row 1 of fragment 1 (skipped)
    # and row 0 of fragment 2 (out of range: copied to the address there)
    assert after == [[0, 0], [7, 1], [7, 2], [3, 3], [4, 4]]


def test_slices_sharing_an_origin_copy_their_own_pieces():
    """Copy plans are shared between slices of equal parameters, origin and shape (host time only): slices of one
    origin with other shapes, and of equal origin and shape under other parameters, each gather their own rows,
    in either order, within one process."""
    frags = [np.full((4, 2), 10 * f, F32) + np.arange(4, dtype=F32)[:, None] for f in range(4)]  # 10 f + row

    def gather(ctx, fs, real, shape):
        addrs, _ = place_fragments(ctx.device, [f[:fs] for f in frags], NDExtLayoutPtn)
        ft = MakeFragmentTensor(frag_param(fs, real, 4, 0, 2), addrs, LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn),
                                ElementType=F32)
        out = np.full(shape, -1.0, F32)
        FragmentSliceCopy(CopyGM2L1(ctx), out, ft.Slice((1, 0), shape), isScatter=False)
        return out[:, 0].astype(int).tolist()

    def body(ctx):
        return [gather(ctx, 4, 4, (2, 2)), gather(ctx, 4, 4, (7, 2)), gather(ctx, 4, 4, (2, 2)),
                gather(ctx, 2, 2, (2, 2)), gather(ctx, 2, 1, (7, 2)), gather(ctx, 4, 4, (7, 2))]

    got, _, hazards = on_core(body)
    assert hazards == []
    assert got == [[1, 2], [1, 2, 3, 10, 11, 12, 13], [1, 2], [1, 10], [1, 10, 11, 20, 21, 30, 31],
                   [1, 2, 3, 10, 11, 12, 13]]


@pytest.mark.parametrize("elem", ["float8_e4m3fn", "float4_e2m1fn"])
def test_tail_region_as_the_ag_kernel_uses_it(elem):
    """The AG TAIL: R = 4 fragments of paddedTailM 16 rows (tailM 5 real) of A (m rows of K = 192 per rank,
    rank-major window), scaleA ((m, 6) E8M0, ScaleANDLayoutPtn) and C (bf16, N = 32). A tile of 40 rows from
    row 8 is gathered K chunk by K chunk (nested slices, as CopyAInL1 slices blockA) into an L1 buffer padded
    to 64 columns, scaleA likewise; its C is scattered: only the tailM real rows of each rank land."""
    R, m, tailM, padded, K, N, headRows = 4, 13, 5, 16, 192, 32, 8
    dt = np.dtype(getattr(ml_dtypes, elem))
    e8m0 = np.dtype(ml_dtypes.float8_e8m0fnu)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(3)
    # every rank's A padded to headRows + paddedTailM rows (the rows past m are what the gather reads there)
    rowsA = headRows + padded
    a = rng.integers(0, 16 if "float4" in elem else 120, (R, rowsA, K)).astype(np.uint8)  # element codes
    sa = rng.integers(100, 140, (R, rowsA, K // 32)).astype(np.uint8).view(e8m0)
    l0c = (rng.integers(-64, 64, (R * padded, N)) * 0.5).astype(F32)  # exact in bf16
    mPos, curM, kL1 = 8, 40, 64

    def body(ctx):
        gm = ctx.device.gm
        if "float4" in elem:
            packed = (a[..., 0::2] & 0x0F) | ((a[..., 1::2] & 0x0F) << 4)
            winA = gm.alloc(packed.nbytes, "winA", data=packed)
            rowBytes = K // 2
        else:
            winA = gm.alloc(a.nbytes, "winA", data=a)
            rowBytes = K
        winS = gm.alloc(sa.nbytes, "winScale", data=sa.view(np.uint8))
        cGM = gm.alloc(R * m * N * 2, "c", zero=True)
        lstA = [winA + r * rowsA * rowBytes + headRows * rowBytes for r in range(R)] + [None] * 28
        lstS = [winS + r * rowsA * (K // 32) + headRows * (K // 32) for r in range(R)] + [None] * 28
        lstC = [cGM + r * m * N * 2 + headRows * N * 2 for r in range(R)] + [None] * 28
        tailA = MakeFragmentTensor(FragmentParam((R * padded, K), padded, tailM, 0, R), lstA,
                                   LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn), ElementType=dt, name="tailFragA_")
        tailS = MakeFragmentTensor(FragmentParam((R * padded, K // 32), padded, tailM, 0, R), lstS,
                                   LayoutFactory=FrameLayoutFormat(ScaleANDLayoutPtn, 2), ElementType=e8m0,
                                   name="tailFragScaleA_")
        tailC = MakeFragmentTensor(FragmentParam((R * padded, N), padded, tailM, 0, R), lstC,
                                   LayoutFactory=FrameLayoutFormat(NDExtLayoutPtn), ElementType=bf16, name="tailFragC_")
        blockA = tailA.Slice((mPos, 0), (curM, K))
        gotA = []
        for iter0 in range(K // kL1):
            l1 = np.zeros((curM, kL1 + 64), dt)
            FragmentSliceCopy(CopyGM2L1(ctx), l1, blockA.Slice((0, iter0 * kL1), (curM, kL1)), isScatter=False)
            gotA.append(l1)
        l1s = np.zeros((curM, K // 32), e8m0)
        FragmentSliceCopy(CopyGM2L1(ctx), l1s, tailS.Slice((mPos, 0), (curM, K // 32)), isScatter=False)
        FragmentSliceCopy(CopyL0C2GM(ctx), l0c[mPos:mPos + curM], tailC.Slice((mPos, 0), (curM, N)), isScatter=True)
        return gotA, l1s, gm.view(cGM, np.uint16, (R, m, N)).copy()

    (gotA, l1s, c), _, hazards = on_core(body)
    assert hazards == []
    rows = [(g // padded, headRows + g % padded) for g in range(mPos, mPos + curM)]  # (rank, row of its A)
    expectA = np.stack([a[r, row] for r, row in rows])
    for iter0, l1 in enumerate(gotA):
        np.testing.assert_array_equal(l1[:, :kL1].view(np.uint8) & (0x0F if "float4" in elem else 0xFF),
                                      expectA[:, iter0 * kL1:(iter0 + 1) * kL1])
        assert not l1[:, kL1:].view(np.uint8).any()
    np.testing.assert_array_equal(l1s.view(np.uint8), np.stack([sa.view(np.uint8)[r, row] for r, row in rows]))
    expectC = np.zeros((R, m, N), np.uint16)
    for i, g in enumerate(range(mPos, mPos + curM)):
        r, rel = divmod(g, padded)
        if rel < tailM:
            expectC[r, headRows + rel] = l0c[mPos + i].view(np.uint32) >> 16
    np.testing.assert_array_equal(c, expectC)
