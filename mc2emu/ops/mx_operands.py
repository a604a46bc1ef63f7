"""The input rules every MX matmul entry shares: the element dtypes of x1 and x2, the E8M0 dtype of their
scales, and their ranks (2-D operands, 3-D scales). Each entry adds its own shape rules on top; a rule
broken is a (rule, reason) pair, as `mc2emu.host.collective.refuse_on_every_rank` takes them."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from mc2emu.numerics import ElemFormat
from mc2emu.numerics.payload import Payload

E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)


def _dtype_name(fmt: ElemFormat) -> str:
    return fmt.ml_dtype.name if fmt.ml_dtype is not None else fmt.value


def _dtype_of(arr: Any) -> np.dtype:
    """The dtype of an input (a `Payload` of a protocol-only run has one and no values)."""
    dtype = getattr(arr, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(arr).dtype


def mx_operand_violations(x1: Any, x1_scale: Any, x2: Any, x2_scale: Any, *,
                          elems: tuple[ElemFormat, ...] = (ElemFormat.E4M3, ElemFormat.E5M2), why: str = ""
                          ) -> tuple[list[ElemFormat], list[tuple[str, str]], bool]:
    """(the element formats of x1 and x2 that parsed and are allowed, the rules broken, whether the ranks are
    right so that the caller may read the shapes). `elems` are the formats the kernel takes; `why` is said
    after their list in a refusal ("(the kernel's C0 is the FP8 one)")."""
    errs: list[tuple[str, str]] = []
    found: list[ElemFormat] = []
    names = [_dtype_name(f) for f in elems]
    allowed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    for name, arr in (("x1", x1), ("x2", x2)):
        try:
            fmt: ElemFormat | None = ElemFormat.parse(_dtype_of(arr), name)
        except ValueError:
            fmt = None
        if fmt not in elems:
            errs.append((f"{name} dtype", f"{name} must be {allowed}{' ' + why if why else ''}, got "
                                          f"{_dtype_of(arr)}"))
        else:
            assert fmt is not None
            found.append(fmt)
    for name, arr in (("x1_scale", x1_scale), ("x2_scale", x2_scale)):
        if _dtype_of(arr) not in (E8M0, np.dtype(np.uint8)):
            errs.append((f"{name} dtype", f"{name} must be float8_e8m0fnu (or its uint8 codes), got "
                                          f"{_dtype_of(arr)}"))
    ranks_ok = np.ndim(x1) == 2 and np.ndim(x2) == 2 and np.ndim(x1_scale) == 3 and np.ndim(x2_scale) == 3
    args = {"x1": x1, "x1_scale": x1_scale, "x2": x2, "x2_scale": x2_scale}
    # the callers read .shape (a list of codes also fails the dtype rule above); a protocol-only run's inputs are
    # shape-only `Payload`s
    loose = [name for name, arr in args.items() if not isinstance(arr, np.ndarray | Payload)]
    if loose:
        errs.append(("operands are numpy arrays", f"{', '.join(loose)} must be numpy arrays"))
        ranks_ok = False
    if not ranks_ok:
        errs.append(("shapes", f"x1 and x2 must be 2-D, the scales 3-D; got {np.shape(x1)}, {np.shape(x2)}, "
                               f"{np.shape(x1_scale)}, {np.shape(x2_scale)}"))
    return found, errs, ranks_ok
