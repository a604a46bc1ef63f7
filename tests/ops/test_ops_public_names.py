"""The public names of `mc2emu.ops`: every operator and its golden are functions (never the module of the
same name), every operator takes the common keywords, and the host harness attaches the checkers (that
operator modules never import `mc2emu.check` is an import-linter contract in pyproject.toml)."""

import ast
import importlib
import inspect
import types
from pathlib import Path

import pytest

import mc2emu.ops as ops
from mc2emu.host import CallOptions

OPERATORS = {"quant_batch_matmul_mx": False, "all_to_all_quant_matmul": True, "all_gather_quant_matmul": True,
             "quant_matmul_reduce_scatter": True, "grouped_matmul_mx": False,
             "weight_quant_matmul": False}   # name -> communicates
GOLDENS = ("golden_quant_batch_matmul_mx", "golden_a2a", "golden_grouped_matmul_mx")
COMMON = tuple(f for f in CallOptions.__dataclass_fields__ if f != "comm")   # comm: the communicating ones
OPS_DIR = Path(ops.__file__).parent


def test_all_names_are_functions():
    """... but `Communicator`, the persistent communicator the collective operators take as `comm=`."""
    from mc2emu.comm import Communicator

    assert set(OPERATORS) | set(GOLDENS) <= set(ops.__all__)
    assert ops.Communicator is Communicator
    for name in ops.__all__:
        if name == "Communicator":
            continue
        obj = getattr(ops, name)
        assert isinstance(obj, types.FunctionType), f"mc2emu.ops.{name} is {type(obj).__name__}"
        assert obj.__name__ == name


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_from_import_gives_the_callable(name):
    ns: dict = {}
    exec(f"from mc2emu.ops import {name}", ns)
    assert callable(ns[name]) and not isinstance(ns[name], types.ModuleType)
    # No module shadows the function: importing the dotted name fails instead of giving a module.
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"mc2emu.ops.{name}")


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_every_operator_takes_the_common_keywords(name):
    params = inspect.signature(getattr(ops, name)).parameters
    want = set(COMMON) | ({"comm"} if OPERATORS[name] else set())
    missing = {k for k in want if k not in params or params[k].kind is not inspect.Parameter.KEYWORD_ONLY}
    assert not missing, f"{name} lacks keyword-only {sorted(missing)}"
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_host_harness_attaches_the_checkers():
    imported = _imports(OPS_DIR.parent / "host" / "harness.py")
    assert {"mc2emu.check.deadlock", "mc2emu.check.happens_before"} <= imported
