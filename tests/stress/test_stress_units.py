"""Pure parts of the fault-injection stress, no MPI: FaultPlan.seeded determinism and firing, the scenario
expectations, the seeded draw, the verdict of one job and the aggregation of many."""

import json
import os

import pytest

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.runtime.faults import HOOK_OF, Fault, FaultPlan
from mc2emu.stress.judge import FAILING, JobRun, Tally, Verdict, judge, parse_lines
from mc2emu.stress.scenario import (
    DEADLOCK,
    WORKING_BLOCK,
    Injection,
    Scenario,
    StressOp,
    can_run,
    expected_diagnosis,
    fault_plan,
    hook_occurrences,
)
from mc2emu.stress.worker import _parser

HCOMM = dict(impl=Impl.HCOMM, wait_order=WaitOrder.IN_ORDER)
AICPU = HcclServerType.AICPU


# -- FaultPlan.seeded -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", list(Fault))
def test_seeded_plan_is_a_function_of_fault_seed_and_ranks(fault):
    for ranks in (2, 3, 4, 8):
        for seed in range(40):
            a, b = FaultPlan.seeded(fault, seed, ranks), FaultPlan.seeded(fault.value, seed, ranks)
            assert (a.fault, a.rank, a.core, a.nth) == (b.fault, b.rank, b.core, b.nth)
            assert 0 <= a.rank < ranks and 0 <= a.nth <= 2 and a.core is None
        hit = {FaultPlan.seeded(fault, seed, ranks).rank for seed in range(200)}
        nths = {FaultPlan.seeded(fault, seed, ranks).nth for seed in range(200)}
        assert hit == set(range(ranks)) and nths == {0, 1, 2}, "the seed must reach every rank and occurrence"


def test_seeded_plans_of_different_faults_draw_independently():
    draws = {f: [(p.rank, p.nth) for p in (FaultPlan.seeded(f, s, 8) for s in range(30))] for f in Fault}
    assert len({tuple(v) for v in draws.values()}) == len(Fault)


def test_seeded_plan_keeps_core_and_occurrence_range():
    for seed in range(50):
        p = FaultPlan.seeded(Fault.WRONG_SPLITK, seed, 4, core="AIC0", max_nth=0)
        assert p.core == "AIC0" and p.nth == 0


# Faults that break every occurrence of their hook on the hit rank (a slow rank, a kernel-wide mode).
EVERY_OCCURRENCE = (Fault.DELAY_RANK, Fault.NO_ATOMIC_ADD, Fault.AIV_JOINS_AIC_KERNEL)


@pytest.mark.parametrize("fault", [f for f in Fault if f not in EVERY_OCCURRENCE])
def test_plan_fires_once_on_its_rank_core_hook_and_occurrence(fault):
    plan = FaultPlan(fault, rank=1, core="AIC0", nth=2)
    hook = HOOK_OF[fault]
    other = next(h for h in set(HOOK_OF.values()) if h != hook)
    calls = [plan.fires(hook, 0, "AIC0"), plan.fires(other, 1, "AIC0"), plan.fires(hook, 1, "AIC1")]
    calls += [plan.fires(hook, 1, "AIC0") for _ in range(5)]
    assert calls == [False, False, False, False, False, True, False, False]
    assert plan.fired == ["AIC0"]


@pytest.mark.parametrize("fault", EVERY_OCCURRENCE)
def test_rank_wide_faults_fire_at_every_occurrence_on_their_rank(fault):
    plan = FaultPlan(fault, rank=0)
    hook = HOOK_OF[fault]
    assert all(plan.fires(hook, 0, c) for c in ("AIC0", "AIV3", "AIC0", "host"))
    assert not plan.fires(hook, 1, "AIC0")


# Faults whose hook point the stressed operator (all_to_all_quant_matmul) never reaches, with the test that
# covers them instead. Adding a fault here needs that reason; every other fault must be stressed.
NOT_STRESSED = {
    # A2A moves data with put_nbi + TeamBarrier, never put_signal (the fault's hook point).
    Fault.LATE_PUT_DATA: "tests/checkers/test_put_visibility_mpi.py",
}


def test_not_stressed_faults_are_covered_elsewhere():
    """An exempted fault names a test file that exists and plans that fault."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for fault, path in NOT_STRESSED.items():
        with open(os.path.join(root, path)) as f:
            assert f"Fault.{fault.name}" in f.read(), (fault, path)


def test_every_fault_is_stressed(driver):
    """A fault added to runtime.faults needs an Injection, an expectation and a kind in a stress family."""
    drawn = {k.injection for kinds in driver.FAMILIES.values() for k in kinds}
    for fault in Fault:
        if fault in NOT_STRESSED:
            continue
        inj = Injection(fault.value)
        assert inj.fault is fault and inj in drawn, fault
        configs = next(k.configs for k in driver.FAMILIES["all"] if k.injection is inj)
        s = Scenario(inj, 2, *configs[0], block_dim=1 if configs[0][3] is AICPU else 2)
        assert can_run(s) == [], (fault, can_run(s))
        assert (expected_diagnosis(s) is None) == (fault is Fault.DELAY_RANK)


# -- scenario expectations -----------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario, expected", [
    (Scenario(Injection.DROP_SET_FLAG, 2), DEADLOCK),
    (Scenario(Injection.KILL_RANK, 4, **HCOMM), DEADLOCK),
    (Scenario(Injection.EXTRA_SET_FLAG, 2), "UNCONSUMED_FLAG"),
    (Scenario(Injection.SKIP_WAIT_TILE, 2), "UNCONSUMED_FLAG"),
    (Scenario(Injection.SKIP_WAIT_TILE, 2, **HCOMM), DEADLOCK),
    (Scenario(Injection.SKIP_WAIT_TILE, 2, **HCOMM, hccl_server=AICPU, block_dim=1), "HCCL_UNWAITED_COMMIT"),
    (Scenario(Injection.SWAP_WAIT_ORDER, 2, **HCOMM), "HCCL_WAIT_ORDER"),
    (Scenario(Injection.WRONG_SPLITK, 3, local_matmul=2), "SPLITK_SEQUENCE"),
    (Scenario(Injection.NONE, 2, **HCOMM, local_matmul=2), DEADLOCK),
    (Scenario(Injection.NONE, 2, **HCOMM, local_matmul=2, hccl_server=AICPU, block_dim=1),
     "HCCL_WAIT_BEYOND_COMMIT"),
    (Scenario(Injection.NO_ATOMIC_ADD, 2, local_matmul=1), "LOCAL_WITHOUT_ATOMIC"),
    (Scenario(Injection.NO_ATOMIC_ADD, 2, **HCOMM, local_matmul=1), "LOCAL_WITHOUT_ATOMIC"),
    (Scenario(Injection.AIV_JOINS_AIC_KERNEL, 2, **HCOMM), "AIV_RUNS_AIC_KERNEL"),
    (Scenario(Injection.DELAY_RANK, 2), None),
    (Scenario(Injection.PERTURB, 2, **HCOMM, local_matmul=1), None),
])
def test_expected_diagnosis(scenario, expected):
    assert expected_diagnosis(scenario) == expected
    assert can_run(scenario) == []


@pytest.mark.parametrize("scenario, reason", [
    (Scenario(Injection.DROP_SET_FLAG, 2, **HCOMM), "cross-core flags"),
    (Scenario(Injection.SWAP_WAIT_ORDER, 2), "HCCL handles only"),
    (Scenario(Injection.WRONG_SPLITK, 2, **HCOMM, local_matmul=2), "uninjected"),
    (Scenario(Injection.PERTURB, 2, impl=Impl.HCOMM, wait_order=WaitOrder.MASK), "timing-independent"),
    (Scenario(Injection.PERTURB, 2, **HCOMM, hccl_server=AICPU, block_dim=2), "timing-independent"),
    (Scenario(Injection.SKIP_WAIT_TILE, 2, **HCOMM, block_dim=1), "block_dim >= 2"),
    (Scenario(Injection.NONE, 2), "only for hcomm local_matmul 2"),
    (Scenario(Injection.DELAY_RANK, 4, block_dim=3), "A2A-5"),
    (Scenario(Injection.NO_ATOMIC_ADD, 2, local_matmul=2), "localMatmul 1"),
    (Scenario(Injection.AIV_JOINS_AIC_KERNEL, 2), "AIC-only"),
])
def test_scenarios_without_a_sound_expectation_are_refused(scenario, reason):
    assert any(reason in r for r in can_run(scenario)), can_run(scenario)


def test_fault_plan_pins_the_core_and_draws_an_occurrence_that_happens():
    for seed in range(60):
        lm0 = fault_plan(Scenario(Injection.WRONG_SPLITK, 2, local_matmul=0, seed=seed))
        assert (lm0.core, lm0.nth) == (WORKING_BLOCK, 0), "one SetupParams per core without a LOCAL pass"
        swap = fault_plan(Scenario(Injection.SWAP_WAIT_ORDER, 3, **HCOMM, ori_m=48, head_tile_size=16, seed=seed))
        assert swap.core == WORKING_BLOCK and swap.nth == 0, "tile 0 with tile 1: the HCCL wait order breaks"
        skip = fault_plan(Scenario(Injection.SKIP_WAIT_TILE, 2, seed=seed))
        assert skip.core is None and skip.nth <= 2
        assert fault_plan(Scenario(Injection.SKIP_WAIT_TILE, 2, **HCOMM, seed=seed)).core == WORKING_BLOCK
    assert fault_plan(Scenario(Injection.PERTURB, 2)) is None
    assert hook_occurrences(Scenario(Injection.WRONG_SPLITK, 2, local_matmul=1)) == 2


def test_every_rank_builds_the_same_plan():
    s = Scenario(Injection.KILL_RANK, 4, seed=12345)
    plans = [fault_plan(s) for _ in range(4)]
    assert len({(p.fault, p.rank, p.core, p.nth) for p in plans}) == 1


def test_scenario_argv_round_trips_through_the_worker_parser():
    s = Scenario(Injection.SWAP_WAIT_ORDER, 3, **HCOMM, local_matmul=1, hccl_server=AICPU, ori_m=72, ka=64,
                 n=32, head_tile_size=16, block_dim=1, seed=99, timeout=1.5, reference=True)
    argv = s.argv()
    assert argv[:2] == ["-m", "mc2emu.stress.worker"]
    a = _parser().parse_args(argv[2:])
    back = Scenario(Injection(a.injection), 3, Impl(a.impl), a.local_matmul, WaitOrder(a.wait_order),
                    HcclServerType(a.hccl_server), a.ori_m, a.ka, a.n, a.head_tile_size, a.block_dim, a.seed,
                    a.timeout, a.reference, a.golden, StressOp(a.op))
    assert back == s
    ag = Scenario(Injection.SKIP_FLAG0_WAIT, 2, wait_order=WaitOrder.IN_ORDER, ori_m=525, op=StressOp.AG)
    assert _parser().parse_args(ag.argv()[2:]).op == StressOp.AG.value


# -- all_gather_quant_matmul scenarios -------------------------------------------------------------------------
AG = dict(op=StressOp.AG, ori_m=525, ka=128, n=64, block_dim=2)


@pytest.mark.parametrize("injection, expected", [
    (Injection.DROP_SET_FLAG, DEADLOCK),
    (Injection.KILL_RANK, DEADLOCK),
    (Injection.EXTRA_SET_FLAG, "UNCONSUMED_FLAG"),
    (Injection.SKIP_WAIT_TILE, "UNCONSUMED_FLAG"),
    (Injection.SKIP_FLAG0_WAIT, "UNCONSUMED_FLAG"),
    (Injection.UPDATE_ADDR_BEFORE_WAIT, "ADDR_LIST_UPDATED_EARLY"),
    (Injection.SKIP_RELEASE_WAIT, "READ_OVERWRITTEN"),
    (Injection.DELAY_RANK, None),
    (Injection.PERTURB, None),
])
def test_ag_expected_diagnosis(injection, expected):
    s = Scenario(injection, 2, **AG)
    assert expected_diagnosis(s) == expected
    assert can_run(s) == []
    assert s.injection.ag_variant == (injection.value if any(w in injection.name for w in ("UPDATE", "FLAG0",
                                                                                           "RELEASE")) else None)


@pytest.mark.parametrize("scenario, reason", [
    (Scenario(Injection.WRONG_SPLITK, 2, **AG), "not an all_gather_quant_matmul injection"),
    (Scenario(Injection.NONE, 2, **AG), "not an all_gather_quant_matmul injection"),
    (Scenario(Injection.DROP_SET_FLAG, 4, **dict(AG, block_dim=3)), "PEER_NOT_SERVED"),
    (Scenario(Injection.DROP_SET_FLAG, 2, **dict(AG, ka=192)), "AG-2"),
    (Scenario(Injection.SKIP_RELEASE_WAIT, 2, **dict(AG, ori_m=48)), "never reuse a slot"),
])
def test_ag_scenarios_without_a_sound_expectation_are_refused(scenario, reason):
    assert any(reason in r for r in can_run(scenario)), can_run(scenario)


def test_ag_scenarios_past_15_rounds_are_not_refused():
    """The source has no commTurn limit (the former AG-4): 16 rounds (the CANN m = 8192) is a sound scenario."""
    assert can_run(Scenario(Injection.DROP_SET_FLAG, 2, **dict(AG, ori_m=16 * 512))) == []


def test_judge_ag_kernel_variants_need_no_fired_fault():
    """A source variant (no fault plan) is judged on its diagnosis: reported -> DETECTED, else MISSED."""
    s = Scenario(Injection.UPDATE_ADDR_BEFORE_WAIT, 2, **AG)
    base = {"status": "hazard", "fired": False, "t_start": 100.0, "t_end": 101.0, "t_exit": 101.5}
    hit = JobRun({0: dict(base, names=["ADDR_LIST_UPDATED_EARLY"]), 1: dict(base, names=[])}, 1, 5.0)
    assert judge(s, hit).verdict is Verdict.DETECTED
    miss = JobRun({0: dict(base, status="ok", names=[]), 1: dict(base, status="ok", names=[])}, 0, 5.0)
    assert judge(s, miss).verdict is Verdict.MISSED


def test_ag_hook_occurrences_follow_the_communication_rounds():
    """Flags 0..commTurn: 525 rows = one 512-row tile + a tail (commTurn 2), 48 rows one round, 1037 three."""
    for m, turns in ((525, 2), (48, 1), (1037, 3)):
        s = Scenario(Injection.SKIP_WAIT_TILE, 2, **dict(AG, ori_m=m))
        assert s.ag_comm_turn == turns and hook_occurrences(s) == turns + 1
    for seed in range(40):
        p = fault_plan(Scenario(Injection.DROP_SET_FLAG, 3, **dict(AG, ori_m=48, block_dim=3), seed=seed))
        assert p.core is None and p.nth <= 1, "commTurn 1: two Sets per AIV, the drawn one exists"


# -- the seeded draw (launch/stress.py) ------------------------------------------------------------------------
@pytest.mark.parametrize("family", ["deadlock", "pairing", "all", "ag"])
def test_draw_is_replayable_sound_and_covers_every_kind(driver, family):
    kinds = driver.FAMILIES[family]
    a = driver.draw_scenarios(family, 3 * len(kinds), seed=7, max_ranks=5)
    assert a == driver.draw_scenarios(family, 3 * len(kinds), seed=7, max_ranks=5)
    assert a != driver.draw_scenarios(family, 3 * len(kinds), seed=8, max_ranks=5)
    for s in a:
        assert can_run(s) == [], (s.label(), can_run(s))
        assert 2 <= s.ranks <= 5
        clean = expected_diagnosis(s) is None
        assert s.reference == s.golden == clean
    first_cycle = {(s.injection, s.impl, s.hccl_server if s.impl is Impl.HCOMM else None)
                   for s in a[: len(kinds)]}
    assert len(first_cycle) == len(kinds), "every kind once per cycle"


def test_driver_options(driver):
    a = driver.parse_args(["--iterations", "3", "--seed", "5"], "pairing")
    assert (a.family, a.iterations, a.seed, a.max_ranks) == ("pairing", 3, 5, 4)
    with pytest.raises(SystemExit):
        driver.parse_args(["--max-ranks", "1"], None)


# -- judging one job ---------------------------------------------------------------------------------------------
def rank_rec(rank, status="ok", names=(), t_start=100.0, t_end=100.5, **kw):
    exit_code = {"ok": 0, "killed": 137}.get(status, 3)
    return {"mc2emu_stress": "rank", "rank": rank, "status": status, "names": list(names), "fired": False,
            "t_fault": None, "t_start": t_start, "t_end": t_end, "exit_code": exit_code, **kw}


def job(*recs, rc=0, wall=3.0):
    return JobRun({r["rank"]: r for r in recs}, rc, wall)


DROP = Scenario(Injection.DROP_SET_FLAG, 2, timeout=2.0)
KILL = Scenario(Injection.KILL_RANK, 3, timeout=2.0)
EXTRA = Scenario(Injection.EXTRA_SET_FLAG, 2)
CLEAN = Scenario(Injection.PERTURB, 2, reference=True, golden=True)


def test_judge_deadlock_detected_with_latency_and_overrun():
    run = job(rank_rec(0, "deadlock", [DEADLOCK], t_end=106.0, t_exit=106.2),
              rank_rec(1, "deadlock", [DEADLOCK], t_end=105.0, fired=True, t_fault=100.2, t_exit=106.1), rc=3)
    o = judge(DROP, run)
    assert o.verdict is Verdict.DETECTED
    assert o.latency_s == pytest.approx(4.8) and o.overrun_s == pytest.approx(4.0)


def test_judge_kill_rank_needs_the_dead_rank_named():
    killed = rank_rec(2, "killed", fired=True, t_fault=101.0, t_start=101.0, t_end=101.0)
    named = rank_rec(0, "deadlock", [DEADLOCK], t_end=109.0, unresponsive=[2])
    other = rank_rec(1, "deadlock", [DEADLOCK], t_end=106.0, unresponsive=[])
    assert judge(KILL, job(named, other, killed, rc=137)).verdict is Verdict.DETECTED
    assert judge(KILL, job(named, other, killed, rc=137)).latency_s == pytest.approx(8.0)
    anon = dict(named, unresponsive=[])
    o = judge(KILL, job(anon, other, killed, rc=137))
    assert o.verdict is Verdict.MISSED


def test_judge_counts_hazards_filed_before_a_deadlock():
    s = Scenario(Injection.AIV_JOINS_AIC_KERNEL, 2, **HCOMM)
    run = job(rank_rec(0, "deadlock", [DEADLOCK], fired=True, t_fault=100.0, events=["AIV_RUNS_AIC_KERNEL"]),
              rank_rec(1, "deadlock", [DEADLOCK]), rc=3)
    o = judge(s, run)
    assert o.verdict is Verdict.DETECTED and o.seen == ["AIV_RUNS_AIC_KERNEL", DEADLOCK]


def test_judge_missed_not_fired_false_alarm():
    hit = rank_rec(1, "hazard", ["READ_UNWRITTEN"], fired=True, t_fault=100.1)
    assert judge(EXTRA, job(rank_rec(0), hit, rc=3)).verdict is Verdict.MISSED
    assert judge(EXTRA, job(rank_rec(0), rank_rec(1), rc=0)).verdict is Verdict.NOT_FIRED
    unfired_alarm = rank_rec(1, "hazard", ["UNCONSUMED_FLAG"])
    assert judge(EXTRA, job(rank_rec(0), unfired_alarm, rc=3)).verdict is Verdict.FALSE_ALARM
    assert judge(CLEAN, job(rank_rec(0, "deadlock", [DEADLOCK]), rank_rec(1), rc=3)).verdict is Verdict.FALSE_ALARM


def test_judge_clean_runs_must_match_reference_and_golden():
    ok = [rank_rec(r, sha=f"s{r}", ref_sha=f"s{r}", ulp=0) for r in (0, 1)]
    assert judge(CLEAN, job(*ok)).verdict is Verdict.CLEAN
    changed = dict(ok[1], sha="other")
    o = judge(CLEAN, job(ok[0], changed))
    assert o.verdict is Verdict.MISMATCH and "ranks [1]" in o.note
    far = dict(ok[0], ulp=2)
    assert judge(CLEAN, job(far, ok[1])).verdict is Verdict.MISMATCH


def test_judge_hang_and_broken_jobs():
    assert judge(DROP, job(rank_rec(0), rc=None, wall=90.0)).verdict is Verdict.HANG
    o = judge(DROP, job(rank_rec(0), rc=1))
    assert o.verdict is Verdict.BROKEN and "[1]" in o.note
    err = rank_rec(1, "error", message="TypeError: boom")
    o = judge(CLEAN, job(rank_rec(0), err, rc=1))
    assert o.verdict is Verdict.BROKEN and "boom" in o.note


def test_tally_counts_and_exit_status():
    t = Tally()
    assert not t.ok, "no iteration is no evidence"
    det = judge(DROP, job(rank_rec(0, "deadlock", [DEADLOCK], t_end=107.0),
                          rank_rec(1, "deadlock", [DEADLOCK], t_end=106.0, fired=True, t_fault=100.0), rc=3))
    clean = judge(CLEAN, job(*[rank_rec(r, sha="x", ref_sha="x") for r in (0, 1)]))
    for o in (det, clean, clean):
        t.add(o)
    assert t.ok and t.injected == 1 and t.clean_runs == 2 and t.worst_latency_s == pytest.approx(6.0)
    assert t.by_expected() == {DEADLOCK: (1, 1)}
    missed = judge(EXTRA, job(rank_rec(0), rank_rec(1, fired=True, t_fault=100.0)))
    t.add(missed)
    t.add(judge(DROP, job(rank_rec(0), rc=None, wall=90.0)))
    assert not t.ok
    assert t.by_expected() == {DEADLOCK: (1, 1), "UNCONSUMED_FLAG": (1, 0)}
    text = t.summary()
    for needle in ("iterations          5", "hazards injected    2   detected 1   missed 1", "hangs               1",
                   "false alarms 0", "worst latency       6.00 s", "result              FAIL"):
        assert needle in text, text
    assert {o.verdict for o in t.outcomes} & FAILING == {Verdict.MISSED, Verdict.HANG}


def test_parse_lines_prefers_own_lines_and_fills_in_from_the_gather():
    own0 = rank_rec(0, "deadlock", [DEADLOCK])
    own2 = rank_rec(2, "killed")
    gathered = {"mc2emu_stress": "gathered", "results": {"0": dict(own0, status="stale"),
                                                         "1": rank_rec(1, "deadlock", [DEADLOCK])}, "missing": [2]}
    text = "\n".join(["noise", json.dumps(own0), "[mc2emu fault injection] rank 2 killed", json.dumps(own2),
                      "{not json mc2emu_stress", json.dumps(gathered),
                      json.dumps({"mc2emu_stress": "exit", "rank": 0, "t_exit": 107.5})])
    ranks, g = parse_lines(text)
    assert sorted(ranks) == [0, 1, 2] and g["missing"] == [2]
    assert ranks[0]["status"] == "deadlock" and ranks[0]["t_exit"] == 107.5 and "t_exit" not in ranks[1]
