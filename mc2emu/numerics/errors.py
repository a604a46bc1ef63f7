"""Exceptions raised by the MX numerics layer.

Every message names the offending parameter and the rule it broke (STYLE.md §9). They subclass the
builtin ValueError / TypeError so callers that only know the builtins still catch them.
"""

from __future__ import annotations


class MxValueError(ValueError):
    """A parameter has the right type but breaks an MX numerics rule (shape, range, format name)."""


class MxTypeError(TypeError):
    """A parameter has a dtype or Python type the MX numerics layer does not accept."""
