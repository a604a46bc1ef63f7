"""The mutation gate's patterns still name the code they mutate: every curated mutant of
`launch/mutants.py` finds its text exactly once in its file, and every test it names exists. Code that moves
fails here, in the suite, instead of stopping the gate later with "pattern not found"."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_gate():
    spec = importlib.util.spec_from_file_location("mc2emu_mutants", ROOT / "launch" / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


GATE = load_gate()


@pytest.mark.parametrize("mutant", GATE.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_finds_its_code_once_and_names_existing_tests(mutant):
    GATE.locate(ROOT, mutant)          # raises PatternError naming the mutant when the code moved
    for node in (*mutant.serial, *mutant.mpi):
        assert (ROOT / node.split("::")[0]).exists(), f"{mutant.name}: {node} does not exist"


def test_the_gate_has_its_curated_list():
    names = [m.name for m in GATE.MUTANTS]
    assert len(names) >= 20 and len(set(names)) == len(names)
