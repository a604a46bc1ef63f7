"""docs/writing-kernels.md stays true: it shows every example file under docs/examples/ that it is about,
word for word, each of them runs in the suite (tests/examples/), and every file and kit name it cites exists."""

import re
from pathlib import Path

import mc2emu.testing

ROOT = Path(__file__).parents[2]
DOC = (ROOT / "docs" / "writing-kernels.md").read_text()
EXAMPLES = ("ring_put.py", "dropped_set.py", "read_before_wait.py", "never_written.py", "ring_put_test.py")


def test_the_doc_shows_each_example_file_word_for_word():
    blocks = re.findall(r"```python\n(.*?)```", DOC, flags=re.S)
    for name in EXAMPLES:
        assert (ROOT / "docs" / "examples" / name).read_text() in blocks, name
    # every block that is a runnable file is one of them (the doc holds no copy that could drift)
    files = [b for b in blocks if b.startswith("# mpirun")]
    assert len(files) == len(EXAMPLES)


def test_each_example_runs_in_the_suite():
    runners = (ROOT / "tests" / "examples" / "test_examples_mpi.py").read_text() + \
              (ROOT / "tests" / "examples" / "test_kit_example_mpi.py").read_text()
    for name in EXAMPLES:
        assert name.removesuffix(".py") in runners, name


def test_cited_files_exist():
    paths = set(re.findall(r"`((?:mc2emu|tests|docs)/[\w/]+\.(?:py|md))`", DOC))
    assert len(paths) >= 8
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_every_kit_name_is_documented():
    for name in [*mc2emu.testing.__all__, "mc2_comm", "mc2_run_kernel", "mc2_device", "mc2_make_world"]:
        if name != "HazardCapture":
            assert re.search(rf"`@?{name}\b", DOC), name
