"""tests/cli: `@pytest.mark.slow` tests (the 8-rank suites) run only when asked for with `-m slow` (or any
`-m` expression naming slow), as the marker's definition in pyproject.toml says."""

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
