"""Compute slots per rank (`BlockMmadHost`): the host's CPUs, one when the launcher put more ranks on this host
than it has CPUs, or what `MC2EMU_COMPUTE_SLOTS` says."""

import pytest

from mc2emu.blaze.gemm.block import block_mmad_host
from mc2emu.blaze.gemm.block.block_mmad_host import BlockMmadHost, default_slots


@pytest.fixture
def host_env(monkeypatch):
    for name in (*block_mmad_host.LOCAL_RANKS_ENV, block_mmad_host.SLOTS_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(block_mmad_host.os, "cpu_count", lambda: 2)
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
    assert BlockMmadHost().count == want


def test_the_environment_and_the_argument_override_the_rule(host_env):
    host_env.setenv("MPI_LOCALNRANKS", "8")
    host_env.setenv(block_mmad_host.SLOTS_ENV, "3")
    assert BlockMmadHost().count == 3
    assert BlockMmadHost(slots=2).count == 2
    assert BlockMmadHost(slots=0).count == 1

