"""The kit's helpers (mc2emu.testing) and the one call on a world of one process: each helper passes what it
should and fails what it should, naming what it saw; run_kernel poisons PAYLOAD and zeroes CONTROL, writes the
trace and raises the hazards by name."""

import json

import ml_dtypes
import numpy as np
import pytest

import mc2emu
from mc2emu import MemRole
from mc2emu.host.kernel_run import KernelResult
from mc2emu.runtime import ConstraintError, DeadlockError, Hazard, HazardError, HazardReport, PerturbPolicy, Severity
from mc2emu.testing import assert_golden, assert_no_hazards, expect_hazard, hazard_names, perturb_seeds

FAIL = pytest.fail.Exception


def report(name: str) -> HazardReport:
    return HazardReport(Hazard(name), Severity.ERROR, 0, "AIV0", f"a {name}")


def result(*names: str) -> KernelResult:
    return KernelResult({"AIV0": 1}, tuple(report(n) for n in names), 1, 0.0)


def test_hazard_names_of_results_reports_and_errors():
    assert hazard_names(result("READ_UNWRITTEN", "UNCONSUMED_FLAG")) == {"READ_UNWRITTEN", "UNCONSUMED_FLAG"}
    assert hazard_names([report("READ_BEFORE_WAIT")]) == {"READ_BEFORE_WAIT"}
    assert hazard_names(HazardError([report("SPLITK_SEQUENCE")])) == {"SPLITK_SEQUENCE"}
    hang = DeadlockError("stuck")
    hang.hazards = [report("PIPE_NOT_ON_CORE")]
    assert hazard_names(hang) == {"DEADLOCK", "PIPE_NOT_ON_CORE"}


def test_assert_no_hazards_fails_naming_them_unless_allowed():
    assert_no_hazards(result())
    with pytest.raises(FAIL, match=r"1 hazard\(s\) \['UNCONSUMED_FLAG'\]"):
        assert_no_hazards(result("UNCONSUMED_FLAG"))
    assert_no_hazards(result("UNCONSUMED_FLAG"), allow=["UNCONSUMED_FLAG"])
    with pytest.raises(FAIL, match="deadlocked"):
        assert_no_hazards(DeadlockError("stuck"))
    with pytest.raises(ValueError, match="not a hazard name"):
        assert_no_hazards(result(), allow=["NO_SUCH_HAZARD"])


def test_expect_hazard_catches_the_error_and_checks_the_ranks():
    with expect_hazard("READ_UNWRITTEN", ranks=[0]) as cap:
        raise HazardError([report("READ_UNWRITTEN")], output=result("READ_UNWRITTEN"))
    assert cap.everyone == [{"READ_UNWRITTEN"}] and [h.core for h in cap.reports()] == ["AIV0"]
    assert isinstance(cap.error, HazardError)
    nowhere = r"READ_UNWRITTEN was reported on no rank; per rank: \[\['UNWAITED_SIGNAL'\]\]"
    with pytest.raises(FAIL, match=nowhere), expect_hazard("READ_UNWRITTEN"):
        raise HazardError([report("UNWAITED_SIGNAL")])
    elsewhere = r"expected on rank\(s\) \[\], reported on \[0\]"
    with pytest.raises(FAIL, match=elsewhere), expect_hazard("READ_UNWRITTEN", ranks=[]):
        raise HazardError([report("READ_UNWRITTEN")])
    with pytest.raises(FAIL, match="reported on no rank"), expect_hazard("DEADLOCK"):
        pass
    with expect_hazard("DEADLOCK"):
        raise DeadlockError("stuck")
    with expect_hazard("UNCONSUMED_FLAG") as cap:       # a warning-only result: counted with `add`
        cap.add(result("UNCONSUMED_FLAG"))


def test_assert_golden_applies_the_ulp_rule():
    bf16 = np.dtype(ml_dtypes.bfloat16)
    golden = np.array([1.0, -2.0, 0.0, 3.0], dtype=bf16)
    one_up = golden.view(np.uint16).copy()
    one_up[0] += 1
    out = one_up.view(bf16)
    assert assert_golden(out, golden) == 1
    assert assert_golden(np.array([1.0, -2.0, -0.0, 3.0], dtype=bf16), golden, max_ulp=0) == 0   # +-0 equal
    with pytest.raises(FAIL, match=r"1 of 4 element\(s\) more than 0 bfloat16 ULP from the golden \(max 1, .*"
                                   r"\(0,\): 1.0078125 vs 1.0 \(1 ULP\)"):
        assert_golden(out, golden, max_ulp=0)
    nan = np.array([np.nan, -2.0, 0.0, 3.0], dtype=bf16)
    with pytest.raises(FAIL, match="max 4294967296"):
        assert_golden(nan, golden)
    assert assert_golden(np.float32([1, 2]), np.float32([1, 2]), dtype=bf16, max_ulp=0) == 0
    with pytest.raises(FAIL, match=r"output shape \(3,\) != golden shape \(4,\)"):
        assert_golden(golden[:3], golden)


def test_perturb_seeds_parametrizes_none_and_one_policy_per_seed():
    mark = perturb_seeds((4, 9)).mark
    assert mark.args[0] == "perturb"
    values = mark.args[1]
    assert values[0] is None and [p.seed for p in values[1:]] == [4, 9]
    assert all(isinstance(p, PerturbPolicy) for p in values[1:])
    assert mark.kwargs["ids"] == ["unperturbed", "seed4", "seed9"]
    other = perturb_seeds((7,), unperturbed=False, argname="p").mark
    assert other.args[0] == "p" and [p.seed for p in other.args[1]] == [7] and other.kwargs["ids"] == ["seed7"]


@perturb_seeds((3,))
def test_the_parametrizer_reaches_the_test(perturb):
    assert perturb is None or perturb.seed == 3


def _probe(ctx, payload, control, gm, gm_control):
    if ctx.GetBlockIdx() != 0:
        return None
    return [ctx.gm_read(a, np.uint8, (8,)).tolist() for a in (payload, control, gm, gm_control)]


def _setup(run):
    return (run.window(64, "pay").addr(0), run.window(64, "ctl", role=MemRole.CONTROL).addr(0),
            run.alloc(64, "gm_pay"), run.alloc(64, "gm_ctl", role=MemRole.CONTROL))


def test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads(tmp_path):
    trace = tmp_path / "probe.json"
    with pytest.raises(HazardError) as info:
        mc2emu.run_kernel(_probe, block_dim=1, kernel_type="AIC_ONLY", setup=_setup, trace=trace, timeout=20)
    res = info.value.output
    assert res.returns["AIC0"] == [[0xFF] * 8, [0] * 8, [0xFF] * 8, [0] * 8]
    got = [(h.hazard.value, h.core, h.details) for h in info.value.hazards]
    assert sorted(got, key=str) == [("READ_UNWRITTEN", "AIC0", {"alloc": "gm_pay", "offset": 0, "count": 8}),
                                    ("READ_UNWRITTEN", "AIC0", {"window": "pay", "lo": 0, "hi": 8, "count": 8})]
    assert res.trace == trace and json.loads(trace.read_text())["traceEvents"]
    unchecked = mc2emu.run_kernel(_probe, block_dim=1, kernel_type="AIC_ONLY", setup=_setup, check=False)
    assert unchecked.returns["AIC0"] == [[0] * 8] * 4 and unchecked.hazards == ()


def test_kernel_run_context_reads_back_and_guards_its_result():
    def double(ctx, src, dst):
        ctx.gm_write(dst, ctx.gm_read(src, np.float32, (4,)) * 2)

    run = mc2emu.KernelRun(timeout=20)
    with pytest.raises(ConstraintError, match="inside its `with` block"):
        _ = run.device
    with run:
        src = run.alloc(0, "src", data=np.float32([1, 2, 3, 4]))
        dst = run.alloc(16, "dst")
        run.launch(double, src, dst, block_dim=1, kernel_type="AIV_ONLY")
        with pytest.raises(ConstraintError, match="once the `with` block ended"):
            _ = run.result
        y = run.read(dst, np.float32, (4,))
    assert y.tolist() == [2, 4, 6, 8]
    assert run.result.launches == 1 and run.result.hazards == () and run.result.names() == set()


def test_a_hang_is_one_deadlock_error_and_a_trace_per_rank(tmp_path):
    from mc2emu.runtime import Pipe

    def hang(ctx):
        if ctx.ASCEND_IS_AIC:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 5)

    with expect_hazard("DEADLOCK") as cap:
        mc2emu.run_kernel(hang, block_dim=1, kernel_type="MIX_AIC_1_1", timeout=1.0, trace=tmp_path / "t.json")
    assert "CrossCoreWaitFlag<2, PIPE_MTE2>(5)" in str(cap.error)
    assert (tmp_path / "t.rank0.json").exists()
