# mpirun -n 4 python -m mpi4py docs/examples/ring_put.py
"""A clean kernel run with every check: each rank puts 8 floats into the next rank's window and signals;
the receiver waits for the signal, adds one, writes the result to GM; the host reads it back."""
import numpy as np

import mc2emu
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp

N = 8   # floats per rank


def ring_put(ctx, shmem, src, data, sig, out, rank, size):
    if ctx.GetBlockIdx() != 0:       # one AIV per rank communicates
        return None
    shmem.put_signal(ctx, data, src, N * 4, sig, 1, SignalOp.ADD, (rank + 1) % size)
    shmem.signal_wait_until(ctx, sig, Cmp.GE, 1)        # the put into my window has landed
    got = ctx.gm_read(data, np.float32, (N,))
    ctx.gm_write(out, got + np.float32(1))
    return float(got[0])


def main(comm=None, perturb=None):
    """Returns (this rank's output, the KernelResult)."""
    with mc2emu.KernelRun(comm=comm, perturb=perturb, name="ring_put") as run:
        rank, size = run.rank, run.size
        data = run.window(N * 4, "ring_data", role=mc2emu.MemRole.PAYLOAD)      # starts poisoned
        sig = run.window(64, "ring_signal", role=mc2emu.MemRole.CONTROL)        # starts at zero
        src = run.alloc(0, "src", data=np.arange(N, dtype=np.float32) + 10 * rank)
        out = run.alloc(N * 4, "out")
        run.launch(ring_put, Shmem(run.world), src, data.addr(0), sig.addr(0), out, rank, size,
                   block_dim=1, kernel_type="AIV_ONLY")
        y = run.read(out, np.float32, (N,))
    return y, run.result


if __name__ == "__main__":
    from mpi4py import MPI

    y, result = main()
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    expect = np.arange(N, dtype=np.float32) + 10 * ((rank - 1) % size) + 1
    print(f"rank {rank}: out {y.tolist()}, hazards {sorted(result.names())}")
    assert (y == expect).all() and not result.hazards
