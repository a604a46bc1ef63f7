# mpirun -n 2 python -m mpi4py docs/examples/never_written.py
"""A read of a window nobody wrote: one AIC reads 8 floats of a fresh 4 KiB PAYLOAD window. In check mode
the window starts poisoned, so the AIC gets NaN (not zeros) and READ_UNWRITTEN names the bytes."""
import numpy as np

from mc2emu import MemRole, run_kernel

PROBE_BYTES = 4096


def probe_reader(ctx, probe):
    if ctx.GetBlockIdx() != 0:
        return None
    return ctx.gm_read(probe, np.float32, (8,)).tolist()


def setup(run):
    return (run.window(PROBE_BYTES, "probe", role=MemRole.PAYLOAD).addr(0),)


def main(comm=None):
    return run_kernel(probe_reader, block_dim=1, kernel_type="AIC_ONLY", setup=setup, comm=comm,
                      name="never_written")


if __name__ == "__main__":
    from mc2emu.runtime import HazardError

    try:
        main()
    except HazardError as exc:
        print(exc, exc.output.returns["AIC0"])
