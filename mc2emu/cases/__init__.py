"""Test cases the emulator replays: the source's own case tables, shipped as data with their provenance.

`source_tables.load(op)` reads one table from `tests/data/source_cases/` of the repository checkout (the
tables are test data, not package data: an installed wheel has none and says so). Pure stdlib; the only
mc2emu import is the error base (`mc2emu.arch.errors`).
"""

from mc2emu.cases.source_tables import (
    NO_TABLE,
    TABLES,
    NoSourceTable,
    Provenance,
    SourceTable,
    SourceTablesMissing,
    available,
    load,
    source_cases_dir,
)

__all__ = [
    "NO_TABLE",
    "TABLES",
    "NoSourceTable",
    "Provenance",
    "SourceTable",
    "SourceTablesMissing",
    "available",
    "load",
    "source_cases_dir",
]
