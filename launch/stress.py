"""Fault-injection stress of all_to_all_quant_matmul: N seeded iterations, one MPI job each, every one judged
against the diagnosis its fault must produce (mc2emu.stress.worker).

    python launch/stress.py [--family all|deadlock|pairing|ag] [--iterations 12] [--seed 0] [--max-ranks 4]
                            [--time-limit 300] [--hard-timeout 90] [--timeout 2]

Families: "deadlock", the faults that hang (drop_set_flag; skip_wait_tile on hcomm/CCU; kill_rank; the
source's hcomm localMatmul 2 under CCU); "pairing", the faults that unbalance pairs or break ordering
(extra_set_flag; skip_wait_tile on UDMA and on hcomm/AICPU; wrong_splitk; swap_wait_order; hcomm
localMatmul 2 under AICPU; no_atomic_add; aiv_joins_aic_kernel) and clean runs (delay_rank, seeded
perturbation) whose C must equal an unperturbed run's bitwise and the golden within 1 ULP. "ag", the same
for all_gather_quant_matmul (`StressOp.AG`): drop_set_flag and kill_rank (DEADLOCK), extra_set_flag and
skip_wait_tile (UNCONSUMED_FLAG), the kernel's reproduced hazards skip_flag0_wait (UNCONSUMED_FLAG),
skip_release_wait (the slot ring with one slot, the AIV without its release wait: READ_OVERWRITTEN) and
update_addr_before_wait (ADDR_LIST_UPDATED_EARLY), delay_rank and perturbation (clean, bitwise, golden),
both wait orders, shapes of one to three communication rounds (a ragged tail or none).
`stress_deadlock.py` / `stress_pairing.py` are this driver with the family fixed. Kinds run in a shuffled
round robin, each with a random valid configuration (impl, localMatmul, wait order, HCCL server), rank
count (2..max), shape and fault seed.

Each iteration is one `mpiexec -n R python -m mc2emu.stress.worker ...` (printed for every failure, to
replay it) with a hard timeout: a job still running then is killed (only the processes it started, by
pid) and counted as a HANG. No iteration starts after --time-limit seconds. Exit status 0 only when
every fired fault was diagnosed as expected, no clean run raised or changed C, nothing hung or broke.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from dataclasses import dataclass

import numpy as np

from mc2emu import launcher
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.launcher import mpiexec_command
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.stress.judge import JobRun, Outcome, Tally, failures, judge, parse_lines
from mc2emu.stress.scenario import AG_SLOT_RING, DEFAULT_TIMEOUT_S, Injection, Scenario, StressOp, expected_diagnosis

# A job normally ends within the emulator deadline + 3 s of collection + 3 s of linger (+ start-up of up to
# 4 ranks on 2 cores, a few seconds); past this it is hung.
DEFAULT_HARD_TIMEOUT_S = 90.0
DEFAULT_TIME_LIMIT_S = 300.0
DEFAULT_ITERATIONS = 12
# Every rank's environment beyond mpiexec_command's BLAS pins.
RANK_ENV_EXTRA = {"UCX_LOG_LEVEL": "error", "PYTHONUNBUFFERED": "1"}
# Hydra (MPICH) ends every rank once one exits non-zero; KILL_RANK's survivors must live to report. A job
# that then stays up is the hard timeout's business.
HYDRA_NO_CLEANUP = "-disable-auto-cleanup"

# -- what to draw -------------------------------------------------------------------------------------------
Config = tuple[Impl, int, WaitOrder, HcclServerType]
CCU, AICPU = HcclServerType.CCU, HcclServerType.AICPU
UDMA = tuple((Impl.UDMA, lm, wo, CCU) for lm in (0, 1, 2) for wo in WaitOrder)
HCOMM_CCU = tuple((Impl.HCOMM, lm, WaitOrder.IN_ORDER, CCU) for lm in (0, 1))
HCOMM_AICPU = tuple((Impl.HCOMM, lm, WaitOrder.IN_ORDER, AICPU) for lm in (0, 1))
VALID = UDMA + HCOMM_CCU + HCOMM_AICPU


@dataclass(frozen=True)
class Kind:
    """One row of a family: an injection and the configurations it is drawn with."""

    name: str
    injection: Injection
    configs: tuple[Config, ...]
    op: StressOp = StressOp.A2A


DEADLOCK_KINDS = (
    Kind("drop_set_flag", Injection.DROP_SET_FLAG, UDMA),
    Kind("skip_wait_tile/ccu", Injection.SKIP_WAIT_TILE, HCOMM_CCU),
    Kind("kill_rank", Injection.KILL_RANK, VALID),
    Kind("hcomm_lm2/ccu", Injection.NONE, ((Impl.HCOMM, 2, WaitOrder.IN_ORDER, CCU),)),
)
PAIRING_KINDS = (
    Kind("extra_set_flag", Injection.EXTRA_SET_FLAG, UDMA),
    Kind("skip_wait_tile/udma", Injection.SKIP_WAIT_TILE, UDMA),
    Kind("skip_wait_tile/aicpu", Injection.SKIP_WAIT_TILE, HCOMM_AICPU),
    Kind("wrong_splitk", Injection.WRONG_SPLITK, VALID),
    Kind("swap_wait_order", Injection.SWAP_WAIT_ORDER, HCOMM_CCU + HCOMM_AICPU),
    Kind("hcomm_lm2/aicpu", Injection.NONE, ((Impl.HCOMM, 2, WaitOrder.IN_ORDER, AICPU),)),
    Kind("no_atomic_add", Injection.NO_ATOMIC_ADD, tuple(c for c in VALID if c[1] == 1)),
    Kind("aiv_joins_aic_kernel", Injection.AIV_JOINS_AIC_KERNEL, HCOMM_CCU + HCOMM_AICPU),
    Kind("delay_rank", Injection.DELAY_RANK, VALID),
    Kind("perturb", Injection.PERTURB, VALID),
)
# all_gather_quant_matmul: UDMA only; a config names the wait order (impl, localMatmul, server are unused).
AG_CONFIGS = tuple((Impl.UDMA, 0, wo, CCU) for wo in WaitOrder)
AG_KINDS = (*(Kind(f"ag/{inj.value}", inj, AG_CONFIGS, StressOp.AG) for inj in (
    Injection.DROP_SET_FLAG, Injection.KILL_RANK, Injection.EXTRA_SET_FLAG, Injection.SKIP_WAIT_TILE,
    Injection.SKIP_FLAG0_WAIT, Injection.UPDATE_ADDR_BEFORE_WAIT, Injection.DELAY_RANK, Injection.PERTURB)),
    # the slot ring's AIV reusing a slot without the release: in-order waits, two rounds or more
    Kind("ag/skip_release_wait", Injection.SKIP_RELEASE_WAIT, ((Impl.UDMA, 0, WaitOrder.IN_ORDER, CCU),),
         StressOp.AG))
FAMILIES = {"deadlock": DEADLOCK_KINDS, "pairing": PAIRING_KINDS, "all": DEADLOCK_KINDS + PAIRING_KINDS,
            "ag": AG_KINDS}
# Shapes: 3-4 head tiles of 16 or 32 rows plus maybe a half tail (every seeded hook occurrence exists), Ka of
# one or two scale pairs, N of one to three base columns. Small: a job is start-up and protocol, not FLOPs.
HEAD_TILES, TILE_COUNTS, KA_CHOICES, N_CHOICES = (16, 32), (3, 4), (64, 128), (32, 64, 96)
MIN_RANKS = 2
EXTRA_BLOCKS = 3   # block_dim drawn from R .. R + 2 (UDMA: AIV block r serves peer r)
# AllGather rows per rank (ST rule tileM = min(512, m)): one round; one 512-row tile + a 13-row tail; two
# tiles + a tail (the character of the CANN cases 2061 / 4109 at reduced m). K of two or four scale pairs.
AG_M_CHOICES, AG_K_CHOICES = (48, 525, 1037), (128, 256)


def draw_ag(kind: Kind, rng: np.random.Generator, max_ranks: int, timeout: float) -> Scenario:
    _, _, wo, _ = kind.configs[int(rng.integers(len(kind.configs)))]
    ranks = int(rng.integers(MIN_RANKS, max(MIN_RANKS, max_ranks) + 1))
    clean = expected_diagnosis(Scenario(kind.injection, ranks, op=StressOp.AG)) is None
    m_choices = AG_M_CHOICES if kind.injection not in AG_SLOT_RING else AG_M_CHOICES[1:]   # >= 2 rounds
    return Scenario(kind.injection, ranks, wait_order=wo, ori_m=int(rng.choice(m_choices)),
                    ka=int(rng.choice(AG_K_CHOICES)), n=int(rng.choice(N_CHOICES)),
                    block_dim=ranks + int(rng.integers(EXTRA_BLOCKS)), seed=int(rng.integers(1, 2**31 - 1)),
                    timeout=timeout, reference=clean, golden=clean, op=StressOp.AG)


def draw_scenarios(family: str, iterations: int, seed: int, max_ranks: int = 4,
                   timeout: float = DEFAULT_TIMEOUT_S) -> list[Scenario]:
    """`iterations` scenarios of `family`, replayable from `seed`: every kind once per shuffled cycle."""
    kinds = FAMILIES[family]
    rng = np.random.default_rng(seed)
    out: list[Scenario] = []
    order: list[int] = []
    while len(out) < iterations:
        if not order:
            order = [int(i) for i in rng.permutation(len(kinds))]
        kind = kinds[order.pop(0)]
        if kind.op is StressOp.AG:
            out.append(draw_ag(kind, rng, max_ranks, timeout))
            continue
        impl, lm, wo, server = kind.configs[int(rng.integers(len(kind.configs)))]
        ranks = int(rng.integers(MIN_RANKS, max(MIN_RANKS, max_ranks) + 1))
        head = int(rng.choice(HEAD_TILES))
        tail = int(rng.choice((0, head // 2)))
        # hcomm under AICPU runs one AIC: with more, block 0's Finalize race makes the verdict timing's
        block_dim = 1 if (impl, server) == (Impl.HCOMM, AICPU) else ranks + int(rng.integers(EXTRA_BLOCKS))
        clean = expected_diagnosis(Scenario(kind.injection, ranks, impl, lm, wo, server)) is None
        out.append(Scenario(kind.injection, ranks, impl, lm, wo, server,
                            ori_m=head * int(rng.choice(TILE_COUNTS)) + tail, ka=int(rng.choice(KA_CHOICES)),
                            n=int(rng.choice(N_CHOICES)), head_tile_size=head, block_dim=block_dim,
                            seed=int(rng.integers(1, 2**31 - 1)), timeout=timeout, reference=clean,
                            golden=clean))
    return out


# -- running one job -----------------------------------------------------------------------------------------
def job_command(s: Scenario) -> tuple[list[str], dict[str, str]]:
    cmd, env = mpiexec_command(s.ranks, s.argv())
    env.update(RANK_ENV_EXTRA)
    if "open" not in os.path.realpath(cmd[0]).lower():
        cmd.insert(1, HYDRA_NO_CLEANUP)
    return cmd, env


def run_job(s: Scenario, hard_timeout: float) -> JobRun:
    """Run `s` under mpiexec (`launcher.run_job`): a job still running after `hard_timeout` s is ended
    (returncode None); any process of the job left after it ended is ended too."""
    t0 = time.monotonic()
    out, err, rc = launcher.run_job(*job_command(s), hard_timeout, merge_stderr=False)
    results, _ = parse_lines(out)
    return JobRun(results, rc, time.monotonic() - t0, err[-4000:])


def run_scenario(s: Scenario, hard_timeout: float) -> Outcome:
    return judge(s, run_job(s, hard_timeout))


def replay_command(s: Scenario) -> str:
    cmd, _ = job_command(s)
    return shlex.join(cmd)


# -- the driver --------------------------------------------------------------------------------------------
def parse_args(argv: list[str], family: str | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if family is None:
        p.add_argument("--family", default="all", choices=sorted(FAMILIES), help="which kinds (default all)")
    p.add_argument("--iterations", "-n", type=int, default=DEFAULT_ITERATIONS,
                   help=f"number of jobs (default {DEFAULT_ITERATIONS})")
    p.add_argument("--seed", type=int, default=0, help="master seed of the draw (default 0)")
    p.add_argument("--max-ranks", type=int, default=4, help="rank counts drawn from 2..max (default 4)")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT_S,
                   help=f"start no job after this many seconds (default {DEFAULT_TIME_LIMIT_S:.0f})")
    p.add_argument("--hard-timeout", type=float, default=DEFAULT_HARD_TIMEOUT_S,
                   help=f"end a job after this many seconds, a HANG (default {DEFAULT_HARD_TIMEOUT_S:.0f})")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help=f"emulator wait deadline inside each job (default {DEFAULT_TIMEOUT_S:.0f})")
    a = p.parse_args(argv)
    a.family = family or a.family
    if a.max_ranks < MIN_RANKS:
        p.error(f"--max-ranks must be at least {MIN_RANKS}")
    return a


def main(argv: list[str] | None = None, family: str | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv, family)
    scenarios = draw_scenarios(a.family, a.iterations, a.seed, a.max_ranks, a.timeout)
    print(f"stress {a.family}: {len(scenarios)} iterations, seed {a.seed}, ranks {MIN_RANKS}..{a.max_ranks}, "
          f"time limit {a.time_limit:.0f} s, hard timeout {a.hard_timeout:.0f} s", flush=True)
    tally = Tally()
    t0 = time.monotonic()
    for i, s in enumerate(scenarios):
        if time.monotonic() - t0 > a.time_limit:
            print(f"time limit reached: {len(scenarios) - i} iteration(s) not started", flush=True)
            break
        outcome = run_scenario(s, a.hard_timeout)
        tally.add(outcome)
        print(f"[{i + 1:>3}/{len(scenarios)}] {outcome.line()}", flush=True)
    print(f"\n{tally.summary()}\nelapsed             {time.monotonic() - t0:.0f} s")
    bad = failures(tally.outcomes)
    if bad:
        print("\nreplay:")
        for o in bad:
            print(f"  {o.verdict.value}: {replay_command(o.scenario)}")
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
