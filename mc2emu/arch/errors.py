"""The error base of mc2emu and the bad-input error, with the CLI exit codes they carry.

`Mc2EmuError` is the base of every mc2emu error (the runtime's hazards, deadlocks and kernel errors
derive from it in `mc2emu/runtime/hazards.py`); `ConstraintError` is bad input, raised from every layer
(host tiling, kernels' `CanImplement`, operators) with the rule it broke (STYLE.md §9).
"""

from __future__ import annotations

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_HAZARD = 3


class Mc2EmuError(Exception):
    """Base of every mc2emu error."""

    exit_code = EXIT_HAZARD


class ConstraintError(Mc2EmuError, ValueError):
    """Bad input: a shape, dtype or option breaks a documented rule. The message names the rule."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule
        self.reason = message
