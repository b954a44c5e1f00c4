"""The analysis stays linear in the number of training loops: a window holds the events of its own
loop and of the code up to the next training loop of its block, never the rest of the file, so a
file of many loops costs each loop the same (bench/scale.py times it against libcst's parse)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import libcst

from gradcheck_accum.lint.engine import analyze
from gradcheck_accum.lint.model import FileModel

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
from scale import training_file  # noqa: E402


def window_sizes(loops: int) -> list[int]:
    return [len(window.events) for window in FileModel(libcst.parse_module(training_file(loops))).windows]


def test_a_window_does_not_grow_with_the_loops_after_it():
    few, many = window_sizes(8), window_sizes(64)
    assert max(many) == max(few) and len(many) >= 8 * len(few) - 8


def test_findings_of_a_loop_do_not_depend_on_the_loops_around_it():
    def per_rule(loops: int) -> Counter:
        return Counter(f.code for f in analyze(training_file(loops), "g.py").findings if f.code != "ACC302")

    few, many = per_rule(8), per_rule(64)  # every loop is one of 4 kinds: 8x the loops, 8x each finding
    assert few and many == Counter({code: 8 * count for code, count in few.items()})
