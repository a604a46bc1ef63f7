"""The examples of docs/writing-kernels.md (files under docs/examples/), run through the one call at every
world size the suite runs (2, 4 and 8 ranks): the clean kernel meets its golden with no hazard, unperturbed
and under seeded perturbation; each broken kernel is reported by name (DEADLOCK, READ_BEFORE_WAIT,
READ_UNWRITTEN) on the ranks that broke the rule."""

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

from mc2emu.runtime import DeadlockError
from mc2emu.testing import assert_golden, assert_no_hazards, expect_hazard, perturb_seeds

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.mpi(min_size=2)
@perturb_seeds((5, 6))
def test_ring_put_meets_its_golden_with_no_hazard(mc2_comm, perturb):
    ring = example("ring_put")
    rank, size = mc2_comm.Get_rank(), mc2_comm.Get_size()
    y, result = ring.main(mc2_comm, perturb=perturb)
    golden = np.arange(ring.N, dtype=np.float32) + 10 * ((rank - 1) % size) + 1
    assert assert_golden(y, golden, max_ulp=0) == 0
    assert_no_hazards(result)
    assert result.launches == 1 and result.returns == {"AIV0": float(golden[0] - 1)}


@pytest.mark.mpi(min_size=2)
def test_dropped_set_is_one_deadlock_report_on_every_rank(mc2_comm):
    dropped = example("dropped_set")
    size = mc2_comm.Get_size()
    with expect_hazard("DEADLOCK", comm=mc2_comm, ranks=range(size)) as cap:
        dropped.main(mc2_comm, timeout=2.0)
    assert isinstance(cap.error, DeadlockError)
    reports = [r for r in mc2_comm.allgather(cap.error.report) if r and r.startswith("DEADLOCK report")]
    assert len(reports) == 1, reports   # one report per deadlock; the other ranks point to it
    report = reports[0]
    assert re.match(rf"DEADLOCK report of rank {size - 1} \(AIC[01] waited 2\.0 s on CrossCoreWaitFlag<2, "
                    r"PIPE_MTE2>\(3\)", report), report
    for aic in (0, 1):
        assert f"AIC{aic} wait on CrossCoreWaitFlag<2, PIPE_MTE2>(3) (expects counter > 0, now 0)" in report
    assert f"releaser rank {size - 1} AIV0-1: finished without signalling" in report


@pytest.mark.mpi(min_size=2)
def test_read_before_wait_of_a_peers_put_is_reported_on_every_rank(mc2_comm):
    rbw = example("read_before_wait")
    size = mc2_comm.Get_size()
    for _ in range(2):      # whatever the timing: the same verdict each run
        with expect_hazard("READ_BEFORE_WAIT", comm=mc2_comm, ranks=range(size)) as cap:
            rbw.main(mc2_comm)
        (rep,) = cap.reports()
        assert cap.names == {"READ_BEFORE_WAIT"}
        assert rep.core == "AIV0" and rep.details["window"] == "rbw_data"
        assert (rep.details["lo"], rep.details["hi"]) == (0, rbw.NBYTES)
        assert rep.details["put_rank"] == (mc2_comm.Get_rank() - 1) % size


@pytest.mark.mpi(min_size=2)
def test_a_never_written_window_reads_nan_and_is_reported(mc2_comm):
    nw = example("never_written")
    size = mc2_comm.Get_size()
    with expect_hazard("READ_UNWRITTEN", comm=mc2_comm, ranks=range(size)) as cap:
        nw.main(mc2_comm)
    (rep,) = cap.reports()
    assert rep.core == "AIC0" and rep.details == {"window": "probe", "lo": 0, "hi": 32, "count": 32}
    values = cap.error.output.returns["AIC0"]
    assert len(values) == 8 and all(np.isnan(v) for v in values)


@pytest.mark.mpi(min_size=2)
def test_control_windows_start_at_zero_and_unchecked_payload_too(mc2_run_kernel):
    """CONTROL windows are never poisoned; with check=False no window is (and nothing is reported)."""
    from mc2emu import MemRole

    def reader(ctx, a, b):
        return ctx.gm_read(a, np.uint8, (16,)).tolist(), ctx.gm_read(b, np.uint8, (16,)).tolist()

    def setup(run):
        return (run.window(64, "ctl", role=MemRole.CONTROL).addr(0), run.window(64, "pay").addr(0))

    res = mc2_run_kernel(reader, block_dim=1, kernel_type="AIC_ONLY", setup=setup, check=False)
    assert res.returns["AIC0"] == ([0] * 16, [0] * 16) and res.hazards == ()
    with expect_hazard("READ_UNWRITTEN", ranks=range(mc2_run_kernel.keywords["comm"].Get_size())) as cap:
        mc2_run_kernel(reader, block_dim=1, kernel_type="AIC_ONLY", setup=setup)
    (rep,) = cap.reports()
    assert rep.details["window"] == "pay"
    assert cap.error.output.returns["AIC0"] == ([0] * 16, [0xFF] * 16)
