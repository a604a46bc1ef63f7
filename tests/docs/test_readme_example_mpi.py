"""The README's "Using it from Python" example is `docs/examples/a2a_from_python.py`, word for word, and
runs at every world size (its own assertion compares C with the golden on every rank)."""

import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "a2a_from_python.py"


def test_readme_shows_the_example_file():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert EXAMPLE.read_text() in blocks


@pytest.mark.mpi(min_size=2)
def test_example_runs_and_matches_the_golden(capsys):
    from mpi4py import MPI

    ns = runpy.run_path(str(EXAMPLE), run_name="__main__")
    assert ns["ulp"] <= 1 and ns["c"].shape == (ns["ori_m"], ns["n"])
    assert f"rank {MPI.COMM_WORLD.Get_rank()}: C " in capsys.readouterr().out
