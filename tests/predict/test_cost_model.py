"""The DAV_3510 cost model: cited figures reproduced, fractal counts, overrides refused with the rule named."""

from __future__ import annotations

import pytest

from mc2emu.arch.errors import ConstraintError
from mc2emu.predict.cost_model import (
    ASCEND_950PR_MXFP4_FLOPS,
    ASCEND_950PR_MXFP8_FLOPS,
    CostModel,
)

MODEL = CostModel()


def test_published_chip_peaks_are_reproduced():
    """[HC25] 950PR: MXFP8 1 PFLOPS, MXFP4 2 PFLOPS. The clock is derived from the MXFP8 figure (so that one is
    exact by construction); MXFP4's 2 PFLOPS is the independent check: the 64-element FP4 C0 doubles the
    cube's MACs per cycle at the same clock. Deviation from the published figures: 0 %."""
    assert MODEL.macs_per_cycle("e4m3") == 16 * 32 * 16 == 8192
    assert MODEL.macs_per_cycle("e2m1") == 16 * 64 * 16 == 16384
    assert MODEL.peak_flops("e4m3") == pytest.approx(ASCEND_950PR_MXFP8_FLOPS, rel=1e-12)
    assert MODEL.peak_flops("e2m1") == pytest.approx(ASCEND_950PR_MXFP4_FLOPS, rel=1e-12)
    assert MODEL.peak_flops("e4m3") / 32 == pytest.approx(31.25e12)   # MXFP8 per AIC
    assert MODEL.clock_hz == pytest.approx(1.9073486328125e9)


@pytest.mark.parametrize("m, n, k, fmt, steps", [
    (256, 256, 128, "e4m3", 16 * 16 * 4),
    (256, 256, 128, "e2m1", 16 * 16 * 2),
    (17, 16, 64, "e4m3", 2 * 1 * 2),      # M tail pads to a whole fractal
    (16, 33, 65, "e5m2", 1 * 3 * 3),
    (16, 16, 64, "e1m2", 1),
])
def test_mmad_fractal_steps(m, n, k, fmt, steps):
    assert MODEL.mmad_cycles(m, n, k, fmt) == steps
    assert MODEL.mmad_s(m, n, k, fmt) == pytest.approx(steps / MODEL.clock_hz)


def test_byte_costs():
    per_core = 1.6e12 / 32
    assert MODEL.core_gm_bw == pytest.approx(per_core)
    assert MODEL.mte_s(50_000) == pytest.approx(50_000 / per_core)
    assert MODEL.fixpipe_s(128, 256, "bfloat16") == pytest.approx(128 * 256 * 2 / per_core)
    assert MODEL.fixpipe_s(128, 256, "float32") == pytest.approx(128 * 256 * 4 / per_core)
    assert MODEL.link_s(2_000_000) == pytest.approx(2_000_000 / 2e12)
    # cores that run alone are held to their MTE port (128 B/cycle), many share the chip's GM evenly
    assert MODEL.core_gm_bw_of(1) == pytest.approx(128 * MODEL.clock_hz)
    assert MODEL.core_gm_bw_of(4) == pytest.approx(128 * MODEL.clock_hz)      # 400 GB/s share > the port
    assert MODEL.core_gm_bw_of(8) == pytest.approx(1.6e12 / 8)
    assert MODEL.core_gm_bw_of(64) == pytest.approx(1.6e12 / 64)
    assert MODEL.mte_s(4096, active=1) == pytest.approx(4096 / (128 * MODEL.clock_hz))
    faster = MODEL.scaled(gm=2, link=4)
    assert faster.core_gm_bw_of(1) == pytest.approx(2 * MODEL.core_gm_bw_of(1))
    assert faster.mte_s(4096) == pytest.approx(MODEL.mte_s(4096) / 2)
    assert faster.link_s(4096) == pytest.approx(MODEL.link_s(4096) / 4)


def test_overrides_and_their_rules():
    m = MODEL.with_overrides(link_bw=1e11, put_latency_s=0.0)
    assert (m.link_bw, m.put_latency_s, m.gm_bw) == (1e11, 0.0, MODEL.gm_bw)
    with pytest.raises(ConstraintError, match="unknown field"):
        MODEL.with_overrides(link_bandwidth=1)
    with pytest.raises(ConstraintError, match=r"CostModel.link_bw: must be a positive"):
        MODEL.with_overrides(link_bw=0)
    with pytest.raises(ConstraintError, match=r"CostModel.put_latency_s"):
        MODEL.with_overrides(put_latency_s=-1e-6)
    with pytest.raises(ConstraintError, match="MMAD format"):
        MODEL.mmad_cycles(16, 16, 64, "int4x")
