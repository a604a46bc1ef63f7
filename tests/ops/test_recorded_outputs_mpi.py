"""The collective operators' output bytes on the recorded cases are the recorded ones, on every rank, at 2, 4
and 8 ranks (the pins are per world size: the data and C differ with R): all_to_all_quant_matmul
(`recorded_cases.A2A_CASES`, recorded before the issue-12 refactor), all_gather_quant_matmul (`AG_CASES`)
and quant_matmul_reduce_scatter (`QMRS_CASES`, recorded after each output was checked against its golden)."""

import pytest
from recorded_cases import (
    A2A_CASES,
    AG_CASES,
    QMRS_CASES,
    digest,
    load_digests,
    missing_pins_reason,
    run_a2a_case,
    run_ag_case,
    run_qmrs_case,
)

ALL_PINS = load_digests()
PINS = ALL_PINS["a2a"]
MISSING = missing_pins_reason()


@pytest.fixture(autouse=True)
def _pins_of_this_blas():
    """The pins are per BLAS fingerprint (recorded_cases.blas_fingerprint): a host never recorded fails here."""
    if MISSING:
        pytest.fail(MISSING)


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", A2A_CASES, ids=lambda c: c.name)
def test_a2a_output_bytes_are_the_recorded_ones(case):
    comm = world()
    pins = PINS.get(str(comm.Get_size()))
    if pins is None:
        pytest.skip(f"no outputs recorded at {comm.Get_size()} ranks (recorded: {sorted(PINS)})")
    got = digest(run_a2a_case(case, comm))
    ok = comm.allgather(got == pins[case.name][comm.Get_rank()])
    bad = [r for r, f in enumerate(ok) if not f]
    assert not bad, f"{case.name}: output differs from the recorded one on ranks {bad}"


def _assert_recorded(group, case, out):
    comm = world()
    pins = ALL_PINS[group].get(str(comm.Get_size()))
    if pins is None:
        pytest.skip(f"no {group} outputs recorded at {comm.Get_size()} ranks (recorded: {sorted(ALL_PINS[group])})")
    ok = comm.allgather(digest(out) == pins[case.name][comm.Get_rank()])
    bad = [r for r, f in enumerate(ok) if not f]
    assert not bad, f"{group} {case.name}: output differs from the recorded one on ranks {bad}"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", AG_CASES, ids=lambda c: c.name)
def test_ag_output_bytes_are_the_recorded_ones(case):
    _assert_recorded("ag", case, run_ag_case(case, world())[0])


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", QMRS_CASES, ids=lambda c: c.name)
def test_qmrs_output_bytes_are_the_recorded_ones(case):
    _assert_recorded("qmrs", case, run_qmrs_case(case, world())[0])
