"""How every operator reads a keyword argument of enum type: `parse_enum(cls, value, keyword)`.

A keyword takes the member itself or its string: the member's value (or, for a member whose value is not a
string, its name), any case, "-" for "_". A value the enum maps itself (`Enum._missing_`: `OutDtype` takes a
numpy dtype, `ElemFormat` an ml_dtypes dtype or its name) is passed through. Anything else is a
`ConstraintError` whose rule is the keyword and whose message lists the allowed strings (STYLE.md §4, §9);
given `errs`, the (rule, reason) pair is appended there instead (a collective operator gathers every rule
broken before it refuses on every rank).
"""

from __future__ import annotations

import enum
from typing import TypeVar, overload

from mc2emu.arch.errors import ConstraintError

E = TypeVar("E", bound=enum.Enum)


def enum_strings(cls: type[enum.Enum]) -> list[str]:
    """The strings that name the members of `cls`, in definition order."""
    return [m.value if isinstance(m.value, str) else m.name.lower() for m in cls]


@overload
def parse_enum(cls: type[E], value: object, keyword: str) -> E: ...
@overload
def parse_enum(cls: type[E], value: object, keyword: str, errs: list[tuple[str, str]]) -> E | None: ...


def parse_enum(cls: type[E], value: object, keyword: str, errs: list[tuple[str, str]] | None = None) -> E | None:
    """The member of `cls` that `value` names; else a ConstraintError naming `keyword` and the allowed values
    (appended to `errs` as (rule, reason), and None returned, when `errs` is given)."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().lower().replace("-", "_")
        for member, name in zip(cls, enum_strings(cls), strict=True):
            if key in (name, member.name.lower()):
                return member
    if value is not None and not isinstance(value, (bool, enum.Enum)):
        try:
            return cls(value)
        except (ValueError, TypeError):
            pass
    rule, reason = keyword, f"{keyword}={value!r} is not one of {enum_strings(cls)}"
    if errs is None:
        raise ConstraintError(rule, reason)
    errs.append((rule, reason))
    return None
