"""A protocol-only run refuses a payload value in control flow, naming the line; it runs control flow on
CONTROL memory and moves payload through local memory without bytes (`numerics.payload`, `runtime.local_region`)."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.numerics.payload import Payload, PayloadValueError
from mc2emu.runtime.device import Device
from mc2emu.runtime.gm import MemRole
from mc2emu.runtime.local_memory import Position


def _branching_kernel(ctx, src, dst):
    """Deliberately wrong: it branches on a tensor value (a protocol-only run cannot know it)."""
    if ctx.GetBlockIdx() != 0:
        return 0
    row = ctx.gm_read(src, np.float32, (8,))
    if row[0] > 0:  # WRONG-KERNEL-LINE
        ctx.gm_write(dst, np.ones(8, dtype=np.float32))
    return 1


def _ub_status_kernel(ctx, src, status, dst):
    """Right: payload passes through UB, a status word in CONTROL GM drives the branch."""
    if ctx.GetBlockIdx() != 0:
        return 0
    ub = ctx.local.allocate(Position.VECCALC, "ub", 16, np.float32)
    ub[:8] = ctx.gm_read(src, np.float32, (8,))
    ub[8:] = ctx.gm_read(status, np.float32, (8,))
    if float(ub[8]) == 0.0:
        ctx.gm_write(dst, (ub[:8] * np.float32(2)).astype(np.float32))
    return int(ub[8:].sum())


def _alloc(dev, data):
    gm = dev.gm
    src = gm.alloc(32, "src", data=np.arange(1, 9, dtype=np.float32) if data else Payload((8,), np.float32))
    status = gm.alloc(32, "status", zero=True, role=MemRole.CONTROL)
    dst = gm.alloc(32, "dst")
    return src, status, dst


def test_a_payload_value_in_a_branch_is_refused_naming_the_line():
    dev = Device(timeout=10, data=False)
    src, _, dst = _alloc(dev, False)
    with pytest.raises(PayloadValueError) as err:
        dev.launch(_branching_kernel, 1, "AIV_ONLY", src, dst)
    cause = err.value
    assert "test_payload.py" in str(cause) and "WRONG-KERNEL-LINE" in str(cause)
    assert "a branch condition" in str(cause)


def test_the_same_kernel_runs_with_data():
    dev = Device(timeout=10)
    src, _, dst = _alloc(dev, True)
    dev.launch(_branching_kernel, 1, "AIV_ONLY", src, dst)
    assert dev.gm.view(dst, np.float32, (8,)).tolist() == [1.0] * 8


@pytest.mark.parametrize("data", [True, False])
def test_control_words_stay_real_payload_passes_through_ub(data):
    dev = Device(timeout=10, data=data)
    src, status, dst = _alloc(dev, data)
    res = dev.launch(_ub_status_kernel, 1, "AIV_ONLY", src, status, dst)
    assert res.returns["AIV0"] == 0
    out = dev.gm.view(dst, np.float32, (8,))
    if data:
        assert out.tolist() == [2.0 * i for i in range(1, 9)]
    else:
        assert isinstance(out, Payload) and out.shape == (8,) and dst.alloc.buf is None
        assert status.alloc.buf is not None and src.alloc.buf is None


def test_a_ub_scalar_of_payload_is_refused():
    dev = Device(timeout=10, data=False)
    src, _, _ = _alloc(dev, False)

    def kernel(ctx, src):
        ub = ctx.local.allocate(Position.VECCALC, "ub", 8, np.float32)
        ub[:] = ctx.gm_read(src, np.float32, (8,))
        return float(ub[3])

    with pytest.raises(PayloadValueError, match=r"test_payload.py:\d+: return float\(ub\[3\]\)"):
        dev.launch(kernel, 1, "AIV_ONLY", src)


def test_payload_shapes_follow_numpy():
    p = Payload((4, 64), np.uint8)
    assert p.view(np.float32).shape == (4, 16)
    assert (p.astype(np.float32) @ Payload((64, 3), np.float32)).shape == (4, 3)
    assert np.matmul(p, np.zeros((64, 5), np.float32)).shape == (4, 5)
    assert p[1:3, ::2].shape == (2, 32) and p.T.shape == (64, 4)
    assert np.concatenate([p, p], axis=1).shape == (4, 128)
    for use in (bool, int, float, lambda x: x.item(), np.asarray):
        with pytest.raises(PayloadValueError):
            use(p[0, 0])
