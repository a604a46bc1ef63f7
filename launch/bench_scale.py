"""Cost growth of the protocol-only run (`data=False`) against the full run: per operator, wall, CPU seconds,
peak RSS per rank and events per second, for a list of rank counts and for m x 1, 4, 16 at a fixed R.

    python launch/bench_scale.py --op a2a --ranks 2 4 8 16 --mult 1 4 16 --m 64 --k 512 --n 1024 [--full]

Each configuration is one MPI job (`mc2emu.launcher`), `--worker` inside it: the operator once, checks on,
shape-only (`Payload`) inputs for protocol-only, no observer but the checks (as a user's run); every rank
reports its wall, CPU (all threads) and peak RSS; the table takes the max over ranks (wall, RSS) and the sum
(CPU). Events are counted by a second, untimed protocol-only run in the same job (an observer of every event
makes each one be built); the full row divides the same count (the two runs' records are equal,
tests/protocol/). `--full` runs the full data run beside each protocol-only one (random inputs, no golden).
`--m` is per rank (A2A oriM, AG m, QMRS M / R rows per rank; GMM, one NPU, run with `--ranks 1`: all M rows in
`--kw groups=G` equal count groups), `--k` the total K (A2A: Ka = K / R); `--kw NAME=VALUE` passes an operator
keyword (`protocol=slot_ring`, `kernel_variant=final_wait`). Every row prints the host load
(`os.getloadavg`): the figures are host time on a shared host.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

OPS = ("a2a", "ag", "qmrs", "gmm")
# A job that outlives this is ended and reported as a timeout.
JOB_TIMEOUT_S = 3600.0


def _inputs(op: str, R: int, m: int, k: int, n: int, data: bool, rank: int, groups: int = 1) -> list:
    import ml_dtypes
    import numpy as np

    from mc2emu.numerics.payload import Payload

    e4, e8 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
    if op == "a2a":   # x1 (R*oriM, Ka), x2 (N, R*Ka): k is the total K, Ka = K / R
        k //= R
        pairs = -(-k // 64)
        shapes = [((R * m, k), e4), ((R * m, pairs, 2), e8), ((n, R * k), e4), ((n, R * pairs, 2), e8)]
    elif op == "gmm":  # one NPU: x (M, K), weight (g, K, N), m = M split into `groups` equal count groups
        pairs = -(-k // 64)
        shapes = [((m, k), e4), ((m, pairs, 2), e8), ((groups, k, n), e4), ((groups, pairs, n, 2), e8)]
    else:             # AG: x1 (m, K); QMRS: x1 (R*m, K)
        rows = m if op == "ag" else R * m
        pairs = -(-k // 64)
        shapes = [((rows, k), e4), ((rows, pairs, 2), e8), ((n, k), e4), ((n, pairs, 2), e8)]
    gl = [np.array([m // groups] * (groups - 1) + [m - m // groups * (groups - 1)], np.int64)] if op == "gmm" else []
    if not data:
        return [Payload(s, d) for s, d in shapes] + gl
    rng = np.random.default_rng(rank)
    return [rng.integers(56, 72, s, dtype=np.uint8).view(d) if d == e4 else
            np.full(s, 127, dtype=np.uint8).view(d) for s, d in shapes] + gl


def _kw(pairs: list[str]) -> dict:
    """`--kw NAME=VALUE` pairs as keywords of the operator (an int where VALUE is one)."""
    out: dict = {}
    for p in pairs:
        name, _, value = p.partition("=")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    from mc2emu.launcher import idle_barrier
    from mc2emu.ops import (
        all_gather_quant_matmul,
        all_to_all_quant_matmul,
        grouped_matmul_mx,
        quant_matmul_reduce_scatter,
    )

    comm = MPI.COMM_WORLD
    R, rank = comm.Get_size(), comm.Get_rank()
    data = args.data == "full"
    ops: dict[str, Callable[..., Any]] = {"a2a": all_to_all_quant_matmul, "ag": all_gather_quant_matmul,
                                          "qmrs": quant_matmul_reduce_scatter, "gmm": grouped_matmul_mx}
    fn = ops[args.op]
    kw: dict = {"impl": args.impl} if args.impl else {}
    kw.update(_kw(args.kw))
    groups = int(kw.pop("groups", 1))
    if args.op == "gmm":  # one NPU per rank, no communicator
        kw["group_list_type"] = "count"
    else:
        kw["comm"] = comm
    ins = _inputs(args.op, R, args.m, args.k, args.n, data, rank, groups)
    count = [0]

    def counter(_e: object) -> None:
        count[0] += 1

    idle_barrier(comm)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    fn(*ins, data=data, timeout=args.deadline, **kw)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    if not data:   # the event count, untimed (the timed run builds only the events the checks take)
        fn(*ins, data=data, observers=[counter], timeout=args.deadline, **kw)
    rows = comm.gather((wall, cpu, ru1.ru_maxrss / 1024.0, count[0]), root=0)
    if rank == 0:
        assert rows is not None
        print("RESULT " + json.dumps({"wall": max(r[0] for r in rows), "cpu": sum(r[1] for r in rows),
                                      "rss_mb": max(r[2] for r in rows), "events": sum(r[3] for r in rows)}))


def run(op: str, R: int, m: int, k: int, n: int, data: str, impl: str | None, deadline: float,
        kw: tuple[str, ...] | list[str] = ()) -> dict | None:
    from mc2emu.launcher import mpiexec_command, run_job

    argv = [os.path.abspath(__file__), "--worker", "--op", op, "--m", str(m), "--k", str(k), "--n", str(n),
            "--data", data, "--deadline", str(deadline)] + (["--impl", impl] if impl else [])
    argv += [a for p in kw for a in ("--kw", p)]
    cmd, env = mpiexec_command(R, argv)
    t0 = time.perf_counter()
    out, _, rc = run_job(cmd, env, JOB_TIMEOUT_S)
    job_s = time.perf_counter() - t0
    for line in out.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            res["job_s"] = job_s
            return res
    sys.stderr.write(f"{op} R {R} m {m} {data}: exit {rc}\n{out[-3000:]}\n")
    return None


def _row(op: str, R: int, m: int, mode: str, res: dict | None, events: int | None) -> str:
    load = os.getloadavg()[0]
    if res is None:
        return f"{op:5} {R:3} {m:6} {mode:6} {'failed':>8}"
    rate = f"{events / max(res['wall'], 1e-9):10.0f}" if events else f"{'-':>10}"
    return (f"{op:5} {R:3} {m:6} {mode:6} {res['wall']:8.2f} {res['job_s']:8.2f} {res['cpu']:8.1f} "
            f"{res['rss_mb']:8.0f} {rate} {load:6.1f}")


def _rows(op: str, R: int, m: int, modes: list[str], args: argparse.Namespace) -> None:
    """One configuration: the protocol-only job (it counts the events), then the full one beside it."""
    events = None
    for mode in modes:
        res = run(op, R, m, args.k, args.n, mode, args.impl, args.deadline, args.kw)
        if mode == "proto" and res is not None:
            events = res["events"]
        print(_row(op, R, m, mode, res, events), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--op", choices=OPS, default="a2a")
    ap.add_argument("--impl", default=None, help="A2A: udma / hcomm; QMRS: rounds / per_block")
    ap.add_argument("--ranks", type=int, nargs="*", default=[2, 4, 8])
    ap.add_argument("--mult", type=int, nargs="*", default=[1, 4, 16], help="m multipliers at the first R")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--k", type=int, default=512)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--kw", action="append", default=[], metavar="NAME=VALUE",
                    help="an operator keyword, e.g. protocol=slot_ring (AG), kernel_variant=final_wait (QMRS)")
    ap.add_argument("--full", action="store_true", help="the full-data run beside each protocol-only one")
    ap.add_argument("--deadline", type=float, default=600.0, help="the wait deadline of the runs (s)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", choices=("full", "proto"), default="proto", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"{'op':5} {'R':>3} {'m':>6} {'mode':6} {'wall s':>8} {'job s':>8} {'CPU s':>8} {'RSS MB':>8} "
          f"{'events/s':>10} {'load':>6}", flush=True)
    modes = ["proto"] + (["full"] if args.full else [])
    for R in args.ranks:
        _rows(args.op, R, args.m, modes, args)
    R = args.ranks[0] if args.ranks else 2
    for mult in args.mult:
        _rows(args.op, R, args.m * mult, modes, args)


if __name__ == "__main__":
    main()
