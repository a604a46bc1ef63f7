"""Replay cost of the predictor: seconds per million recorded events, on synthetic UDMA all-to-all records
of 2 to 64 ranks (`mc2emu.predict.synthetic`), measured with this process's CPU time (the machine is shared).

    python launch/bench_predict.py [--ranks 2 8 32 64] [--rounds 4]
"""

from __future__ import annotations

import argparse
import time

from mc2emu.predict import replay
from mc2emu.predict.synthetic import synthetic_a2a


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 32, 64])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--aics", type=int, default=16)
    args = ap.parse_args()
    print(f"{'ranks':>5} {'events':>9} {'nodes':>9} {'cpu s':>7} {'s / M events':>12}  predicted")
    for r in args.ranks:
        recs = synthetic_a2a(r, args.rounds, aics=args.aics)
        c0 = time.process_time()
        p = replay(recs)
        cpu = time.process_time() - c0
        print(f"{r:5d} {p.events:9d} {p.nodes:9d} {cpu:7.2f} {cpu / p.events * 1e6:12.2f}  {p.total_s * 1e6:.2f} us",
              flush=True)


if __name__ == "__main__":
    main()
