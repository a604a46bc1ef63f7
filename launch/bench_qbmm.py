"""Emulated QBMM MX (mc2emu.ops.quant_batch_matmul_mx_op) against the plain numpy CANN golden, side by side.

One rank, no MPI. Both sides get the same MX inputs (CANN ST style: elements uniform(1, 8) -> E4M3 or E5M2,
scales 2^0 / 2^1); the emulator runs the full kernel (tiling, 32 AIC threads, GM -> L1 -> L0 -> L0C ->
fixpipe, checks on), the golden is `golden_quant_batch_matmul_mx` (decode, repeat scales, one FP32 BLAS
matmul, cast). The two run alternately (so load from other processes hits both alike); reports each side's best wall
time (and that run's CPU time), their ratio (emulator / golden; target <= 1.3) and the bf16 ULP distance of
the two outputs.

    python launch/bench_qbmm.py                       # (M, N, K) = (2048, 4096, 3584) FP8 E4M3
    python launch/bench_qbmm.py --m 1024 --repeat 5 --profile
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one BLAS thread per caller: the emulator's cores are the parallelism

import argparse  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402
from bench_common import bf16_ulp, side_by_side  # noqa: E402

from mc2emu.numerics import ElemFormat, encode_elements, to_ascend_scale_a, to_ascend_scale_b  # noqa: E402
from mc2emu.numerics.golden import gen_ag_scales  # noqa: E402
from mc2emu.ops import golden_quant_batch_matmul_mx, quant_batch_matmul_mx  # noqa: E402

ST_LOW, ST_HIGH = 1.0, 8.0  # CANN ST elements: uniform(1, 8)
MX_BLOCK = 32


def make_inputs(m: int, n: int, k: int, elem: ElemFormat, trans_b: bool, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    a = encode_elements(rng.uniform(ST_LOW, ST_HIGH, (m, k)).astype(np.float32), elem).view(elem.storage_dtype)
    nb = -(-k // MX_BLOCK)
    if trans_b:
        b = encode_elements(rng.uniform(ST_LOW, ST_HIGH, (n, k)).astype(np.float32), elem).view(elem.storage_dtype)
        sb = to_ascend_scale_b(gen_ag_scales((n, nb), rng), trans=True)
    else:
        b = encode_elements(rng.uniform(ST_LOW, ST_HIGH, (k, n)).astype(np.float32), elem).view(elem.storage_dtype)
        sb = to_ascend_scale_b(gen_ag_scales((nb, n), rng))
    sa = to_ascend_scale_a(gen_ag_scales((m, nb), rng))
    return {"x1": a, "x1_scale": sa, "x2": b, "x2_scale": sb, "trans_b": trans_b}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=3584)
    ap.add_argument("--format", default="e4m3", choices=["e4m3", "e5m2"], help="FP8 element format")
    ap.add_argument("--trans-b", action="store_true", help="B stored (n, k) (the A2A instantiation)")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions per side (best is reported)")
    ap.add_argument("--block-dim", type=int, default=None, help="AICs (default: the platform's 32)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--profile", action="store_true", help="cProfile AIC0 in one more emulator run (top 25)")
    args = ap.parse_args(argv)

    elem = ElemFormat(args.format)
    inputs = make_inputs(args.m, args.n, args.k, elem, args.trans_b, args.seed)
    kw = {"trans_b": inputs["trans_b"]}
    ops = (inputs["x1"], inputs["x1_scale"], inputs["x2"], inputs["x2_scale"])
    print(f"QBMM MX {elem.value}  (M, N, K) = ({args.m}, {args.n}, {args.k})  trans_b={args.trans_b}  "
          f"best of {args.repeat} alternating runs, BLAS threads 1, {os.cpu_count()} host CPUs")
    best = side_by_side(lambda: quant_batch_matmul_mx(*ops, block_dim=args.block_dim, **kw),
                        lambda: golden_quant_batch_matmul_mx(*ops, **kw), args.repeat)
    (t_emu, cpu_emu, c_emu), (t_gold, cpu_gold, c_gold) = best["emulator"], best["golden"]
    print(f"emulator  {t_emu:8.3f} s   (CPU {cpu_emu:.3f} s)")
    print(f"golden    {t_gold:8.3f} s   (CPU {cpu_gold:.3f} s)")
    print(f"ratio     {t_emu / t_gold:8.3f}   (emulator / golden wall time, target <= 1.3)")
    print(f"max bf16 ULP distance emulator vs golden: {bf16_ulp(c_emu, c_gold)}")
    if args.profile:
        profile_core0(lambda: quant_batch_matmul_mx(*ops, block_dim=args.block_dim, **kw))


def profile_core0(run: Callable[[], object]) -> None:
    """cProfile the kernel body of AIC0 (one core's share of the work; times include waiting for the GIL)."""
    import cProfile
    import importlib
    import pstats

    op_module = importlib.import_module("mc2emu.ops.quant_batch_matmul_mx_host")  # the host program launches it

    kernel = op_module.kernel_qbmm_mx

    def profiled(ctx, *args, **kwargs):  # type: ignore[no-untyped-def]
        if ctx.GetBlockIdx() != 0:
            return kernel(ctx, *args, **kwargs)
        prof = cProfile.Profile()
        prof.enable()
        try:
            return kernel(ctx, *args, **kwargs)
        finally:
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)

    op_module.kernel_qbmm_mx = profiled
    try:
        run()
    finally:
        op_module.kernel_qbmm_mx = kernel

if __name__ == "__main__":
    main()
