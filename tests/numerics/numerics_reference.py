"""Independent float64 reference for MX quantization, used only by the tests.

Different algorithm from mc2emu.numerics on purpose: the value grid is enumerated from the format
definitions written out here, the shared exponent is found by comparing against powers of two, and each
element picks the nearest grid value by exhaustive search, ties broken by mantissa (code) parity.
Python loops are fine here: this is test code on small arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RefFormat:
    name: str
    bits: int
    codes: np.ndarray  # non-negative codes, ascending value
    values: np.ndarray  # float64 values of `codes`
    emax: int
    nan_code: int | None  # what a NaN block's elements must hold (FP4: 0)

    @property
    def max(self) -> float:
        return float(self.values[-1])

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)


def _fp8_grid(ebits: int, mbits: int, bias: int, skip) -> tuple[np.ndarray, np.ndarray]:
    codes, values = [], []
    for e in range(1 << ebits):
        for m in range(1 << mbits):
            if skip(e, m):
                continue
            # subnormal: 0.m * 2^(1-bias); normal: 1.m * 2^(e-bias); as integer significand * 2^...
            significand, exp = (m, 1 - bias) if e == 0 else ((1 << mbits) + m, e - bias)
            codes.append((e << mbits) | m)
            values.append(math.ldexp(significand, exp - mbits))
    return np.array(codes), np.array(values, dtype=np.float64)


def ref_format(name: str) -> RefFormat:
    if name == "e4m3":  # OCP E4M3FN: S.1111.111 is NaN, no Inf, max 448
        c, v = _fp8_grid(4, 3, 7, lambda e, m: e == 15 and m == 7)
        return RefFormat(name, 8, c, v, 8, 0x7F)
    if name == "e5m2":  # IEEE-like: exponent 31 is Inf / NaN, max 57344
        c, v = _fp8_grid(5, 2, 15, lambda e, m: e == 31)
        return RefFormat(name, 8, c, v, 15, 0x7E)
    if name == "e2m1":  # OCP FP4
        return RefFormat(name, 4, np.arange(8), np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], float), 2, 0)
    if name == "e1m2":  # Ascend fp4x2_e1m2_t: |v| = 0.25 * code
        return RefFormat(name, 4, np.arange(8), np.arange(8) * 0.25, 0, 0)
    raise KeyError(name)


def ref_floor_log2(a: float) -> int:
    """floor(log2(a)) for a > 0 by exact comparisons with powers of two."""
    e = 0
    while math.ldexp(1.0, e + 1) <= a:
        e += 1
    while math.ldexp(1.0, e) > a:
        e -= 1
    return e


def ref_encode(v: float, fmt: RefFormat) -> int:
    """Nearest grid code to float64 v (saturating), ties to the even code; sign of v kept."""
    a = min(abs(v), fmt.max)
    d = np.abs(fmt.values - a)
    best = np.flatnonzero(d == d.min())
    if best.size == 2:  # a tie: keep the even mantissa
        best = best[fmt.codes[best] % 2 == 0]
    code = int(fmt.codes[best[0]])
    return code | fmt.sign_bit if math.copysign(1.0, v) < 0 else code


def ref_quantize_block(x: np.ndarray, fmt: RefFormat) -> tuple[int, list[int]]:
    """(E8M0 code, element codes) of one block of float32 values."""
    xs = [float(t) for t in x]
    if any(not math.isfinite(t) for t in xs):
        return 0xFF, [fmt.nan_code] * len(xs)
    amax = max(abs(t) for t in xs)
    s = -127 if amax == 0 else min(max(ref_floor_log2(amax) - fmt.emax, -127), 127)
    return s + 127, [ref_encode(math.ldexp(t, -s), fmt) for t in xs]


def ref_quantize(x: np.ndarray, name: str, block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Reference quantize_mx along the last axis of a float32 array: (codes, scale codes)."""
    fmt = ref_format(name)
    x2 = np.asarray(x, dtype=np.float32).reshape(-1, x.shape[-1])
    k = x2.shape[1]
    nb = -(-k // block)
    codes = np.zeros(x2.shape, dtype=np.uint8)
    scales = np.zeros((x2.shape[0], nb), dtype=np.uint8)
    for r in range(x2.shape[0]):
        for j in range(nb):
            sc, cs = ref_quantize_block(x2[r, j * block : (j + 1) * block], fmt)
            scales[r, j] = sc
            codes[r, j * block : j * block + len(cs)] = cs
    return codes.reshape(x.shape), scales.reshape(*x.shape[:-1], nb)
