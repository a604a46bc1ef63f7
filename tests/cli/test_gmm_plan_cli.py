"""`python -m mc2emu.run --op grouped_matmul_mx --print-tiling / --print-schedule`: host-only, no MPI."""

import json

import pytest

from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.cli.operators import default_registry
from mc2emu.cli.options import OptionError
from mc2emu.cli.options import parse_options as parse_run_options
from mc2emu.run import main as run_main

OP = ["--op", "grouped_matmul_mx"]


def parse_options(argv):
    """The command line against the registered operators' options."""
    return parse_run_options(argv, default_registry().specs())


def test_print_tiling_text(capsys):
    assert run_main([*OP, "--print-tiling", "--shape", "600,700,4096"]) == 0
    fields = {k.strip(): v for k, v in (line.split(" = ") for line in capsys.readouterr().out.splitlines())}
    assert (fields["baseM"], fields["kAL1"], fields["dbL0C"], fields["l1BufferStage"], fields["tilingKey"]) == \
        ("256", "256", "1", "3", "0")
    assert fields["depthA1"] == "4" and fields["bQuantMode"] == "MX_PERGROUP_MODE"


def test_print_tiling_json_trans_b(capsys):
    assert run_main([*OP, "--print-tiling", "--shape", "2048,7168,2048", "--trans-b", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tilingKey"] == 1 and out["mmTilingData"]["scaleKAL1"] == 2048
    assert out["mmTilingData"]["l1BufferStage"] == 3 and out["gmmQuantParams"]["groupNum"] == 1


def test_print_schedule_per_core(capsys):
    assert run_main([*OP, "--print-schedule", "--shape", "100,700,4096", "--group-list", "25,25,25,25"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 21 and lines[0] == "core  0: g0(0,0)r0[0+25,0+256]"
    assert lines[18] == "core 18: g3(0,2)r0[0+13,640+60]"


def test_print_schedule_per_variant(capsys):
    """--gmm-variant: the IS_BLAZE kernel (SetTailAlign 1 / 32) splits group 3's tiles 2 x 3 on cores 9..26 with
    rows 13 | 12 and columns rounded to 32; the sample (16 / 128) gives rows 16 | 9, columns 128, cores idle."""
    argv = [*OP, "--print-schedule", "--shape", "100,700,4096", "--group-list", "25,25,25,25", "--gmm-variant"]
    assert run_main([*argv, "blaze"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 27 and lines[9] == "core  9: g3(0,0)r0[13+12,96+96]"
    assert lines[26] == "core 26: g3(0,2)r0[0+13,576+64]"
    assert run_main([*argv, "blaze_sample"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[9] == "core  9: g3(0,0)r0[16+9,128+128]" and lines[10].startswith("core 12: ")
    assert run_main([*argv, "cgmct"]) == 0
    assert capsys.readouterr().out.splitlines()[18] == "core 18: g3(0,2)r0[0+13,640+60]"


def test_gmm_variant_mode_option_runs_every_mode_on_that_kernel():
    from mc2emu.cli.operators.grouped_matmul_mx import SPEC
    from mc2emu.cli.scenarios import check_mode_options, operator_cases

    cases, _ = operator_cases(SPEC, parse_options([*OP, "--quick", "--gmm-variant", "blaze", "--hazards"]))
    assert len(cases) == 5 and {c.mode.gmm_variant for c in cases} == {TailSplitVariant.BLAZE}
    # the mode's kernel is the one that runs: the quick count case's last group splits into 22 vs 5 fixpipes
    from mc2emu.cli.scenarios import ExecContext
    from mc2emu.runtime.events import Fixpipe

    fix = {}
    for case in cases[:1] + operator_cases(SPEC, parse_options([*OP, "--quick"]))[0][:1]:
        evs = []
        obs = (lambda ev, evs=evs: isinstance(ev, Fixpipe) and evs.append(ev),)
        ctx = ExecContext(rank=0, size=1, observers=obs)
        SPEC.execute(case, SPEC.make_inputs(case, 0, 1), ctx)
        fix[case.mode.gmm_variant.value] = len(evs)
    assert fix == {"blaze": 22, "cgmct": 5}
    cases, _ = operator_cases(SPEC, parse_options([*OP, "--quick", "--gmm-variant", "blaze_sample"]))
    assert sorted((c.mode.split.value, c.mode.group_list_type.value) for c in cases) == [("K", "count"),
                                                                                        ("M", "count")]
    other = default_registry().get("quant_batch_matmul_mx")
    with pytest.raises(OptionError, match="--gmm-variant does not apply"):
        check_mode_options(other, parse_options(["--op", "quant_batch_matmul_mx", "--gmm-variant", "blaze"]))


def test_print_schedule_split_k_json(capsys):
    argv = [*OP, "--print-schedule", "--shape", "128,512,768", "--group-list", "512,0,256", "--split-k", "--json",
            "--block-dim", "8"]
    assert run_main(argv) == 0
    recs = json.loads(capsys.readouterr().out)
    assert {r["group"] for r in recs} == {0, 2} and max(r["core"] for r in recs) < 8


def test_bad_shape_exits_2_naming_the_rule(capsys):
    assert run_main([*OP, "--print-tiling", "--shape", "0,700,4096"]) == 2
    assert "SetMKN: split-M rejects an empty x or weight" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "needle"), [
    (["--print-tiling", "--shape", "1,2,3"], "needs --op grouped_matmul_mx"),
    ([*OP, "--print-schedule"], "needs --shape"),
    (["--shape", "1,2,3"], "only with --print-tiling or --print-schedule"),
    ([*OP, "--print-tiling", "--shape", "1,2"], "--shape"),
    ([*OP, "--print-schedule", "--shape", "1,2,3", "--group-list", "3,-1"], "--group-list"),
])
def test_plan_option_errors(argv, needle):
    with pytest.raises(OptionError, match=needle):
        parse_options(argv)


def test_spec_modes_pass_and_the_showcase_reports_its_hazard():
    """The CLI entry (`SPEC`): every mode of the quick suite matches its golden in-process (one NPU, no MPI);
    the hazard mode files exactly the hazard its rule expects, with the rows it names."""
    from mc2emu.cli.operators import default_registry
    from mc2emu.cli.operators.grouped_matmul_mx import SPEC
    from mc2emu.cli.scenarios import Case, ExecContext
    from mc2emu.runtime import HazardError

    assert "grouped_matmul_mx" in default_registry().names()
    ctx = ExecContext(rank=0, size=1)
    for mode in SPEC.modes:
        case = Case(SPEC.name, mode, SPEC.quick_shape, None, 1)
        inputs = SPEC.make_inputs(case, 0, 1)
        cmp = SPEC.compare(SPEC.execute(case, inputs, ctx), SPEC.golden(case, inputs, None))
        assert cmp.ok, (mode, cmp)
    (mode,) = SPEC.hazard_modes
    case = Case(SPEC.name, mode, SPEC.quick_shape, None, 1)
    with pytest.raises(HazardError) as ei:
        SPEC.execute(case, SPEC.make_inputs(case, 0, 1), ctx)
    assert ei.value.names() == SPEC.expectation(mode).hazard_names == {"OUTPUT_WRITE_COUNT"}
    rows = SPEC.quick_shape.m * 3 // 8  # group 1's rows, which group 0 writes over
    assert ei.value.hazards[0].details["twice"] == rows * SPEC.quick_shape.n


def test_nz_mode_runs_the_nz_weight():
    """The NZ mode hands the operator the weight cast to FRACTAL_NZ: every weight read is whole 16 x C0 fractals
    (32-byte rows, storage (blocks, rows, 32)); e1m2 runs only there, e5m2 is not applicable there."""
    from mc2emu.cli.operators.grouped_matmul_mx import SPEC
    from mc2emu.cli.scenarios import ExecContext, operator_cases
    from mc2emu.runtime.events import GmRead

    cases, _ = operator_cases(SPEC, parse_options([*OP, "--quick"]))
    (nz,) = [c for c in cases if c.mode.weight_nz]
    reads = []
    obs = (lambda ev: isinstance(ev, GmRead) and ev.buffer == "weight" and reads.append(ev.shape),)
    out = SPEC.execute(nz, SPEC.make_inputs(nz, 0, 1), ExecContext(rank=0, size=1, observers=obs))
    assert SPEC.compare(out, SPEC.golden(nz, SPEC.make_inputs(nz, 0, 1), None)).max_ulp == 0
    assert reads and all(len(s) == 3 and s[-1] == 32 for s in reads)
    e1m2, _ = operator_cases(SPEC, parse_options([*OP, "--quick", "--dtype", "e1m2"]))
    assert [SPEC.validate(c, 1) == [] for c in e1m2].count(True) == 1
    e5m2, _ = operator_cases(SPEC, parse_options([*OP, "--quick", "--dtype", "e5m2"]))
    assert [c.mode.weight_nz for c in e5m2 if SPEC.validate(c, 1)] == [True]
