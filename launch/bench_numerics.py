"""Throughput of the MX numerics layer (mc2emu.numerics) on one CPU thread.

For each element format: dequantize_mx throughput against a plain `astype(np.float32)` of the same
element array (ml_dtypes decode; for E1M2, which ml_dtypes lacks, a LUT gather of its uint8 codes),
and quantize_mx throughput against the same baseline. Ratios > 1 mean faster than the baseline.

    python launch/bench_numerics.py --rows 1024 --cols 4096 --repeat 5
"""

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # one BLAS thread: ranks share the cores in the emulator

import argparse  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import numpy as np  # noqa: E402

from mc2emu.numerics import ElemFormat, decode_elements, dequantize_mx, quantize_mx  # noqa: E402


def best_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of `repeat` calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1024, help="rows of the test matrix")
    ap.add_argument("--cols", type=int, default=4096, help="columns (the blocked K axis)")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions (best is reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--formats", nargs="+", default=[f.value for f in ElemFormat], choices=[f.value for f in ElemFormat]
    )
    args = ap.parse_args(argv)

    x = (np.random.default_rng(args.seed).standard_normal((args.rows, args.cols)) * 8).astype(np.float32)
    n = x.size
    print(
        f"MX numerics throughput, {args.rows} x {args.cols} float32 = {n / 1e6:.1f} M elements, "
        f"best of {args.repeat}, 1 thread"
    )
    header = (
        f"{'format':<6} {'astype Me/s':>12} {'dequant Me/s':>13} {'dq/astype':>10} "
        f"{'quant Me/s':>11} {'q/astype':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in args.formats:
        fmt = ElemFormat(name)
        q = quantize_mx(x, fmt)
        if fmt.ml_dtype is not None:
            data = q.data
            t_base = best_seconds(lambda data=data: data.astype(np.float32), args.repeat)
        else:
            codes = q.data
            t_base = best_seconds(lambda codes=codes, fmt=fmt: decode_elements(codes, fmt), args.repeat)
        t_deq = best_seconds(lambda q=q: dequantize_mx(q), args.repeat)
        t_q = best_seconds(lambda fmt=fmt: quantize_mx(x, fmt), args.repeat)
        print(
            f"{name:<6} {n / t_base / 1e6:>12.1f} {n / t_deq / 1e6:>13.1f} {t_base / t_deq:>10.2f} "
            f"{n / t_q / 1e6:>11.1f} {t_base / t_q:>9.2f}"
        )


if __name__ == "__main__":
    main()
