"""`python -m mc2emu.run` end to end: each test spawns mpiexec itself (plain pytest, no pytest-mpi).

Default run: 2 ranks (and 8 for the option errors), --quick / the self-check and the --hazards showcase,
each well under a minute. `-m slow`: the 8-rank quick suite and the 8-rank hazard showcase.
Every table row must PASS, or be an expected hazard reproduced and reported (EXPECTED); SKIPPED, MISMATCH,
HAZARD, MISSING and ERROR rows fail the test.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from trace_check import check_chrome_trace

from mc2emu.cli.dump import load_case, rank_file
from mc2emu.cli.operators.all_to_all import SPEC as ALL_TO_ALL_QUANT_MATMUL
from mc2emu.launcher import mpiexec_command

RUN_TIMEOUT_S = 170
# Environment variables by which a process knows it runs under an MPI launcher (mc2emu.launcher).
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "HYDRA_CONTROL_FD", "PMI_FD")
A2A_UDMA_LM0 = ["--op", "all_to_all_quant_matmul", "--impl", "udma", "--local-matmul", "0", "--wait-order", "mask"]
# Records each rank's return code of main() in a file, then exits with it.
RC_WRAPPER = ("import os, sys; from mc2emu.run import main; rc = main(sys.argv[1:]); "
              "r = os.environ.get('PMI_RANK') or os.environ.get('OMPI_COMM_WORLD_RANK') or '0'; "
              "open(os.path.join(os.environ['RC_DIR'], 'rc' + r), 'w').write(str(rc)); sys.exit(rc)")


def _env(env):
    return {**env, "PYTHONUNBUFFERED": "1"}


def run_cli(np_, *args, timeout=RUN_TIMEOUT_S):
    cmd, env = mpiexec_command(np_, ["-m", "mc2emu.run", *map(str, args)])
    return subprocess.run(cmd, env=_env(env), capture_output=True, text=True, timeout=timeout, check=False)


def run_wrapped(np_, rc_dir, *args):
    cmd, env = mpiexec_command(np_, ["-c", RC_WRAPPER, *map(str, args)])
    env = {**_env(env), "RC_DIR": str(rc_dir)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    rcs = {int(p.name[2:]): int(p.read_text()) for p in rc_dir.glob("rc*")}
    return proc, rcs


def table_of(stdout):
    """(header cells, rows as lists of cells split on 2+ spaces) of the one table."""
    lines = stdout.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("operator ")]
    assert len(starts) == 1, f"expected one table, found {len(starts)}:\n{stdout}"
    i = starts[0]
    rows = []
    for ln in lines[i + 2:]:
        if re.match(r"^\d+ case\(s\):", ln) or not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return re.split(r"\s{2,}", lines[i].strip()), rows


def summary_code(stdout):
    m = re.search(r"case\(s\):.*; exit code (\d+)$", stdout, re.M)
    assert m, stdout
    return int(m.group(1))


def _check_run(proc, np_):
    out = proc.stdout
    assert proc.returncode == summary_code(out), out + proc.stderr
    header, rows = table_of(out)
    assert header[:7] == ["operator", "impl", "mode", "shape", "dtype", "R", "result"]
    progress = [ln for ln in out.splitlines() if re.match(r"^\[\s*\d+/\d+\] ", ln)]
    assert len(progress) == len(rows), out
    assert all(r[5] == str(np_) for r in rows)
    bad = [r for r in rows if not (r[6] == "PASS" or r[6].startswith("EXPECTED "))]
    assert not bad, f"rows neither PASS nor an expected hazard: {bad}\n{out}"
    assert proc.returncode == 0, out + proc.stderr
    return rows


def test_quick_suite_at_two_ranks():
    proc = run_cli(2, "--quick")
    rows = _check_run(proc, 2)
    assert [rows[0][0], rows[0][6]] == ["selfcheck", "PASS"]
    assert proc.stdout.count("mc2emu: ") == 1  # the header line, printed by rank 0 only


def test_udma_launch_above_the_tiling_is_noted_in_the_table():
    """16 x 16 output, one tile: usedCoreNum 1 < R = 2. By default the UDMA host launches R blocks and the
    table says so: the note column points to the note printed under the table. (--launch source, refused with
    A2A-5 on every rank, is tested through the CLI entry in tests/apace/test_a2a_source_fidelity_mpi.py.)"""
    proc = run_cli(2, *A2A_UDMA_LM0, "--m", "16", "--k", "64", "--n", "16")
    rows = _check_run(proc, 2)
    assert len(rows) == 1 and rows[0][-1] == "[1]", proc.stdout
    notes = proc.stdout.split("\nnotes:\n", 1)[1].splitlines()
    assert notes[0].startswith("  [1] launched 2 blocks where the tiling's usedCoreNum is 1: AIV block r serves "
                               "peer r"), proc.stdout
    assert "--launch source: refused by A2A-5" in notes[0] and "16x64x16" in notes[0]


def test_relaunches_itself_without_mpirun():
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "mc2emu.run", "--np", "2", "--op", "selfcheck", "--quick"],
                          env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 rank(s)" in proc.stdout
    _check_run(proc, 2)


# Every refusal at 2 ranks; at 8 ranks one refused by the option parser and one by the operator's collective
# validation (the two paths to exit code 2), which is what more ranks can break.
@pytest.mark.parametrize("np_, args, needle", [
    (2, ["--impl", "nvlink"], "--impl 'nvlink'"),
    (2, ["--m", "0"], "--m 0"),
    (2, ["--op", "all_to_all_quant_matmul", "--k", "100", "--quick"], "Ka % 64"),
    (2, ["--impl", "hcomm", "--local-matmul", "2"], "--hazards"),
    (8, ["--impl", "nvlink"], "--impl 'nvlink'"),
    (8, ["--op", "all_to_all_quant_matmul", "--k", "100", "--quick"], "Ka % 64"),
])
def test_bad_options_exit_2_on_every_rank_with_one_message(tmp_path, np_, args, needle):
    proc, rcs = run_wrapped(np_, tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert rcs == dict.fromkeys(range(np_), 2)
    assert proc.stderr.count(needle) == 1, proc.stderr
    assert "operator " not in proc.stdout


def test_list_and_help_need_no_ranks():
    for flag, needle in (("--list", "--hazards showcase"), ("--help", "--local-matmul")):
        proc = subprocess.run([sys.executable, "-m", "mc2emu.run", flag], capture_output=True, text=True,
                              timeout=60, check=False)
        assert proc.returncode == 0 and needle in proc.stdout


def test_trace_is_valid_chrome_json_with_matched_spans(tmp_path):
    path = tmp_path / "trace.json"
    proc = run_cli(2, "--op", "selfcheck", "--quick", "--trace", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = json.loads(path.read_text())
    counts = check_chrome_trace(trace)
    assert counts["s"] == counts["f"] > 0
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1}
    names = {e["name"].split()[0] for e in spans}
    assert {"wait", "SyncAll", "kernel", "raise", "consume"} <= names
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"AIC0", "AIV0", "run"} <= threads


def _a2a_ran(proc):
    assert "SKIPPED" not in proc.stdout, proc.stdout   # the operator has landed: a skip is a failure


def test_trace_of_the_all_to_all_has_puts_and_cross_rank_flows(tmp_path):
    path = tmp_path / "trace.json"
    proc = run_cli(2, *A2A_UDMA_LM0, "--quick", "--trace", path)
    _a2a_ran(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trace = json.loads(path.read_text())
    check_chrome_trace(trace)
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert any(e["name"].startswith("put") for e in spans)
    assert any(e["name"].startswith("mmad") for e in spans)


def _dumped_outputs(directory, np_):
    return {r: load_case(rank_file(directory, r)).arrays["out"] for r in range(np_)}


@pytest.mark.parametrize("args", [["--op", "selfcheck", "--quick"], [*A2A_UDMA_LM0, "--quick"]],
                         ids=["selfcheck", "a2a"])
def test_dump_then_replay_is_bitwise_identical(tmp_path, args):
    first, second = tmp_path / "first", tmp_path / "second"
    proc = run_cli(2, *args, "--dump", first)
    if "all_to_all_quant_matmul" in args:
        _a2a_ran(proc)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    replay = run_cli(2, "--inputs", first, "--dump", second)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "replay: bitwise identical to the dump" in replay.stdout
    a, b = _dumped_outputs(first, 2), _dumped_outputs(second, 2)
    for r in range(2):
        assert a[r].dtype == b[r].dtype and np.array_equal(a[r].view(np.uint8), b[r].view(np.uint8))
        ca, cb = load_case(rank_file(first, r)), load_case(rank_file(second, r))
        for name, arr in ca.of_role("input").items():
            assert np.array_equal(arr.view(np.uint8), cb.arrays[name].view(np.uint8))


def test_replay_refuses_another_world_size(tmp_path):
    run_cli(2, "--op", "selfcheck", "--quick", "--dump", tmp_path)
    proc = run_cli(1, "--inputs", tmp_path)
    assert proc.returncode == 2 and "written by 2 ranks" in proc.stderr


def test_past_the_seed_limit_the_seed_all_gather_is_listed_and_the_slot_ring_runs(tmp_path):
    """9 ranks: AG-3 R <= 8 leaves the seed protocol's cases out (listed, counted), the slot ring's (R <= 16)
    run, exit 0; the seed protocol alone (--wait-order selects it) can run nothing: exit 2 with the rule."""
    proc = run_cli(9, "--quick", "--op", "all_gather_quant_matmul")
    rows = _check_run(proc, 9)
    assert [r[2] for r in rows] == ["slot_ring=1", "slot_ring=0"], proc.stdout
    assert ("not applicable at R = 9: all_gather_quant_matmul: AG-3 R <= 8 (seed protocol): 9 ranks: 2 case(s)"
            in proc.stdout.splitlines())
    assert proc.stdout.splitlines()[-1] == "4 case(s): 2 pass, 2 not applicable at R = 9; exit code 0"
    refused, rcs = run_wrapped(9, tmp_path, "--quick", "--op", "all_gather_quant_matmul", "--wait-order", "mask")
    assert refused.returncode == 2 and rcs == dict.fromkeys(range(9), 2), refused.stdout + refused.stderr
    assert refused.stderr.count("AG-3 R <= 8 (seed protocol): 9 ranks") == 1 and "operator " not in refused.stdout


@pytest.mark.slow
def test_quick_suite_at_eight_ranks():
    proc = run_cli(8, "--quick")
    rows = _check_run(proc, 8)
    assert rows[0][6] == "PASS"


def _check_showcase(np_):
    proc = run_cli(np_, "--quick", "--hazards", "--op", "all_to_all_quant_matmul")
    _a2a_ran(proc)
    rows = _check_run(proc, np_)
    showcase = [r for r in rows if r[6].startswith(("EXPECTED", "MISSING"))]
    assert len(showcase) == len(ALL_TO_ALL_QUANT_MATMUL.hazard_modes)
    assert all(r[6].startswith("EXPECTED") for r in showcase), proc.stdout
    assert sum(r[6] == "PASS" for r in rows) == len(rows) - len(showcase)
    return proc.stdout


def test_hazard_showcase_at_two_ranks():
    """The end-to-end --hazards run in the default suite: every source hazard reproduced and explained."""
    out = _check_showcase(2)
    # a result may list several names ("HCCL_WAIT_BEYOND_COMMIT, DEADLOCK": hcomm lm2 under AICPU with several
    # AICs may also hang after block 0's Finalize, which its rule allows)
    expected = {name for r in table_of(out)[1] if r[6].startswith("EXPECTED")
                for name in r[6].split(" ", 1)[1].split(", ")}
    assert {"READ_BEFORE_WAIT", "BIAS_DOUBLE_ADD", "HCCL_WAIT_BEYOND_COMMIT", "DEADLOCK"} <= expected, expected
    # the diagnoses a user reads: who waits on what, and who should have released it
    assert re.search(r"read of window 'hcomm_workspace' bytes \[\d+, \d+\) before the HCCL Wait that orders it: "
                     r"they are written by HCCL task handle \d+ repeat \d+ \(the put from rank \d+'s server\)",
                     out), out
    assert "C gets it twice" in out
    aicpu = next(r for r in table_of(out)[1] if r[1] == "hcomm" and r[2].startswith("lm2") and "aicpu" in r[2])
    if "DEADLOCK" in aicpu[6]:
        # several AICs under AICPU: block 0's Finalize<true> reset the finish counters while other AICs still
        # Waited, so they hang (timing-dependent); the report names the stuck AIC and the handle it waits on
        assert re.search(r"rank \d AIC\d+: no progress for [\d.]+ s while waiting on HCCL handle \d \(AlltoAll\) "
                         r"repeat \d+ \(expects finished repeats >= \d+; released by the HCCL server", out), out
    else:
        assert re.search(r"Wait #2 of handle 0 \(AlltoAll\) on AIC\d+ with only 1 Commit\(s\): returns -1", out), out
    assert re.search(r"rank \d AIC\d+: no progress for [\d.]+ s while waiting on HCCL handle 0 repeat 1 \(never "
                     r"committed\) \(expects a Commit that cannot come; released by the HCCL server", out), out


@pytest.mark.slow
def test_hazard_showcase_at_eight_ranks():
    _check_showcase(8)


def test_all_gather_modes_and_hazard_showcase_at_two_ranks():
    """--op all_gather_quant_matmul --hazards: both wait orders and the slot ring pass the AG ST rule, every kernel
    variant reproduces and names its hazard (the slot-ring one at the default shape: test_all_gather_slot_ring_mpi)."""
    from mc2emu.cli.operators.all_gather import SPEC as ALL_GATHER_QUANT_MATMUL

    proc = run_cli(2, "--quick", "--hazards", "--op", "all_gather_quant_matmul")
    rows = _check_run(proc, 2)
    assert all(r[0] == "all_gather_quant_matmul" for r in rows)
    passed = [r[2] for r in rows if r[6] == "PASS"]
    # the slot ring's skip_release_wait needs a second round to reuse a slot: the quick shape (one round) is clean
    assert sorted(passed) == ["in_order", "mask", "slot_ring=0", "slot_ring=1", "slot_ring=1 skip_release_wait"], \
        proc.stdout
    expected = sorted(r[6] for r in rows if r[6].startswith("EXPECTED"))
    assert len(expected) == len(ALL_GATHER_QUANT_MATMUL.hazard_modes) - 1
    assert expected == ["EXPECTED ADDR_LIST_UPDATED_EARLY", "EXPECTED FRAGMENT_OUT_OF_RANGE",
                        "EXPECTED UNCONSUMED_FLAG", "EXPECTED UNCONSUMED_FLAG"]
    assert "flag id 0 holds 1 unconsumed round(s)" in proc.stdout
    assert re.search(r"before CrossCoreWaitFlag\(\d+\)", proc.stdout), proc.stdout
    # blocks=crossing (quick shape, R 2: 2 AICs give baseM 128 over the 64-row HEAD): the block starting in HEAD
    # names the fragment it cannot reach, and its result is checked against the golden's prediction (the 64
    # MAIN rows of the other rank never written, every other row within the AG ST rule): EXPECTED, not MISMATCH
    crossing = [r for r in rows if "blocks=crossing" in r[2]]
    assert len(crossing) == 1 and crossing[0][6] == "EXPECTED FRAGMENT_OUT_OF_RANGE", crossing
    assert re.search(r"headFrag\w+ slice \(0, 0\) \(128, \d+\): piece 1 reads fragment 1 of 1", proc.stdout), \
        proc.stdout


def test_quant_matmul_reduce_scatter_modes_and_hazard_showcase_at_two_ranks():
    """--op quant_matmul_reduce_scatter --hazards: both kernels pass bit-exact, every showcase variant names its
    hazard (the shipped kernel's leftover flag 9, acc * 0 keeping NaN, the templated wait, the rounded copy)."""
    from mc2emu.cli.operators.quant_matmul_reduce_scatter import SPEC as QMRS

    proc = run_cli(2, "--quick", "--hazards", "--op", "quant_matmul_reduce_scatter")
    rows = _check_run(proc, 2)
    assert all(r[0] == "quant_matmul_reduce_scatter" for r in rows)
    assert sorted(r[2] for r in rows if r[6] == "PASS") == ["per_block final_wait", "rounds"], proc.stdout
    expected = {r[2]: r[6] for r in rows if r[6].startswith("EXPECTED")}
    assert len(expected) == len(QMRS.hazard_modes)
    assert expected == {"per_block": "EXPECTED UNCONSUMED_FLAG",
                        "per_block ub_stale_nan": "EXPECTED MUL_ZERO_KEEPS_NAN, UNCONSUMED_FLAG",
                        "rounds templated_wait": "EXPECTED READ_BEFORE_WAIT",
                        "rounds tail_copy_rounded ragged_n": "EXPECTED TAIL_COPY_OVERRUN"}, proc.stdout
    out = proc.stdout
    # every diagnosis read: the quick shape is m 32 rows per rank, N 48 (96-byte rows; the rounded tail copy at the
    # ragged N 40, 80-byte rows), rounds of 16 rows
    # per_block (both variants): one unconsumed flag-9 round on each of the R // 2 + 1 = 2 AICs of each rank
    assert out.count("UNCONSUMED_FLAG: 4 report(s) on rank(s) 0-1; e.g. [UNCONSUMED_FLAG] rank ") == 2, out
    assert "flag id 9 holds 1 unconsumed round(s)" in out
    nan = re.search(r"\[MUL_ZERO_KEEPS_NAN\] rank \d AIV\d+: row (\d+): the fp32 sum is cleared by "
                    r"MulScalar\(sum, 0.0f\) but (\d+) of its 48 elements hold NaN", out)
    assert nan and int(nan[1]) < 32 and 0 < int(nan[2]) <= 48, out
    # templated wait: the comm core of rank r serving rank 1 - r (AIV R + 3 - 1 - job) reads round t's rows of
    # that segment from staging before flag 0
    early = re.search(r"\[READ_BEFORE_WAIT\] rank (\d) AIV(\d+): round (\d): Commit to rank (\d) reads staging "
                      r"bytes \[(0x[0-9a-f]+), (0x[0-9a-f]+)\) before CrossCoreWaitFlag\(0\)", out)
    assert early, out
    r, core, t, target, lo, hi = (int(v, 0) for v in early.groups())
    assert target == 1 - r and core == 2 + 3 - 1 - target
    assert (lo, hi) == ((target * 32 + t * 16) * 96, (target * 32 + t * 16 + 16) * 96)
    # rounded copy: 3 reduce cores split 16 rows 6 / 5 / 5; 5 rows = 400 B -> 416 B on two cores, 2 rounds, 2 ranks
    assert "TAIL_COPY_OVERRUN: 8 report(s) on rank(s) 0-1" in out, out
    assert re.search(r"DataCopy of 400 B rounded up to 416 B writes y bytes \[0x[0-9a-f]+, 0x[0-9a-f]+\) past this "
                     r"core's rows", out), out
