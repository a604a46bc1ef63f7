"""The synchronization log of a core, as HappensBeforeChecker records it (mc2emu/check/happens_before.py).

One NamedTuple per kind of sync record (flag Sets and the Waits consuming them, puts and HCCL repeats,
quiets, signal posts and waits, TeamBarrier stores and observations), `_CoreLog` (a core's program-ordered
sync records, its window reads, HCCL Waits and reads of poisoned windows) and `_Exchange`, what the ranks
exchange at the end of a launch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, NamedTuple


# The synchronization records of a core's log (what the ranks exchange at the end of a launch).
class _LaunchBeginRec(NamedTuple):
    """Stream mode: a core's first record in launch `launch` (after every core's end of the rank's launch before)."""

    launch: int


class _LaunchEndRec(NamedTuple):
    """Stream mode: a core's last record in its launch (everything it did happens before it)."""


class _SetRec(NamedTuple):
    """CrossCoreSetFlag: an edge to the Wait consuming a round it is part of."""

    set_id: int


class _AcquireRec(NamedTuple):
    """CrossCoreWaitFlag returned: the Sets of the round `token` happen before."""

    token: int | None


class _PutRec(NamedTuple):
    """A put of window bytes [lo, hi) into rank `pe`: completes at the core's next quiet / signal to pe."""

    pe: int
    window: str
    lo: int
    hi: int


class _HcclPutRec(NamedTuple):
    """A put of the HCCL server (repeat `repeat` of task `handle`): checked against the reader's HCCL Waits."""

    pe: int
    window: str
    lo: int
    hi: int
    handle: int
    repeat: int


class _QuietRec(NamedTuple):
    """shmem quiet: completes the core's puts."""


class _PostRec(NamedTuple):
    """A signal post (`op` by value) to the word at `offset` of `window` on rank `pe`: edges to its waits."""

    pe: int
    window: str
    offset: int
    op: str
    signal: int


class _SigWaitRec(NamedTuple):
    """A signal wait returned having seen `observed` in the own word at `offset` of `window`."""

    window: str
    offset: int
    observed: int


class _StoreRec(NamedTuple):
    """TeamBarrier stored `value` in slot `slot` of `barrier`: an edge to the peer's observation."""

    barrier: str
    slot: int
    value: int


class _ObserveRec(NamedTuple):
    """TeamBarrier read `value` from slot `slot` of rank `peer`'s `barrier`."""

    barrier: str
    peer: int
    slot: int
    value: int


_SyncRec = (_SetRec | _AcquireRec | _PutRec | _HcclPutRec | _QuietRec | _PostRec | _SigWaitRec | _StoreRec
            | _ObserveRec | _LaunchBeginRec | _LaunchEndRec)
# Every rank's (core -> its sync log, flag round token -> the round's (core, set_id) sources).
_Exchange = list[tuple[dict[str, list[_SyncRec]], dict]]


def launch_chains(entities: list[tuple[int, str]]) -> list[list[tuple[int, str]]]:
    """Per (rank, core): its logs of every launch (keys `core@launch`) in launch order, each stream-ordered after
    the one before, so one vector-clock component serves them all (`_Clocks(chains=)`); logs of no launch (the
    HCCL server's, a rank's stream) are left out."""
    chains: dict[tuple[int, str], list[tuple[int, str]]] = defaultdict(list)
    for r, key in entities:
        core, at, _ = key.rpartition("@")
        if at:
            chains[(r, core)].append((r, key))
    return [sorted(chain, key=lambda ent: int(ent[1].rpartition("@")[2])) for chain in chains.values()]


def logs_for_each_rank(logs: dict[str, list[Any]], size: int, me: int) -> list[dict[str, list[Any]]]:
    """What each of `size` ranks needs of rank `me`'s sync logs: every record but the puts (and HCCL server
    puts) into other ranks. A rank's check reads only the puts into itself, and a put is no edge of the
    happens-before graph (its completion is the core's quiet or post, kept); positions in a peer's logs are
    those of the list the rank receives. Rank `me` keeps its own logs whole: its reads and writes name positions
    in them. Puts are most of a log (QMRS per_block: 95 %), so each rank receives about its own
    puts plus R copies of the rest, where an allgather of whole logs gave each rank every rank's puts
    (per_block at 16 ranks, M 16384: ~7.8 M records per rank, OOM-killed with checks on)."""
    out: list[dict[str, list[Any]]] = [{} for _ in range(size)]
    for core, sync in logs.items():
        parts: list[list[Any]] = [[] for _ in range(size)]
        appends = [part.append for part in parts]
        for rec in sync:
            if type(rec) is _PutRec or type(rec) is _HcclPutRec:
                appends[rec.pe](rec)
            else:
                for add in appends:
                    add(rec)
        for d in range(size):
            out[d][core] = sync if d == me else parts[d]
    return out


@dataclass
class _CoreLog:
    sync: list[_SyncRec] = field(default_factory=list)   # program-ordered sync records
    # (sync position, window, lo, hi, (byte offsets read, the bytes returned) or None)
    reads: list[tuple[int, str, int, int, Any]] = field(default_factory=list)
    # Program-ordered HCCL Waits that returned 0: (handle, waits on it, total Waits, follows_working).
    hwaits: list[tuple[int, int, int, bool]] = field(default_factory=list)
    # Reads of poisoned windows: (window, offset, storage shape, strides, itemsize, hwait position).
    exact: list[tuple[str, int, tuple, tuple, int, int]] = field(default_factory=list)
