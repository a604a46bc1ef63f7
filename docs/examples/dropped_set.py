# mpirun -n 4 python -m mpi4py docs/examples/dropped_set.py
"""A dropped Set: the AIV of the last rank skips its last round's CrossCoreSetFlag, so the AIC's last
CrossCoreWaitFlag never returns. The one call turns the hang into one cross-rank DEADLOCK report and a
DeadlockError on every rank within seconds (the other ranks stop in their host barrier)."""
from mc2emu import run_kernel
from mc2emu.runtime import Pipe

ROUNDS = 4


def producer_consumer(ctx, rounds, drop_last):
    for t in range(rounds):
        if ctx.ASCEND_IS_AIV:
            if not (drop_last and t == rounds - 1):     # the bug: the last round's Set is skipped
                ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, t)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, t)


def main(comm=None, timeout=2.0):
    from mc2emu.host.collective import world_comm

    comm = world_comm(comm)
    drop = comm.Get_rank() == comm.Get_size() - 1
    return run_kernel(producer_consumer, ROUNDS, drop, block_dim=2, kernel_type="MIX_AIC_1_1", comm=comm,
                      timeout=timeout, name="dropped_set")


if __name__ == "__main__":
    from mc2emu.runtime import DeadlockError

    try:
        main()
    except DeadlockError as exc:
        print(exc.report or exc)
