"""The event record of one operator call, as the protocol-only equivalence tests compare it.

`Recorder` keeps every event of a call as (kind, core, fields) with the fields that describe what happened
(flag, address range, bytes, peer, tile, ...) and without those that depend on timing or on host objects
(timestamps, sequence numbers, the bytes a read returned, live allocations, the value a wait happened to see).
`per_core` turns a record into one multiset per core: the order of a core's events may differ between two
runs only as the happens-before relation allows (waits that complete in arrival order), so the multisets are
what two runs of one protocol must share.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from typing import Any

# Fields that change from run to run of one protocol (timing, identities of host objects, observed values).
VOLATILE = frozenset({"rank", "t_ns", "seq", "t0_ns", "data", "alloc", "token", "sources", "observed", "wall_s",
                      "set_id", "waits", "total", "follows_working", "elapsed_s", "t1_ns", "dur_ns", "session",
                      "current", "value_seen", "stack", "detail", "message"})
# Kinds whose raising core, or fields, depend on arrival order: a mode-0 round is raised by whichever core Set
# last; a barrier observation records the value the poll happened to see (>= the one it waits for).
ANY_CORE_KINDS = frozenset({"FlagRaise"})
VOLATILE_BY_KIND = {"BarrierObserve": frozenset({"value"})}
# Kinds that report host time, not the protocol.
SKIPPED_KINDS = frozenset({"ComputeSlot", "WaitBegin", "WaitEnd", "Progress", "PerturbDelay"})


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_plain(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _plain(x)) for k, x in v.items()))
    if isinstance(v, (int, float, str, bool, type(None))):
        return v
    return repr(v)


class Recorder:
    """An event observer keeping the comparable record of a call."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, tuple]] = []
        self._lock = threading.Lock()

    def __call__(self, e: Any) -> None:
        kind = type(e).__name__
        if kind in SKIPPED_KINDS:
            return
        skip = VOLATILE_BY_KIND.get(kind, frozenset())
        fields = tuple((f.name, _plain(getattr(e, f.name))) for f in dataclasses.fields(e)
                       if f.name not in VOLATILE and f.name not in skip and f.name != "core")
        with self._lock:
            self.events.append((kind, "any" if kind in ANY_CORE_KINDS else e.core, fields))


def per_core(events: list[tuple[str, str, tuple]]) -> dict[str, Counter]:
    """One multiset of (kind, fields) per core."""
    out: dict[str, Counter] = {}
    for kind, core, fields in events:
        out.setdefault(core, Counter())[(kind, fields)] += 1
    return out


def differences(a: list, b: list, limit: int = 8) -> list[str]:
    """What one record has that the other has not, per core (empty: the records agree)."""
    pa, pb = per_core(a), per_core(b)
    diffs = []
    for core in sorted(set(pa) | set(pb)):
        ca, cb = pa.get(core, Counter()), pb.get(core, Counter())
        for key, n in (ca - cb).items():
            diffs.append(f"{core}: only in the first ({n}x): {key}")
        for key, n in (cb - ca).items():
            diffs.append(f"{core}: only in the second ({n}x): {key}")
    return diffs[:limit] + ([f"... {len(diffs) - limit} more"] if len(diffs) > limit else [])
