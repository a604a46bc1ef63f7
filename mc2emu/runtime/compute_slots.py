"""Compute slots: how many cores of one device may run a matmul block on the host at once. Not part of the
machine (every AI core computes at once there); host time only.

With 32 core threads on a few host CPUs, every core interleaving its numpy calls thrashes the caches and
convoys on the GIL (about 2x the CPU time of the same work on 2 threads). A core holds a slot for one call of
a block (`holds_compute_slot`), which never waits on another core (no flags, no HCCL inside), so slots cannot
deadlock and cannot change a result; cores still interleave at tile boundaries. The host layer decides the
count (`mc2emu.host.compute_slots`) and passes it to the `Device`. A protocol-only device (`data=False`) computes
nothing: its slots are unlimited (taking and handing a slot back woke a waiting core per block call: 20 % of an
A2A rank's GIL time at the CANN shape, for no compute).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ComputeSlots:
    """A bounded semaphore of `count` slots (None: the host's CPU count; at least one); `unlimited`: no bound
    (`count` is None then)."""

    def __init__(self, count: int | None = None, *, unlimited: bool = False) -> None:
        self.count = None if unlimited else max(1, int(count if count is not None else (os.cpu_count() or 1)))
        self._sem = None if self.count is None else threading.BoundedSemaphore(self.count)

    def __enter__(self) -> ComputeSlots:
        if self._sem is not None:
            self._sem.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sem is not None:
            self._sem.release()


def holds_compute_slot(call: F) -> F:
    """Decorates a block's `operator()`: the call runs holding one of its core's device's compute slots."""

    @functools.wraps(call)
    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self.ctx.device.compute_slots:
            return call(self, *args, **kwargs)

    return held  # type: ignore[return-value]
