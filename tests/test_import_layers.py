"""The import graph of `mc2emu/` has no module cycle, and the declared layers hold.

The graph is read from the source (an AST walk, nothing imported) and counts every import of a module of
mc2emu: module-level, function-local, and `if TYPE_CHECKING:` ones. None is excused: a cycle held open by an
import deferred into a function, or by one made for annotations only, still ties the two modules together
for a reader and for the layering. The layers themselves are the import-linter contract in pyproject.toml
(`lint-imports`, run by `.ci/run`); the last test runs it too when import-linter is installed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "mc2emu"


@dataclass(frozen=True)
class Import:
    target: str
    line: int
    how: str   # "", "function-local" or "TYPE_CHECKING"


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module and package of mc2emu."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module an imported name lives in: the longest prefix of `name` that is a module of mc2emu."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _walk(node: ast.AST, how: str) -> Iterator[tuple[ast.AST, str]]:
    for child in ast.iter_child_nodes(node):
        inner = how
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = inner or "function-local"
        elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            yield from _walk(ast.Module(body=child.body, type_ignores=[]), "TYPE_CHECKING")
            yield from _walk(ast.Module(body=child.orelse, type_ignores=[]), how)
            continue
        yield child, inner
        yield from _walk(child, inner)


def imports_of(module: str) -> list[Import]:
    """Every import of an mc2emu module that `module` makes, wherever it stands."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node, how in _walk(ast.parse(path.read_text(), str(path)), ""):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from a import b`: b is the module a.b if there is one, else a name defined in a
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            target = _resolve(name) if name.split(".")[0] == PACKAGE else None
            if target is not None and target != module:
                out.append(Import(target, node.lineno, how))
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def strongly_connected(graph: dict[str, list[Import]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, edges = work[-1]
            for e in edges:
                w = e.target
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def a_cycle(graph: dict[str, list[Import]], component: list[str]) -> list[tuple[str, Import]]:
    """One cycle through the component's first module, as (module, its import of the next one) steps."""
    members = set(component)
    start = component[0]
    parent: dict[str, tuple[str, Import]] = {}
    frontier = [start]
    while frontier:   # breadth first, so the cycle shown is a shortest one through `start`
        nxt = []
        for v in frontier:
            for e in graph[v]:
                if e.target == start:
                    steps = [(v, e)]
                    while v != start:
                        v, e = parent[v]
                        steps.append((v, e))
                    return steps[::-1]
                if e.target in members and e.target not in parent:
                    parent[e.target] = (v, e)
                    nxt.append(e.target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")


def describe(graph: dict[str, list[Import]], component: list[str]) -> str:
    steps = a_cycle(graph, component)
    lines = [f"  {m}:{e.line} imports {e.target}" + (f" ({e.how})" if e.how else "") for m, e in steps]
    return f"cycle among {', '.join(component)}:\n" + "\n".join(lines)


def test_the_walk_sees_every_kind_of_import():
    # not vacuous: the walk finds the package's imports, the deferred ones and the annotation-only ones
    hows = {e.how for edges in GRAPH.values() for e in edges}
    assert {"", "function-local", "TYPE_CHECKING"} <= hows
    assert sum(len(edges) for edges in GRAPH.values()) > 500


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": [Import("b", 1, "")], "b": [Import("c", 2, "TYPE_CHECKING")], "c": [Import("a", 3, "")],
             "d": [Import("a", 4, "")]}
    (component,) = strongly_connected(graph)
    assert component == ["a", "b", "c"]
    assert describe(graph, component) == ("cycle among a, b, c:\n  a:1 imports b\n"
                                          "  b:2 imports c (TYPE_CHECKING)\n  c:3 imports a")


def test_no_module_cycle():
    cycles = strongly_connected(GRAPH)
    assert not cycles, "import cycles in mc2emu/:\n" + "\n".join(describe(GRAPH, c) for c in cycles)


def test_every_package_is_a_declared_layer():
    # a package the contract does not name would be free to import anything
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["type"] == "layers"]
    declared = {name.strip() for layer in layers for name in layer.split("|")}
    top = {m for m in MODULES if m.count(".") == 1}
    assert top == declared, f"not a layer: {sorted(top - declared)}; no such package: {sorted(declared - top)}"


def test_the_layer_contract_holds():
    cli = pytest.importorskip("importlinter.cli", reason="import-linter (the test extra) is not installed")
    assert cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
