"""Output comparison: the one home of max-abs error and ULP distance, and the CANN MC2 ST rules (SPEC §4).

- A2A ST (all_to_all_quant_matmul): `np.allclose(out, golden, rtol=1e-2, atol=1e-2)`.
- AG ST (all_gather_quant_matmul): bit-exact or at most 1 bf16 ULP apart.

ULP distance uses the ordered-integer mapping of IEEE bit patterns: a non-negative float maps to its bit
pattern, a negative one to minus its magnitude bits, so adjacent floats differ by 1 and +0 / -0 both map
to 0 (distance 0). A sign crossing thus counts every representable value between the two (1.0 to -1.0 in
bf16: 2 * 0x3F80 steps), the smallest subnormals either side of zero are 2 apart, and inf sits one step
above max finite. NaN: two NaNs at the same position are distance 0 (any payloads); a NaN facing a
non-NaN is NAN_MISMATCH_ULP, larger than any finite distance. Max-abs error is taken in float32 and is NaN
when the two sides put NaN in different places.
"""

from __future__ import annotations

from collections.abc import Iterator

import ml_dtypes
import numpy as np
import numpy.typing as npt

from mc2emu.numerics.errors import MxTypeError, MxValueError

A2A_RTOL = 1e-2  # A2A ST compare: relative tolerance of np.allclose.
A2A_ATOL = 1e-2  # A2A ST compare: absolute tolerance of np.allclose.
AG_MAX_ULP = 1  # AG ST compare: bf16 outputs may differ from the golden by at most one ULP.
NAN_MISMATCH_ULP = 1 << 32  # exceeds every 16/32-bit ordered distance (at most 2 * 0x7F800000).

# The reductions below (max ULP, count, max-abs error, allclose) walk the arrays in flat chunks of this many
# elements: host memory only (a full-size AG output of 84 M elements otherwise needs ~6 int64 temporaries of
# 670 MB each per rank); the figures are those of the whole arrays.
COMPARE_CHUNK = 1 << 20
_UINT_OF_WIDTH = {2: np.uint16, 4: np.uint32}  # itemsize -> unsigned view for ULP ordering.
_ULP_DTYPES = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32))


def _flat_chunks(a: np.ndarray, b: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Matching flat chunks of two same-shape arrays (COMPARE_CHUNK elements each)."""
    if np.shape(a) != np.shape(b):
        raise MxValueError(f"shapes {np.shape(a)} and {np.shape(b)} must be equal")
    fa = np.asarray(a).reshape(-1)
    fb = np.asarray(b).reshape(-1)
    for lo in range(0, fa.size, COMPARE_CHUNK):
        yield fa[lo:lo + COMPARE_CHUNK], fb[lo:lo + COMPARE_CHUNK]


def a2a_allclose(out: np.ndarray, ref: np.ndarray, equal_nan: bool = False) -> bool:
    """A2A ST rule: allclose(rtol = atol = 1e-2) after an exact upcast of both sides to float32."""
    return all(np.allclose(o.astype(np.float32), r.astype(np.float32), rtol=A2A_RTOL, atol=A2A_ATOL,
                           equal_nan=equal_nan) for o, r in _flat_chunks(out, ref))


def _ordered(x: np.ndarray) -> np.ndarray:
    bits = x.view(_UINT_OF_WIDTH[x.dtype.itemsize]).astype(np.int64)
    sign_bit = 1 << (8 * x.dtype.itemsize - 1)
    mag = bits & (sign_bit - 1)
    return np.where(bits & sign_bit, -mag, mag)


def ulp_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-element ULP distance (int64) between same-dtype bf16 / fp16 / fp32 arrays, under the module's
    rules: +-0 are 0 apart, a sign crossing counts every representable value between, NaN facing NaN is 0,
    NaN facing a number NAN_MISMATCH_ULP."""
    x = np.asarray(a)
    y = np.asarray(b)
    if x.dtype != y.dtype or x.dtype not in _ULP_DTYPES:
        raise MxTypeError(
            f"a and b must share one dtype of bfloat16, float16, float32; got {x.dtype}, {y.dtype}"
        )
    if x.shape != y.shape:
        raise MxValueError(f"a shape {x.shape} must equal b shape {y.shape}")
    with np.errstate(invalid="ignore"):   # ml_dtypes 0.6's bfloat16 isnan sets the invalid flag on a NaN
        nan_x = np.isnan(x)
        nan_y = np.isnan(y)
    dist = np.abs(_ordered(x) - _ordered(y))
    dist[nan_x & nan_y] = 0
    dist[nan_x != nan_y] = NAN_MISMATCH_ULP
    return dist


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: npt.DTypeLike | None = None) -> int:
    """Max ULP distance between same-dtype bf16 / fp16 / fp32 arrays (0 for empty arrays); with `dtype`,
    both are cast to it first (e.g. the bf16 ULP of two float32 outputs)."""
    return ulp_stats(a, b, dtype)[0]


def ulp_stats(a: np.ndarray, b: np.ndarray, dtype: npt.DTypeLike | None = None) -> tuple[int, int]:
    """(max ULP distance, count of elements at a distance > 0), as `ulp_distance` (in bounded memory)."""
    worst = differing = 0
    for x, y in _flat_chunks(a, b):
        if dtype is not None:
            x, y = x.astype(dtype), y.astype(dtype)
        dist = ulp_distances(x, y)
        worst = max(worst, int(np.max(dist, initial=0)))
        differing += int(np.count_nonzero(dist))
    if np.size(a) == 0:   # the dtype check of an empty pair
        ulp_distances(np.asarray(a).astype(dtype) if dtype is not None else a,
                      np.asarray(b).astype(dtype) if dtype is not None else b)
    return worst, differing


def bf16_ulp_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Max ULP distance between two bfloat16 arrays (see the module docstring for NaN, Inf and +-0)."""
    for name, arr in (("a", a), ("b", b)):
        if np.asarray(arr).dtype != ml_dtypes.bfloat16:
            raise MxTypeError(f"{name} must be bfloat16, got {np.asarray(arr).dtype}")
    return ulp_distance(a, b)


def max_abs_error(out: np.ndarray, ref: np.ndarray) -> float:
    """The largest |out - ref| in float32 over the elements where both are numbers; NaN when the two put NaN
    in different places (a NaN the golden does not have is never hidden by the maximum); 0 for no elements."""
    worst: float | None = None
    for oc, rc in _flat_chunks(out, ref):
        o, r = oc.astype(np.float32), rc.astype(np.float32)
        if np.any(np.isnan(o) != np.isnan(r)):
            return float("nan")
        diff = np.abs(o - r)
        if not np.all(np.isnan(diff)):
            worst = max(worst or 0.0, float(np.nanmax(diff)))
    return worst or 0.0


def bit_exact(out: np.ndarray, ref: np.ndarray) -> bool:
    """Same dtype, same shape, the same bits in every element (so -0 differs from +0, NaN payloads count)."""
    o = np.ascontiguousarray(out)
    r = np.ascontiguousarray(ref)
    return o.dtype == r.dtype and o.shape == r.shape and o.tobytes() == r.tobytes()


def ag_compare(out: np.ndarray, ref: np.ndarray) -> bool:
    """AG ST rule: bit-exact or at most AG_MAX_ULP ULP apart (bf16; fp16/fp32 use their own ULP)."""
    return ulp_distance(out, ref) <= AG_MAX_ULP
