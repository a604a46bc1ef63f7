"""all_to_all_quant_matmul's output bytes on the recorded cases (`recorded_cases.A2A_CASES`) are the ones
recorded before the issue-12 refactor, on every rank, at 2, 4 and 8 ranks (the pins are per world size:
the data and C differ with R)."""

import pytest
from recorded_cases import A2A_CASES, digest, load_digests, run_a2a_case

PINS = load_digests()["a2a"]


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
