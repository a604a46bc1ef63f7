"""tests/stress: the stress driver (`launch/stress.py`, loaded by path as the `driver` fixture)."""

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
