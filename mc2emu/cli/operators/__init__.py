"""The operators the CLI knows: one module per operator, each defining one `OperatorSpec` named `SPEC`.

To plug in an operator, add `mc2emu/cli/operators/<op>.py` with its mode type (a frozen `OperatorMode`
dataclass of its own fields), its command-line options if it has any (a frozen `OperatorOptions` dataclass:
its group under `--help`), its modes, hazard rules (`Hazard` members), shapes, make_inputs / golden /
execute / compare, and `SPEC = OperatorSpec(...)`; then append the module to `OPERATOR_MODULES`. A module
that fails to import is an error naming the import error (exit code 2), never skipped.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from mc2emu.cli.options import OptionError
from mc2emu.cli.scenarios import OperatorSpec, Registry

OPERATOR_MODULES: tuple[str, ...] = (
    "mc2emu.cli.operators.selfcheck",
    "mc2emu.cli.operators.quant_batch_matmul",
    "mc2emu.cli.operators.all_to_all",
    "mc2emu.cli.operators.all_gather",
    "mc2emu.cli.operators.quant_matmul_reduce_scatter",
    "mc2emu.cli.operators.weight_quant_matmul",
    "mc2emu.cli.operators.grouped_matmul_mx",
)


class OperatorImportError(OptionError):
    """An operator's CLI module (or the operator it imports) does not import: exit code 2."""


def load_spec(module: str) -> OperatorSpec:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:   # any failure to import is reported with its cause, never skipped
        raise OperatorImportError(f"operator module {module} failed to import: {type(exc).__name__}: {exc}") from exc
    spec = getattr(mod, "SPEC", None)
    if not isinstance(spec, OperatorSpec):
        raise OperatorImportError(f"operator module {module} defines no SPEC = OperatorSpec(...)")
    return spec


def default_registry(modules: Sequence[str] | None = None) -> Registry:
    """The registry of `modules` (default: `OPERATOR_MODULES`); raises `OperatorImportError`."""
    return Registry([load_spec(m) for m in (OPERATOR_MODULES if modules is None else modules)])


__all__ = ["OPERATOR_MODULES", "OperatorImportError", "default_registry", "load_spec"]
