"""The harness's read-back (`LaunchHarness.read`): GM the call allocated is handed over without a host copy and
stays the caller's after the call; a window's bytes are copied before its MPI memory is freed; a launch after
the read-back is refused."""

import numpy as np
import pytest

from mc2emu.host import CallOptions, LaunchHarness
from mc2emu.runtime import KernelType


def write_kernel(ctx, addr, value: np.ndarray) -> int:
    """AIC 0 writes `value` at `addr`."""
    if ctx.GetBlockIdx() == 0:
        ctx.gm_write(addr, value)
    return 1


def _value(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (64, 48), dtype=np.uint8)


def _gm_call(value: np.ndarray, *, extra_after_read: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """One single-NPU call: allocate GM of `value`'s size, launch `write_kernel`, read back; returns the
    read-back and the allocation's buffer."""
    with LaunchHarness("read_test", CallOptions(check=True, timeout=5.0)) as h:
        addr = h.device.gm.alloc(value.nbytes, "out")
        h.launch(write_kernel, 2, KernelType.AIC_ONLY, addr, value.reshape(-1))
        out = h.read(addr, np.uint8, value.shape)
        if extra_after_read:
            h.launch(write_kernel, 2, KernelType.AIC_ONLY, addr, np.zeros(value.size, dtype=np.uint8))
        return out, addr.alloc.buf


def test_the_read_back_of_gm_is_the_gm_written_handed_over_and_kept_after_the_call():
    value = _value(1)
    out, buf = _gm_call(value)
    np.testing.assert_array_equal(out, value)
    assert out.flags.c_contiguous and out.flags.writeable and out.dtype == np.uint8
    assert np.shares_memory(out, buf)          # handed over: no host copy
    # A later call on another device neither reuses nor changes it.
    other, _ = _gm_call(_value(2))
    np.testing.assert_array_equal(out, value)
    assert not np.shares_memory(out, other)


def test_a_launch_after_the_read_back_is_refused_and_the_read_back_keeps_its_bytes():
    value = _value(3)
    with pytest.raises(RuntimeError, match="launch after `read`"):
        _gm_call(value, extra_after_read=True)


def test_the_read_back_of_a_window_is_a_copy_that_outlives_the_window():
    from mpi4py import MPI

    value = _value(4).reshape(-1)[:256]
    with LaunchHarness("read_test", CallOptions(check=True, timeout=5.0, comm=MPI.COMM_SELF)) as h:
        win = h.window(value.nbytes, "read_test")
        h.launch(write_kernel, 2, KernelType.AIC_ONLY, win.addr(0), value)
        out = h.read(win.addr(0), np.uint8, value.shape)
        window_buf = win.addr(0).alloc.buf
        assert not np.shares_memory(out, window_buf)
    assert win.freed
    np.testing.assert_array_equal(out, value)
