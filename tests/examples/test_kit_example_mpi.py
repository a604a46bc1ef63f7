"""docs/examples/ring_put_test.py, a user's test file written with the kit, run as part of the suite (its
tests carry pytest.mark.mpi: they run at 2, 4 and 8 ranks). The file's own tests are collected here."""

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "ring_put_test.py"

_spec = importlib.util.spec_from_file_location("ring_put_test_example", EXAMPLE)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

test_ring_receives_the_previous_rank = _module.test_ring_receives_the_previous_rank
test_forgetting_the_wait_is_reported_on_every_rank = _module.test_forgetting_the_wait_is_reported_on_every_rank


def test_the_example_file_holds_exactly_these_tests():
    assert sorted(n for n in vars(_module) if n.startswith("test_")) == [
        "test_forgetting_the_wait_is_reported_on_every_rank", "test_ring_receives_the_previous_rank"]
