"""The serial operators' output bytes on the recorded cases are the recorded ones: quant_batch_matmul_mx
(`recorded_cases.QBMM_CASES`, recorded before the issue-12 refactor), grouped_matmul_mx (`GMM_CASES`) and
weight_quant_matmul (`WQMM_CASES`, recorded after each output was checked against its golden); and the pins
are not vacuous (every case pinned at every recorded world size, distinct data)."""

import numpy as np
import pytest
from recorded_cases import (
    A2A_CASES,
    AG_CASES,
    GMM_CASES,
    QBMM_CASES,
    QMRS_CASES,
    WQMM_CASES,
    digest,
    load_digests,
    missing_pins_reason,
    run_gmm_case,
    run_qbmm_case,
    run_wqmm_case,
)

PINS = load_digests()
MISSING = missing_pins_reason()


@pytest.fixture(autouse=True)
def _pins_of_this_blas():
    """The pins are per BLAS fingerprint (recorded_cases.blas_fingerprint): a host never recorded fails here."""
    if MISSING:
        pytest.fail(MISSING)


@pytest.mark.parametrize("case", QBMM_CASES, ids=lambda c: c.name)
def test_qbmm_output_bytes_are_the_recorded_ones(case):
    assert digest(run_qbmm_case(case)) == PINS["qbmm"][case.name]


@pytest.mark.parametrize("case", GMM_CASES, ids=lambda c: c.name)
def test_gmm_output_bytes_are_the_recorded_ones(case):
    assert digest(run_gmm_case(case)[0]) == PINS["gmm"][case.name]


@pytest.mark.parametrize("case", WQMM_CASES, ids=lambda c: c.name)
def test_wqmm_output_bytes_are_the_recorded_ones(case):
    assert digest(run_wqmm_case(case)[0]) == PINS["wqmm"][case.name]


def test_every_case_is_pinned_at_every_recorded_world_size():
    for group, cases in (("qbmm", QBMM_CASES), ("gmm", GMM_CASES), ("wqmm", WQMM_CASES)):
        assert set(PINS[group]) == {c.name for c in cases}, group
    for group, cases in (("gmm", GMM_CASES), ("wqmm", WQMM_CASES)):   # no two cases that pin the same bytes
        assert len(set(PINS[group].values())) == len(cases), group
    for group, cases in (("a2a", A2A_CASES), ("ag", AG_CASES), ("qmrs", QMRS_CASES)):
        assert sorted(PINS[group]) == ["2", "4", "8"], group
        for size, pins in PINS[group].items():
            assert set(pins) == {c.name for c in cases}, (group, size)
            assert all(len(per_rank) == int(size) for per_rank in pins.values())


def test_digest_sees_one_flipped_bit_and_the_dtype():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = a.copy()
    b.view(np.uint32)[1, 2] ^= 1
    assert digest(a) != digest(b)
    assert digest(a) != digest(a.view(np.int32))
