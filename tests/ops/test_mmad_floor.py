"""launch/mmad_floor.py: the benches' floor runs the emulator's own MMAD steps, bit for bit.

The floor is the ratio context of `bench_ag` / `bench_qmrs` (what no emulator with SPEC §4's numerics can beat),
so it must compute what `BlockMmadMx` computes: every baseK step one float32 BLAS matmul added to the tile's
L0C, the same K walk, tails included. Checked against the QBMM emulator's float32 output (a second
implementation of the same sequence), on signed data whose float32 sums depend on the order (the one-call
golden matmul differs there, so the comparison can fail).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from mc2emu.arch.platform import DAV_3510
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.golden import golden_mx_operands
from mc2emu.ops import quant_batch_matmul_mx
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

FLOOR_PATH = Path(__file__).resolve().parents[2] / "launch" / "mmad_floor.py"


@pytest.fixture(scope="module")
def mmad_floor():
    spec = importlib.util.spec_from_file_location("mmad_floor", FLOOR_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _signed_mx(rng: np.random.Generator, rows: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, k) E4M3 codes of signed values spanning many binades, and (rows, ceil(k/64), 2) E8M0 scales."""
    vals = rng.standard_normal((rows, k)).astype(np.float32) * np.exp2(rng.integers(-6, 7, (rows, k)))
    codes = np.clip(vals, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    scales = rng.integers(120, 134, (rows, -(-k // 64), 2), dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)
    return codes, scales


@pytest.mark.parametrize(("m", "n", "k"), [(300, 200, 576), (256, 384, 1024), (17, 130, 320), (512, 512, 1088)])
def test_floor_steps_are_the_emulators_bits(mmad_floor, m, n, k):
    rng = np.random.default_rng([m, n, k])
    x1, x1_scale = _signed_mx(rng, m, k)
    x2, x2_scale = _signed_mx(rng, n, k)   # stored transposed (N, K), as the MC2 operators take x2
    emulated = quant_batch_matmul_mx(x1, x1_scale, x2, x2_scale, trans_b=True, out_dtype="float32", timeout=60)
    t = QuantMatmulTilingSwat(DAV_3510).GetTilingData(m, n, k, False, True, ElemFormat.E4M3, ElemFormat.E4M3)
    a, b = golden_mx_operands(x1, x1_scale, x2, x2_scale, ElemFormat.E4M3, trans_b=True)
    a_chunks, b_chunks = mmad_floor.chunk_operands(a, b, t.baseM, t.baseN, t.kL1)
    c, steps = mmad_floor.mmad_steps(a_chunks, b_chunks, m, n, k, t.baseM, t.baseN, t.baseK, t.kL1)
    tiles = -(-m // t.baseM) * -(-n // t.baseN)
    chunks = -(-k // t.kL1)
    assert steps == tiles * sum(-(-min(t.kL1, k - i * t.kL1) // t.baseK) for i in range(chunks))
    assert mmad_floor.step_count(m, n, k, t.baseM, t.baseN, t.baseK, t.kL1) == steps   # counted without running
    assert np.array_equal(c.view(np.uint32), np.asarray(emulated, dtype=np.float32).view(np.uint32))
    # The data makes the order visible: one BLAS call over the whole K rounds differently somewhere.
    assert not np.array_equal(np.matmul(a, b).view(np.uint32), c.view(np.uint32))
