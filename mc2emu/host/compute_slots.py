"""The compute-slot count of a rank's device (`mc2emu.runtime.compute_slots`), decided on the host side from
the environment the launcher set: nothing below `mc2emu.host` reads the environment."""

from __future__ import annotations

import os

# Environment naming the number of ranks the MPI launcher started on this host (MPICH hydra, Open MPI).
LOCAL_RANKS_ENV = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")
SLOTS_ENV = "MC2EMU_COMPUTE_SLOTS"


def default_slots() -> int:
    """Compute slots per rank: `MC2EMU_COMPUTE_SLOTS` when set, else the host's CPUs, down to one when the
    launcher put more ranks on this host than it has CPUs (every CPU then already has a rank's slot to run)."""
    if os.environ.get(SLOTS_ENV):
        return int(os.environ[SLOTS_ENV])
    cpus = os.cpu_count() or 1
    for name in LOCAL_RANKS_ENV:
        if os.environ.get(name, "").isdigit() and int(os.environ[name]) > cpus:
            return 1
    return cpus
