"""Passive-target progress: this rank keeps calling into MPI so that peers' RMA into its windows completes.

MPI-4.1 §12.7.3 ("Progress") lets an implementation complete a passive-target `Put` / `Accumulate` at
the target only when the target process calls into MPI; the origin's `Win_flush` then waits for it. On
MPICH's shared-memory path RMA is a copy by the origin and needs nothing from the target, but between
hosts (or on one host with `MPIR_CVAR_NOLOCAL=1`, or Open MPI's `osc=rdma` over TCP) the target's MPI
progress engine applies the operation. `Win_sync` is a memory barrier, not a progress call: a rank polling
its own window with `Win_sync` + loads never sees a peer's signal there (MPI-NOTES "The inter-node path").

So every rank drives its own progress with an `Iprobe` on a private communicator (which never carries a
message, so it only progresses): at every re-test of a polled wait on window memory (`MpiProgress.poke`),
and from the rank's progress thread every `PROGRESS_INTERVAL_S` while open, which covers the stretches where
no core polls (a peer's `Flush` into this rank waits at most one interval). `MPIR_CVAR_ASYNC_PROGRESS`
(MPICH's own progress thread) is not used: it spins, several times slower on 2 cores.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpi4py import MPI

# A peer's Flush into a busy rank waits at most this long for the rank's progress; one wake-up costs
# ~10 us of one core, so 8 ranks on 2 cores spend ~4 % of a core on it (32 ranks: ~16 %).
PROGRESS_INTERVAL_S = 2e-3


class MpiProgress:
    """The progress driver of one rank (collective to create: it duplicates `comm`). `close()` on every
    rank before the communicator it was made from is freed."""

    def __init__(self, comm: MPI.Comm, rank: int, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        from mpi4py import MPI

        self._any_source, self._any_tag = MPI.ANY_SOURCE, MPI.ANY_TAG
        self.comm = comm.Dup()
        self.interval_s = float(interval_s)
        self.pokes = 0
        self.closed = False
        # Held while open; `close` releases it. The thread's timed acquire is its idle wait: a raw lock is the
        # cheapest timed sleep in CPython (a `threading.Event.wait` builds a Condition waiter every time).
        self._stop = threading.Lock()
        self._stop.acquire()
        self._thread: threading.Thread | None = None
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._run, name=f"r{rank}-mpi-progress", daemon=True)
            self._thread.start()

    def poke(self) -> None:
        """One call into MPI's progress engine (completes what peers' RMA into this rank needs)."""
        self.comm.Iprobe(self._any_source, self._any_tag)

    def _run(self) -> None:
        stop, interval, poke = self._stop, self.interval_s, self.poke
        while not stop.acquire(timeout=interval):   # an idle wait on the stop lock, not an ordering delay
            poke()
            self.pokes += 1
        stop.release()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.release()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.comm.Free()
