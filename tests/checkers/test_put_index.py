"""The happens-before check's put index: for every read, exactly the puts into the same window that overlap
its byte range, in the order of the put list (the reports name the last earlier put and the others in order)."""

import numpy as np

from mc2emu.check.read_content import _PutIndex


def _brute(puts, window, lo, hi):
    return [p for p in puts if p[0] == window and p[2] > lo and p[1] < hi]


def test_overlapping_puts_are_those_of_a_full_scan_in_list_order():
    rng = np.random.default_rng(7)
    for _ in range(200):
        puts = []
        for i in range(int(rng.integers(0, 25))):
            lo = int(rng.integers(0, 400))
            n = int(rng.choice([0, 1, 8, 32, 64, 300]))    # empty puts, slot-sized and long ones
            puts.append((str(rng.choice(["w0", "w1"])), lo, lo + n, 0, f"AIV{i}", i, None))
        index = _PutIndex(puts)
        for _ in range(30):
            lo = int(rng.integers(0, 500))
            hi = lo + int(rng.integers(1, 120))
            window = str(rng.choice(["w0", "w1", "w2"]))
            assert index.overlapping(window, lo, hi) == _brute(puts, window, lo, hi)


def test_a_long_earlier_put_is_found_behind_short_later_ones():
    puts = [("w", 0, 1000, 1, "AIV0", 0, 5), ("w", 500, 508, 2, "AIV1", 0, 3), ("w", 900, 901, 3, "AIV2", 0, 2)]
    assert _PutIndex(puts).overlapping("w", 950, 960) == [puts[0]]
    assert _PutIndex(puts).overlapping("w", 505, 901) == puts
