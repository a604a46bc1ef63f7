"""Test-suite plumbing shared by the serial and the multi-rank runs.

- BLAS threads are pinned to 1 before numpy loads (8 ranks on 2 cores: threaded BLAS measured 13x slower).
- `@pytest.mark.slow` tests are skipped unless `-m slow` asks for them.
- Under `mpirun ... pytest --with-mpi`, a test failing on one rank would leave the others blocked in the
  next collective: the report hook prints the failure and aborts the whole job instead (MPI-NOTES).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.slow` tests (long stress and 8-rank CLI suites) run only when asked for with `-m slow`
    (or any `-m` expression naming slow), as the marker's definition in pyproject.toml says."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _world():
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover - mpi4py is a core dependency
        return None
    return MPI.COMM_WORLD if MPI.Is_initialized() else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and (item.config.getoption("with_mpi", default=False)
                          or item.config.getoption("only_mpi", default=False)):
        world = _world()
        if world is not None and world.Get_size() > 1:
            import sys

            sys.stderr.write(f"\n[rank {world.Get_rank()}] {item.nodeid} FAILED ({report.when}):\n"
                             f"{report.longreprtext}\n[rank {world.Get_rank()}] aborting all ranks\n")
            sys.stderr.flush()
            world.Abort(1)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The multi-rank runs' own counts (tests/test_multirank.py), before pytest's closing line."""
    for line in config.__dict__.get("_mc2emu_mpi_summaries", []):
        terminalreporter.write_line(line)
