"""Checker edges: what exactly a signal Wait, a signal value, a quiet, a flag Wait round and the launch-end
signal pairing prove, each tested one step short of its edge (ordered: no report) and one step past it (the
named hazard, on the exact byte range). Every rank puts to its right neighbour and reads what its left
neighbour put, so the cases run at any world size; they are deterministic (no timing decides a verdict).

Rules (happens-before, `mc2emu.check.happens_before`; pairing, `_unwaited_signals`):
- put_signal: a wait that saw the signal proves the data of that put_signal, not a put issued after it;
- signal value: a wait that saw value v proves the posts that made it v, not a later post to the slot;
- quiet: completes the puts before it, not a put after it (ordered to a reader by a cross-core flag round);
- flag round: a Wait proves the puts completed before the Sets of the round it consumes, not the next round;
- UNWAITED_SIGNAL: the waits saw the posts' final value (paired), or one post short of it (reported);
- HCCL Wait (`_check_hccl`): the k-th Wait on a handle proves repeats 0..k-1 of its task, not repeat k;
- HCCL client (`mc2emu.comm.hccl`, per core): 63 Prepares, Commits up to `repeat`, Waits up to the Commits
  are clean; the 64th Prepare, a Commit past `repeat`, a Wait past the Commits are each reported once.
Flag counter and id edges (15 pending / 16th, id 15 / 16) are in tests/runtime/test_cross_core_flags.py.
"""

import numpy as np
import pytest

from mc2emu.check.happens_before import HappensBeforeChecker
from mc2emu.comm import HCCL_MAX_HANDLE_ID, HCCL_SUCCESS, INVALID_HANDLE_ID, Hccl, HcclServer, HcclServerType
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.world import CommWorld
from mc2emu.runtime import Device, KernelType, Pipe

pytestmark = pytest.mark.mpi(min_size=2)

PART = 64                   # window bytes of part A at [0, 64) and part B at [64, 128)
A, B = (0, PART), (PART, 2 * PART)
TIMEOUT_S = 20.0


def run(kernel, block_dim=1, kernel_type=KernelType.AIV_ONLY):
    """Launch `kernel(ctx, env)` on every rank with the checker on; returns this rank's hazards as
    (name, core, lo, hi) sorted, plus what the reads returned."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=TIMEOUT_S)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm)
    try:
        win = cw.window(2 * PART, "edges")
        sig = cw.window(64, "edges_sig")
        src = dev.gm.alloc(2 * PART, "src", data=np.full(2 * PART, rank + 1, dtype=np.uint8))
        env = {"shmem": Shmem(cw), "win": win, "sig": sig.addr(0), "ack": sig.addr(8), "src": src,
               "right": (rank + 1) % size, "left": (rank - 1) % size, "me": rank, "reads": {}}
        cw.barrier()
        dev.launch(kernel, block_dim, kernel_type, env)
        cw.barrier()
        hb.finish()
        got = [(h.hazard.value, h.core, h.details.get("lo"), h.details.get("hi")) for h in dev.hazards.take()]
        return sorted(got, key=str), env["reads"]
    finally:
        hb.close()
        cw.close()


def read(ctx, env, part, key):
    env["reads"][key] = ctx.gm_read(env["win"].addr(part[0]), np.uint8, (PART,))


# -- put_signal: the wait proves that put's data, not a put after it -----------------------------------------
def _put_signal_then_put(read_part):
    def kernel(ctx, env):
        sh = env["shmem"]
        sh.put_signal(ctx, env["win"].addr(A[0]), env["src"], PART, env["sig"], 1, SignalOp.ADD, env["right"])
        sh.put_nbi(ctx, env["win"].addr(B[0]), env["src"] + PART, PART, env["right"])
        sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 1, from_pe=env["left"])
        read(ctx, env, read_part, "x")
        sh.quiet(ctx)
        sh.barrier_all(ctx)
    return kernel


def test_a_signal_wait_proves_the_data_of_its_put_signal():
    got, reads = run(_put_signal_then_put(A))
    assert got == []
    assert (reads["x"] == run_left_value()).all()


def test_a_signal_wait_does_not_prove_a_put_issued_after_the_put_signal():
    got, _ = run(_put_signal_then_put(B))
    assert got == [("READ_BEFORE_WAIT", "AIV0", *B)]


def run_left_value():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return (comm.Get_rank() - 1) % comm.Get_size() + 1


# -- signal value: a wait for v proves the posts that made it v ----------------------------------------------
def _two_put_signals(wait_for):
    """Part A then part B, each with its own +1 post to one slot; the reader waits for `wait_for` and reads B.
    The second put_signal is held until the reader acknowledged: a wait for 1 sees exactly 1, and the read
    after the acknowledgement races the left neighbour's put of B."""
    def kernel(ctx, env):
        sh = env["shmem"]
        sh.put_signal(ctx, env["win"].addr(A[0]), env["src"], PART, env["sig"], 1, SignalOp.ADD, env["right"])
        if wait_for == 1:                  # sees exactly 1: the left neighbour's B waits for the ack below
            sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 1, from_pe=env["left"])
        sh.signal_op(ctx, env["ack"], 1, SignalOp.ADD, env["left"])
        sh.signal_wait_until(ctx, env["ack"], Cmp.GE, 1, from_pe=env["right"])
        sh.put_signal(ctx, env["win"].addr(B[0]), env["src"] + PART, PART, env["sig"], 1, SignalOp.ADD,
                      env["right"])
        if wait_for == 2:
            sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 2, from_pe=env["left"])
        read(ctx, env, B, "x")
        sh.barrier_all(ctx)
        if wait_for == 1:
            sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 2, from_pe=env["left"])   # pair the second post
    return kernel


def test_a_wait_for_the_value_of_the_second_post_proves_its_data():
    got, reads = run(_two_put_signals(2))
    assert got == []
    assert (reads["x"] == run_left_value()).all()


def test_a_wait_for_the_value_of_the_first_post_does_not_prove_the_second_posts_data():
    got, _ = run(_two_put_signals(1))
    assert got == [("READ_BEFORE_WAIT", "AIV0", *B)]


# -- quiet and flag rounds (one rank's AIV puts into its own window; its AIC reads after a flag Wait) -------
def _quiet_then_flag(read_part, rounds_waited):
    """AIV: put A, quiet, Set(round 1), put B, quiet, Set(round 2). AIC: `rounds_waited` Waits, then the read
    of `read_part`, then the remaining Waits (every Set is consumed)."""
    def kernel(ctx, env):
        sh, me = env["shmem"], env["me"]
        if ctx.ASCEND_IS_AIV:
            sh.put_nbi(ctx, env["win"].addr(A[0]), env["src"], PART, me)
            sh.quiet(ctx)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
            sh.put_nbi(ctx, env["win"].addr(B[0]), env["src"] + PART, PART, me)
            if rounds_waited != "no_quiet":
                sh.quiet(ctx)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 0)
            return
        waited = 2 if rounds_waited == "no_quiet" else rounds_waited
        for _ in range(waited):
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
        read(ctx, env, read_part, "x")
        for _ in range(2 - waited):
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 0)
    return kernel


def test_a_flag_wait_proves_the_puts_completed_before_the_round_it_consumes():
    got, _ = run(_quiet_then_flag(A, 1), kernel_type=KernelType.MIX_AIC_1_1)
    assert got == []
    got, _ = run(_quiet_then_flag(B, 2), kernel_type=KernelType.MIX_AIC_1_1)
    assert got == []


def test_a_flag_wait_does_not_prove_the_next_rounds_puts():
    got, _ = run(_quiet_then_flag(B, 1), kernel_type=KernelType.MIX_AIC_1_1)
    assert got == [("READ_BEFORE_WAIT", "AIC0", *B)]


def test_a_put_after_the_last_quiet_is_not_completed_by_the_set_that_follows():
    got, _ = run(_quiet_then_flag(B, "no_quiet"), kernel_type=KernelType.MIX_AIC_1_1)
    assert got == [("READ_BEFORE_WAIT", "AIC0", *B)]


# -- launch-end pairing: the waits must see the posts' final value --------------------------------------------
def _posts_and_waits(seen):
    """Two +1 posts to the right neighbour's slot (the second after the neighbour acknowledged the first);
    this rank waits for its left neighbour's posts up to `seen`."""
    def kernel(ctx, env):
        sh = env["shmem"]
        sh.signal_op(ctx, env["sig"], 1, SignalOp.ADD, env["right"])
        sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 1, from_pe=env["left"])
        sh.signal_op(ctx, env["ack"], 1, SignalOp.ADD, env["left"])
        sh.signal_wait_until(ctx, env["ack"], Cmp.GE, 1, from_pe=env["right"])
        sh.signal_op(ctx, env["sig"], 1, SignalOp.ADD, env["right"])
        if seen == 2:
            sh.signal_wait_until(ctx, env["sig"], Cmp.GE, 2, from_pe=env["left"])
        sh.barrier_all(ctx)
    return kernel


def test_signals_waited_up_to_their_final_value_are_paired():
    got, _ = run(_posts_and_waits(2))
    assert got == []


def test_signals_waited_one_post_short_of_their_final_value_are_unwaited():
    got, _ = run(_posts_and_waits(1))
    assert got == [("UNWAITED_SIGNAL", "launch", None, None)]


# -- HCCL: the k-th Wait on a handle proves repeats 0..k-1 --------------------------------------------------
COUNT = 16                  # fp16 elements per block per repeat


def _hccl_two_repeats(read_repeat):
    """AlltoAll with 2 repeats (stride 2 * COUNT: repeat r of block i at (2 i + r) * COUNT), both committed;
    one Wait, then the read of every block's repeat `read_repeat`, then the second Wait."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=TIMEOUT_S)
    cw = CommWorld(dev, comm)
    hb = HappensBeforeChecker(dev, comm)
    server = HcclServer(cw)
    try:
        recv = cw.window(size * 2 * COUNT * 2, "hccl_edges")
        send = dev.gm.alloc(size * 2 * COUNT * 2, "send", data=np.full(size * 2 * COUNT, rank + 1, np.float16))
        cw.barrier()

        def kernel(ctx):
            hccl = Hccl(ctx, server)
            hccl.Init()
            h = hccl.AlltoAll(send, recv.base, COUNT, np.float16, 2 * COUNT, repeat=2)
            hccl.Commit(h)
            hccl.Commit(h)
            hccl.Wait(h)
            for i in range(size):
                ctx.gm_read(recv.addr((2 * i + read_repeat) * COUNT * 2), np.float16, (COUNT,))
            hccl.Wait(h)
            hccl.Finalize()

        dev.launch(kernel, 1, KernelType.AIC_ONLY)
        server.end_session()
        cw.barrier()
        hb.finish()
        return [(h.hazard.value, h.details.get("handle"), h.details.get("repeat")) for h in dev.hazards.take()]
    finally:
        hb.close()
        server.close()
        cw.close()


def test_the_first_hccl_wait_proves_the_first_repeat():
    assert _hccl_two_repeats(0) == []


def test_the_first_hccl_wait_does_not_prove_the_second_repeat():
    got = _hccl_two_repeats(1)
    assert got and set(got) == {("READ_BEFORE_WAIT", 0, 1)}, got


def _hccl_rules(prepares, commits, waits):
    """One AIC under the AICPU model (a Wait past the Commits returns -1 instead of hanging): `prepares`
    AlltoAll Prepares of count 0 (never committed), then one of 2 repeats with `commits` Commits and `waits`
    Waits. Returns (hazard names with their counts, the handles, the Waits' return codes)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    dev = Device(rank, timeout=TIMEOUT_S)
    cw = CommWorld(dev, comm)
    server = HcclServer(cw, model=HcclServerType.AICPU)
    try:
        recv = cw.window(size * 2 * COUNT * 2, "hccl_rules")
        send = dev.gm.alloc(size * 2 * COUNT * 2, "send", data=np.full(size * 2 * COUNT, rank + 1, np.float16))
        cw.barrier()

        def kernel(ctx):
            hccl = Hccl(ctx, server)
            hccl.Init()
            h = hccl.AlltoAll(send, recv.base, COUNT, np.float16, 2 * COUNT, repeat=2)
            idle = [hccl.AlltoAll(send, recv.base, 0, np.float16) for _ in range(prepares - 1)]
            for _ in range(commits):
                hccl.Commit(h)
            rcs = [hccl.Wait(h) for _ in range(waits)]
            hccl.Finalize()
            return [h, *idle], rcs

        res = dev.launch(kernel, 1, KernelType.AIC_ONLY)
        server.end_session()
        cw.barrier()
        names = [h.hazard.value for h in dev.hazards.take()]
        handles, rcs = res.returns["AIC0"]
        return {n: names.count(n) for n in names}, handles, rcs
    finally:
        server.close()
        cw.close()


def test_hccl_client_rules_at_their_edges_are_clean():
    got, handles, rcs = _hccl_rules(HCCL_MAX_HANDLE_ID, 2, 2)
    assert got == {}
    assert handles == list(range(HCCL_MAX_HANDLE_ID)) and rcs == [HCCL_SUCCESS] * 2


def test_hccl_client_rules_one_step_past_are_each_reported_once():
    got, handles, _ = _hccl_rules(HCCL_MAX_HANDLE_ID + 1, 2, 2)
    assert got == {"HCCL_TOO_MANY_PREPARES": 1} and handles[-1] == INVALID_HANDLE_ID
    got, _, rcs = _hccl_rules(1, 3, 2)
    assert got == {"HCCL_COMMIT_BEYOND_REPEAT": 1} and rcs == [HCCL_SUCCESS] * 2
    got, _, rcs = _hccl_rules(1, 2, 3)
    assert got == {"HCCL_WAIT_BEYOND_COMMIT": 1} and rcs[:2] == [HCCL_SUCCESS] * 2 and rcs[2] != HCCL_SUCCESS
