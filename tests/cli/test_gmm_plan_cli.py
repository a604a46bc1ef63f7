"""`python -m mc2emu.run --op grouped_matmul_mx --print-tiling / --print-schedule`: host-only, no MPI."""

import json

import pytest

from mc2emu.cli.options import OptionError, parse_options
from mc2emu.run import main as run_main

OP = ["--op", "grouped_matmul_mx"]


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
