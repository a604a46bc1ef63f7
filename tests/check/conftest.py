"""tests/check: the stress driver (`launch/stress.py`, loaded by path as the `driver` fixture), and the
`@pytest.mark.slow` long stress runs, which run only when asked for with `-m slow` (or any `-m` expression
naming slow), as the marker's definition in pyproject.toml says."""

import importlib.util
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
DRIVER_PATH = _HERE.parents[1] / "launch" / "stress.py"


def load_driver():
    name = "mc2emu_launch_stress"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, DRIVER_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module   # dataclasses resolve their module while the file executes
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def driver():
    return load_driver()


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="slow: opt in with -m slow")
    for item in items:
        if "slow" in item.keywords and _HERE in Path(str(item.fspath)).parents:
            item.add_marker(skip)
