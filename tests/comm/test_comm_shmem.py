"""SHMEM-like puts, gets, signals, quiet and barrier_all over MPI, at any world size."""

from __future__ import annotations

import time

import numpy as np
import pytest
from comm_cases import HANG_TIMEOUT_S, RESYNC_TIMEOUT_S, rank_data

from mc2emu.comm import Cmp, Shmem, SignalOp, SignalRead
from mc2emu.runtime import DeadlockError, EventRecorder, KernelError, KernelType
from mc2emu.runtime.comm_events import Put, SignalPost, SignalWait

pytestmark = pytest.mark.mpi(min_size=2)

TILE = 4096
TILES = 4


@pytest.mark.parametrize("read", list(SignalRead))
def test_all_to_all_by_put_signal_is_byte_exact(make_world, read):
    """Every rank sends TILES random tiles to every rank (itself too), one put_signal per tile, from one
    AIV per peer (the UDMA pattern, several core threads putting concurrently), and waits for all tiles
    addressed to it."""
    world = make_world()
    shmem = Shmem(world, read=read)
    R, me, dev = world.size, world.rank, world.device
    chunk = TILES * TILE
    win = world.window(R * chunk + R * TILES * 8, "a2a")
    sigs = win.addr(R * chunk)
    send = dev.gm.alloc(R * chunk, "send", data=rank_data(me, R * chunk))

    def kernel(ctx):
        target = ctx.GetBlockIdx()
        for t in range(TILES):
            shmem.put_signal(ctx, win.addr(me * chunk + t * TILE), send + target * chunk + t * TILE, TILE,
                             sigs + (me * TILES + t) * 8, 1, SignalOp.ADD, target)
        for t in range(TILES):
            got = shmem.signal_wait_until(ctx, sigs + (target * TILES + t) * 8, Cmp.GE, 1)
            assert got == 1

    dev.launch(kernel, R, KernelType.AIV_ONLY)
    got = dev.gm.read(win.base, np.uint8, (R, chunk))
    for src in range(R):
        want = rank_data(src, R * chunk)[me * chunk:(me + 1) * chunk]
        np.testing.assert_array_equal(got[src], want, err_msg=f"block from rank {src}")
    world.barrier()


def test_concurrent_puts_from_many_cores_and_quiet(make_world):
    """8 core threads of each rank put interleaved 8-byte words to the right neighbour, quiet, then one
    signal per core; the neighbour sees every word."""
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    cores, words = 8, 64
    win = world.window(cores * words * 8 + cores * 8, "w")
    sigs = win.addr(cores * words * 8)
    right, left = (me + 1) % R, (me - 1) % R
    src = dev.gm.alloc(cores * words * 8, "src",
                       data=np.arange(cores * words, dtype=np.uint64) + np.uint64(me << 32))

    def kernel(ctx):
        c = ctx.GetBlockIdx()
        for w in range(words):
            off = (w * cores + c) * 8
            shmem.put_nbi(ctx, win.addr(off), src + off, 8, right)
        shmem.quiet(ctx)
        shmem.signal_op(ctx, sigs + c * 8, 7, SignalOp.SET, right)
        shmem.signal_wait_until(ctx, sigs + c * 8, Cmp.EQ, 7)

    dev.launch(kernel, cores, KernelType.AIV_ONLY)
    got = dev.gm.read(win.base, np.uint64, (cores * words,))
    np.testing.assert_array_equal(got, np.arange(cores * words, dtype=np.uint64) + np.uint64(left << 32))
    world.barrier()


def test_signal_set_add_and_comparisons(make_world):
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    win = world.window(64, "sig")
    sig = win.addr(0)

    def kernel(ctx):
        # every rank ADDs 2 into every rank's word, then rank 0 also SETs a second word to 100 everywhere
        for pe in range(R):
            shmem.signal_op(ctx, sig, 2, SignalOp.ADD, pe)
        if me == 0:
            for pe in range(R):
                shmem.signal_op(ctx, sig + 8, 100, SignalOp.SET, pe)
        assert shmem.signal_wait_until(ctx, sig, Cmp.EQ, 2 * R) == 2 * R
        assert shmem.signal_wait_until(ctx, sig + 8, Cmp.GT, 99) == 100
        assert shmem.signal_wait_until(ctx, sig + 8, Cmp.NE, 0) == 100
        assert shmem.signal_wait_until(ctx, sig + 16, Cmp.LT, 1) == 0
        assert shmem.signal_wait_until(ctx, sig + 16, Cmp.LE, 0) == 0
        assert shmem.signal_read(sig) == 2 * R
        with pytest.raises(KernelError, match="SignalOp"):
            shmem.signal_op(ctx, sig, 1, "add", 0)
        with pytest.raises(KernelError, match="aligned"):
            shmem.signal_op(ctx, sig + 4, 1, SignalOp.ADD, 0)

    dev.launch(kernel, 1, KernelType.AIV_ONLY)
    world.barrier()


def test_get_nbi_and_barrier_all(make_world):
    """Each rank writes its window locally, barrier_all, then gets the left neighbour's bytes."""
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    win = world.window(256, "g")
    dst = dev.gm.alloc(256, "dst")

    def kernel(ctx):
        ctx.gm_write(win.base, rank_data(me, 256, salt=1))
        shmem.barrier_all(ctx)
        shmem.get_nbi(ctx, dst, win.base, 256, (me - 1) % R)
        shmem.quiet(ctx)

    dev.launch(kernel, 1, KernelType.AIV_ONLY)
    np.testing.assert_array_equal(dev.gm.read(dst, np.uint8, (256,)), rank_data((me - 1) % R, 256, salt=1))
    world.barrier()


def test_events_carry_what_a_happens_before_checker_needs(make_world):
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    rec = EventRecorder()
    dev.events.subscribe(rec)
    win = world.window(64 + 8, "ev")
    src = dev.gm.alloc(64, "src", data=rank_data(me, 64))
    right = (me + 1) % R

    def kernel(ctx):
        shmem.put_signal(ctx, win.base, src, 64, win.addr(64), 1, SignalOp.ADD, right)
        shmem.signal_wait_until(ctx, win.addr(64), Cmp.GE, 1)

    dev.launch(kernel, 1, KernelType.AIV_ONLY)
    put = rec.of(Put)[0]
    assert (put.src_rank, put.pe, put.window, put.offset, put.nbytes) == (me, right, "ev", 0, 64)
    (post,), (wait,) = rec.of(SignalPost), rec.of(SignalWait)
    assert post.op is SignalOp.ADD and post.op_seq > put.op_seq
    assert (post.pe, post.offset, post.signal) == (right, 64, 1)
    assert (wait.offset, wait.cmp, wait.expected, wait.observed) == (64, Cmp.GE, 1, 1)
    world.barrier()


def test_peer_that_never_signals_ends_in_deadlock_on_every_rank(make_world):
    """Every rank waits for a signal its right neighbour never sends: each raises DeadlockError within the
    deadline (at most 2 x, see progress_probe), then all ranks meet again."""
    world = make_world(timeout=HANG_TIMEOUT_S)
    shmem = Shmem(world)
    win = world.window(8, "never")

    def kernel(ctx):
        shmem.signal_wait_until(ctx, win.base, Cmp.GE, 1)

    t0 = time.monotonic()
    with pytest.raises(DeadlockError, match=r"signal never\+0x0"):
        world.device.launch(kernel, 1, KernelType.AIV_ONLY)
    elapsed = time.monotonic() - t0
    assert HANG_TIMEOUT_S * 0.9 <= elapsed <= 2 * HANG_TIMEOUT_S + 3.0
    world.barrier(timeout=RESYNC_TIMEOUT_S)


def test_slow_but_live_peer_does_not_trip_the_deadline(make_world):
    """Rank 1 keeps making progress (puts to itself) for 2.5 x the deadline before it signals rank 0;
    the global progress probe keeps rank 0's wait alive. Other ranks idle."""
    world = make_world(timeout=HANG_TIMEOUT_S)
    shmem = Shmem(world)
    me, dev = world.rank, world.device
    win = world.window(16, "slow")
    step_s = 0.25                                      # a progress event every 0.25 s ...
    steps = round(2.5 * HANG_TIMEOUT_S / step_s)       # ... for 2.5 x the deadline

    def kernel(ctx):
        if me == 0:
            shmem.signal_wait_until(ctx, win.base, Cmp.GE, 1)
        elif me == 1:
            for _ in range(steps):
                ctx.launch.abort.wait(step_s)          # "compute" (interruptible, like a perturbation)
                shmem.put_nbi(ctx, win.addr(8), win.addr(8), 8, 1)
            shmem.signal_op(ctx, win.base, 1, SignalOp.SET, 0)

    dev.launch(kernel, 1, KernelType.AIV_ONLY)
    world.barrier(timeout=RESYNC_TIMEOUT_S)


@pytest.mark.parametrize("rows, row_bytes, stride", [(5, 24, 64), (1, 24, 64), (4, 16, 16), (3, 0, 8)])
def test_strided_local_put_lands_rows_apart_and_leaves_the_gaps(make_world, rows, row_bytes, stride):
    """`put_local_rows_nbi`: the rows of a local buffer land `stride` bytes apart in the right neighbour's window
    (one strided copy); the bytes between them keep what was there; one PUT event per row with its offset."""
    world = make_world()
    shmem = Shmem(world)
    R, me, dev = world.size, world.rank, world.device
    rec = EventRecorder()
    dev.events.subscribe(rec, (Put,))
    win = world.window(512, "rows")
    right, left = (me + 1) % R, (me - 1) % R
    data = rank_data(me, max(rows * row_bytes, 1), salt=3)[:rows * row_bytes].reshape(rows, row_bytes)

    def kernel(ctx):
        ctx.gm_write(win.base, np.full(512, 0xEE, dtype=np.uint8))
        shmem.barrier_all(ctx)
        shmem.put_local_rows_nbi(ctx, win.addr(40), data, stride, right)
        shmem.quiet(ctx)
        shmem.barrier_all(ctx)

    dev.launch(kernel, 1, KernelType.AIV_ONLY)
    got = dev.gm.read(win.base, np.uint8, (512,))
    want = np.full(512, 0xEE, dtype=np.uint8)
    theirs = rank_data(left, max(rows * row_bytes, 1), salt=3)[:rows * row_bytes].reshape(rows, row_bytes)
    for i in range(rows):
        want[40 + i * stride: 40 + i * stride + row_bytes] = theirs[i]
    np.testing.assert_array_equal(got, want)
    puts = rec.of(Put)
    if row_bytes and rows > 1 and stride != row_bytes:
        assert [(p.pe, p.offset, p.nbytes) for p in puts] == \
            [(right, 40 + i * stride, row_bytes) for i in range(rows)]
    world.barrier()


def test_strided_local_put_of_overlapping_rows_is_refused(make_world):
    world = make_world()
    shmem = Shmem(world)
    dev = world.device
    win = world.window(256, "ovl")

    def kernel(ctx):
        shmem.put_local_rows_nbi(ctx, win.base, np.zeros((3, 32), np.uint8), 16, (world.rank + 1) % world.size)

    with pytest.raises(Exception, match="rows overlap"):
        dev.launch(kernel, 1, KernelType.AIV_ONLY)
    world.barrier()
