"""How an operator call refuses its input before any launch: the rules it broke, as (rule, reason) pairs,
become one `ConstraintError` naming the first rule. A one-NPU call refuses at once (`refuse`); a collective
call agrees on its communicator and every rank refuses together (`refuse_on_every_rank`: a collective that
fails on one rank only would leave the others hanging). On a persistent `Communicator` the call refuses on
its own rank: an agreement would be a host barrier between launches, which the device stream has not; a
rank that refuses alone leaves its peers' launch to the deadlock diagnosis."""

from __future__ import annotations

from typing import Any

from mc2emu.arch import ConstraintError
from mc2emu.comm.communicator import Communicator


def world_comm(comm: Any) -> Any:
    """`comm`, or MPI.COMM_WORLD when None (mpi4py is imported only by collective calls)."""
    if comm is not None:
        return comm
    from mpi4py import MPI

    return MPI.COMM_WORLD


def refuse(errs: list[tuple[str, str]]) -> None:
    """Raise the first (rule, reason) of `errs` as a ConstraintError; nothing when `errs` is empty."""
    if errs:
        rule, reason = errs[0]
        raise ConstraintError(rule, reason)


def refuse_on_every_rank(comm: Any, errs: list[tuple[str, str]]) -> None:
    """Raise on every rank when any rank's input broke a rule: the first such rank's first (rule, reason),
    its reason suffixed with "(on rank r)" on the other ranks. Collective: every rank calls it (on a
    `Communicator`: this rank's rules only, no collective)."""
    if isinstance(comm, Communicator):
        refuse(errs)
        return
    all_errs = comm.allgather(errs)
    first = next(((r, e) for r, e in enumerate(all_errs) if e), None)
    if first is None:
        return
    r, e = first
    rule, reason = e[0]
    raise ConstraintError(rule, f"{reason} (on rank {r})" if r != comm.Get_rank() else reason)
