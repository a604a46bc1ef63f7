"""Shared pieces of the property tests: the Hypothesis settings, exact operands and the one contract.

The contract (issue 38 item 3): a call either returns and meets its golden, or raises `ConstraintError` naming
a rule; any other exception (a builtin one, numpy's, a hang's deadline error) fails the test by propagating.
Operands hold values whose products and sums are exact in FP32 (|v| <= 3, scales 2^-1 .. 2^1, small K), so
the kernel's chunked accumulation and the golden's one matmul agree to the bit before the output cast.

Settings are derandomized (the same examples on every run and on every MPI rank) with no example database;
`MC2EMU_HYPOTHESIS_EXAMPLES=N` multiplies every test's example count by N for a longer exploration run.
"""

from __future__ import annotations

import os
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from mc2emu.arch.errors import ConstraintError
from mc2emu.numerics import ElemFormat, encode_elements
from mc2emu.numerics.compare import ulp_distance

# A kernel call on a tiny shape takes milliseconds; a deadline error is a hang, not load.
CALL_TIMEOUT_S = 60.0
SCALE = int(os.environ.get("MC2EMU_HYPOTHESIS_EXAMPLES", "1"))
# Values exact in every element format with a sign (E1M2 stops at 1.75).
EXACT_VALUES = {ElemFormat.E1M2: (0.0, 0.25, -0.5, 1.0, -1.5), **{
    f: (0.0, 0.5, -1.0, 1.5, -2.0, 3.0) for f in (ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1)}}
SCALE_CODES = (126, 127, 128)  # E8M0 2^-1, 2^0, 2^1
ML_DTYPES = {ElemFormat.E4M3: ml_dtypes.float8_e4m3fn, ElemFormat.E5M2: ml_dtypes.float8_e5m2,
             ElemFormat.E2M1: ml_dtypes.float4_e2m1fn}
# Output cast: bit-exact FP32 sums rounded once on both sides; 1 ULP is the project's AG / QBMM rule.
MAX_ULP = 1


def prop_settings(max_examples: int) -> settings:
    return settings(max_examples=max_examples * SCALE, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


def elements(rng: np.random.Generator, shape: tuple[int, ...], fmt: ElemFormat) -> np.ndarray:
    """uint8 element codes (one per byte) of exact values."""
    vals = rng.choice(np.array(EXACT_VALUES[fmt], dtype=np.float32), size=shape)
    return encode_elements(vals, fmt)


def scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice(np.array(SCALE_CODES, dtype=np.uint8), size=shape)


def typed(codes: np.ndarray, fmt: ElemFormat, as_ml: bool) -> tuple[np.ndarray, ElemFormat | None]:
    """The operand as the caller passes it: an ml_dtypes array (format inferred) or uint8 codes + format."""
    if as_ml and fmt in ML_DTYPES:
        return codes.view(ML_DTYPES[fmt]), None
    return codes, fmt


@st.composite
def mangling(draw: Any) -> str:
    """How an operand is handed over: as built, a non-contiguous view of the same values, Fortran order, or
    a wrong dtype / kind (must be refused)."""
    return draw(st.sampled_from(["same", "same", "same", "strided", "fortran", "float32", "int64", "list"]))


def mangle(arr: np.ndarray, how: str) -> Any:
    """`arr` handed over as `how` says; the value-preserving ones keep every element."""
    if how == "strided":
        wide = np.zeros((*arr.shape[:-1], 2 * arr.shape[-1]) if arr.ndim else (2,), dtype=arr.dtype)
        wide[..., ::2] = arr
        return wide[..., ::2]
    if how == "fortran":
        return np.asfortranarray(arr)
    if how == "float32":
        return np.asarray(arr).astype(np.float32)
    if how == "int64":
        return np.asarray(arr).view(np.uint8).astype(np.int64) if arr.dtype.itemsize == 1 else arr.astype(np.int64)
    if how == "list":
        return np.asarray(arr).view(np.uint8).tolist() if arr.dtype.itemsize == 1 else arr.tolist()
    return arr


def preserves_values(how: str) -> bool:
    return how in ("same", "strided", "fortran")


def call_or_refusal(fn: Any, *args: Any, **kw: Any) -> tuple[Any, ConstraintError | None]:
    """(output, None) when the call returns, (None, error) when it refuses with a ConstraintError naming a rule;
    every other exception propagates (the property fails)."""
    try:
        return fn(*args, **kw), None
    except ConstraintError as exc:
        assert exc.rule and exc.rule.strip(), f"ConstraintError without a rule: {exc!r}"
        assert str(exc).startswith(exc.rule), exc
        return None, exc


def assert_meets_golden(out: np.ndarray, golden: np.ndarray) -> None:
    assert out.shape == golden.shape, (out.shape, golden.shape)
    assert out.dtype == golden.dtype, (out.dtype, golden.dtype)
    if out.size:
        assert ulp_distance(out, golden) <= MAX_ULP, ulp_distance(out, golden)
