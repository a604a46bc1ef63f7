"""The loop from the command line and across faults, each test spawning mpiexec at 2 ranks (plain pytest):
`--repeat N` checks every iteration on one Communicator (hcomm: the persistent HCCL server and a window
poisoned only at its first carve), `--scenario layers` chains the layers bitwise equal across seeds, a
malformed `--window-offset` is an option error, and a rank killed in iteration k leaves the survivor
stopped within 10 s with one report naming launch k and the dead rank."""

import json
import subprocess
import time

import pytest

from mc2emu.launcher import MpiFlavor, mpiexec_command, mpiexec_flavor

RUN_TIMEOUT_S = 170
STOP_WITHIN_S = 10.0


def run_cli(np_, *args, timeout=RUN_TIMEOUT_S):
    cmd, env = mpiexec_command(np_, ["-m", "mc2emu.run", *map(str, args)])
    return subprocess.run(cmd, env={**env, "PYTHONUNBUFFERED": "1"}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_repeat_checks_every_iteration_hcomm():
    proc = run_cli(2, "--repeat", 3, "--op", "all_to_all_quant_matmul", "--quick", "--impl", "hcomm",
                   "--local-matmul", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 case(s): 2 pass" in proc.stdout


def test_layers_scenario_bitwise_equal_across_seeds():
    # the rounds window away from the AllGather's (both at the buffer base race: docs/protocols.md)
    proc = run_cli(2, "--scenario", "layers", "--layers", 2, "--seeds", 2, "--no-check",
                   "--window-offset", "qmrs_data=2097152")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for chain in ("tp_mlp", "moe"):
        assert f"{chain}: 2 seed(s)" in proc.stdout
        assert f"{chain} L=2 R=2 perturb=1: " in proc.stdout
    assert proc.stdout.count("max 0 ULP vs the chained golden, bitwise equal to the first seed") == 4


def test_layers_op_runs_only_the_chain_calling_it_and_refuses_one_no_chain_calls():
    moe = run_cli(2, "--scenario", "layers", "--op", "grouped_matmul_mx", "--layers", 2, "--seeds", 1)
    assert moe.returncode == 0, moe.stdout + moe.stderr
    assert "moe: 1 seed(s)" in moe.stdout and "tp_mlp" not in moe.stdout, moe.stdout
    assert "moe L=2 R=2 perturb=0: " in moe.stdout and "max 0 ULP vs the chained golden" in moe.stdout
    none = run_cli(2, "--scenario", "layers", "--op", "weight_quant_matmul")
    assert none.returncode == 2, none.stdout + none.stderr
    assert ("--scenario layers --op weight_quant_matmul: no layer chain calls it (tp_mlp: all_gather_quant_matmul, "
            "quant_matmul_reduce_scatter; moe: all_to_all_quant_matmul, grouped_matmul_mx)") in none.stderr


def test_window_offset_option_is_checked():
    proc = run_cli(2, "--repeat", 2, "--op", "all_gather_quant_matmul", "--window-offset", "qmrs_data")
    assert proc.returncode == 2
    assert "--window-offset 'qmrs_data': expected NAME=BYTES" in proc.stderr


KILL_JOB = """
import json, os, sys, time
from mpi4py import MPI
from mc2emu.comm import Communicator
from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs
from mc2emu.runtime.faults import Fault, FaultPlan
world = MPI.COMM_WORLD
r = world.Get_rank()
inp = gen_ag_st_inputs(64, 256, 128, r)
comm = Communicator(world, buffer_size=4 << 20, timeout=2.0)
out = {"rank": r}
try:
    for it in range(4):
        plan = FaultPlan(Fault.KILL_RANK, 1) if it == 2 else None
        if it == 2:
            out["t_fault"] = time.monotonic()
        all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], comm=comm, faults=plan)
    out["status"] = "finished"
except Exception as exc:
    out.update(status=type(exc).__name__, message=str(exc), report=getattr(exc, "report", None) or "")
out["t_end"] = time.monotonic()
with open(os.path.join(os.environ["OUT_DIR"], f"rank{r}.json"), "w") as f:
    json.dump(out, f)
os._exit(0)
"""


def test_a_rank_killed_in_iteration_k_the_survivor_stops_naming_launch_k(tmp_path):
    """MPICH's launcher ends every rank when one dies (`-disable-auto-cleanup` lets the survivor report, as a
    device job's other ranks would go on until their timeout)."""
    cmd, env = mpiexec_command(2, ["-c", KILL_JOB])
    if mpiexec_flavor(cmd[0]) is not MpiFlavor.MPICH:
        pytest.skip("the survivor's report needs MPICH's -disable-auto-cleanup")
    cmd.insert(1, "-disable-auto-cleanup")
    t0 = time.monotonic()
    subprocess.run(cmd, env={**env, "OUT_DIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}, capture_output=True,
                   text=True, timeout=RUN_TIMEOUT_S, check=False)
    assert time.monotonic() - t0 < RUN_TIMEOUT_S
    assert not (tmp_path / "rank1.json").exists()          # killed at its first checkpoint of launch 2
    survivor = json.loads((tmp_path / "rank0.json").read_text())
    assert survivor["status"] == "DeadlockError", survivor
    assert survivor["t_end"] - survivor["t_fault"] < STOP_WITHIN_S
    report = survivor["report"]
    assert report.count("DEADLOCK report") == 1
    assert "rank 0 (all_gather_quant_matmul, launch 2)" in report
    assert "rank 1: no answer" in report


def test_predict_repeat_replays_the_loop():
    """`--predict --repeat 2`: each setting's loop of 2 launches on one Communicator, replayed as one stream; the
    A2A UDMA kernel (a start barrier, symmetric ranks) repeats its launch: the loop is twice the launch, no skew."""
    proc = run_cli(2, "--predict", "--repeat", 2, "--op", "all_to_all_quant_matmul", "--quick", "--local-matmul", 1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "a loop of 2 launches each on 2 rank(s)" in proc.stdout
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("launch  begin us"))
    rows = [ln.split() for ln in lines[head + 1: head + 3]]
    assert [r[0] for r in rows] == ["0", "1"]
    device = [float(r[3]) for r in rows]
    assert device[0] == device[1] > 0 and [r[4] for r in rows] == ["0.00", "0.00"]
    loop = next(ln for ln in lines if ln.startswith("loop: 2 launch(es) on 2 rank(s) in "))
    assert abs(float(loop.split(" in ")[1].split()[0]) - 2 * device[0]) <= 0.011, loop


def test_repeat_correct_loops_report_nothing():
    """AG (both protocols) and the A2A UDMA impl back to back with no host barrier between launches: the
    happens-before checker orders a rank's launches by stream order only, and finds nothing (without stream
    order every read of launch 0 looks overwritten by launch 1's puts)."""
    ag = run_cli(2, "--repeat", 3, "--op", "all_gather_quant_matmul", "--quick")
    assert ag.returncode == 0, ag.stdout + ag.stderr
    assert "4 case(s): 4 pass" in ag.stdout
    a2a = run_cli(2, "--repeat", 2, "--op", "all_to_all_quant_matmul", "--quick", "--impl", "udma",
                  "--local-matmul", "2")
    assert a2a.returncode == 0, a2a.stdout + a2a.stderr
    assert "HAZARD" not in a2a.stdout


@pytest.mark.parametrize("data", ["full", "protocol-only"])
def test_repeat_per_block_names_the_source_cross_launch_hazards(data):
    """QMRS per_block twice back to back: ReduceAddProcess has no barrier after ReadRemoteDataAdd, so a peer's
    launch-1 epilogue put races this rank's launch-0 reads and its launch-1 status SET races the launch-0
    reset (4cecfe3b quant_matmul_reduce_scatter_impl.h:117-122, 233-267): named by the cross-launch check,
    and not again as an in-launch READ_OVERWRITTEN / READ_BEFORE_WAIT; the same on a protocol-only
    communicator (its status words in the buffer's real prefix)."""
    extra = ["--protocol-only"] if data == "protocol-only" else []
    proc = run_cli(2, "--repeat", 2, "--op", "quant_matmul_reduce_scatter", "--quick", *extra)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "per_block" in ln and "HAZARD in" in ln)
    assert "LOST_SIGNAL" in line and "WRITE_AFTER_READ_ACROSS_LAUNCH" in line, line
    assert "READ_OVERWRITTEN" not in line and "READ_BEFORE_WAIT" not in line, line
    assert "rounds" in proc.stdout and "1 pass, 1 hazard" in proc.stdout


def test_layers_with_checks_name_the_shared_window_race_and_pass_apart():
    """TP MLP on one Communicator with checks on: at the default window offsets the rounds reduce-scatter puts
    its round 0 (before any CrossDevice) into the bytes a peer's all-gather of the same layer may still read:
    WRITE_AFTER_READ_ACROSS_LAUNCH, named even on a timing where the numbers come out right; with the rounds
    window moved past the all-gather's, the same loop is clean. MoE (no window in the grouped matmul) is clean."""
    shared = run_cli(2, "--scenario", "layers", "--layers", 2, "--seeds", 1)
    assert "tp_mlp: 1 seed(s)" in shared.stdout, shared.stdout + shared.stderr
    tp = next(ln for ln in shared.stdout.splitlines() if ln.startswith("tp_mlp: "))
    assert "WRITE_AFTER_READ_ACROSS_LAUNCH" in tp, tp
    moe = next(ln for ln in shared.stdout.splitlines() if ln.startswith("moe: "))
    assert moe.endswith("hazards across the loop: none"), moe
    apart = run_cli(2, "--scenario", "layers", "--layers", 2, "--seeds", 1, "--window-offset", "qmrs_data=2097152")
    assert apart.returncode == 0, apart.stdout + apart.stderr
    assert apart.stdout.count("hazards across the loop: none") == 2, apart.stdout


def test_layers_protocol_only_runs_the_loop_and_its_checks_without_comparisons():
    """`--protocol-only`: the same calls on a protocol-only Communicator; the cross-launch check still names
    the shared-window race (exit 3) and is clean apart (exit 0); no golden / bitwise comparison is claimed."""
    shared = run_cli(2, "--scenario", "layers", "--layers", 2, "--seeds", 1, "--protocol-only")
    assert shared.returncode == 3, shared.stdout + shared.stderr
    tp = next(ln for ln in shared.stdout.splitlines() if ln.startswith("tp_mlp: "))
    assert "protocol-only (outputs not compared)" in tp and "WRITE_AFTER_READ_ACROSS_LAUNCH" in tp, tp
    apart = run_cli(2, "--scenario", "layers", "--layers", 2, "--seeds", 2, "--protocol-only", "--window-offset",
                    "qmrs_data=2097152")
    assert apart.returncode == 0, apart.stdout + apart.stderr
    for chain in ("tp_mlp", "moe"):
        assert (f"{chain}: 2 seed(s), " in apart.stdout
                and f"{chain} L=2 R=2 perturb=1: " in apart.stdout), apart.stdout
    assert apart.stdout.count("protocol-only (outputs not compared), hazards across the loop: none") == 2
    assert apart.stdout.count("protocol-only: no values, golden and bitwise comparisons off") == 4
    assert "ULP" not in apart.stdout and "bitwise equal" not in apart.stdout
