"""Emulated GroupedMatmul MX (mc2emu.ops.grouped_matmul_mx) against the plain numpy golden, side by side.

One rank, no MPI. An MoE-like case by default: g = 8 experts, M = 4096 rows in total (ragged: the sizes are a
seeded draw around M / g, one expert empty), K 4096, N 2048, FP8 E4M3 (elements uniform(1, 8) with random
signs, scales 2^-1 .. 2^1), split-M with a count list. The emulator runs the full kernel (TilingGMM, the AIC
threads, GM -> L1 -> L0 -> L0C -> fixpipe, checks on, the write-count check); the golden is
`golden_grouped_matmul_mx` (decode, repeat scales, one FP32 BLAS matmul per group, cast). The two run
alternately (load from other processes hits both alike); reports each side's best wall time (and that run's
CPU time), the ratio emulator / golden (target <= 1.3) and the bf16 ULP distance of the two outputs.

    python launch/bench_gmm.py                        # g 8, M 4096, K 4096, N 2048
    python launch/bench_gmm.py --m 1024 --repeat 5 --trans-b
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one BLAS thread per caller: the emulator's cores are the parallelism

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from bench_common import bf16_ulp, side_by_side  # noqa: E402

from mc2emu.numerics import ElemFormat, encode_elements  # noqa: E402
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE  # noqa: E402
from mc2emu.ops import golden_grouped_matmul_mx, grouped_matmul_mx  # noqa: E402

ST_LOW, ST_HIGH = 1.0, 8.0  # CANN ST elements: uniform(1, 8)
E8M0_ONE = 127  # E8M0 code of 2^0


def moe_sizes(m: int, g: int, rng: np.random.Generator) -> np.ndarray:
    """Ragged expert sizes summing to m: a Dirichlet draw, one expert (index 1) empty."""
    w = rng.dirichlet(np.full(g, 2.0))
    w[1 % g] = 0.0
    sizes = np.floor(w / w.sum() * m).astype(np.int64)
    sizes[0] += m - sizes.sum()
    return sizes


def make_inputs(m: int, n: int, k: int, g: int, trans_b: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    elem = ElemFormat.E4M3

    def codes(shape: tuple[int, ...]) -> np.ndarray:
        vals = rng.uniform(ST_LOW, ST_HIGH, shape) * rng.choice([-1.0, 1.0], shape)
        return encode_elements(vals.astype(np.float32), elem).view(elem.storage_dtype)

    pairs = -(-k // MXFP_DIVISOR_SIZE)
    return {"x": codes((m, k)), "x_scale": rng.integers(E8M0_ONE - 1, E8M0_ONE + 2, (m, pairs, 2), dtype=np.uint8),
            "weight": codes((g, n, k) if trans_b else (g, k, n)),
            "weight_scale": rng.integers(E8M0_ONE - 1, E8M0_ONE + 2,
                                         (g, n, pairs, 2) if trans_b else (g, pairs, n, 2), dtype=np.uint8),
            "group_list": moe_sizes(m, g, rng)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=4096, help="rows of x (all experts)")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--trans-b", action="store_true", help="weight stored [g, N, K]")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions per side (best is reported)")
    ap.add_argument("--block-dim", type=int, default=None, help="AICs (default: the platform's 32)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--variant", choices=("cgmct", "blaze", "blaze_sample"), default="cgmct",
                    help="the source kernel (docs/grouped-matmul-mx.md)")
    args = ap.parse_args(argv)

    inp = make_inputs(args.m, args.n, args.k, args.groups, args.trans_b, args.seed)
    ops = (inp["x"], inp["x_scale"], inp["weight"], inp["weight_scale"], inp["group_list"])
    kw = {"group_list_type": "count", "trans_b": args.trans_b}
    print(f"GroupedMatmul MX e4m3  g {args.groups}  M {args.m} (sizes {inp['group_list'].tolist()})  N {args.n}  "
          f"K {args.k}  trans_b={args.trans_b}  variant {args.variant}  best of {args.repeat} alternating runs, "
          f"BLAS threads 1, "
          f"{os.cpu_count()} host CPUs")
    best = side_by_side(lambda: grouped_matmul_mx(*ops, block_dim=args.block_dim, variant=args.variant, **kw),
                        lambda: golden_grouped_matmul_mx(*ops, **kw), args.repeat)
    (t_emu, cpu_emu, y_emu), (t_gold, cpu_gold, y_gold) = best["emulator"], best["golden"]
    print(f"emulator  {t_emu:8.3f} s   (CPU {cpu_emu:.3f} s)")
    print(f"golden    {t_gold:8.3f} s   (CPU {cpu_gold:.3f} s)")
    print(f"ratio     {t_emu / t_gold:8.3f}   (emulator / golden wall time, target <= 1.3)")
    print(f"max bf16 ULP distance emulator vs golden: {bf16_ulp(y_emu, y_gold)}")


if __name__ == "__main__":
    main()
