"""Exceptions of the communication layer (windows, SHMEM-like puts, TeamBarrier, HCCL).

Each names the rule that was broken; all derive from the runtime's `Mc2EmuError` so the CLI maps them to
exit codes like every other mc2emu error.
"""

from __future__ import annotations

from mc2emu.runtime.hazards import ConstraintError, DeadlockError, KernelError, Mc2EmuError


class WindowError(KernelError):
    """A communication call was given an address that is not where the rule says it must be: a
    destination outside every symmetric window, a range past a window's end, a misaligned signal."""


class SymmetryError(ConstraintError):
    """Ranks created windows that are not symmetric (a different size or order on some rank)."""

    def __init__(self, message: str) -> None:
        super().__init__("symmetric window", message)


class CommClosedError(KernelError):
    """A window or world was used after `CommWorld.close()` freed it."""


class TransportError(Mc2EmuError):
    """The MPI transport broke a window protocol in the transport check (`mc2emu.comm.transport_check`):
    bytes differ from what was put, or a peer's RMA did not complete without the target polling."""


class HostBarrierFailed(DeadlockError):
    """A host barrier's agreement round showed that some rank left the call or gave up waiting in it
    (`mc2emu.comm.world`): every rank leaves the call at that barrier. This rank did not hang, nothing
    waits on it: no deadlock diagnosis to linger for."""

    def __init__(self, message: str) -> None:
        super().__init__(message, [], None, declared_elsewhere=True)
