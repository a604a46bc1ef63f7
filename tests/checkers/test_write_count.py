"""The output write-count check at production output sizes: one byte per element for the expected counts and
the per-element counts (an int64 copy of each was 16 bytes per element: 512 MB for GMM's M 8192 x N 4096 y in
a protocol-only run), and the same report."""

import tracemalloc
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from mc2emu.check.write_count import WriteCountChecker


class _Hazards:
    def __init__(self):
        self.reports = []

    def report(self, hazard, core, text, **details):
        self.reports.append((hazard.value, details))


def test_counts_and_expected_take_one_byte_per_element_and_report_as_before():
    shape = (1024, 2048)
    elems = shape[0] * shape[1]
    hazards = _Hazards()
    device = SimpleNamespace(events=SimpleNamespace(subscribe=lambda obs, kinds: (lambda: None)), hazards=hazards)
    addr = SimpleNamespace(alloc=SimpleNamespace(name="y"), offset=0)
    expected = np.ones(shape, dtype=np.uint8)
    expected[-1, -1] = 0
    tracemalloc.start()
    chk = WriteCountChecker(device, addr, ml_dtypes.bfloat16, shape, expected)
    chk._counts[0::2] = 1          # every element written once (an element's count is its first byte's) ...
    chk._counts[2] = 2             # ... element (0, 1) twice, the last one once where none is expected
    chk.finish()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert chk.expected.dtype == np.uint8
    assert peak < 8 * elems, f"{peak / elems:.1f} bytes per element"
    ((name, d),) = hazards.reports
    assert name == "OUTPUT_WRITE_COUNT" and d["twice"] == 2 and d["never"] == 0
    assert d["element"] == (0, 1) and d["count"] == 2 and d["expected"] == 1
