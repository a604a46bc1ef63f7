"""quant_batch_matmul_mx's output bytes on the recorded cases (`recorded_cases.QBMM_CASES`) are the ones
recorded before the issue-12 refactor, and the pins are not vacuous (every case pinned, distinct data)."""

import numpy as np
import pytest
from recorded_cases import A2A_CASES, QBMM_CASES, digest, load_digests, run_qbmm_case

PINS = load_digests()


@pytest.mark.parametrize("case", QBMM_CASES, ids=lambda c: c.name)
def test_qbmm_output_bytes_are_the_recorded_ones(case):
    assert digest(run_qbmm_case(case)) == PINS["qbmm"][case.name]


def test_every_case_is_pinned_at_every_recorded_world_size():
    assert set(PINS["qbmm"]) == {c.name for c in QBMM_CASES}
    assert sorted(PINS["a2a"]) == ["2", "4", "8"]
    for size, pins in PINS["a2a"].items():
        assert set(pins) == {c.name for c in A2A_CASES}
        assert all(len(per_rank) == int(size) for per_rank in pins.values())


def test_digest_sees_one_flipped_bit_and_the_dtype():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = a.copy()
    b.view(np.uint32)[1, 2] ^= 1
    assert digest(a) != digest(b)
    assert digest(a) != digest(a.view(np.int32))
