"""The CLI's pure parts without MPI: options, the registry and planning, verdicts, the table, dump files."""

import dataclasses
import enum
import re
import sys

import ml_dtypes
import numpy as np
import pytest

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import QbmmMxRevision
from mc2emu.cli.dump import DumpError, case_dirs, decode_array, encode_array, load_case, rank_file, save_case
from mc2emu.cli.operators import OPERATOR_MODULES, OperatorImportError, default_registry
from mc2emu.cli.operators.all_to_all import SPEC as ALL_TO_ALL_QUANT_MATMUL
from mc2emu.cli.operators.all_to_all import A2AMode, A2AOptions
from mc2emu.cli.operators.quant_batch_matmul import QbmmMode
from mc2emu.cli.operators.quant_matmul_reduce_scatter import rounds_head_m as qmrs_head_m
from mc2emu.cli.options import COMMON_FIELDS, OperatorOptions, OptionError, build_parser, help_text, option
from mc2emu.cli.options import parse_options as parse_run_options
from mc2emu.cli.report import (
    CaseReport,
    Raised,
    RankResult,
    Status,
    error_lines,
    exit_code,
    format_listing,
    format_table,
    judge,
    make_report,
    note_lines,
    progress_line,
    summary_line,
)
from mc2emu.cli.runner import Planned, _message, split_plan, validate_plan
from mc2emu.cli.scenarios import (
    Case,
    Comparison,
    Expect,
    Registry,
    Shape,
    operator_cases,
    plan_cases,
)
from mc2emu.cli.stats import CaseStats
from mc2emu.comm.hccl_task import HcclServerType as HcclServer
from mc2emu.numerics import ElemFormat
from mc2emu.ops.all_to_all_quant_matmul_op import Impl, LaunchMode
from mc2emu.run import main as run_main
from mc2emu.runtime.hazards import DeadlockError, Hazard

A2A = ALL_TO_ALL_QUANT_MATMUL.name


@pytest.fixture
def registry():
    return default_registry()


def parse_options(argv):
    """The command line against the registered operators' options."""
    return parse_run_options(argv, default_registry().specs())


# -- options ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (["--impl", "nvlink"], "--impl"), (["--local-matmul", "3"], "--local-matmul"), (["--m", "0"], "--m"),
    (["--wait-order", "random"], "--wait-order"), (["--hccl-server", "x"], "--hccl-server"),
    (["--dtype", "fp32"], "--dtype"), (["--timeout", "-1"], "--timeout"), (["--np", "0"], "--np"),
    (["--bogus"], "unrecognized"), (["--k", "abc"], "--k"), (["--inputs", "/nonexistent/dir"], "--inputs"),
    (["--perturb", "-3"], "--perturb"), (["--launch", "exact"], "--launch")])
def test_bad_options_raise_one_clear_error(argv, needle):
    with pytest.raises(OptionError) as ei:
        parse_options(argv)
    assert needle in str(ei.value)
    assert ei.value.exit_code == 2


def test_options_parse_to_enums():
    o = parse_options(["--impl", "hcomm", "--local-matmul", "1", "--wait-order", "in_order", "--hccl-server",
                       "aicpu", "--dtype", "e5m2", "--no-check", "--perturb", "7", "--quick"])
    a2a = o.operators[A2A]
    assert isinstance(a2a, A2AOptions)
    assert (a2a.impl, a2a.local_matmul, a2a.wait_order, a2a.hccl_server) == (Impl.HCOMM, 1, WaitOrder.IN_ORDER,
                                                                             HcclServer.AICPU)
    assert o.dtype is ElemFormat.E5M2 and not o.check and o.perturb == 7 and o.quick
    assert a2a.mode_overrides() == {"impl": Impl.HCOMM, "local_matmul": 1, "wait_order": WaitOrder.IN_ORDER,
                                    "hccl_server": HcclServer.AICPU}
    assert o.operators["all_gather_quant_matmul"].mode_overrides() == {"wait_order": WaitOrder.IN_ORDER}


def test_help_shows_each_operators_own_options_under_its_name(registry):
    text = help_text(registry.specs())
    own = {"all_to_all_quant_matmul": ["--impl", "--local-matmul", "--wait-order", "--hccl-server", "--launch"],
           "all_gather_quant_matmul": [],
           "weight_quant_matmul": ["--isolate"],
           "grouped_matmul_mx": ["--gmm-variant", "--print-tiling", "--print-schedule", "--shape", "--group-list",
                                 "--trans-b", "--split-k", "--json"]}
    parts = re.split(r"\n(\w+) \(--op \w+\):\n", text)    # [common, name, section, name, section, ...]
    sections = dict(zip(parts[1::2], parts[2::2], strict=True))
    assert list(sections) == list(own)                   # in registry order; none for operators without options
    for name, flags in own.items():
        assert re.findall(r"^  (--[\w-]+)", sections[name], re.M) == flags, name
    assert "also takes --wait-order (under all_to_all_quant_matmul)" in text
    assert "  --seed" in parts[0] and "  --impl" not in parts[0]   # the common options come first
    declared = {name for spec in registry.specs() for name, _, _ in spec.options.declared()}
    assert not declared & set(COMMON_FIELDS)
    # + --source-cases, --scale, --case; --repeat, --scenario, --layers, --seeds, --window-offset; --protocol-only
    assert "operators" not in COMMON_FIELDS and len(COMMON_FIELDS) == 30


def test_a_flag_two_operators_declare_otherwise_is_refused():
    @dataclasses.dataclass(frozen=True)
    class One(OperatorOptions):
        width: int | None = option("w", parse=int, mode=True)

    @dataclasses.dataclass(frozen=True)
    class Other(OperatorOptions):
        width: WaitOrder | None = option("w", enum=WaitOrder, mode=True)

    entry = type("Entry", (), {})
    a, b = entry(), entry()
    a.name, a.summary, a.options = "a", "A", One
    b.name, b.summary, b.options = "b", "B", Other
    with pytest.raises(TypeError, match="--width is declared otherwise by a"):
        build_parser([a, b])
    build_parser([a, a])   # declared alike: once, under the first


def test_run_names_no_operator():
    from pathlib import Path

    import mc2emu.run

    text = Path(mc2emu.run.__file__).read_text()
    assert not [spec.name for spec in default_registry().specs() if spec.name in text]
    assert "print_tiling" not in text and "gmm" not in text


# -- planning --------------------------------------------------------------------------------------------------
def test_default_suite_is_every_valid_mode_and_no_hazard(registry):
    cases = plan_cases(registry, parse_options([]))
    a2a = [c for c in cases if c.op == A2A]
    assert len(a2a) == 10 and not any(c.expect.is_hazard for c in cases)
    assert {(c.mode.impl, c.mode.local_matmul) for c in a2a} == {
        (Impl.UDMA, 0), (Impl.UDMA, 1), (Impl.UDMA, 2), (Impl.HCOMM, 0), (Impl.HCOMM, 1)}
    assert {c.mode.wait_order for c in a2a} == set(WaitOrder)
    assert "selfcheck" in {c.op for c in cases}


def test_hazards_add_the_showcase_last_with_the_deadlock_at_the_end(registry):
    cases = plan_cases(registry, parse_options(["--hazards"]))
    hz = [c for c in cases if c.expect.is_hazard]
    assert cases[-len(hz):] == hz and cases[-1].expect == Expect(deadlock=True)
    by = {(c.mode.local_matmul, c.mode.hccl_server, c.mode.bias): c.expect for c in hz if c.op == A2A}
    assert by[(2, HcclServer.AICPU, False)].hazards == {Hazard.HCCL_WAIT_BEYOND_COMMIT}
    assert by[(1, HcclServer.CCU, True)].hazards == {Hazard.BIAS_DOUBLE_ADD}
    assert by[(2, HcclServer.CCU, False)].deadlock
    assert cases[-1].timeout == ALL_TO_ALL_QUANT_MATMUL.deadlock_timeout_s  # short deadline for the showcase


def test_mode_options_select_impl_and_override_the_rest(registry):
    with pytest.raises(OptionError, match="--hazards"):  # under AICPU every hcomm mode may hit a hazard
        plan_cases(registry, parse_options(["--impl", "hcomm", "--hccl-server", "aicpu"]))
    cases = plan_cases(registry, parse_options(["--impl", "hcomm", "--hccl-server", "aicpu", "--hazards"]))
    assert {c.op for c in cases} == {A2A}
    assert {(c.mode.impl, c.mode.hccl_server) for c in cases} == {(Impl.HCOMM, HcclServer.AICPU)}
    timing = [c for c in cases if c.expect.optional]
    assert len(timing) == 4 and all(c.expect.hazards == {Hazard.HCCL_FINALIZE_WHILE_WAITING} for c in timing)
    assert all(c.timeout == ALL_TO_ALL_QUANT_MATMUL.deadlock_timeout_s for c in timing)
    cases = plan_cases(registry, parse_options(["--local-matmul", "1", "--wait-order", "in_order"]))
    assert {(c.mode.impl, c.mode.local_matmul, c.mode.wait_order) for c in cases} == {
        (Impl.UDMA, 1, WaitOrder.IN_ORDER), (Impl.HCOMM, 1, WaitOrder.IN_ORDER)}


def test_an_operator_option_that_is_no_mode_option_narrows_nothing(registry):
    """`--launch` (the all-to-all's) reaches its options object and leaves every operator's cases in place."""
    opts = parse_options(["--launch", "source"])
    assert opts.operators[A2A].launch is LaunchMode.SOURCE and opts.mode_options_given() == ()
    assert plan_cases(registry, opts) == plan_cases(registry, parse_options([]))


def test_hazard_modes_need_hazards(registry):
    with pytest.raises(OptionError, match="--hazards"):
        plan_cases(registry, parse_options(["--impl", "hcomm", "--local-matmul", "2"]))
    cases = plan_cases(registry, parse_options(["--impl", "hcomm", "--local-matmul", "2", "--hazards"]))
    assert all(c.expect.deadlock for c in cases if c.mode.hccl_server is HcclServer.CCU)


def test_shape_dtype_and_op_selection(registry):
    cases = plan_cases(registry, parse_options(["--op", A2A, "--quick", "--n", "64", "--dtype", "e2m1"]))
    q = ALL_TO_ALL_QUANT_MATMUL.quick_shape
    assert {c.shape for c in cases} == {Shape(q.m, q.k, 64)} and {c.dtype for c in cases} == {ElemFormat.E2M1}
    with pytest.raises(OptionError, match="not a registered operator"):
        plan_cases(registry, parse_options(["--op", "nope"]))
    with pytest.raises(OptionError, match="supports"):
        plan_cases(registry, parse_options(["--op", A2A, "--dtype", "e1m2"]))


def test_an_operator_module_that_does_not_import_is_an_error(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "mc2emu_test_broken_op", None)   # importing it raises ImportError
    with pytest.raises(OperatorImportError, match="mc2emu_test_broken_op failed to import: ModuleNotFoundError"):
        default_registry((*OPERATOR_MODULES, "mc2emu_test_broken_op"))
    monkeypatch.setattr("mc2emu.cli.operators.OPERATOR_MODULES", (*OPERATOR_MODULES, "mc2emu_test_broken_op"))
    monkeypatch.setattr("mc2emu.run.under_mpirun", lambda: False)
    assert run_main(["--op", "selfcheck"]) == 2
    assert "mc2emu_test_broken_op failed to import" in capsys.readouterr().err


@pytest.mark.parametrize("argv, option", [
    (["--op", "quant_batch_matmul_mx", "--local-matmul", "1"], "--local-matmul"),
    (["--op", "quant_batch_matmul_mx", "--impl", "udma"], "--impl"),
    (["--op", "selfcheck", "--wait-order", "mask"], "--wait-order"),
])
def test_mode_options_of_another_operator_are_errors_naming_both(registry, argv, option, monkeypatch, capsys):
    with pytest.raises(OptionError, match=f"{option} does not apply to --op {argv[1]}"):
        plan_cases(registry, parse_options(argv))
    monkeypatch.setattr("mc2emu.run.under_mpirun", lambda: False)
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert option in err and argv[1] in err


def test_each_operator_has_its_own_mode_type(registry):
    assert registry.get(A2A).mode_type is A2AMode
    assert registry.get("quant_batch_matmul_mx").mode_type is QbmmMode
    assert "local_matmul" not in QbmmMode.field_names() and "batch" not in A2AMode.field_names()
    for spec in registry.specs():
        for rule in spec.rules:
            assert all(isinstance(h, Hazard) for h in rule.expect.hazards)
    with pytest.raises(TypeError, match="is not a A2AMode"):
        dataclasses.replace(registry.get(A2A), modes=(QbmmMode(),))


def test_mode_round_trips_and_labels():
    m = A2AMode(Impl.HCOMM, 1, WaitOrder.MASK, HcclServer.CCU, bias=True)
    assert A2AMode.from_dict(m.as_dict()) == m
    assert m.label() == "lm1 mask ccu +bias" and m.slug() == "hcomm-lm1-mask-ccu-bias"
    q = QbmmMode(bias=True, batch=2, revision=QbmmMxRevision.CC21C0D6)
    assert QbmmMode.from_dict(q.as_dict()) == q
    assert q.label() == "+bias rev cc21c0d6 batch2" and q.slug() == "bias-rev-cc21c0d6-batch2"
    assert QbmmMode().label() == "-"
    from mc2emu.cli.operators.grouped_matmul_mx import SPEC as GMM
    from mc2emu.cli.operators.weight_quant_matmul import SPEC as WQMM

    for spec in (GMM, WQMM):   # enum fields dump as their values (case ids unchanged) and come back as members
        for mode in (*spec.modes, *spec.hazard_modes):
            assert spec.mode_type.from_dict(mode.as_dict()) == mode
            assert all(not isinstance(v, enum.Enum) for v in mode.as_dict().values())
    assert [m.slug() for m in GMM.modes] == ["split-M-count", "split-M-cumsum-transB", "split-M-sparse",
                                             "split-K-count", "split-M-sparse-blaze", "split-M-count-blaze_sample",
                                             "split-M-cumsum-transB-nz"]
    assert [m.label() for m in WQMM.modes][-2:] == ["int8 +offset a_only_mmad", "int8 transB +offset dequant_only"]


def test_operator_cases_dedupe_after_overrides(registry):
    cases, held = operator_cases(registry.get(A2A), parse_options(["--wait-order", "mask"]))
    assert len(cases) == 5 and not held


def test_registry_rejects_duplicates():
    with pytest.raises(ValueError):
        Registry([default_registry().specs()[0]] * 2)
    assert default_registry().names()[0] == "selfcheck"
    assert "--hazards showcase" in format_listing(default_registry())


# -- verdicts and text ------------------------------------------------------------------------------------------
CASE = Case(A2A, A2AMode(Impl.UDMA, 0, WaitOrder.MASK), Shape(32, 128, 128), ElemFormat.E4M3, 42)
HZ_CASE = Case(A2A, A2AMode(Impl.HCOMM, 2, WaitOrder.MASK, HcclServer.CCU), Shape(32, 128, 128), ElemFormat.E4M3,
               42, Expect(deadlock=True))
OK = Comparison(True, 0.0, 0)


@pytest.mark.parametrize("results, status", [
    ([RankResult(0, comparison=OK), RankResult(1, comparison=OK)], Status.PASS),
    ([RankResult(0, comparison=OK), RankResult(1, comparison=Comparison(False, 3.0, 40))], Status.MISMATCH),
    ([RankResult(0, Raised.CONSTRAINT, message="rule: bad"), RankResult(1, comparison=OK)], Status.BAD_INPUT),
    ([RankResult(0, Raised.HAZARD, ("SPLITK_SEQUENCE",)), RankResult(1, comparison=OK)], Status.HAZARD),
    ([RankResult(0, Raised.DEADLOCK, message="stuck"), RankResult(1, Raised.MC2EMU)], Status.DEADLOCK),
    ([RankResult(0, Raised.EXCEPTION, message="KeyError"), RankResult(1, comparison=OK)], Status.ERROR),
    ([RankResult(0, comparison=OK, replay_diff=3, replay_same_case=True)], Status.MISMATCH),
    ([RankResult(0, comparison=OK, replay_diff=3, replay_same_case=False)], Status.PASS),
])
def test_judge_valid_case(results, status):
    assert judge(CASE, results, check=True)[0] is status


def test_judge_expected_hazards():
    assert judge(HZ_CASE, [RankResult(0, Raised.DEADLOCK), RankResult(1, Raised.MC2EMU)], check=True)[0] \
        is Status.EXPECTED
    assert judge(HZ_CASE, [RankResult(0, comparison=OK)], check=True)[0] is Status.MISSING
    bias = Case(A2A, A2AMode(Impl.HCOMM, 1, WaitOrder.MASK, HcclServer.CCU, True), CASE.shape, CASE.dtype, 42,
                Expect(hazards=frozenset({Hazard.BIAS_DOUBLE_ADD})))
    found = [RankResult(0, Raised.HAZARD, ("BIAS_DOUBLE_ADD", "OTHER")), RankResult(1, comparison=OK)]
    assert judge(bias, found, check=True)[0] is Status.EXPECTED
    assert judge(bias, [RankResult(0, comparison=OK)], check=False)[0] is Status.UNCHECKED
    assert judge(bias, [RankResult(0, Raised.EXCEPTION, message="bug")], check=True)[0] is Status.ERROR
    timing = dataclasses.replace(bias, expect=Expect(frozenset({Hazard.HCCL_FINALIZE_WHILE_WAITING}), hang_ok=True,
                                                     optional=True))
    assert judge(timing, [RankResult(0, comparison=OK)], check=True)[0] is Status.PASS
    assert judge(timing, [RankResult(0, comparison=Comparison(False))], check=True)[0] is Status.MISMATCH
    assert judge(timing, [RankResult(0, Raised.DEADLOCK)], check=True)[0] is Status.EXPECTED
    assert judge(timing, [RankResult(0, Raised.HAZARD, ("HCCL_FINALIZE_WHILE_WAITING",))], check=True)[0] \
        is Status.EXPECTED
    assert judge(timing, [RankResult(0, Raised.HAZARD, ("SPLITK_SEQUENCE",))], check=True)[0] is Status.MISSING
    hang = dataclasses.replace(bias, expect=Expect(frozenset({Hazard.HCCL_WAIT_BEYOND_COMMIT}), hang_ok=True))
    assert judge(hang, [RankResult(0, Raised.DEADLOCK), RankResult(1, Raised.MC2EMU)], check=True)[0] \
        is Status.EXPECTED
    assert judge(hang, [RankResult(0, comparison=OK)], check=True)[0] is Status.MISSING


def test_judge_expected_hazard_with_predicted_damage():
    """Expect(compare=True): the hazard must be reported AND the output must match the golden's prediction."""
    crossing = dataclasses.replace(CASE, expect=Expect(frozenset({Hazard.FRAGMENT_OUT_OF_RANGE}), optional=True,
                                                       compare=True, optional_on="the shape"))
    seen = (Raised.HAZARD, ("FRAGMENT_OUT_OF_RANGE",))
    assert judge(crossing, [RankResult(0, *seen, comparison=OK)], check=True)[0] is Status.EXPECTED
    status, detail = judge(crossing, [RankResult(0, *seen, comparison=OK),
                                      RankResult(1, *seen, comparison=Comparison(False, note="3 rows written"))],
                           check=True)
    assert status is Status.MISMATCH and "ranks 1" in detail and "3 rows written" in detail
    assert judge(crossing, [RankResult(0, *seen)], check=True)[0] is Status.MISMATCH   # no comparison at all
    assert judge(crossing, [RankResult(0, comparison=OK)], check=True)[0] is Status.PASS  # no crossing block
    assert crossing.expect.label() == "FRAGMENT_OUT_OF_RANGE + golden (if the shape allows)"


def test_ag_crossing_prediction_from_the_tiling_alone():
    """Quick shape 64x128x128, R 2, 2 AICs: baseM 128 over HEAD [0, 64) + MAIN round 0 [64, 128): the one M
    block starts in HEAD, so the MAIN rows (the other rank's 64 rows of C) are never written; R 3 and the
    default 525-row shape: the crossing AIC count and the lost rows of blocks straddling HEAD / MAIN / TAIL."""
    from mc2emu.cli.operators.all_gather import ag_lost_rows, crossing_block_dim
    from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_matmul_tiling, make_ag_comm_tiling

    quick = Shape(64, 128, 128)
    assert crossing_block_dim(quick, 2) == 2
    for rank, other in ((0, 1), (1, 0)):
        lost = ag_lost_rows(quick, 2, rank, 2)
        assert lost.shape == (128,) and np.flatnonzero(lost).tolist() == list(range(other * 64, other * 64 + 64))
    shape = Shape(525, 256, 512)
    b = crossing_block_dim(shape, 3)
    ct = make_ag_comm_tiling(525, 256)
    base_m = ag_matmul_tiling(ct, 3, 512, ElemFormat.E4M3, aic_num=b).baseM
    assert b == 15 and base_m == 240   # the first AIC count whose baseM does not divide 512
    lost = ag_lost_rows(shape, 3, 1, b)
    # HEAD [0, 512): blocks at 0, 240, 480 -> the one at 480 loses logical rows 512..719 (MAIN round 0: rank 0's
    # rows 0..207); MAIN [512, 1536) -> the block at 1440 loses 1536..1583 (TAIL: 16 padded rows per rank)
    expect = np.zeros(3 * 525, dtype=bool)
    expect[0:208] = True                                   # rank 0, rows 0..207 of its first tile
    for frag in range(3):                                  # TAIL rows 1536..1583: fragments of 16 (13 real)
        expect[frag * 525 + 512: frag * 525 + 525] = True
    assert np.array_equal(lost, expect), np.flatnonzero(lost ^ expect)
    assert crossing_block_dim(shape, 8) is None            # baseM 256 at every AIC count: no crossing


def test_exit_code_is_the_worst_case():
    def rep(status):
        return CaseReport(1, 1, CASE, 2, status, "", (), CaseStats())

    assert exit_code([]) == 0
    assert exit_code([rep(Status.PASS), rep(Status.EXPECTED)]) == 0
    assert exit_code([rep(Status.PASS), rep(Status.MISMATCH)]) == 1
    assert exit_code([rep(Status.BAD_INPUT), rep(Status.MISMATCH)]) == 2
    assert exit_code([rep(Status.BAD_INPUT), rep(Status.DEADLOCK)]) == 3


def test_summary_counts_the_cases_not_applicable_at_this_world_size():
    def rep(status):
        return CaseReport(1, 1, CASE, 16, status, "", (), CaseStats())

    reports = [rep(Status.PASS), rep(Status.PASS), rep(Status.EXPECTED)]
    assert summary_line(reports) == "3 case(s): 2 pass, 1 expected; exit code 0"
    assert summary_line(reports, 6, 16) == "9 case(s): 2 pass, 1 expected, 6 not applicable at R = 16; exit code 0"


AG = "all_gather_quant_matmul"
QMRS = "quant_matmul_reduce_scatter"


def _split(registry, argv, size):
    return split_plan(registry, [Planned(c) for c in plan_cases(registry, parse_options(argv))], size)


@pytest.mark.parametrize("size", range(2, 9))
def test_up_to_eight_ranks_every_case_of_the_plan_runs(registry, size):
    for argv in (["--quick"], [], ["--quick", "--hazards"]):
        split = _split(registry, argv, size)
        assert split.skipped == 0 and split.not_applicable == {} and split.lines(size) == []


@pytest.mark.parametrize("size", range(9, 17))
def test_above_eight_ranks_the_seed_all_gather_is_not_applicable_the_slot_ring_runs(registry, size):
    """AG-3 per protocol: the seed kernel's cFragAddrs_[8], the slot ring's MAX_RANK_SIZE = 16."""
    plan = [Planned(c) for c in plan_cases(registry, parse_options(["--quick", "--hazards"]))]
    split = split_plan(registry, plan, size)
    seed = [p for p in plan if p.case.op == AG and p.case.mode.protocol.value == "seed"]
    ring = [p for p in plan if p.case.op == AG and p.case.mode.protocol.value == "slot_ring"]
    assert len(seed) == 6 and len(ring) == 3
    assert split.runnable == [p for p in plan if p not in seed]    # the plan's order, the slot ring included
    why = f"{AG}: AG-3 R <= 8 (seed protocol): {size} ranks"
    assert split.not_applicable == {why: [p.case.case_id for p in seed]}
    assert split.lines(size) == [f"not applicable at R = {size}: {why}: 6 case(s)"]


def test_past_every_operators_limit_each_rule_is_listed_once(registry):
    split = _split(registry, ["--quick"], 65)
    assert split.skipped == 16 and {p.case.op for p in split.runnable} == {
        "selfcheck", "quant_batch_matmul_mx", "weight_quant_matmul", "grouped_matmul_mx"}
    assert [why.split(": ")[1] for why in split.not_applicable] == [
        "A2A-5 R <= 64", "AG-3 R <= 8 (seed protocol)", "AG-3 R <= 16 (slot_ring protocol)",
        "RS-5 R * T <= 32 (rounds kernel)", "QMRS-4 R <= 64 (HCCL_MTE_MAX_RANK_NUM)"]


def test_past_32_ranks_the_qmrs_rounds_kernel_is_not_applicable_the_per_block_kernel_runs(registry):
    split = _split(registry, ["--quick", "--op", QMRS], 33)
    assert [p.case.mode.kernel.value for p in split.runnable] == ["per_block"] and split.skipped == 1
    assert split.lines(33) == [f"not applicable at R = 33: {QMRS}: RS-5 R * T <= 32 (rounds kernel): 33 ranks: "
                               f"{QMRS}_rounds_32x128x48_e4m3"]


@pytest.mark.parametrize("size, head_m", [(2, 16), (10, 16), (11, 32), (16, 32), (17, 48), (32, 48)])
def test_qmrs_rounds_of_16_rows_grow_only_as_the_round_limits_need(size, head_m):
    """m = 48: 16-row rounds (T = 3) while R * T <= 32, then 32 + 16 rows (T = 2), then one round; m = 40 is no
    whole number of 16-row blocks: the host's choice."""
    assert qmrs_head_m(48, size) == head_m and qmrs_head_m(40, size) is None


def test_a_plan_nothing_of_which_can_run_keeps_its_reasons(registry):
    """An explicit --op the rank rule forbids: nothing runs, and the run refuses it with the reasons (exit 2)."""
    plan = [Planned(c) for c in plan_cases(registry, parse_options(["--op", AG, "--quick", "--wait-order",
                                                                    "mask"]))]
    assert split_plan(registry, plan, 9).runnable == []
    assert validate_plan(registry, plan, 9) == [f"{AG}: AG-3 R <= 8 (seed protocol): 9 ranks ({plan[0].case.case_id})"]
    assert validate_plan(registry, plan, 8) == []


def test_table_progress_and_errors_text():
    stats = CaseStats(tiles=16, waits=12, puts=56, bytes_moved=3 << 20, comm_ns=100, hidden_ns=75, events=99)
    results = [RankResult(r, comparison=Comparison(True, 0.5, 1), wall_s=1.0 + r, stats=stats) for r in range(2)]
    rep = make_report(1, 3, CASE, results, check=True)
    table = format_table([rep])
    header, rule, row = table.splitlines()
    for col in ("operator", "impl", "mode", "shape", "R", "result", "max|err|", "ulp", "wall s", "tiles", "waits",
                "puts", "bytes", "hidden"):
        assert col in header
    assert set(rule.replace(" ", "")) == {"-"}
    assert "PASS" in row and "6.0 MiB" in row and "75%" in row and "2.00" in row and " 32 " in row
    assert progress_line(rep).startswith("[ 1/3] all_to_all_quant_matmul udma lm0 mask 32x128x128 R2: PASS")
    bad = make_report(2, 3, CASE, [RankResult(0, Raised.DEADLOCK, message="rank 0 AIC1: stuck\n  detail"),
                                   RankResult(1, Raised.DEADLOCK, message="rank 1 AIC1: stuck\n  detail")],
                      check=True)
    lines = error_lines(bad)
    assert lines[0].startswith("    ranks 0-1: rank 0 AIC1: stuck") and len(lines) == 2
    other_core = make_report(2, 3, CASE, [RankResult(0, Raised.DEADLOCK, message="rank 0 AIC1: stuck 1.5 s"),
                                          RankResult(1, Raised.DEADLOCK, message="rank 1 AIC7: stuck 2.25 s")],
                             check=True)
    assert error_lines(other_core) == ["    ranks 0-1: rank 0 AIC1: stuck 1.5 s"]
    # the declaring rank's cross-rank report is the detail shown, whichever rank holds it
    declared = make_report(2, 3, CASE, [
        RankResult(0, Raised.DEADLOCK, message="DeadlockError: rank 0 AIV1: stopped: rank 1 declared a deadlock"),
        RankResult(1, Raised.DEADLOCK, message="DeadlockError: rank 1 host: no progress\nDEADLOCK report of rank 1 "
                                               "(host waited 30.0 s):\n  LOST_SIGNAL: rank 0 AIV1 waits")], check=True)
    assert error_lines(declared) == [
        "    rank 0: DeadlockError: rank 0 AIV1: stopped: rank 1 declared a deadlock",
        "    rank 1: DeadlockError: rank 1 host: no progress",
        "      DEADLOCK report of rank 1 (host waited 30.0 s):", "        LOST_SIGNAL: rank 0 AIV1 waits"]
    hz = make_report(3, 3, CASE, [RankResult(r, Raised.HAZARD, ("SPLITK_SEQUENCE",), "HazardError: 2 hazard(s)",
                                             (("SPLITK_SEQUENCE", 2, f"[SPLITK_SEQUENCE] rank {r} AIC0: x"),))
                                  for r in (0, 1, 2, 5)], check=True)
    assert error_lines(hz) == ["    SPLITK_SEQUENCE: 8 report(s) on rank(s) 0-2,5; e.g. [SPLITK_SEQUENCE] rank 0 "
                               "AIC0: x"]


def test_a_deadlock_message_carries_the_report_only_on_the_rank_that_declared_it():
    report = "DEADLOCK report of rank 1 (AIV0 waited 1.0 s on x):\n  LOST_SIGNAL: rank 1 AIV0 waits"
    assert _message(DeadlockError("rank 1 AIV0: no progress", report=report)) == (
        "DeadlockError: rank 1 AIV0: no progress\n" + report)
    assert _message(DeadlockError("rank 0 AIV1: stopped: rank 1 declared a deadlock", report=report,
                                  declared_elsewhere=True)) == (
        "DeadlockError: rank 0 AIV1: stopped: rank 1 declared a deadlock")


def test_launch_notes_are_numbered_once_in_the_table_and_listed_under_it():
    results = [RankResult(r, comparison=Comparison(True, 0.0, 0), notes=("note A",)) for r in range(2)]
    a = make_report(1, 3, CASE, results, check=True)
    b = make_report(2, 3, dataclasses.replace(CASE, seed=7), [RankResult(0, comparison=Comparison(True, 0.0, 0),
                                                                         notes=("note B", "note A"))], check=True)
    plain = make_report(3, 3, CASE, [RankResult(0, comparison=Comparison(True, 0.0, 0))], check=True)
    assert a.notes == ("note A",)                       # two ranks, one note
    header, _, row_a, row_b, row_plain = format_table([a, b, plain]).splitlines()
    assert header.endswith("note")
    assert " PASS " in row_a and row_a.endswith("[1]")
    assert row_b.endswith("[2] [1]") and not row_plain.endswith("]")
    title = "all_to_all_quant_matmul udma lm0 mask 32x128x128"
    assert note_lines([a, b, plain]) == ["", "notes:", f"  [1] note A (2 case(s): {title}; {title})",
                                         f"  [2] note B (1 case(s): {title})"]
    assert note_lines([plain]) == []


# -- dump files --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu,
                                   ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16, np.float32, np.uint8])
def test_codes_round_trip_bitwise(dtype):
    rng = np.random.default_rng(0)
    width = np.dtype(dtype).itemsize
    codes = rng.integers(0, 16 if dtype is ml_dtypes.float4_e2m1fn else 1 << (8 * width), size=(3, 5),
                         dtype=np.uint64).astype({1: np.uint8, 2: np.uint16, 4: np.uint32}[width])
    arr = codes.view(dtype)
    enc, name = encode_array(arr)
    assert enc.dtype == codes.dtype and name == np.dtype(dtype).name
    back = decode_array(enc, name)
    assert back.dtype == np.dtype(dtype) and np.array_equal(back.view(codes.dtype), codes)


def test_save_and_load_a_case(tmp_path):
    x1 = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.float8_e4m3fn)
    out = np.linspace(-1, 1, 6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    path = save_case(rank_file(tmp_path / "c", 1), {"x1": (x1, "input"), "out": (out, "output")},
                     {"case": CASE.as_dict(), "rank": 1, "ranks": 2})
    cf = load_case(path)
    assert cf.meta["case"] == CASE.as_dict() and cf.meta["ranks"] == 2
    assert cf.arrays["x1"].dtype == x1.dtype and np.array_equal(cf.arrays["x1"].view(np.uint8), x1.view(np.uint8))
    assert set(cf.of_role("input")) == {"x1"} and set(cf.of_role("output")) == {"out"}
    with pytest.raises(DumpError):
        case_dirs(tmp_path / "c")  # rank1 only, no rank0
    save_case(rank_file(tmp_path / "c", 0), {"x1": (x1, "input")}, {"case": CASE.as_dict(), "rank": 0, "ranks": 2})
    assert case_dirs(tmp_path) == [tmp_path / "c"] and case_dirs(tmp_path / "c") == [tmp_path / "c"]


def test_qmrs_rounds_past_the_chunk_rule_leave_head_m_to_the_host_search():
    """M 2048 N 4096 at R 4: 16-row rounds grown to T <= 8 would be 256 rows, a 2 MiB chunk past RS-6 (512 KiB):
    the CLI leaves head_m to the host's search (8 rounds of 64 rows), as the operator's default does."""
    assert qmrs_head_m(2048, 4, 4096) is None
    assert qmrs_head_m(2048, 4, 1024) == 256
