"""The operators the CLI knows: one module per operator, each defining one `OperatorSpec`.

To plug in an operator, add `mc2emu/cli/operators/<op>.py` defining its spec (modes, hazard rules, shapes,
make_inputs / golden / execute / compare, an `available` check that imports the op lazily) and append the
spec to `BUILTIN_OPERATORS`. An operator whose module does not import yet is skipped by the default suite.
"""

from __future__ import annotations

from mc2emu.cli.operators.all_gather import ALL_GATHER_QUANT_MATMUL
from mc2emu.cli.operators.all_to_all import ALL_TO_ALL_QUANT_MATMUL
from mc2emu.cli.operators.quant_batch_matmul import QUANT_BATCH_MATMUL_MX
from mc2emu.cli.operators.selfcheck import SELFCHECK
from mc2emu.cli.scenarios import OperatorSpec, Registry

BUILTIN_OPERATORS: tuple[OperatorSpec, ...] = (SELFCHECK, QUANT_BATCH_MATMUL_MX, ALL_TO_ALL_QUANT_MATMUL,
                                                ALL_GATHER_QUANT_MATMUL)


def default_registry() -> Registry:
    return Registry(BUILTIN_OPERATORS)


__all__ = ["BUILTIN_OPERATORS", "default_registry"]
