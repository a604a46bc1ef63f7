"""The wait primitive's polling cost: a long polled wait backs off in proportion to its length, and a core's
GM write-out counts as progress (a long phase of write-outs is never taken for a hang)."""

import threading

import numpy as np
import pytest

from mc2emu.runtime import Device
from mc2emu.runtime.event_bus import EventBus
from mc2emu.runtime.waiting import (
    POLL_BACKOFF_LONG_MAX_S,
    POLL_BACKOFF_MAX_S,
    POLL_LONG_WAIT_DIVISOR,
    Doorbell,
    Waiter,
    poll_cap,
)


@pytest.mark.parametrize(("waited", "cap"), [
    (0.0, POLL_BACKOFF_MAX_S),                      # a short wait keeps the 1 ms cap of a round trip
    (0.01, POLL_BACKOFF_MAX_S),
    (0.4, 0.4 / POLL_LONG_WAIT_DIVISOR),            # 20 ms: a twentieth of the wait so far
    (0.8, 0.8 / POLL_LONG_WAIT_DIVISOR),
    (30.0, POLL_BACKOFF_LONG_MAX_S),                # never more than 50 ms
])
def test_poll_cap_grows_with_the_wait_and_is_bounded(waited, cap):
    assert poll_cap(waited) == pytest.approx(cap)


def test_a_long_polled_wait_tests_its_predicate_rarely():
    """A polled wait of 1.2 s tests its predicate on the order of a hundred times (20 spins, the 1 ms regime,
    then sleeps of a twentieth of the wait); with a fixed 1 ms cap it tested ~1 200 times, which on an
    oversubscribed host took the CPU from the ranks still working. An upper bound only: a loaded host tests
    less often, never more."""
    waiter = Waiter(0, EventBus(0), timeout=30.0)
    released = threading.Event()
    tests = [0]

    def pred() -> bool:
        tests[0] += 1
        return released.is_set()

    timer = threading.Timer(1.2, released.set)
    timer.start()
    try:
        waiter.wait_until(Doorbell(), pred, core="host", obj="remote word", poll=True)
    finally:
        timer.cancel()
    assert released.is_set()
    assert tests[0] < 300, tests[0]


def test_a_gm_write_out_counts_as_progress():
    dev = Device()
    out = dev.gm.alloc(64, "out")
    counts = []

    def kernel(ctx):
        before = dev.waiter.progress.count
        ctx.gm_write(out, np.ones(16, dtype=np.float32))
        counts.append(dev.waiter.progress.count - before)

    dev.launch(kernel, 1, "AIV_ONLY")
    assert counts == [1]

