"""Mutation gate: plant one curated one-line bug at a time in a temporary copy of the package and run the
tests that should catch it; print killed / survived per mutant. Exit 0 only when every mutant is killed.

Each mutant is located by an exact source pattern (file + text that must occur exactly once); when the code
has moved and the pattern is gone (or ambiguous), the gate stops with "pattern not found" before running
anything, never silently skips. A pattern may span several lines to make it unique; the change itself is
one line. Killed = the selected tests fail (or the run hangs past its timeout, which the suite's own
deadlines should prevent); survived = they pass with the bug planted.

    python launch/mutants.py                 # every mutant
    python launch/mutants.py --list          # names, files, tests
    python launch/mutants.py -k drain -k put # a subset (substring of the name)
    python launch/mutants.py --baseline      # first check the selected tests pass unmutated

Every later operator adds its own mutants to MUTANTS (one per behaviour that matters).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPIED = ("mc2emu", "tests", "launch", "pyproject.toml")   # launch: the stress driver the stress tests load
# A mutant whose tests run longer than this is counted as killed by timeout (the suite's own deadlines are
# seconds; a hang past this is still a failure the user would see).
RUN_TIMEOUT_S = 900
ENV_PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}

A2A_MPI = "tests/apace/test_all_to_all_quant_matmul_mpi.py"
A2A_MULTI = "tests/apace/test_a2a_multi_tile_mpi.py"
HAZ_MPI = "tests/apace/test_hazard_checks_mpi.py"
DIAG_MPI = "tests/apace/test_diagnoses_mpi.py"
AG_MPI = "tests/apace/test_all_gather_quant_matmul_mpi.py"
QBMM = "tests/blaze/test_quant_batch_matmul_mx.py"
BMMAD = "tests/blaze/test_block_mmad_mx.py"
INDEP = "tests/numerics/test_golden_independence.py"
DIAG = "tests/runtime/test_diagnoses.py"


@dataclass(frozen=True)
class Mutant:
    """One planted bug: in `path`, the unique text `old` becomes `new`; `serial` tests run with plain pytest,
    `mpi` tests under mpirun with `ranks` ranks (`--only-mpi`)."""

    name: str
    path: str
    old: str
    new: str
    serial: tuple[str, ...] = ()
    mpi: tuple[str, ...] = ()
    ranks: int = 2
    why: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _existing(*paths: str) -> tuple[str, ...]:
    """Test paths that exist in the source tree (tests added later are listed before they exist)."""
    return tuple(p for p in paths if (REPO / p.split("::")[0]).exists())


MUTANTS: list[Mutant] = [
    # -- numerics (shared by kernel and, before step 5, by the goldens) --------------------------------------
    Mutant("E8M0 scale decode doubles every scale", "mc2emu/numerics/block_scale.py",
           'return np.take(E8M0_LUT, as_codes(scale_codes, "scale_codes"))',
           'return np.take(E8M0_LUT, as_codes(scale_codes, "scale_codes")) * 2',
           serial=_existing(QBMM, BMMAD, INDEP), mpi=(A2A_MPI,),
           why="kernel-vs-golden tests must see a wrong scale decode (goldens decode independently)"),
    Mutant("element decode: mantissa fraction halved", "mc2emu/numerics/formats.py",
           "frac = man / float(1 << info.mbits)", "frac = man / float(2 << info.mbits)",
           serial=_existing(QBMM, BMMAD, INDEP),
           why="every element LUT is wrong; goldens decode through ml_dtypes / np.ldexp"),
    Mutant("E8M0 shared exponent off by one (OCP floor rule)", "mc2emu/numerics/block_scale.py",
           "scale_exp = np.clip(e - 1 - fmt.emax, E8M0_MIN_EXP, E8M0_MAX_EXP)",
           "scale_exp = np.clip(e - fmt.emax, E8M0_MIN_EXP, E8M0_MAX_EXP)",
           serial=("tests/numerics/test_quantize.py",)),
    Mutant("fixpipe cast truncates instead of RNE", "mc2emu/numerics/mx_matmul.py",
           "        return acc.astype(out.dtype)",
           "        return (acc.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(out.dtype)",
           serial=("tests/numerics/test_mx_matmul.py", QBMM)),
    # -- Blaze BlockMmad -------------------------------------------------------------------------------------
    Mutant("accumulation index: REMOTE mmads count from 1", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 0\n", "                remoteRankCnt = 1\n",
           mpi=(A2A_MPI,)),
    Mutant("splitKIdx out-of-order report removed", "mc2emu/blaze/gemm/block/split_k_sequence.py",
           "        elif splitKIdx != expected:", "        elif False:",
           serial=(BMMAD,)),
    Mutant("bias added on every split, not split 0 only", "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "needBiasInL1 = hasBias and iter0 == 0 and isFirstSplitK",
           "needBiasInL1 = hasBias and iter0 == 0",
           serial=(BMMAD, QBMM)),
    Mutant("bias dropped in the MMAD", "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "            tensorL0C += self._bt", "            pass",
           serial=(QBMM,), mpi=(A2A_MPI,)),
    Mutant("QBMM 3-D bias: batch offset missing", "mc2emu/blaze/gemm/kernel/kernel_qbmm_mx.py",
           "self.biasGmAddr_ = self.biasGmAddr_ + self.batchCOffset_ * n * self.BlockMmad.BiasType.itemsize",
           "self.biasGmAddr_ = self.biasGmAddr_",
           serial=(QBMM,)),
    # -- runtime ---------------------------------------------------------------------------------------------
    Mutant("atomic add overwrites", "mc2emu/runtime/gm.py",
           "dst[...] = (old + value.astype(np.float32)).astype(dtype)", "dst[...] = value.astype(dtype)",
           serial=(BMMAD, QBMM), mpi=(A2A_MPI,)),
    Mutant("flag pairing: Wait does not consume", "mc2emu/runtime/cross_core.py",
           "            c.value -= 1\n            token = c.tokens.popleft()",
           "            c.value -= 0\n            token = c.tokens.popleft()",
           serial=("tests/runtime/test_cross_core_flags.py",)),
    Mutant("flag pairing: leftover counts not reported", "mc2emu/runtime/cross_core.py",
           "                if c.value:\n", "                if c.value < 0:\n",
           serial=("tests/runtime/test_cross_core_flags.py",)),
    Mutant("truncated flag id report names the effective id as given", "mc2emu/runtime/cross_core.py",
           'the hardware uses id {eff}"', 'the hardware uses id {fid}"',
           serial=_existing(DIAG)),
    # -- A2A kernel: wait order, dependency tile, drain, rank order --------------------------------------------
    Mutant("in-order wait stops one tile early", "mc2emu/apace/comm_policy.py",
           "        while st.ready < dep:", "        while st.ready < dep - 1:",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("CalcDependTileIdx one tile early", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "    return min(lastRow // headTileSize, totalTiles - 1)",
           "    return max(min(lastRow // headTileSize, totalTiles - 1) - 1, 0)",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("mask drain stops one tile early", "mc2emu/apace/comm_policy.py",
           "        for t in range(totalTiles):\n            if not (st.waitedMask >> t) & 1:",
           "        for t in range(totalTiles - 1):\n            if not (st.waitedMask >> t) & 1:",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("in-order drain stops one tile early", "mc2emu/apace/comm_policy.py",
           "        self.WaitDep(totalTiles - 1)", "        self.WaitDep(totalTiles - 2)",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("REMOTE ranks walked in descending order", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 0\n                for rank in range(rankSize):",
           "                remoteRankCnt = 0\n                for rank in reversed(range(rankSize)):",
           mpi=_existing(A2A_MPI, A2A_MULTI), ranks=4),
    Mutant("DEFERRED_SYNC peers walked in descending order", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 1\n                for rank in range(rankSize):",
           "                remoteRankCnt = 1\n                for rank in reversed(range(rankSize)):",
           mpi=_existing(A2A_MPI, A2A_MULTI), ranks=4),
    # -- communication ---------------------------------------------------------------------------------------
    Mutant("UDMA data put ignores the tile offset", "mc2emu/apace/all_to_all_mx_quant_matmul_udma_impl.py",
           "dst = a.winA + rankId * dataChunkBytes + tileRow * a.rowBytes",
           "dst = a.winA + rankId * dataChunkBytes",
           mpi=_existing(A2A_MPI, A2A_MULTI)),
    Mutant("UDMA scale put ignores the tile offset", "mc2emu/apace/all_to_all_mx_quant_matmul_udma_impl.py",
           "dst = a.winScaleA + rankId * scaleChunkBytes + tileRow * a.scaleRowBytes",
           "dst = a.winScaleA + rankId * scaleChunkBytes",
           mpi=_existing(A2A_MPI, A2A_MULTI)),
    Mutant("TeamBarrier epoch not kept", "mc2emu/comm/team_barrier.py",
           "        self._epoch[job] = cnt", "        pass",
           mpi=("tests/comm/test_comm_team_barrier.py",)),
    Mutant("HCCL repeat stride uses the block pitch", "mc2emu/comm/hccl_task.py",
           "        return r * self.count * self.item", "        return r * self.block_pitch",
           mpi=_existing("tests/comm/test_comm_hccl.py", A2A_MULTI)),
    Mutant("HCCL recv block at count, not strideCount", "mc2emu/comm/hccl_server.py",
           "dst_off = recv_off + me * task.block_pitch + rep", "dst_off = recv_off + me * task.block_bytes + rep",
           mpi=("tests/comm/test_comm_hccl.py",)),
    # -- all_gather_quant_matmul (AllGatherQbmmMxKernel) ---------------------------------------------------------
    Mutant("AG: MAIN round data offset advances by the scale stride", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "self.curRoundDataOff_ += delta * self.tileMDataStride_",
           "self.curRoundDataOff_ += delta * self.tileMScaleStride_",
           mpi=(AG_MPI,)),
    Mutant("AG: TAIL C rows written at the block start", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "        tailCOff = tailRowOff * params.cBytesPerM", "        tailCOff = 0",
           mpi=(AG_MPI,)),
    Mutant("AG: UpdateAddrList-before-wait check removed", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "        if dep not in self._waitedIds:", "        if False:",
           mpi=(AG_MPI,)),
    Mutant("AG L2: B streams without the full-M gate", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock and bAlignForL2Stream",
           "            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if bAlignForL2Stream",
           mpi=(AG_MPI,)),
    Mutant("AG: the wait_tile fault hook skips nothing", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "            if faults.fault is Fault.SKIP_WAIT_TILE:\n                return",
           "            if faults.fault is Fault.SKIP_WAIT_TILE:\n                pass",
           serial=("tests/check/test_stress_jobs.py::test_ag_fault_is_caught",)),
    Mutant("AG stress: a skipped AG wait is expected clean", "mc2emu/check/stress_model.py",
           "    if inj in (Injection.EXTRA_SET_FLAG, Injection.SKIP_WAIT_TILE):\n        return \"UNCONSUMED_FLAG\"",
           "    if inj is Injection.EXTRA_SET_FLAG:\n        return \"UNCONSUMED_FLAG\"",
           serial=("tests/check/test_stress_units.py",)),
    Mutant("AG stress: kernel variants judged as unfired faults", "mc2emu/check/stress_model.py",
           "    if expected is not None and (fired or s.injection is Injection.NONE or s.injection in AG_VARIANTS):",
           "    if expected is not None and (fired or s.injection is Injection.NONE):",
           serial=("tests/check/test_stress_units.py",)),
    Mutant("AG CLI: crossing prediction misses the first lost row", "mc2emu/cli/operators/all_gather.py",
           "        for row in range(region_end, end):", "        for row in range(region_end + 1, end):",
           serial=("tests/cli/test_cli_units.py",)),
    Mutant("CLI: an expected hazard's predicted damage is not compared", "mc2emu/cli/report.py",
           "            if exp.compare:", "            if False:",
           serial=("tests/cli/test_cli_units.py",)),
    # -- happens-before content records ------------------------------------------------------------------------
    Mutant("HB: a read record shared without comparing its bytes", "mc2emu/check/happens_before.py",
           "        if last is not None and last.same_bytes(raw):", "        if last is not None:",
           serial=("tests/checkers/test_read_content.py",)),
    Mutant("HB: a read inside a put compared against nothing", "mc2emu/check/happens_before.py",
           "            return int(np.count_nonzero(now != self.data)), int(self.data.size), lo, hi",
           "            return 0, int(self.data.size), lo, hi",
           serial=("tests/checkers/test_read_content.py",), mpi=("tests/checkers/test_put_visibility_mpi.py",)),
    # -- diagnoses -------------------------------------------------------------------------------------------
    Mutant("deadlock report loses the wait lines", "mc2emu/check/deadlock.py",
           '            lines.append(f"    {line}")', "            pass",
           mpi=_existing(HAZ_MPI, DIAG_MPI)),
    Mutant("deadlock report loses the releaser lines", "mc2emu/check/deadlock.py",
           '            lines.append(f"      releaser {where} {who}: {st}")', "            pass",
           mpi=_existing(HAZ_MPI, DIAG_MPI)),
    Mutant("READ_BEFORE_WAIT names the reader as the putting core", "mc2emu/check/happens_before.py",
           "window=window, lo=max(lo, plo), hi=min(hi, phi), put_rank=pr, put_core=pcore)",
           "window=window, lo=max(lo, plo), hi=min(hi, phi), put_rank=pr, put_core=core)",
           mpi=_existing("tests/checkers/test_happens_before_mpi.py", HAZ_MPI, DIAG_MPI)),
    # -- tiling ----------------------------------------------------------------------------------------------
    Mutant("A2A tiling: head tile count rounds up", "mc2emu/tiling/all_to_all_quant_matmul_tiling.py",
           "    tile_cnt = ori_m // head_tile_size", "    tile_cnt = -(-ori_m // head_tile_size)",
           serial=("tests/apace/test_a2a_tiling.py",)),
    Mutant("SWAT tiling: scaleKL1 takes the larger operand", "mc2emu/tiling/quant_matmul_tiling_swat.py",
           "return min(r.scaleFactorA * r.stepKa * r.baseK, r.scaleFactorB * r.stepKb * r.baseK)",
           "return max(r.scaleFactorA * r.stepKa * r.baseK, r.scaleFactorB * r.stepKb * r.baseK)",
           serial=("tests/blaze/test_tiling_swat.py",)),
]


class PatternError(RuntimeError):
    pass


def locate(root: Path, m: Mutant) -> str:
    """The mutated text of m.path under root; PatternError when the pattern is absent or ambiguous."""
    src = (root / m.path).read_text() if (root / m.path).exists() else None
    if src is None:
        raise PatternError(f"{m.name}: file {m.path} not found (the code moved: update the mutant)")
    n = src.count(m.old)
    if n != 1:
        what = "pattern not found" if n == 0 else f"pattern ambiguous ({n} matches)"
        raise PatternError(f"{m.name}: {what} in {m.path}: {m.old!r} (the code moved: update the mutant)")
    mutated = src.replace(m.old, m.new)
    if mutated == src:
        raise PatternError(f"{m.name}: the replacement changes nothing")
    return mutated


def mpiexec() -> str:
    for name in ("mpiexec", "mpirun"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no mpiexec on PATH")


def run_tests(root: Path, m: Mutant, timeout: float) -> tuple[bool, str]:
    """(tests passed, short reason). Serial tests first, then the MPI tests."""
    env = dict(os.environ, PYTHONPATH=str(root), **ENV_PINS)
    cmds = []
    if m.serial:
        cmds.append([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.serial])
    if m.mpi:
        cmds.append([mpiexec(), "-n", str(m.ranks), sys.executable, "-m", "pytest", "--only-mpi", "-x", "-q",
                     "-p", "no:cacheprovider", *m.mpi])
    for cmd in cmds:
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            return False, f"timeout after {timeout:.0f} s"
        if proc.returncode != 0:
            out = proc.stdout + proc.stderr
            failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))
                      or " FAILED " in ln]
            return False, (failed[0].strip()[:110] if failed else f"exit {proc.returncode}")
    return True, "tests pass"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", action="append", default=[], help="run mutants whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--baseline", action="store_true", help="check the selected tests pass unmutated first")
    ap.add_argument("--src", type=Path, default=REPO, help="tree to copy (default: this repository)")
    ap.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S)
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.k or any(k.lower() in m.name.lower() for k in args.k)]
    if args.list:
        for i, m in enumerate(chosen, 1):
            print(f"{i:2d}. {m.name}  [{m.path}]\n      serial: {' '.join(m.serial) or '-'}\n"
                  f"      mpi -n {m.ranks}: {' '.join(m.mpi) or '-'}")
        return 0
    # Every pattern must be found before anything runs: a moved code path is an error, not a skip.
    errors = []
    for m in chosen:
        try:
            locate(args.src, m)
        except PatternError as exc:
            errors.append(str(exc))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mc2emu-mutants-") as tmp:
        root = Path(tmp)
        for item in COPIED:
            src = args.src / item
            if src.is_dir():
                shutil.copytree(src, root / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, root / item)
        if args.baseline:
            for m in chosen:
                ok, why = run_tests(root, m, args.timeout)
                if not ok:
                    print(f"baseline fails for {m.name}: {why}", file=sys.stderr)
                    return 2
            print("baseline: the selected tests pass unmutated")
        rows = []
        width = max(len(m.name) for m in chosen)
        print(f"{'#':>2}  {'mutant':<{width}}  {'result':<8}  {'s':>5}  reason")
        for i, m in enumerate(chosen, 1):
            path = root / m.path
            original = path.read_text()
            path.write_text(locate(root, m))
            t0 = time.monotonic()
            try:
                passed, why = run_tests(root, m, args.timeout)
            finally:
                path.write_text(original)
            result = "survived" if passed else "killed"
            rows.append((m, result))
            print(f"{i:2d}  {m.name:<{width}}  {result:<8}  {time.monotonic() - t0:5.0f}  {why}", flush=True)
    killed = sum(r == "killed" for _, r in rows)
    print(f"\n{killed} killed, {len(rows) - killed} survived of {len(rows)} mutants")
    for m, r in rows:
        if r == "survived":
            print(f"  SURVIVED: {m.name} ({m.path}); tests: {' '.join(m.serial + m.mpi)}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
