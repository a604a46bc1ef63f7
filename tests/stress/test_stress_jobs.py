"""Fault-injection stress jobs end to end: each test spawns `mpiexec -n R python -m mc2emu.stress.worker`
through the driver's `run_job` (hard timeout, process cleanup) and checks the diagnosis, every rank's
status and that every rank ended within END_SLACK_S of the deadline. The default set is a few
representative faults at 2 ranks and one at 4 (about a minute on 2 cores); the `slow` ones run whole
stress families."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.runtime.faults import KILLED_EXIT_CODE, Fault, FaultPlan
from mc2emu.stress.judge import FAILING, Verdict, judge
from mc2emu.stress.scenario import (
    DEADLOCK,
    WORKING_BLOCK,
    Injection,
    Scenario,
    StressOp,
    expected_diagnosis,
    fault_plan,
)

if os.environ.get("MC2EMU_SKIP_MPI"):
    pytest.skip("MC2EMU_SKIP_MPI is set", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
# A job that has not ended after this is hung (the slowest here, kill_rank at 4 ranks, takes ~10-20 s).
HARD_TIMEOUT_S = 90.0
# The acceptance rule: every rank ends within this many seconds of the deadline (fault + emulator timeout).
END_SLACK_S = 10.0
TIMEOUT_S = 2.0
SMALL = dict(ori_m=96, ka=128, n=64, head_tile_size=32, block_dim=4, timeout=TIMEOUT_S)
HCOMM = dict(impl=Impl.HCOMM, wait_order=WaitOrder.IN_ORDER)


def seed_with(fault, ranks, want, **kw):
    """The first seed whose plan matches `want` (rank / nth): pins a test to one case, replayably."""
    for seed in range(1, 500):
        p = FaultPlan.seeded(fault, seed, ranks, **kw)
        if all(getattr(p, k) == v for k, v in want.items()):
            return seed
    raise AssertionError(f"no seed gives {want}")


def run(driver, s):
    job = driver.run_job(s, HARD_TIMEOUT_S)
    assert job.returncode is not None, f"job hung:\n{job.stderr_tail}"
    assert sorted(job.results) == list(range(s.ranks)), f"results of ranks {sorted(job.results)}:\n{job.stderr_tail}"
    return job


def assert_ended_in_time(s, job):
    t_fault = min(r["t_fault"] for r in job.results.values() if r.get("t_fault") is not None)
    deadline = t_fault + s.timeout
    # A rank the launcher ended (after another rank's exit) before it printed its exit line has no t_exit: its
    # verdict time stands in, as in the stress model's judgement (mc2emu.stress.judge); seen at 8 ranks in CI.
    ends = {r: v.get("t_exit", v.get("t_end")) for r, v in job.results.items()}
    assert all(t is not None for t in ends.values()), job.results
    late = {r: round(t - deadline, 2) for r, t in ends.items() if t > deadline + END_SLACK_S}
    assert not late, f"ranks ended more than {END_SLACK_S} s after the deadline: {late}"


def test_drop_set_flag_deadlock_stops_every_rank(driver):
    s = Scenario(Injection.DROP_SET_FLAG, 2, seed=1, **SMALL)
    job = run(driver, s)
    plan = fault_plan(s)
    assert job.returncode != 0
    for r, v in job.results.items():
        assert v["status"] == "deadlock" and v["exit_code"] != 0, (r, v.get("message"))
    assert job.results[plan.rank]["fired"]
    assert any(not v["declared_elsewhere"] and "DEADLOCK report" in v["message"] for v in job.results.values())
    assert_ended_in_time(s, job)
    assert judge(s, job).verdict is Verdict.DETECTED


@pytest.mark.parametrize("scenario", [
    Scenario(Injection.EXTRA_SET_FLAG, 2, seed=1, **SMALL),
    Scenario(Injection.SKIP_WAIT_TILE, 2, local_matmul=1, wait_order=WaitOrder.IN_ORDER, seed=2, **SMALL),
    Scenario(Injection.WRONG_SPLITK, 2, local_matmul=2, seed=3, **SMALL),
    # localMatmul 1: the second SetupParams of AIC0 is the REMOTE pass
    Scenario(Injection.WRONG_SPLITK, 2, local_matmul=1,
             seed=seed_with(Fault.WRONG_SPLITK, 2, {"nth": 1}, core=WORKING_BLOCK, max_nth=1), **SMALL),
    Scenario(Injection.SWAP_WAIT_ORDER, 2, seed=4, **HCOMM, **dict(SMALL, block_dim=3)),
    Scenario(Injection.NO_ATOMIC_ADD, 2, local_matmul=1, wait_order=WaitOrder.IN_ORDER, seed=5, **SMALL),
], ids=lambda s: s.label().split(" m")[0].replace(" ", ""))
def test_pairing_fault_is_reported_by_the_hit_rank(driver, scenario):
    job = run(driver, scenario)
    hit = job.results[fault_plan(scenario).rank]
    expected = expected_diagnosis(scenario)
    assert hit["fired"] and hit["status"] == "hazard" and expected in hit["names"], hit.get("message", hit)
    assert hit["exit_code"] != 0 and job.returncode != 0
    for v in job.results.values():   # the other ranks: clean, or hazards of their own; never hung
        assert v["status"] in ("ok", "hazard") and (v["exit_code"] == 0) == (v["status"] == "ok")
    assert_ended_in_time(scenario, job)
    assert judge(scenario, job).verdict is Verdict.DETECTED


def test_wrong_splitk_on_the_local_pass_is_a_splitk_sequence(driver):
    """wrong_splitk on the LOCAL pass of localMatmul 1 leaves a tile open at splitKIdx 0 of 2; the REMOTE
    pass's BlockMmadMx.Init reports it (it once reset the sequence silently)."""
    s = Scenario(Injection.WRONG_SPLITK, 2, local_matmul=1,
                 seed=seed_with(Fault.WRONG_SPLITK, 2, {"nth": 0}, core=WORKING_BLOCK, max_nth=1), **SMALL)
    job = run(driver, s)
    assert judge(s, job).verdict is Verdict.DETECTED, judge(s, job).line()


def test_kill_rank_at_4_ranks_is_named_by_the_survivors(driver):
    s = Scenario(Injection.KILL_RANK, 4, impl=Impl.UDMA, local_matmul=1, seed=3, **SMALL)
    job = run(driver, s)
    dead = fault_plan(s).rank
    assert job.results[dead]["status"] == "killed" and job.results[dead]["exit_code"] == KILLED_EXIT_CODE
    survivors = {r: v for r, v in job.results.items() if r != dead}
    for r, v in survivors.items():
        assert v["status"] == "deadlock" and v["exit_code"] != 0, (r, v.get("message"))
    assert any(dead in v["unresponsive"] for v in survivors.values()), [v["message"] for v in survivors.values()]
    assert job.returncode != 0
    assert_ended_in_time(s, job)
    assert judge(s, job).verdict is Verdict.DETECTED


def test_seeded_perturbation_and_a_slow_rank_keep_outputs_bitwise(driver):
    """localMatmul 1 adds the remote terms atomically: the order of arrival must not change one bit."""
    base = dict(SMALL, local_matmul=1, wait_order=WaitOrder.IN_ORDER, reference=True, golden=True)
    hashes = []
    for s in (Scenario(Injection.PERTURB, 2, seed=11, **base), Scenario(Injection.PERTURB, 2, seed=12, **base),
              Scenario(Injection.DELAY_RANK, 2, seed=13, **base)):
        job = run(driver, s)
        assert job.returncode == 0, [v.get("message") for v in job.results.values()]
        for r, v in job.results.items():
            assert v["status"] == "ok" and v["exit_code"] == 0 and v["names"] == []
            assert v["sha"] == v["ref_sha"], f"{s.injection.value} seed {s.seed}: rank {r} C differs from unperturbed"
            assert v["ulp"] <= 1
        assert judge(s, job).verdict is Verdict.CLEAN
        hashes.append(tuple(job.results[r]["sha"] for r in range(2)))
    assert len(set(hashes)) == 1, hashes


def test_a_hung_job_is_ended_and_counted_as_a_hang(driver):
    """A dropped Set with a 10-minute emulator deadline: the job hangs; the hard timeout ends it and every
    process it started."""
    s = Scenario(Injection.DROP_SET_FLAG, 2, seed=987_654_321, **dict(SMALL, timeout=600.0))
    job = driver.run_job(s, hard_timeout=8.0)
    assert job.returncode is None and 8.0 <= job.wall_s < 20.0
    assert judge(s, job).verdict is Verdict.HANG
    left = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ")
        except OSError:
            continue
        if b"mc2emu.stress.worker" in cmd and b"987654321" in cmd:
            left.append((pid, cmd[:120]))
    assert not left, f"processes of the hung job survived: {left}"


# -- CI-sized versions of what the slow variants cover -------------------------------------------------------
@pytest.mark.parametrize("scenario", [
    Scenario(Injection.DROP_SET_FLAG, 8, seed=21, **dict(SMALL, block_dim=8)),
    Scenario(Injection.NO_ATOMIC_ADD, 8, local_matmul=1, wait_order=WaitOrder.IN_ORDER, seed=22,
             **dict(SMALL, block_dim=8)),
], ids=["drop_set_flag", "no_atomic_add"])
def test_fault_stress_at_eight_ranks(driver, scenario):
    """A reduced 8-rank fault stress (the slow `all` family draws every kind up to 8 ranks): a hang and a
    pairing fault at 8 ranks are detected, reported by the hit rank, and every rank ends in time."""
    job = run(driver, scenario)
    outcome = judge(scenario, job)
    assert outcome.verdict is Verdict.DETECTED, outcome.line()
    hit = job.results[fault_plan(scenario).rank]
    assert hit["fired"], hit
    if scenario.injection is Injection.DROP_SET_FLAG:
        assert all(v["status"] == "deadlock" for v in job.results.values()), {r: v["status"] for r, v in
                                                                               job.results.items()}
        full = [v["message"] for v in job.results.values() if not v["declared_elsewhere"]]
        assert any("DEADLOCK report" in m and all(f"rank {q} (" in m for q in range(8)) for m in full), full
        assert_ended_in_time(scenario, job)
    else:
        assert hit["status"] == "hazard" and "LOCAL_WITHOUT_ATOMIC" in hit["names"], hit.get("message")
        for r, v in job.results.items():
            if r != fault_plan(scenario).rank:
                assert v["status"] == "ok" and v["names"] == [], (r, v.get("message"))


def test_hcomm_aicpu_finalize_race_with_several_aics(driver):
    """hcomm under the AICPU model with 4 AICs: block 0's Finalize<true> may reset the finish counters while
    another AIC still has Waits (SPEC §3.2). Timing decides whether it bites; whatever happens must be
    right: a clean rank has C equal to the golden (<= 1 bf16 ULP) and no hazard; a rank that saw the race
    names the AICs left waiting; a hang is a diagnosed deadlock naming the stuck HCCL wait. Never a hang,
    never a wrong C without a report."""
    for seed in (1, 2, 3):
        s = Scenario(Injection.PERTURB, 2, **HCOMM, hccl_server=HcclServerType.AICPU,
                     **dict(SMALL, ori_m=144, block_dim=4, golden=True), seed=seed)
        job = run(driver, s)
        for r, v in job.results.items():
            msg = v.get("message") or ""
            if v["status"] == "ok":
                assert v["exit_code"] == 0 and v["names"] == [] and v["ulp"] <= 1, (seed, r, v)
            elif v["status"] == "hazard":
                assert set(v["names"]) == {"HCCL_FINALIZE_WHILE_WAITING"}, (seed, r, msg)
                assert re.search(r"working block AIC0 finalizes while AIC\d+(, AIC\d+)* still have Waits|"
                                 r"Wait\(\d+\) on AIC\d+ after the working block's Finalize", msg), msg
            else:
                assert v["status"] == "deadlock", (seed, r, v["status"], msg)
                assert v["declared_elsewhere"] or re.search(r"AIC\d+ wait on HCCL handle \d+", msg), msg


# -- long stress variants ----------------------------------------------------------------------------------
# Checker gaps the stress finds today; a MISSED outcome outside this list fails. (None known.)
def known_gap(o):
    return False


@pytest.mark.slow
@pytest.mark.parametrize("family, seed, max_ranks, cycles", [("deadlock", 11, 4, 2), ("pairing", 12, 4, 2),
                                                              ("all", 13, 8, 1)])
def test_stress_family(driver, family, seed, max_ranks, cycles):
    """Every kind of the family `cycles` times (each cycle draws every kind once)."""
    scenarios = driver.draw_scenarios(family, cycles * len(driver.FAMILIES[family]), seed, max_ranks)
    outcomes = [driver.run_scenario(s, HARD_TIMEOUT_S) for s in scenarios]
    bad = [o.line() for o in outcomes if o.verdict in FAILING and not known_gap(o)]
    assert not bad, "\n".join(bad)
    assert all(o.overrun_s <= END_SLACK_S for o in outcomes if o.expected == DEADLOCK)


@pytest.mark.slow
def test_stress_driver_script():
    proc = subprocess.run([sys.executable, str(ROOT / "launch" / "stress_deadlock.py"), "--iterations", "4",
                           "--seed", "2", "--time-limit", "120"], capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hangs               0" in proc.stdout and "result              PASS" in proc.stdout


@pytest.mark.slow
def test_hcomm_aicpu_with_several_aics_may_hang_and_is_then_diagnosed(driver):
    """hcomm AICPU with 2 AICs (SPEC §6: block 0 may Finalize while AIC1 still Waits): timing decides; every
    run ends clean, with the race reported, or in a diagnosed deadlock, never in a hang."""
    for seed in range(1, 9):
        s = Scenario(Injection.PERTURB, 2, **HCOMM, hccl_server=HcclServerType.AICPU,
                     **dict(SMALL, ori_m=144, block_dim=2), seed=seed)
        job = run(driver, s)
        assert {v["status"] for v in job.results.values()} <= {"ok", "hazard", "deadlock"}
        assert {n for v in job.results.values() for n in v["names"]} <= {"HCCL_FINALIZE_WHILE_WAITING", DEADLOCK}


# -- all_gather_quant_matmul ------------------------------------------------------------------------------------
AG_SMALL = dict(op=StressOp.AG, ori_m=525, ka=128, n=64, block_dim=2, timeout=TIMEOUT_S)   # tile + tail: 2 rounds


@pytest.mark.parametrize("scenario", [
    Scenario(Injection.DROP_SET_FLAG, 2, wait_order=WaitOrder.IN_ORDER, seed=31, **AG_SMALL),
    Scenario(Injection.SKIP_WAIT_TILE, 2, wait_order=WaitOrder.MASK, seed=32, **AG_SMALL),
], ids=["ag_drop_set_flag", "ag_skip_wait_tile"])
def test_ag_fault_is_caught(driver, scenario):
    """The AG family (`launch/stress.py --family ag`) in CI size: a lost AIV Set hangs its AIC's wait and every
    rank stops with the deadlock report; an AIC that skips one round's wait leaves that round unconsumed, and
    the hit rank reports it. Both counted as caught by the stress verdict."""
    job = run(driver, scenario)
    plan = fault_plan(scenario)
    hit = job.results[plan.rank]
    assert hit["fired"], hit
    assert judge(scenario, job).verdict is Verdict.DETECTED, judge(scenario, job).line()
    if scenario.injection is Injection.DROP_SET_FLAG:
        assert all(v["status"] == "deadlock" for v in job.results.values()), {r: v["status"] for r, v in
                                                                               job.results.items()}
        assert any(not v["declared_elsewhere"] and "DEADLOCK report" in v["message"] for v in job.results.values())
        assert_ended_in_time(scenario, job)
    else:
        assert hit["status"] == "hazard" and "UNCONSUMED_FLAG" in hit["names"], hit.get("message")
        assert "flag id" in hit["message"] and "AIC" in hit["message"], hit["message"]
