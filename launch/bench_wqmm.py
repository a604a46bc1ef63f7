"""Emulated weight_quant_matmul (V+C, seed 001) against the plain numpy golden, side by side.

One rank, no MPI. Both sides get the same inputs: x standard normal (bf16), weight int8 uniform over
[-128, 127] (or fp8), per-channel bf16 scale (and offset); the emulator runs the whole kernel (tiling, 32 AIC
+ 64 AIV threads, the AIVs' dequant into L1 with the mode-4 flags, GM -> L1 -> L0 -> L0C -> fixpipe, checks
on), the golden is `golden_weight_quant_matmul` (ml_dtypes bf16 dequant, one FP32 BLAS matmul, cast). The
two run alternately (so load from other processes hits both alike); reports each side's best wall time (and
that run's CPU time), their ratio (emulator / golden; target <= 1.5) and the ULP distance of the outputs.

    python launch/bench_wqmm.py                       # (M, K, N) = (256, 4096, 4096) int8
    python launch/bench_wqmm.py --weight float8_e4m3fn --offset --trans-b --repeat 2
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one BLAS thread per caller: the emulator's cores are the parallelism

import argparse  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from bench_common import side_by_side  # noqa: E402

from mc2emu.numerics.compare import ulp_distance  # noqa: E402
from mc2emu.ops import golden_weight_quant_matmul, weight_quant_matmul  # noqa: E402

TARGET = 1.5
SCALE_DIV = 512.0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=256)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--weight", default="int8", choices=["int8", "float8_e4m3fn", "float8_e5m2"])
    ap.add_argument("--trans-b", action="store_true", help="weight stored (n, k)")
    ap.add_argument("--offset", action="store_true", help="with antiquant_offset")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions per side (best is reported)")
    ap.add_argument("--block-dim", type=int, default=None, help="AICs (default: the platform's 32)")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    bf16 = np.dtype(ml_dtypes.bfloat16)
    x = rng.standard_normal((args.m, args.k)).astype(bf16)
    wshape = (args.n, args.k) if args.trans_b else (args.k, args.n)
    if args.weight == "int8":
        w = rng.integers(-128, 128, wshape).astype(np.int8)
    else:
        w = (rng.standard_normal(wshape) * 4).astype(np.dtype(args.weight))
    s = (rng.uniform(1, 9, args.n) / SCALE_DIV).astype(bf16)
    o = (rng.standard_normal(args.n) * 3).astype(bf16) if args.offset else None
    print(f"weight_quant_matmul {args.weight}  (M, K, N) = ({args.m}, {args.k}, {args.n})  trans_b={args.trans_b}  "
          f"offset={args.offset}  best of {args.repeat} alternating runs, BLAS threads 1, {os.cpu_count()} host CPUs")
    best = side_by_side(lambda: weight_quant_matmul(x, w, s, o, trans_b=args.trans_b, block_dim=args.block_dim),
                        lambda: golden_weight_quant_matmul(x, w, s, o, trans_b=args.trans_b), args.repeat)
    (t_emu, cpu_emu, c_emu), (t_gold, cpu_gold, c_gold) = best["emulator"], best["golden"]
    ulp = ulp_distance(np.asarray(c_emu), np.asarray(c_gold))
    print(f"emulator  {t_emu:8.3f} s   (CPU {cpu_emu:.3f} s)")
    print(f"golden    {t_gold:8.3f} s   (CPU {cpu_gold:.3f} s)")
    print(f"ratio     {t_emu / t_gold:8.3f}   (emulator / golden wall time, target <= {TARGET})")
    ce, cg = np.asarray(c_emu).astype(np.float32), np.asarray(c_gold).astype(np.float32)
    rel = float(np.max(np.abs(ce - cg)) / max(float(np.max(np.abs(cg))), 1e-30))
    print(f"max ULP distance emulator vs golden: {ulp} (max |diff| / max |C| = {rel:.2e}: K-ordered L0C sums vs one "
          f"BLAS matmul; large ULP counts sit on cancelled, near-zero outputs)")


if __name__ == "__main__":
    main()
