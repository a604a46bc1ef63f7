"""Where an MC2 operator's CPU goes: one call on every rank, with the thread CPU of the emulator's main parts.

Run as `mpirun -n R python launch/profile_op.py qmrs|ag [--m M --k K --n N] [--no-check] [--block-dim B]
[--impl rounds|per_block]`
(the defaults are the benches' shapes: `bench_qmrs`, `bench_ag`). Every rank makes one call of the operator on
the ST inputs; meanwhile each function of `PROFILED` accumulates the thread CPU (`time.thread_time`) spent
inside it, per rank, over all the rank's threads. The report gives, as a mean over the ranks:
- the rank's CPU seconds (`getrusage`: user + system, every thread), its system part, its main thread's CPU,
  its voluntary context switches and minor page faults;
- per function: CPU seconds, share of the rank's CPU, calls and µs per call. The times are inclusive (a
  function's time contains what it calls, so the rows overlap) and a call nested in a call of the same function
  counts once;
- the MMAD steps the emulator ran per rank, beside the floor's count for the same output and tiling
  (`mmad_floor.step_count`): the steps the benches' floor times;
- the hazards the call reported, if any (the shipped QMRS kernel's leftover flag-9 count, `--impl per_block`):
  the call is profiled all the same.

The wrappers add ~1 µs per call, so the rank's CPU is a little above what the bench measures. Host time only:
no output, read, event or report changes. `docs/performance.md` keeps what the reports showed.
"""

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import collections  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from mpi4py import MPI  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mmad_floor import step_count  # noqa: E402

from mc2emu.runtime import HazardError  # noqa: E402

# (module, attribute path): the emulator's main parts, each looked up through its class or module at call time.
PROFILED = (
    ("mc2emu.runtime.device", "Device.launch"),
    ("mc2emu.blaze.gemm.block.block_mmad_mx", "BlockMmadMx.__call__"),
    ("mc2emu.blaze.gemm.block.block_mmad_mx", "BlockMmadMx.Iterate"),
    ("mc2emu.blaze.gemm.block.block_mmad_mx", "BlockMmadMx.Mmad"),
    ("mc2emu.runtime.decode_cache", "DecodeCache.decoded"),
    ("mc2emu.blaze.gemm.tile.tile_mmad_mx", "dequant_chunk"),
    ("mc2emu.apace.block.qmm_mx_block_mmad_fragment", "QmmMxBlockMmadFragment.CopyAInL1"),
    ("mc2emu.apace.block.qmm_mx_block_mmad_fragment", "QmmMxBlockMmadFragment.CopyScalesInL1"),
    ("mc2emu.apace.block.qmm_mx_block_mmad_fragment", "QmmMxBlockMmadFragment.CopyL0C2GM"),
    ("mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl", "QuantMatmulReduceScatterRoundsImpl.RunMatmul"),
    ("mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl",
     "QuantMatmulReduceScatterRoundsImpl.RunAllToAllAndReduceSum"),
    ("mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl", "QuantMatmulReduceScatterRoundsImpl.ReduceSum"),
    ("mc2emu.apace.block_epilogue_all_to_all", "BlockEpilogueAlltoAll.CommProcess"),
    ("mc2emu.apace.quant_matmul_reduce_scatter_impl", "QuantMatmulReduceScatterImpl.ReadStatus"),
    ("mc2emu.apace.quant_matmul_reduce_scatter_impl", "QuantMatmulReduceScatterImpl.ReadRemoteDataAdd"),
    ("mc2emu.apace.all_gather_mx_matmul_udma_impl", "AllGatherMxMatmulUdmaImpl.MatmulProcess"),
    ("mc2emu.apace.all_gather_mx_matmul_udma_impl", "AllGatherMxMatmulUdmaImpl.AllGatherProcess"),
    ("mc2emu.runtime.gm", "GlobalMemory.read"),
    ("mc2emu.runtime.gm", "GlobalMemory.write"),
    ("mc2emu.comm.shmem", "Shmem.put_local_nbi"),
    ("mc2emu.comm.shmem", "Shmem.put_local_rows_nbi"),
    ("mc2emu.comm.shmem", "Shmem.quiet"),
    ("mc2emu.runtime.cross_core", "CrossCoreFlags.set_flag"),
    ("mc2emu.runtime.cross_core", "CrossCoreFlags.wait_flag"),
    ("mc2emu.runtime.sync_all", "sync_all_hard"),
    ("mc2emu.comm.team_barrier", "TeamBarrier.CrossDevice"),
    ("mc2emu.check.happens_before", "HappensBeforeChecker.__call__"),
    ("mc2emu.check.happens_before", "HappensBeforeChecker.finish"),
)
STEPS = "BlockMmadMx.Mmad"


class Profile:
    """Thread CPU and calls per profiled function, summed over the threads of this process."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._inside = threading.local()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            inside = self._inside.__dict__.setdefault("names", set())
            if name in inside:              # nested in a call of the same function: counted there
                return fn(*args, **kwargs)
            inside.add(name)
            t0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                dt = time.thread_time() - t0
                inside.discard(name)
                with self._lock:
                    self.cpu[name] += dt
                    self.calls[name] += 1
        return timed

    def install(self, targets: tuple[tuple[str, str], ...] = PROFILED) -> None:
        for module, path in targets:
            owner, attr = resolve(module, path)
            setattr(owner, attr, self.wrap(path, getattr(owner, attr)))


def resolve(module: str, path: str) -> tuple[Any, str]:
    """(the object holding the attribute, its name) of a `PROFILED` target: `path` walked down from `module`."""
    owner: Any = importlib.import_module(module)
    *outer, attr = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    return owner, attr


def _qmrs(args: argparse.Namespace, rank: int) -> tuple[Callable[..., Any], int]:
    from mc2emu.ops import gen_qmrs_st_inputs, quant_matmul_reduce_scatter

    inp = gen_qmrs_st_inputs(args.m, args.k, args.n, rank)
    return functools.partial(quant_matmul_reduce_scatter, inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"],
                             impl=args.impl, block_dim=args.block_dim, check=args.check, timeout=600), args.m


def _ag(args: argparse.Namespace, rank: int) -> tuple[Callable[..., Any], int]:
    from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs

    inp = gen_ag_st_inputs(args.m, args.k, args.n, rank)
    return functools.partial(all_gather_quant_matmul, inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"],
                             wait_order="in_order", block_dim=args.block_dim, check=args.check,
                             timeout=600), args.m * MPI.COMM_WORLD.Get_size()


# operator -> (call maker, default (m, k, n), the launch's matmul tiling from the call's stats); the call maker
# returns the call on the ST inputs and the rows of the output the rank's matmul computes (QMRS: its own C_j, in T
# rounds of one tiling; AG: the gathered x1).
OPERATORS = {"qmrs": (_qmrs, (4096, 4096, 2048), lambda launch: launch.round_tilings[0]),
             "ag": (_ag, (2061, 4096, 2560), lambda launch: launch.mm_tiling)}


def report(rows: list[dict[str, Any]], steps_floor: int) -> list[str]:
    """The per-rank means of the ranks' measurements (`rows`, one dict per rank) as report lines."""
    n = len(rows)

    def mean(key: str) -> float:
        return sum(r[key] for r in rows) / n

    total = mean("cpu")
    lines = [f"per rank (mean of {n}): CPU {total:.3f} s (system {mean('sys'):.3f}), main thread "
             f"{mean('main'):.3f} s, {mean('vcsw'):.0f} voluntary context switches, {mean('minflt'):.0f} minor faults",
             f"  {'CPU s':>8} {'share':>6} {'calls':>9} {'us/call':>9}  function (inclusive)"]
    names = sorted({k for r in rows for k in r["fn_cpu"]}, key=lambda k: -sum(r["fn_cpu"].get(k, 0.0) for r in rows))
    for name in names:
        cpu = sum(r["fn_cpu"].get(name, 0.0) for r in rows) / n
        calls = sum(r["fn_calls"].get(name, 0) for r in rows) / n
        share = 100 * cpu / total if total > 0 else 0.0
        per = 1e6 * cpu / calls if calls else 0.0
        lines.append(f"  {cpu:8.3f} {share:5.1f}% {calls:9.0f} {per:9.1f}  {name}")
    steps = sum(r["fn_calls"].get(STEPS, 0) for r in rows) / n
    lines.append(f"MMAD steps per rank: {steps:.0f} (the floor's tiling of the same output: {steps_floor})")
    hazards: collections.Counter[str] = collections.Counter()
    for r in rows:
        hazards.update(r.get("hazards", {}))
    if hazards:
        lines.append("hazards reported (all ranks): " + ", ".join(f"{h} x{c}" for h, c in sorted(hazards.items())))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", choices=sorted(OPERATORS))
    ap.add_argument("--m", type=int, default=None)
    ap.add_argument("--k", type=int, default=None)
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--block-dim", type=int, default=None)
    ap.add_argument("--impl", default="rounds", choices=("rounds", "per_block"),
                    help="qmrs: the design-spec kernel (rounds, the default) or the shipped one (per_block)")
    ap.add_argument("--no-check", dest="check", action="store_false", help="hazard checkers off")
    args = ap.parse_args()
    make, (m, k, n), tiling_of = OPERATORS[args.op]
    args.m, args.k, args.n = args.m or m, args.k or k, args.n or n
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    prof = Profile()
    prof.install()
    call, rows_out = make(args, rank)
    comm.Barrier()
    r0, main0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    hazards: collections.Counter[str] = collections.Counter()
    try:
        _, stats = call(return_stats=True)
    except HazardError as exc:   # a kernel's known hazard (per_block's leftover flag-9 count): still profiled
        hazards.update(h.hazard.name for h in exc.hazards)
        stats = exc.stats
    r1, main1 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
    mine = {"cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), "sys": r1.ru_stime - r0.ru_stime,
            "main": main1 - main0, "vcsw": r1.ru_nvcsw - r0.ru_nvcsw, "minflt": r1.ru_minflt - r0.ru_minflt,
            "fn_cpu": dict(prof.cpu), "fn_calls": dict(prof.calls), "hazards": dict(hazards)}
    rows = comm.gather(mine, root=0)
    if rank == 0:
        mm = tiling_of(stats)
        floor = step_count(rows_out, args.n, args.k, mm.baseM, mm.baseN, mm.baseK, mm.stepK * mm.baseK)
        impl = f" impl {args.impl}" if args.op == "qmrs" else ""
        print(f"{args.op}{impl}: m={args.m} k={args.k} n={args.n} R={comm.Get_size()} checks "
              f"{'on' if args.check else 'off'}, one call")
        for line in report(rows, floor):
            print(line)


if __name__ == "__main__":
    main()
