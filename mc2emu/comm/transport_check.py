"""Transport check: do the window protocols hold on the MPI transport this job runs on?

Run by the `selfcheck` operator (`python -m mc2emu.run --op selfcheck --quick --np N` on the cluster's
hosts, docs/mpi-transports.md) and usable from Python. On every rank, collectively:

| step | protocol                  | what is checked                                                       |
|------|---------------------------|-----------------------------------------------------------------------|
| 1    | window memory model       | every window is MPI_WIN_UNIFIED (CommWorld refuses otherwise)        |
| 2    | put_signal all-to-all     | one AIV per peer puts `TILES` tiles + an ADD signal each; after       |
|      |                           | `signal_wait_until` every received byte equals what the peer sent     |
| 3    | put_signal to a busy rank | rank 0 computes and reads its signal word by load only (no MPI call) |
|      |                           | while every peer put_signals into it: the signals must land within    |
|      |                           | the deadline (passive-target progress by the rank's progress thread) |
| 4    | TeamBarrier               | `ROUNDS` CrossDevice + CrossCore rounds complete (Accumulate slots,   |
|      |                           | remote Fetch_and_op reads)                                            |

The result counts bad bytes (steps 2-3) and says whether step 3's signals landed; any bad byte, a
starved step 3 or a hang fails the self-check. Every wait has the device's deadline, so a transport that starves
progress ends in a DeadlockError naming the wait, never in a hang.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from mc2emu.comm.shmem import Cmp, Shmem, SignalOp
from mc2emu.comm.team_barrier import TeamBarrier
from mc2emu.comm.world import CommWorld
from mc2emu.runtime.device import KernelType
from mc2emu.runtime.gm import MemRole

if TYPE_CHECKING:
    from mpi4py import MPI

    from mc2emu.runtime.device import Device

TILES = 4
TILE_BYTES = 16 * 1024            # above MPICH's and UCX's eager limits: the rendezvous paths too
ROUNDS = 8
# Step 3: rank 0's compute "tile" between two loads of its signal word (no MPI call in between).
BUSY_POLL_S = 1e-3
DATA_SEED = 0x14C0


@dataclass(frozen=True)
class TransportCheck:
    """What the ranks saw: bytes that differ from what their senders put (this rank), whether rank 0 saw
    its peers' signals land while it computed without calling MPI (all ranks), TeamBarrier rounds."""

    bad_bytes: int
    progress_without_polling: bool
    barrier_rounds: int

    @property
    def ok(self) -> bool:
        return self.bad_bytes == 0 and self.progress_without_polling and self.barrier_rounds == ROUNDS

    def problems(self) -> list[str]:
        out = []
        if self.bad_bytes:
            out.append(f"{self.bad_bytes} received byte(s) differ from what the peers put (put_signal)")
        if not self.progress_without_polling:
            out.append("peers' put_signal into a rank that computes without calling MPI never landed "
                       "(passive-target progress, MPI-4.1 §12.7.3)")
        if self.barrier_rounds != ROUNDS:
            out.append(f"TeamBarrier completed {self.barrier_rounds} of {ROUNDS} rounds")
        return out


def sent_bytes(src: int, nbytes: int) -> np.ndarray:
    """What rank `src` sends (reproducible on every rank)."""
    return np.random.default_rng([DATA_SEED, src]).integers(0, 256, nbytes, dtype=np.uint8)


def check_window_protocols(device: Device, comm: MPI.Comm | None = None) -> TransportCheck:
    """Collective: run the steps of the module docstring on a world of its own (closed at the end)."""
    world = CommWorld(device, comm)
    try:
        return _run(world)
    finally:
        world.close()


def _run(world: CommWorld) -> TransportCheck:
    shmem = Shmem(world)
    dev, R, me = world.device, world.size, world.rank
    chunk = TILES * TILE_BYTES
    win = world.window(R * chunk + R * TILES * 8 + R * 8, "transport_check", MemRole.CONTROL)
    sigs = win.addr(R * chunk)
    busy_sig = win.addr(R * chunk + R * TILES * 8)
    send = dev.gm.alloc(R * chunk, "transport_send", data=sent_bytes(me, R * chunk))

    def all_to_all(ctx) -> None:          # step 2: one AIV per peer, the UDMA pattern
        target = ctx.GetBlockIdx()
        for t in range(TILES):
            shmem.put_signal(ctx, win.addr(me * chunk + t * TILE_BYTES), send + target * chunk + t * TILE_BYTES,
                             TILE_BYTES, sigs + (me * TILES + t) * 8, 1, SignalOp.ADD, target)
        for t in range(TILES):
            shmem.signal_wait_until(ctx, sigs + (target * TILES + t) * 8, Cmp.GE, 1, from_pe=target)

    dev.launch(all_to_all, R, KernelType.AIV_ONLY, name="transport_all_to_all")
    got = dev.gm.read(win.addr(0), np.uint8, (R, chunk))
    bad = 0
    for src in range(R):
        bad += int(np.count_nonzero(got[src] != sent_bytes(src, R * chunk)[me * chunk:(me + 1) * chunk]))
    world.barrier()

    seen_busy = [True]

    def busy(ctx) -> None:                # step 3: rank 0 computes and reads by load only, no MPI progress
        if me == 0:
            words, idx = win.u64, (R * chunk + R * TILES * 8) // 8
            give_up = time.monotonic() + dev.waiter.timeout
            x = np.ones((64, 64), dtype=np.float32)
            while int(words[idx]) < R - 1:
                if time.monotonic() > give_up:
                    seen_busy[0] = False
                    break
                x = x @ x / 64.0                       # compute: no MPI call on this thread
                ctx.launch.abort.wait(BUSY_POLL_S)     # the next "tile"
            shmem.signal_wait_until(ctx, busy_sig, Cmp.GE, R - 1)
        else:
            shmem.put_signal(ctx, win.addr(me * chunk), send, TILE_BYTES, busy_sig, 1, SignalOp.ADD, 0)

    dev.launch(busy, 1, KernelType.AIV_ONLY, name="transport_busy_target")
    if me == 0:
        bad += sum(int(np.count_nonzero(dev.gm.read(win.addr(src * chunk), np.uint8, (TILE_BYTES,))
                                        != sent_bytes(src, R * chunk)[:TILE_BYTES])) for src in range(1, R))
    world.barrier()

    jobs = 2
    barrier = TeamBarrier(world, jobs, "transport_team_barrier")
    rounds = [0] * jobs

    def team(ctx) -> None:                # step 4
        job = ctx.GetBlockIdx()
        for _ in range(ROUNDS):
            barrier.CrossDevice(ctx, job)
            barrier.CrossCore(ctx, job)
            rounds[job] += 1

    dev.launch(team, jobs, KernelType.AIV_ONLY, name="transport_team_barrier")
    world.barrier()
    progressed = bool(world.comm.allreduce(int(seen_busy[0]), op=_mpi_min()))
    return TransportCheck(bad, progressed, min(rounds))


def _mpi_min():
    from mpi4py import MPI

    return MPI.MIN
