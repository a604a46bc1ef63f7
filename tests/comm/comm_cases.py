"""Constants and data of the comm tests, shared by the test modules (imported as `comm_cases`, like
`blaze_cases`: pytest puts this directory on sys.path)."""

from __future__ import annotations

import numpy as np

# Deadline of ordinary tests: far above any legitimate wait of these small cases on 8 ranks / 2 cores.
TEST_TIMEOUT_S = 30.0
# Deadline of tests that expect DeadlockError. The wait primitive may restart a deadline once when it
# sees a peer's earlier progress (mc2emu.comm.progress_probe), so a hang is reported within 2 x this.
HANG_TIMEOUT_S = 1.5
# Deadline of the barrier that re-synchronizes the ranks after an expected hang (ranks leave a hang up
# to 2 x HANG_TIMEOUT_S apart).
RESYNC_TIMEOUT_S = 30.0
# Seed of the random test data; rank r's data is default_rng([DATA_SEED, salt, r]) so any rank can
# rebuild what any other rank sent.
DATA_SEED = 20260731


def rank_data(rank: int, nbytes: int, salt: int = 0) -> np.ndarray:
    """The random bytes rank `rank` sends in a test (reproducible on every rank)."""
    return np.random.default_rng([DATA_SEED, salt, rank]).integers(0, 256, nbytes, dtype=np.uint8)
