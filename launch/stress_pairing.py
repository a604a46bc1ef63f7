"""Fault-injection stress of the faults that unbalance pairs or break ordering (extra_set_flag, skip_wait_tile
on UDMA and hcomm/AICPU, wrong_splitk, swap_wait_order, hcomm localMatmul 2 under AICPU, no_atomic_add,
aiv_joins_aic_kernel) and of clean runs (delay_rank, seeded perturbation) whose C must match an unperturbed
run bitwise: `launch/stress.py --family pairing`, same options.

    python launch/stress_pairing.py [--iterations 12] [--seed 0] [--max-ranks 4] [--time-limit 300]
"""

import sys

from stress import main

if __name__ == "__main__":
    sys.exit(main(family="pairing"))
