# mpirun -n 4 python -m mpi4py docs/examples/read_before_wait.py
"""A read before the wait: each rank puts 64 bytes into the next rank's window with a signal, but the
receiver reads the window before it waits for the signal. Whether the data happened to arrive does not
matter: the happens-before checker reports READ_BEFORE_WAIT on every run, on every rank."""
import numpy as np

from mc2emu import MemRole, run_kernel
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp

NBYTES = 64


def early_reader(ctx, shmem, src, data, sig, peer):
    if ctx.GetBlockIdx() != 0:
        return None
    shmem.put_signal(ctx, data, src, NBYTES, sig, 1, SignalOp.ADD, peer)
    got = ctx.gm_read(data, np.uint8, (NBYTES,))      # the bug: read first ...
    shmem.signal_wait_until(ctx, sig, Cmp.GE, 1)      # ... wait after
    return int(got[0])


def setup(run):
    data = run.window(NBYTES, "rbw_data", role=MemRole.PAYLOAD)
    sig = run.window(64, "rbw_signal", role=MemRole.CONTROL)
    src = run.alloc(0, "src", data=np.full(NBYTES, run.rank + 1, dtype=np.uint8))
    return Shmem(run.world), src, data.addr(0), sig.addr(0), (run.rank + 1) % run.size


def main(comm=None):
    return run_kernel(early_reader, block_dim=1, kernel_type="AIV_ONLY", setup=setup, comm=comm,
                      name="read_before_wait")


if __name__ == "__main__":
    from mc2emu.runtime import HazardError

    try:
        main()
    except HazardError as exc:
        print(exc)
