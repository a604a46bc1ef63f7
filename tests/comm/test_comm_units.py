"""Serial unit tests of the pure parts of the comm layer (no MPI world needed)."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.comm.hccl_session import ALL_DELIVERED, delivered, tag
from mc2emu.comm.hccl_task import HcclCMDType, HcclReduceOp, HcclTask, hccl_dtype
from mc2emu.comm.shmem import Cmp, SignalOp
from mc2emu.comm.window import RemoteAddr
from mc2emu.runtime import ConstraintError, Device


@pytest.mark.parametrize(("cmp", "cur", "val", "want"), [
    (Cmp.EQ, 3, 3, True), (Cmp.EQ, 3, 4, False), (Cmp.NE, 3, 4, True), (Cmp.GT, 4, 3, True),
    (Cmp.GT, 3, 3, False), (Cmp.GE, 3, 3, True), (Cmp.LT, 2, 3, True), (Cmp.LE, 4, 3, False),
])
def test_cmp_holds(cmp, cur, val, want):
    assert cmp.holds(cur, val) is want


def test_signal_op_maps_to_accumulates():
    from mpi4py import MPI

    assert SignalOp.SET.mpi_op == MPI.REPLACE
    assert SignalOp.ADD.mpi_op == MPI.SUM


def test_remote_addr_arithmetic():
    a = RemoteAddr("w", 3, 64)
    assert a + 8 == RemoteAddr("w", 3, 72)
    assert "pe3" in repr(a)


def test_completion_tags_are_session_scoped():
    assert delivered(tag(5, 3), 5) == 3
    assert delivered(tag(4, 9), 5) == 0            # stale slot of an earlier session: nothing yet
    assert delivered(tag(6, 1), 5) == ALL_DELIVERED  # a later session implies this one is done
    assert tag(5, 3) < tag(5, 4) < tag(6, 0)


def _task(op, count=4, stride=0, repeat=1, dtype=np.float16):
    dev = Device(check=False)
    buf = dev.gm.alloc(1 << 12, "b")
    return HcclTask(0, op, buf, buf, count, np.dtype(dtype), stride, repeat,
                    HcclReduceOp.SUM if op.reduces else None)


def test_task_spans_follow_the_block_formulas():
    # AlltoAll, 4 ranks, count 4 fp16, stride 8, 3 repeats: send blocks j*8 elements apart, repeat r adds
    # r*count elements.
    t = _task(HcclCMDType.ALL_TO_ALL, count=4, stride=8, repeat=3)
    assert t.block_pitch == 16 and t.block_bytes == 8 and t.repeat_offset(2) == 16
    assert t.send_span(4) == 3 * 16 + 16 + 8
    assert t.recv_span(4) == 3 * 16 + 16 + 8
    g = _task(HcclCMDType.ALL_GATHER, count=4, stride=0, repeat=1)
    assert g.send_span(4) == 8 and g.recv_span(4) == 4 * 8
    r = _task(HcclCMDType.ALL_REDUCE, count=4, repeat=2)
    assert r.recv_span(4) == 16 and r.staging_bytes(4) == 2 * 4 * 8


def test_reduce_ops_combine():
    a, b = np.array([1.0, 5.0]), np.array([3.0, 2.0])
    assert list(HcclReduceOp.SUM.combine(a, b)) == [4.0, 7.0]
    assert list(HcclReduceOp.PROD.combine(a, b)) == [3.0, 10.0]
    assert list(HcclReduceOp.MAX.combine(a, b)) == [3.0, 5.0]
    assert list(HcclReduceOp.MIN.combine(a, b)) == [1.0, 2.0]


def test_packed_fp4_is_refused_as_hccl_dtype():
    import ml_dtypes

    with pytest.raises(ConstraintError, match="packed"):
        hccl_dtype(ml_dtypes.float4_e2m1fn)
    assert hccl_dtype(np.float16).itemsize == 2
