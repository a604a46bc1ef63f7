"""The case runner in-process on a one-rank fake communicator, with fake operators that pass, mismatch,
raise hazards, deadlock or crash (no MPI, no real operator)."""

import dataclasses
import io
import json
import time

import numpy as np
import pytest
from trace_check import check_chrome_trace

from mc2emu.cli.options import OperatorOptions, option, parse_options
from mc2emu.cli.report import Status
from mc2emu.cli.runner import CaseRunner, Planned, Watchdog, split_plan
from mc2emu.cli.scenarios import (
    Comparison,
    Expect,
    ModeRule,
    OperatorMode,
    OperatorSpec,
    Registry,
    Shape,
    plan_cases,
)
from mc2emu.ops.all_to_all_quant_matmul_op import LaunchMode
from mc2emu.runtime import ConstraintError, DeadlockError, Hazard, HazardError, HazardReport, Severity
from mc2emu.runtime.comm_events import Put
from mc2emu.runtime.events import Mmad, WaitBegin, WaitEnd


class _Req:
    def Test(self):
        return True


class FakeComm:
    """COMM_WORLD of one rank; `Abort` records its code instead of ending the process."""

    def __init__(self):
        self.aborted = None

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def Ibarrier(self):
        return _Req()

    def gather(self, obj, root=0):
        return [obj]

    def allgather(self, obj):
        return [obj]

    def bcast(self, obj, root=0):
        return obj

    def alltoall(self, objs):
        return list(objs)

    def Abort(self, code):
        self.aborted = code


def _hazard(name):
    return HazardReport(Hazard(name), Severity.ERROR, 0, "AIC0", "synthetic")


def _execute(case, inputs, ctx):
    """Behaviour chosen by the mode: local_matmul 0 pass, 1 mismatch, 2 hazard; bias: deadlock."""
    for obs in ctx.observers:
        obs(WaitBegin(0, "AIC0", 10, 1, what="flag0", expected="", setter=""))
        obs(Put(0, "AIV0", 15, 2, window="win", offset=0, nbytes=64, src_rank=0, pe=1, op_seq=1))
        obs(WaitEnd(0, "AIC0", 20, 3, what="flag0", expected="", setter=""))
        obs(Mmad(0, "AIC0", 30, 4, m=16, n=16, k=64, tile=(0, 0), l0=0, aType="e4m3", unitFlag=3, cmatrixInitVal=True,
                 bias=False, t0_ns=25))
    if case.mode.bias:
        raise DeadlockError("rank 0 AIC0: no progress for 1.0 s while waiting on flag 3")
    if case.mode.local_matmul == 2:
        raise HazardError([_hazard("SPLITK_SEQUENCE")], output=inputs["x"] * 2)
    if case.mode.local_matmul == 3:
        raise ConstraintError("rule-7", "bad shape")
    if case.mode.local_matmul == 4:
        raise KeyError("bug")
    return inputs["x"] * (2 if case.mode.local_matmul == 0 else 3)


@dataclasses.dataclass(frozen=True)
class FakeMode(OperatorMode):
    local_matmul: int = 0
    bias: bool = False

    def label_parts(self) -> list[str]:
        return [f"lm{self.local_matmul}", *(["+bias"] if self.bias else [])]


@dataclasses.dataclass(frozen=True)
class FakeOptions(OperatorOptions):
    launch: LaunchMode = option("the UDMA host's launch", enum=LaunchMode, default=LaunchMode.CONVENIENT)


def _spec(modes, hazard_modes=(), rules=()):
    return OperatorSpec(
        name="fake", summary="fake operator", mode_type=FakeMode,
        make_inputs=lambda case, rank, size: {"x": np.arange(4, dtype=np.float32)},
        golden=lambda case, inputs, comm: inputs["x"] * 2,
        execute=_execute,
        compare=lambda out, ref: Comparison(bool(np.array_equal(out, ref)), float(np.max(np.abs(out - ref))), 0),
        modes=tuple(modes), hazard_modes=tuple(hazard_modes), rules=tuple(rules), default_shape=Shape(4),
        options=FakeOptions)


def _run(spec, argv, tmp_path=None):
    registry = Registry([spec])
    opts = parse_options(argv, registry.specs())
    comm = FakeComm()
    out, err = io.StringIO(), io.StringIO()
    aborts = []
    wd = Watchdog(comm, err, abort=aborts.append)
    runner = CaseRunner(registry, opts, comm, out, err, wd)
    try:
        code = runner.run([Planned(c) for c in plan_cases(registry, opts)])
    finally:
        wd.stop()
    return code, runner, out.getvalue(), comm


def test_pass_mismatch_hazard_and_bad_input_verdicts():
    modes = [FakeMode(local_matmul=lm) for lm in (0, 1, 2, 3)]
    code, runner, out, comm = _run(_spec(modes), [])
    assert [r.status for r in runner.state.reports] == [Status.PASS, Status.MISMATCH, Status.HAZARD,
                                                        Status.BAD_INPUT]
    assert code == 3 and comm.aborted is None
    assert out.count("operator ") == 1 and "SPLITK_SEQUENCE" in out and "rule-7: bad shape" in out
    s = runner.state.reports[0].stats
    assert (s.waits, s.puts, s.bytes_moved, s.tiles) == (1, 1, 64, 1)


def test_cases_not_applicable_at_the_world_size_are_left_out_and_counted():
    """The operator refuses lm1 at this world size: the mismatching case is left out, the rest passes (exit 0)
    and the summary counts both."""
    spec = dataclasses.replace(_spec([FakeMode(local_matmul=0), FakeMode(local_matmul=1)]),
                               validate=lambda case, size: [f"rule-9 R >= 2: {size} ranks"] * case.mode.local_matmul)
    registry = Registry([spec])
    opts = parse_options([], registry.specs())
    split = split_plan(registry, [Planned(c) for c in plan_cases(registry, opts)], 1)
    assert [p.case.mode.local_matmul for p in split.runnable] == [0] and split.skipped == 1
    assert split.lines(1) == ["not applicable at R = 1: fake: rule-9 R >= 2: 1 ranks: fake_lm1_4"]
    comm, out, err = FakeComm(), io.StringIO(), io.StringIO()
    wd = Watchdog(comm, err, abort=[].append)
    try:
        code = CaseRunner(registry, opts, comm, out, err, wd).run(split.runnable, split.skipped)
    finally:
        wd.stop()
    assert code == 0
    assert out.getvalue().splitlines()[-1] == "2 case(s): 1 pass, 1 not applicable at R = 1; exit code 0"


def test_unexpected_exception_is_an_error_not_a_crash():
    code, runner, out, _ = _run(_spec([FakeMode(local_matmul=4)]), [])
    assert runner.state.reports[0].status is Status.ERROR and code == 3
    assert "KeyError" in out and "Traceback" in out


def test_unexpected_deadlock_ends_the_run_with_an_abort():
    code, runner, out, comm = _run(_spec([FakeMode(local_matmul=0, bias=True), FakeMode(local_matmul=0)]), [])
    assert comm.aborted == 3 and code == 3
    assert len(runner.state.reports) == 1 and runner.state.reports[0].status is Status.DEADLOCK
    assert "aborting every rank" in out and "operator " in out  # the table so far is printed first


def test_expected_hazards_and_deadlocks_pass_with_hazards():
    rules = [ModeRule({"local_matmul": 2}, Expect(hazards=frozenset({Hazard.SPLITK_SEQUENCE}))),
             ModeRule({"bias": True}, Expect(deadlock=True))]
    spec = _spec([FakeMode(local_matmul=0)], [FakeMode(local_matmul=2), FakeMode(local_matmul=0, bias=True)], rules)
    code, runner, out, comm = _run(spec, ["--hazards"])
    assert [r.status for r in runner.state.reports] == [Status.PASS, Status.EXPECTED, Status.EXPECTED]
    assert code == 0 and comm.aborted is None
    assert "EXPECTED SPLITK_SEQUENCE" in out and "EXPECTED DEADLOCK" in out


def test_expected_hazard_missing_fails():
    rules = [ModeRule({"local_matmul": 0}, Expect(hazards=frozenset({Hazard.BIAS_DOUBLE_ADD})))]
    code, runner, _, _ = _run(_spec([], [FakeMode(local_matmul=0)], rules), ["--hazards"])
    assert runner.state.reports[0].status is Status.MISSING and code == 3


def test_trace_and_dump_from_the_runner(tmp_path):
    trace = tmp_path / "t.json"
    code, _, out, _ = _run(_spec([FakeMode(local_matmul=0), FakeMode(local_matmul=2)]),
                           ["--trace", str(trace), "--dump", str(tmp_path / "d")])
    assert code == 3 and f"trace: {trace}" in out
    t = json.loads(trace.read_text())
    check_chrome_trace(t)
    assert [e["args"]["case"] for e in t["traceEvents"] if e.get("cat") == "scenario"] == \
        ["fake_lm0_4", "fake_lm2_4"]
    assert (tmp_path / "d" / "fake_lm0_4" / "rank0.npz").is_file()
    assert (tmp_path / "d" / "fake_lm2_4" / "rank0.npz").is_file()  # the hazard's output is dumped too


def test_watchdog_aborts_a_stuck_phase():
    comm = FakeComm()
    err = io.StringIO()
    aborts = []
    wd = Watchdog(comm, err, abort=aborts.append)
    try:
        wd.arm(0.05, "case 1/1 stuck")
        deadline = time.monotonic() + 5
        while not aborts and time.monotonic() < deadline:
            time.sleep(0.01)
        assert aborts == [3] and "case 1/1 stuck still running" in err.getvalue()
        wd.arm(10, "next")
        wd.disarm()
    finally:
        wd.stop()


@pytest.mark.parametrize("argv", [["--perturb", "3"], ["--no-check"]])
def test_options_reach_the_operator(argv):
    seen = {}

    def execute(case, inputs, ctx):
        seen.update(check=ctx.check, perturb=ctx.perturb, observers=len(ctx.observers))
        return inputs["x"] * 2

    spec = dataclasses.replace(_spec([FakeMode(local_matmul=0)]), execute=execute)
    code, _, _, _ = _run(spec, argv)
    assert code == 0 and seen["observers"] == 1
    assert seen["check"] == ("--no-check" not in argv)
    assert (seen["perturb"] is not None) == ("--perturb" in argv)


@pytest.mark.parametrize("argv", [[], ["--launch", "source"]])
def test_launch_option_reaches_the_operator_and_its_notes_reach_the_table(argv):
    """What `execute` appends to ctx.notes (the A2A UDMA host's "launched R blocks where the tiling's
    usedCoreNum is ..." note) is marked in the table's last column and listed under it."""
    seen = {}
    note = "launched 8 blocks where the tiling's usedCoreNum is 1: synthetic"

    def execute(case, inputs, ctx):
        seen["launch"] = ctx.options.launch
        if case.mode.local_matmul == 0:
            ctx.notes.append(note)
        return inputs["x"] * 2

    spec = dataclasses.replace(_spec([FakeMode(local_matmul=0), FakeMode(local_matmul=5)]), execute=execute)
    code, _, out, _ = _run(spec, argv)
    assert code == 0
    assert seen["launch"] is (LaunchMode.SOURCE if argv else LaunchMode.CONVENIENT)
    lines = out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith("operator "))
    assert lines[header].split()[-1] == "note"
    noted, plain = lines[header + 2], lines[header + 3]
    assert "lm0" in noted and noted.endswith("[1]")
    assert "lm5" in plain and not plain.rstrip().endswith("]")
    assert lines[header + 4] == "" and lines[header + 5] == "notes:"
    assert lines[header + 6] == f"  [1] {note} (1 case(s): fake lm0 4)"
    assert lines[header + 7].startswith("2 case(s): 2 pass")
