"""Test-suite plumbing shared by the serial and the multi-rank runs.

- BLAS threads are pinned to 1 before numpy loads (8 ranks on 2 cores: threaded BLAS measured 13x slower).
- `@pytest.mark.slow` tests are skipped unless `-m slow` asks for them.
- The kit `mc2emu.testing` (its pytest plugin, also registered as a `pytest11` entry point) gives the
  multi-rank tests their fixtures and helpers; under `mpirun ... pytest --with-mpi` its report hook aborts the
  whole job when a test fails on one rank (the others would block in the next collective; MPI-NOTES).
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402

# The entry point registers the plugin under this same name when the project is installed: no clash.
pytest_plugins = ("mc2emu.testing.plugin",)


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.slow` tests (long stress and 8-rank CLI suites) run only when asked for with `-m slow`
    (or any `-m` expression naming slow), as the marker's definition in pyproject.toml says."""
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The multi-rank runs' own counts (tests/test_multirank.py), before pytest's closing line."""
    for line in config.__dict__.get("_mc2emu_mpi_summaries", []):
        terminalreporter.write_line(line)
