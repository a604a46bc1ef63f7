"""Fault-injection stress of the faults that hang (drop_set_flag, skip_wait_tile on hcomm/CCU, kill_rank,
hcomm localMatmul 2 under CCU): `launch/stress.py --family deadlock`, same options.

    python launch/stress_deadlock.py [--iterations 12] [--seed 0] [--max-ranks 4] [--time-limit 300]
"""

import sys

from stress import main

if __name__ == "__main__":
    sys.exit(main(family="deadlock"))
