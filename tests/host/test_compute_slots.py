"""Compute slots per rank: the host layer decides them (`mc2emu.host.compute_slots`: the host's CPUs, one when
the launcher put more ranks on this host than it has CPUs, or what `MC2EMU_COMPUTE_SLOTS` says) and the
harness passes them to the `Device` (`runtime.compute_slots.ComputeSlots`), which reads no environment; a
protocol-only device has no bound."""

import pytest

from mc2emu.host import compute_slots
from mc2emu.host.compute_slots import default_slots
from mc2emu.runtime import Device
from mc2emu.runtime.compute_slots import ComputeSlots


@pytest.fixture
def host_env(monkeypatch):
    for name in (*compute_slots.LOCAL_RANKS_ENV, compute_slots.SLOTS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(compute_slots.os, "cpu_count", lambda: 2)
    return monkeypatch


@pytest.mark.parametrize("env, ranks, want", [
    (None, None, 2),                          # no launcher: the host's CPUs
    ("MPI_LOCALNRANKS", "2", 2),              # MPICH, as many ranks as CPUs
    ("MPI_LOCALNRANKS", "4", 1),              # MPICH, oversubscribed
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1),   # Open MPI, oversubscribed
    ("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 2),
    ("MPI_LOCALNRANKS", "", 2),               # set but empty: ignored
])
def test_slots_follow_the_ranks_on_this_host(host_env, env, ranks, want):
    if env is not None:
        host_env.setenv(env, ranks)
    assert default_slots() == want
    assert Device(compute_slots=default_slots()).compute_slots.count == want


def test_the_environment_and_the_argument_override_the_rule(host_env):
    host_env.setenv("MPI_LOCALNRANKS", "8")
    host_env.setenv(compute_slots.SLOTS_ENV, "3")
    assert default_slots() == 3
    assert Device(compute_slots=2).compute_slots.count == 2
    assert ComputeSlots(0).count == 1


def test_the_device_reads_no_environment(host_env):
    host_env.setenv(compute_slots.SLOTS_ENV, "3")
    host_env.setattr("os.cpu_count", lambda: 5)
    assert Device().compute_slots.count == 5      # the host's CPUs, whatever the environment says


def test_the_harness_passes_the_host_decision_down(host_env):
    from mc2emu.host import CallOptions, LaunchHarness

    host_env.setenv(compute_slots.SLOTS_ENV, "3")
    with LaunchHarness("slots", CallOptions()) as h:
        assert h.device.compute_slots.count == 3


def test_a_protocol_only_device_takes_no_slot(host_env):
    """A protocol-only device computes nothing: its slots bound nothing (entering more times than a data device's
    count never blocks), and a data device with the same count still does."""
    import threading

    proto, full = Device(compute_slots=1, data=False).compute_slots, Device(compute_slots=1).compute_slots
    assert proto.count is None and full.count == 1
    with proto, proto, proto:
        pass
    with full:
        entered = threading.Event()
        other = threading.Thread(target=lambda: (full.__enter__(), entered.set(), full.__exit__()), daemon=True)
        other.start()
        assert not entered.wait(0.2)   # the one slot is held here
    assert entered.wait(5.0)
    other.join(5.0)
