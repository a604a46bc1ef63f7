"""Comments and docstrings in mc2emu/ state what is: every module has a docstring of at most 20 lines, and no
comment or docstring carries a date (YYYY-MM-DD) or a project session number (git keeps the history).
"HCCL session" is a term of the emulated runtime (`HcclSession`), so the word alone is allowed."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mc2emu"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_DOC_LINES = 20
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
SESSION = re.compile(r"\bsessions?\s+\d+\b", re.I)


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _texts(src: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring (module, class, function) of a source file."""
    out = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(src).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def test_modules_found() -> None:
    assert len(MODULES) > 100


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_module_docstring_at_most_20_lines(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, f"{_rel(path)} has no module docstring"
    n = len(doc.splitlines())
    assert n <= MAX_DOC_LINES, f"{_rel(path)}: module docstring of {n} lines (at most {MAX_DOC_LINES})"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_dates_or_session_numbers_in_comments(path: Path) -> None:
    bad = [f"{_rel(path)}:{line}: {m.group(0)!r}"
           for line, text in _texts(path.read_text())
           for rx in (DATE, SESSION) for m in rx.finditer(text)]
    assert not bad, "history in comments or docstrings (git keeps it):\n" + "\n".join(bad)
