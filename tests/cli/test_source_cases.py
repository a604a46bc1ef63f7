"""`python -m mc2emu.run --source-cases OP`: the source's case tables replayed (mc2emu/cli/source_cases.py).

Serial: the GMM tiling UT rows (host only), the --scale structure rule, option errors, run.py's wiring with
no operator branch. Through mpiexec: one A2A ST case at 2 ranks at a large scale divisor (a few seconds).
"""

import re
import subprocess
from pathlib import Path

import pytest

import mc2emu.run
from mc2emu.cases.source_tables import load
from mc2emu.cli.operators import default_registry
from mc2emu.cli.source_cases import A2A, AG, REPLAYS, SourceCase
from mc2emu.launcher import mpiexec_command
from mc2emu.ops import gen_ag_st_inputs
from mc2emu.ops.all_gather_quant_matmul_op import validate as ag_validate
from mc2emu.run import main

RUN_TIMEOUT_S = 170


def _rows(stdout: str) -> dict[str, list[str]]:
    """case name -> the row's cells (split on 2+ spaces) of the one table."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("case "))
    out = {}
    for ln in lines[start + 2:]:
        if ln.startswith(("recipe:", "verify:")):
            break
        cells = re.split(r"\s{2,}", ln.strip())
        out[cells[0]] = cells
    return out


def test_gmm_tiling_rows_replay_serially(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--source-cases", "grouped_matmul_mx", "--scale", "8"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert len(rows) == len(load("gmm_mx")) == 27
    verdicts = {name: cells[3] for name, cells in rows.items()}
    # the FP32-scale (template 1) row: a path the emulator does not follow (said, not failed); NZ rows run
    not_emulated = {n for n, v in verdicts.items() if v == "NOT EMULATED"}
    assert not_emulated == {"fp8_splitk_pertensor_1d_groupnum_eq_m"}
    assert rows["fp4e1m2_weight_nz_success"][4] == "tiled (no golden)"
    assert all(v == "PASS" for n, v in verdicts.items() if n not in not_emulated)
    assert rows["mxfp8_basic_api_nd_notrans"][4] == "18 fields equal, blockDim 32, key 0"
    assert rows["mxfp8_weight_nz_notrans"][4] == "18 fields equal, blockDim 32, key 0"
    assert rows["mxfp8_weight_nz_notrans"][-1] == "tiling only (--scale)"
    assert rows["mxfp8_basic_api_bias_dtype_invalid"][4] == "refused as the UT"
    assert "verify: UT: result equal" in out


def test_gmm_nz_rows_run_the_kernel_at_full_size(capsys: pytest.CaptureFixture[str]) -> None:
    """Full size, the NZ successes (FLOAT4_E1M2 among them) tile as the UT and run their NZ weight: 0 ULP."""
    names = ["mxfp4_same_dtype_weight_nz_success", "fp4e1m2_weight_nz_success"]
    assert main(["--source-cases", "grouped_matmul_mx", *(a for n in names for a in ("--case", n))]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows[names[0]][4] == "18 fields equal, blockDim 32, key 0; y 0 ULP vs golden"
    assert rows[names[1]][4] == "tiled (no golden); y 0 ULP vs golden"


def _a2a_case(n: int) -> SourceCase:
    return next(c for c in A2A.cases(load("a2a")) if c.index == n)


def _ag_case(n: int) -> SourceCase:
    return next(c for c in AG.cases(load("ag")) if c.index == n)


def test_a2a_scale_keeps_tiles_per_rank_and_tail() -> None:
    scaled = A2A.scale(_a2a_case(1), 16)            # 2048 rows: 4 head tiles of 512, no tail
    assert isinstance(scaled, SourceCase)
    assert (scaled.m, scaled.extra["head_tile_size"]) == (128, "32")
    assert "4 x 32 + 0 rows" in scaled.scale_note
    why = A2A.scale(_a2a_case(6), 16)               # 4040 rows at R 4: a 456-row tail, not 16 whole fractals / 16
    assert isinstance(why, str) and why.startswith("not scaled: tail 456 / 16")


def test_ag_scale_keeps_tail_rows_and_refuses_a_crossing_block() -> None:
    scaled = AG.scale(_ag_case(2), 2)               # 2061 = 4 x 512 + 13 -> 4 x 256 + 13
    assert isinstance(scaled, SourceCase)
    assert (scaled.m, scaled.extra["tile_m"]) == (4 * 256 + 13, "256")
    why = AG.scale(_ag_case(1), 16)                 # tileM 32 with the tiling's baseM 256: a block crosses
    assert isinstance(why, str) and "FRAGMENT_OUT_OF_RANGE" in why


def test_qmrs_scale_keeps_the_blocks_of_a_rank_segment() -> None:
    """The launcher's baseM cap min(256, floor16(M / R)) scales with M: a case scales when every rank segment
    keeps its count of baseM blocks and its partial last block."""
    qmrs = {c.name: c for c in REPLAYS["quant_matmul_reduce_scatter"].cases(load("qmrs"))}
    scale = REPLAYS["quant_matmul_reduce_scatter"].scale
    scaled = scale(qmrs["qmrs#6"], 8)               # 512 at R 4: one block of 128 a segment -> one of 16
    assert isinstance(scaled, SourceCase) and scaled.m == 64 and "1 block(s) of baseM 16" in scaled.scale_note
    why = scale(qmrs["qmrs#6"], 16)                 # 32 rows: 8-row segments, a partial block of 16
    assert isinstance(why, str) and "partial last" in why
    assert scale(qmrs["qmrs#1"], 4) == "not scaled: M 126 / 4 is not a multiple of R 2"
    thirds = scale(qmrs["qmrs#1"], 3)               # 63-row segments: 2 blocks of 48 -> 2 of 16, partial both
    assert isinstance(thirds, SourceCase) and thirds.m == 42


def test_list_notes_where_the_product_api_is_narrower(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    notes = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("note: product API")]
    assert len(notes) == 3
    assert any("2, 4, 8 and 16 ranks for the MX AllToAll" in n for n in notes)
    assert any("2, 4, 8 and 16 ranks for the MX AllGather" in n for n in notes)
    assert any("2, 4, 8, 16, 32, 64 ranks on Ascend 950" in n for n in notes)


@pytest.mark.parametrize("tile_m", [24, 0, -16, True])
def test_ag_tile_m_must_be_whole_fractals(tile_m: object) -> None:
    inputs = gen_ag_st_inputs(64, 128, 128, 0)
    problem, errs = ag_validate(inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"], rank=0,
                                rank_size=2, wait_order=None, protocol="seed", slot_num=0, bias=None,
                                out_dtype="bfloat16", kernel_variant="source", tile_m=tile_m)
    assert problem is None and [rule for rule, _ in errs] == ["tile_m"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--scale", "4"], "only with --source-cases"),
    (["--source-cases", "nope"], "replayed operators"),
    (["--source-cases", "grouped_matmul_mx", "--case", "nope"], "not a case"),
])
def test_option_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_run_py_has_no_operator_branch() -> None:
    """The replay is declared per operator (REPLAYS); run.py wires the options generically."""
    text = Path(mc2emu.run.__file__).read_text()
    names = {spec.name for spec in default_registry().specs()} | set(REPLAYS)
    assert not [n for n in names if n in text]


def test_one_a2a_case_at_two_ranks_scaled() -> None:
    cmd, env = mpiexec_command(2, ["-m", "mc2emu.run", "--source-cases", "all_to_all_quant_matmul", "--scale", "32",
                                   "--case", "a2a#4", "--case", "a2a#2"])
    proc = subprocess.run(cmd, env={**env, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    assert set(rows) == {"a2a#2", "a2a#4"}
    assert rows["a2a#2"][3] == "NEEDS R4"             # listed with the R it needs, not failed
    case = rows["a2a#4"]
    assert case[1:4] == ["32x3584x4096", "2", "PASS"]
    assert "2 x 16 + 0 rows" in case[-1]


# The scaled replay of every table at each R its rows need (CI): m / M_DIV where the structure allows, the other
# rows listed (NOT SCALED, NEEDS R<r>), never failed. The CI budget picks rows: the cost of a row is mostly its
# N x K (B decoded per block), which --scale does not shrink, and AG's tables scale only by 2 (at tileM 128 the
# tiling's baseM 256 would put a block across a region boundary). A2A R 2: a full-M head row and the 256-row
# head (a2a#4 runs in the test above); A2A R 4: the whole table; AG: the slot ring's tail row; QMRS R 2: the
# table; QMRS R 4: the K 3072 row (the K 8192 rows take 3 minutes scaled; full size in docs).
SCALED_REPLAYS = [
    ("all_to_all_quant_matmul", 2, 32, ("a2a#1", "a2a#7")),
    ("all_to_all_quant_matmul", 4, 32, ()),
    ("all_gather_quant_matmul", 4, 2, ("ag_urma#4",)),
    ("quant_matmul_reduce_scatter", 2, 4, ()),
    ("quant_matmul_reduce_scatter", 4, 4, ("qmrs#2", "qmrs#3")),
]


@pytest.mark.parametrize(("op", "ranks", "m_div", "cases"), SCALED_REPLAYS,
                         ids=[f"{op}-R{r}-scale{d}" for op, r, d, _ in SCALED_REPLAYS])
def test_every_table_replays_scaled_at_its_ranks(op: str, ranks: int, m_div: int, cases: tuple[str, ...]) -> None:
    argv = ["-m", "mc2emu.run", "--source-cases", op, "--scale", str(m_div)]
    for c in cases:
        argv += ["--case", c]
    cmd, env = mpiexec_command(ranks, argv)
    proc = subprocess.run(cmd, env={**env, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S * 2, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    spec = REPLAYS[op]
    want = {c.name: c.rank_num for key in spec.tables for c in spec.cases(load(key)) if not cases or c.name in cases}
    assert set(rows) == set(want)
    ran = [name for name, r in want.items() if r == ranks and rows[name][3] == "PASS"]
    assert ran, proc.stdout
    for name, r in want.items():
        verdict = rows[name][3]
        assert verdict in (("PASS", "NOT SCALED") if r == ranks else (f"NEEDS R{r}",)), (name, rows[name])
