"""`--predict` without MPI: the table, the recommendation, cost overrides, options, the plot extra."""

from __future__ import annotations

import importlib.util

import pytest

from mc2emu.arch.errors import ConstraintError
from mc2emu.cli.operators import default_registry
from mc2emu.cli.operators.all_to_all import A2AMode, predict_knobs
from mc2emu.cli.options import OptionError
from mc2emu.cli.options import parse_options as parse_run_options
from mc2emu.cli.predict import (
    PredictRow,
    PredictTable,
    format_predict_table,
    parse_cost_overrides,
    recommendation,
    write_plot,
)
from mc2emu.cli.scenarios import Knob, Shape
from mc2emu.predict import DEFAULT_COST_MODEL


def parse_options(argv):
    """The command line against the registered operators' options."""
    return parse_run_options(argv, default_registry().specs())


def _table():
    rows = [PredictRow(Knob(A2AMode(local_matmul=lm), values={"localMatmul": lm, "head tile": 64}), t, comm_s=1e-6,
                       hidden_share=h, cube_utilisation=0.5, critical=(("mmad", t * 0.6), ("latency", t * 0.3)))
            for lm, t, h in ((0, 30e-6, 0.2), (1, 20e-6, 0.9), (2, 25e-6, 0.5))]
    rows.append(PredictRow(Knob(A2AMode(local_matmul=0), 1, {"localMatmul": 0, "head tile": 16}),
                           refused="A2A-5 R <= AIV blocks"))
    return PredictTable("all_to_all_quant_matmul", Shape(256, 512, 512), None, 4, DEFAULT_COST_MODEL, rows)


def test_table_and_recommendation():
    t = _table()
    assert t.best() == 1
    text = format_predict_table(t)
    lines = text.splitlines()
    assert lines[1].split() == ["localMatmul", "head", "tile", "predicted", "us", "vs", "best", "comm", "us", "hidden",
                                "cube", "util", "critical", "path"]
    assert lines[2].split()[:6] == ["0", "64", "30.00", "1.50x", "1.00", "20%"]
    assert lines[3].split()[:6] == ["1", "64", "20.00", "1.00x", "1.00", "90%"]
    assert "refused: A2A-5 R <= AIV blocks" in lines[5]
    assert lines[-1] == recommendation(t) == ("recommend: localMatmul 1 head tile 64 (20.00 us predicted, 1.50x "
                                              "faster than the slowest; its critical path is mostly mmad)")


def test_nothing_ran():
    t = _table()
    t.rows = [t.rows[-1]]
    assert t.best() is None and recommendation(t) == "recommend: nothing (no setting ran)"


def test_a2a_knobs_cover_local_matmul_and_distinct_head_tiles():
    knobs = predict_knobs(Shape(48, 128, 64), 2)
    heads = [k.values["head tile"] for k in knobs]
    assert sorted(set(heads)) == [16, 32, 48]           # 48 / {1, 2, 4} rows, aligned to 16; 8, 16 repeat 16
    assert {k.values["localMatmul"] for k in knobs} == {0, 1, 2} and len(knobs) == 9


def test_cost_overrides():
    m = parse_cost_overrides(["link_bw=4e12", "gm_share_cores=16"])
    assert m.link_bw == 4e12 and m.gm_share_cores == 16 and isinstance(m.gm_share_cores, int)
    assert parse_cost_overrides([]) is DEFAULT_COST_MODEL
    for bad, rule in (("link_bw", "--cost"), ("link_bw=fast", "--cost"), ("linkbw=1", "unknown field"),
                      ("link_bw=-1", "CostModel.link_bw")):
        with pytest.raises(ConstraintError, match=rule):
            parse_cost_overrides([bad])


def test_predict_options():
    o = parse_options(["--predict", "--op", "all_to_all_quant_matmul", "--cost", "link_bw=1e12", "--plot", "p.svg"])
    assert o.predict and o.cost == ("link_bw=1e12",) and str(o.plot) == "p.svg"
    with pytest.raises(OptionError, match="only with --predict"):
        parse_options(["--plot", "p.png"])
    with pytest.raises(OptionError, match="only with --predict"):
        parse_options(["--cost", "link_bw=1"])
    with pytest.raises(OptionError, match="--hazards, --dump and --inputs do not apply"):
        parse_options(["--predict", "--hazards"])


def test_plot_is_an_optional_extra(tmp_path):
    t = _table()
    if importlib.util.find_spec("matplotlib") is None:
        with pytest.raises(ConstraintError, match=r"mc2emu\[plot\]"):
            write_plot(t, tmp_path / "p.svg")
    else:
        out = write_plot(t, tmp_path / "p.svg")
        assert out.read_text().lstrip().startswith(("<?xml", "<svg"))


def test_run_predict_refusals():
    """Refused before any collective work, identically on every rank (here: one)."""
    from mpi4py import MPI

    from mc2emu.cli.operators import default_registry
    from mc2emu.cli.predict import run_predict

    reg = default_registry()
    said = []
    with pytest.raises(OptionError, match="offers no knobs to compare"):
        run_predict(parse_options(["--predict", "--op", "selfcheck"]), reg, MPI.COMM_SELF, said.append)
    with pytest.raises(OptionError, match="leave no knob of all_to_all_quant_matmul"):
        run_predict(parse_options(["--predict", "--op", "all_to_all_quant_matmul", "--wait-order", "mask"]), reg,
                    MPI.COMM_SELF, said.append)
    with pytest.raises(OptionError, match="--cost"):
        run_predict(parse_options(["--predict", "--op", "all_to_all_quant_matmul", "--cost", "link_bw"]), reg,
                    MPI.COMM_SELF, said.append)
    assert said == []
