"""mutmut (PyPI `mutmut` 3.x) over the pure layers, numerics and tiling, in a temporary copy of the repository.

The curated gate (`launch/mutants.py`) covers behaviours across layers; this run lets a mutation tool
generate every operator / constant / call mutant of `mc2emu/numerics` and `mc2emu/tiling` and runs their
unit tests (tests/numerics, tests/tiling, the tiling tests of tests/apace and tests/blaze) against each,
mutmut choosing per mutant the tests that execute the mutated function. Prints killed / survived /
timeout / no-tests counts and the score killed / (all - skipped). A survivor gets a test that kills it or
a row in docs/mutation.md's list of equivalent mutants (with the reason); `--keep DIR` then `mutmut show`.

    pip install mutmut                    # the `dev` extra of pyproject.toml
    python launch/mutmut_pure.py          # the whole pure layer (~6500 mutants: hours on 2 cores)
    python launch/mutmut_pure.py --bounded   # block_scale, element_codec, the A2A tiling
    python launch/mutmut_pure.py "mc2emu.numerics.block_scale*"   # a bounded run: mutant names matching
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("mc2emu/numerics/", "mc2emu/tiling/")
# A bounded run (2 cores: the whole pure layer is ~6500 mutants, hours): the decode / encode / scale rule
# and the A2A communication tiling.
BOUNDED = ("mc2emu/numerics/block_scale.py", "mc2emu/numerics/element_codec.py",
           "mc2emu/tiling/all_to_all_quant_matmul_tiling.py")
TESTS = {"tests/numerics": "tests/numerics", "tests/tiling": "tests/tiling",
         "tests/apace/test_a2a_tiling.py": "tests/tiling/test_a2a_tiling.py",
         "tests/blaze/test_tiling_swat.py": "tests/tiling/test_tiling_swat.py",
         "tests/blaze/blaze_cases.py": "tests/blaze/blaze_cases.py", "tests/conftest.py": "tests/conftest.py"}
CONFIG = """[tool.mutmut]
source_paths = {sources!r}
also_copy = ["mc2emu/"]
max_children = 1

[tool.pytest.ini_options]
testpaths = ["tests"]
markers = ["mpi: multi-rank", "slow: slow"]
"""
ENV_PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="mutant name globs (mutmut's), default: all")
    ap.add_argument("--bounded", action="store_true", help=f"mutate only {', '.join(BOUNDED)}")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it (default: a temporary one)")
    args = ap.parse_args(argv)
    if shutil.which("mutmut") is None:
        raise SystemExit("mutmut is not installed: pip install mutmut")
    work = args.keep or Path(tempfile.mkdtemp(prefix="mc2emu-mutmut-"))
    work.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "mc2emu", work / "mc2emu", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for src, dst in TESTS.items():
        s, d = REPO / src, work / dst
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        elif s.exists():
            shutil.copy2(s, d)
    (work / "pyproject.toml").write_text(CONFIG.format(sources=list(BOUNDED if args.bounded else SOURCES)))
    # no PYTHONPATH: mutmut puts its mutated copy first; a developer's PYTHONPATH would shadow it
    env = dict(os.environ, **ENV_PINS, PYTHONPATH="")
    # an explicit name glob (mutmut 3.8 checked nothing when run without one here)
    subprocess.run(["mutmut", "run", *(args.names or ["mc2emu.*"])], cwd=work, env=env, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = subprocess.run(["mutmut", "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                         text=True, check=False)
    counts: collections.Counter[str] = collections.Counter()
    survivors = []
    for line in res.stdout.splitlines():
        m = re.match(r"\s*(\S+): (\w[\w ]*)$", line)
        if m:
            counts[m.group(2)] += 1
            if m.group(2) == "survived":
                survivors.append(m.group(1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    done = sum(counts.values()) - counts["skipped"] - counts["not checked"]
    score = counts["killed"] / done if done else 0.0
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    print(f"score: {counts['killed']} killed / {done} checked = {score:.1%}")
    for name in survivors:
        print(f"  survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
