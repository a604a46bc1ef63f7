"""The source's case tables (ST `cases.csv`, the GMM tiling UT CSV) as shipped data, with their provenance.

Each table lives in `tests/data/source_cases/<file>.csv` of the repository: a header of `# key: value` lines
(repo, commit, path, blob, verified, note) followed byte for byte by the source file at that commit, its
columns and rows unchanged. `blob` is the git blob id of that body (`git hash-object`); `load` recomputes
it, so a table edited after it was checked against the source is refused, not silently replayed.

The source's drivers skip lines starting with `#` and empty lines, then take the first line as the header
(`run.sh`: `grep -v '^#' | grep -v '^$' | tail -n +2`; the GMM UT driver skips empty lines and the
`socVersion` header); `load` reads the body the same way. Cells stay strings (the GMM table mixes ints,
booleans, dtype names and a space-separated tilingData golden); `SourceTable.ints` converts columns.

The tables are test data, not package data: an installed wheel has no `tests/`, and `load` then raises
`SourceTablesMissing` naming the directory it looked in (pass `root=` to point at a checkout).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from mc2emu.arch.errors import EXIT_BAD_INPUT, ConstraintError, Mc2EmuError

# op key -> file under tests/data/source_cases/ (one table per file; README.md there lists the sources).
TABLES = MappingProxyType(
    {
        "a2a": "a2a_st.csv",
        "a2a_buffer_count": "a2a_st_buffer_count.csv",
        "ag": "ag_st.csv",
        "ag_urma": "ag_urma_st.csv",
        "ag_ubmem": "ag_ubmem_st.csv",
        "qmrs": "qmrs_ubmem_st.csv",
        "gmm_mx": "gmm_mx_tiling_ut.csv",
    }
)

# op key -> why the source has no table for it (and which shapes to use instead).
NO_TABLE = MappingProxyType(
    {
        "wqmm": (
            "the weight-quant matmul's source (seed 001, the Blaze weight-dequant prologue fusion scenario) "
            "publishes no case table or tolerance; use the seed shapes named in tests/data/source_cases/README.md"
        ),
    }
)

REPO_ROOT = Path(__file__).resolve().parents[2]  # mc2emu/cases/source_tables.py -> the checkout
SOURCE_CASES_SUBDIR = Path("tests", "data", "source_cases")
HEADER_PREFIX = "#"
REQUIRED_KEYS = ("repo", "commit", "path", "blob", "verified")
MULTI_KEYS = ("note",)  # keys that may repeat; their values are kept in order


class SourceTablesMissing(Mc2EmuError):
    """The table directory or a table file is not there (an installed wheel ships no tests/)."""

    exit_code = EXIT_BAD_INPUT


class SourceTableCorrupt(Mc2EmuError):
    """A shipped table's header is malformed, or its body no longer matches the verified blob id."""

    exit_code = EXIT_BAD_INPUT


class NoSourceTable(ConstraintError):
    """The operator has no table: unknown key, or the source publishes none (NO_TABLE says why)."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__("source case tables", message)
        self.op = op


@dataclass(frozen=True)
class Provenance:
    """Where a table comes from: repository, commit, path, the body's git blob id, how it was verified."""

    repo: str
    commit: str
    path: str
    blob: str
    verified: str
    notes: tuple[str, ...] = ()

    def cite(self) -> str:
        """`owner/repo@commit8:path`, the form the tests and reports cite."""
        return f"{self.repo}@{self.commit[:8]}:{self.path}"


@dataclass(frozen=True)
class SourceTable:
    """One source table: its provenance, the source's column names and its rows (cells as strings)."""

    op: str
    provenance: Provenance
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, name: str) -> tuple[str, ...]:
        """Every row's cell in column `name`."""
        return tuple(row[self._index(name)] for row in self.rows)

    def records(self) -> list[dict[str, str]]:
        """The rows as {column: cell} dicts, in source order."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def ints(self, *names: str) -> list[tuple[int, ...]]:
        """The named columns of every row as ints (an empty cell is refused, never read as 0)."""
        idx = [self._index(n) for n in names]
        out = []
        for r, row in enumerate(self.rows):
            try:
                out.append(tuple(int(row[i]) for i in idx))
            except ValueError as exc:
                raise ConstraintError(
                    "source case tables", f"{self.op} row {r}: columns {names} are not all integers: {exc}"
                ) from None
        return out

    def _index(self, name: str) -> int:
        try:
            return self.columns.index(name)
        except ValueError:
            raise ConstraintError(
                "source case tables", f"{self.op} has no column {name!r}; its columns: {', '.join(self.columns)}"
            ) from None


def available() -> tuple[str, ...]:
    """The op keys that have a table."""
    return tuple(TABLES)


def source_cases_dir(root: Path | str | None = None) -> Path:
    """The table directory: `<root>/tests/data/source_cases` (root defaults to this checkout)."""
    return (Path(root) if root is not None else REPO_ROOT) / SOURCE_CASES_SUBDIR


def git_blob_id(body: bytes) -> str:
    """The git blob id of `body` (what `git hash-object` prints): sha1 of b"blob <len>\\0" + body."""
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


def load(op: str, root: Path | str | None = None) -> SourceTable:
    """Read the table of `op` (a key of TABLES), checking its header and its body's blob id."""
    if op not in TABLES:
        if op in NO_TABLE:
            raise NoSourceTable(op, f"{op}: no source table: {NO_TABLE[op]}")
        raise NoSourceTable(op, f"unknown op {op!r}; tables: {', '.join(TABLES)}; none: {', '.join(NO_TABLE)}")
    directory = source_cases_dir(root)
    path = directory / TABLES[op]
    if not path.is_file():
        raise SourceTablesMissing(
            f"source case table {TABLES[op]} not found in {directory}: the tables ship in the repository's "
            f"{SOURCE_CASES_SUBDIR.as_posix()}/ (test data, not in an installed wheel); run from a checkout "
            "or pass root= a checkout"
        )
    raw = path.read_bytes()
    provenance, body = _split_header(path, raw)
    if git_blob_id(body) != provenance.blob:
        raise SourceTableCorrupt(
            f"{path}: body blob id {git_blob_id(body)} differs from the verified {provenance.blob} "
            f"({provenance.cite()}): the table was edited after it was checked against the source"
        )
    columns, rows = _parse_body(path, body)
    return SourceTable(op=op, provenance=provenance, columns=columns, rows=rows)


def _split_header(path: Path, raw: bytes) -> tuple[Provenance, bytes]:
    """Leading `# key: value` lines -> Provenance; the rest, untouched, is the source's body."""
    fields: dict[str, str] = {}
    notes: list[str] = []
    offset = 0
    while raw.startswith(HEADER_PREFIX.encode(), offset):
        end = raw.find(b"\n", offset)
        if end < 0:
            raise SourceTableCorrupt(f"{path}: header line at byte {offset} has no newline (no body follows)")
        line = raw[offset + 1 : end].decode("utf-8").strip()
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key not in (*REQUIRED_KEYS, *MULTI_KEYS):
            raise SourceTableCorrupt(f"{path}: header line {line!r} is not '# key: value' with a known key")
        if key in MULTI_KEYS:
            notes.append(value)
        elif key in fields:
            raise SourceTableCorrupt(f"{path}: header key {key!r} given twice")
        else:
            fields[key] = value
        offset = end + 1
    missing = [k for k in REQUIRED_KEYS if k not in fields]
    if missing:
        raise SourceTableCorrupt(f"{path}: header lacks {', '.join(missing)}")
    return Provenance(**fields, notes=tuple(notes)), raw[offset:]


def _parse_body(path: Path, body: bytes) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    """Skip `#` and empty lines as the source's drivers do; the first line left is the header."""
    lines = [ln for ln in body.decode("utf-8").splitlines() if ln.strip() and not ln.startswith(HEADER_PREFIX)]
    if not lines:
        raise SourceTableCorrupt(f"{path}: the body has no header line")
    columns = tuple(c.strip() for c in lines[0].split(","))
    rows = []
    for n, line in enumerate(lines[1:], start=1):
        cells = tuple(c.strip() for c in line.split(","))
        if len(cells) != len(columns):
            raise SourceTableCorrupt(f"{path}: data line {n} has {len(cells)} cells, the header {len(columns)}")
        rows.append(cells)
    return columns, tuple(rows)
