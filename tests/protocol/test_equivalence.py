"""One-NPU operators: the protocol-only event record equals the full run's (tests/protocol/record.py), and the
output of a protocol-only call is a Payload of the output's shape and dtype."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from record import Recorder, differences

from mc2emu.numerics.payload import Payload
from mc2emu.ops.grouped_matmul_mx_op import grouped_matmul_mx
from mc2emu.ops.quant_batch_matmul_mx_op import quant_batch_matmul_mx
from mc2emu.ops.weight_quant_matmul_op import weight_quant_matmul

_spec = importlib.util.spec_from_file_location("gmm_cases", Path(__file__).parents[1] / "ops" / "gmm_cases.py")
assert _spec is not None and _spec.loader is not None
gmm_cases = importlib.util.module_from_spec(_spec)
sys.modules["gmm_cases"] = gmm_cases   # its dataclasses resolve their module
_spec.loader.exec_module(gmm_cases)
split_k_case, split_m_case = gmm_cases.split_k_case, gmm_cases.split_m_case

E4M3, E8M0, BF16 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu, np.dtype(ml_dtypes.bfloat16)


def _shape_only(x):
    """A Payload of an input's shape and dtype (host-side lists such as group_list stay values)."""
    return Payload(x.shape, x.dtype) if isinstance(x, np.ndarray) and x.dtype != np.int64 else x


def _both(op, args, **kw):
    records = []
    for data in (True, False):
        rec = Recorder()
        out = op(*(args if data else [_shape_only(a) for a in args]), data=data, observers=[rec], **kw)
        records.append((rec.events, out))
    (full, c), (proto, p) = records
    assert isinstance(p, Payload) and p.shape == c.shape and p.dtype == c.dtype
    assert len(full) > 50
    return full, proto


@pytest.mark.parametrize("case", [split_m_case([64, 0, 96, 32], 128, 256),
                                  split_m_case([40, 88], 96, 192, trans_b=True),
                                  split_k_case([128, 64, 192], 48, 96)],
                         ids=["split_m", "split_m_transB", "split_k"])
def test_gmm_protocol_only_record_equals_the_full_runs(case):
    full, proto = _both(grouped_matmul_mx, list(case.args()), **case.kw)
    assert differences(full, proto) == []


@pytest.mark.parametrize("atomic", [False, True])
def test_qbmm_protocol_only_record_equals_the_full_runs(atomic):
    rng = np.random.default_rng(0)
    x1, x2 = rng.uniform(1, 8, (96, 256)).astype(E4M3), rng.uniform(1, 8, (128, 256)).astype(E4M3)
    s1, s2 = rng.uniform(1, 4, (96, 4, 2)).astype(E8M0), rng.uniform(1, 4, (128, 4, 2)).astype(E8M0)
    kw = dict(trans_b=True, atomic=atomic, out_dtype="float32" if atomic else "bfloat16")
    if atomic:
        kw["c_init"] = np.zeros((96, 128), np.float32)
    full, proto = _both(quant_batch_matmul_mx, [x1, s1, x2, s2], **kw)
    assert differences(full, proto) == []


@pytest.mark.parametrize("mode", ["full", "a_only_mmad", "dequant_only"])
def test_wqmm_protocol_only_record_equals_the_full_runs(mode):
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 9, (64, 256)).astype(np.float32).astype(BF16)
    w = rng.integers(-128, 128, (256, 128)).astype(np.int8)
    scale, offset = np.ones(128, np.float32).astype(BF16), np.zeros(128, np.float32).astype(BF16)
    full, proto = _both(weight_quant_matmul, [x, w, scale, offset], mode=mode)
    assert differences(full, proto) == []
