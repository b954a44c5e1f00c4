"""The analysis stays linear in the number of training loops: a window holds the events of its own
loop and of the code up to the next training loop of its block, never the rest of the file, so a
file of many loops costs each loop the same (bench/scale.py times it against libcst's parse).
The work is counted, not timed: bytecode instructions the command executes, the same on every run."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from types import FrameType
from pathlib import Path

import libcst
import pytest
from click.testing import CliRunner

from gradcheck_accum.cli import main
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


def bytecodes(loops: int, directory: Path) -> int:
    """How many bytecode instructions `accumcheck lint` executes on a file of this many loops (in
    every thread: the analysis runs on a deep-stack thread; a C call counts as one)."""
    count = 0

    def each_instruction(frame: FrameType, event: str, arg: object):
        nonlocal count
        count += event == "opcode"
        return each_instruction

    def each_call(frame: FrameType, event: str, arg: object):
        frame.f_trace_opcodes, frame.f_trace_lines = True, False
        return each_instruction

    path = directory / str(loops) / "train.py"  # a project of its own
    path.parent.mkdir()
    path.write_text(training_file(loops), encoding="utf-8")
    threading.settrace(each_call)
    sys.settrace(each_call)
    try:
        run = CliRunner().invoke(main, ["lint", "--no-cache", "--exit-zero", "-q", str(path)])
    finally:
        sys.settrace(None)
        threading.settrace(None)
    assert run.exit_code == 0, run.output
    return count


@pytest.mark.slow
def test_the_work_of_a_loop_does_not_grow_with_the_loops_before_it(tmp_path):
    """40 more loops cost the same after 60 loops as after 20 (each 40 hold every kind of loop and
    every place alike). Queries that scanned the file's events, bindings, loops or calls once per
    loop, per function or per finding made the second 40 cost 5% more (3% for the scan of the
    file's calls per function name alone), and the 200,000-line file many minutes more."""
    bytecodes(4, tmp_path)  # imports and first-use caches out of the count
    first, second, third = (bytecodes(loops, tmp_path) for loops in (20, 60, 100))
    assert third - second <= 1.01 * (second - first)


def test_a_name_bound_by_every_loop_is_not_rescanned_for_each_loop():
    """`batch` is bound by every loop of the file; whether it aliases the accumulation count was asked
    for every name read in every loss, each time over all its bindings: the square of the loops (a
    quarter of the rules' time on a 6,000-loop file, a rounding error at the sizes above). The
    predicates' work per loop stays the same however many loops the file has."""
    from gradcheck_accum.lint import predicates

    def work(loops: int) -> int:
        count = 0

        def each_instruction(frame: FrameType, event: str, arg: object):
            nonlocal count
            count += event == "opcode"
            return each_instruction

        def each_call(frame: FrameType, event: str, arg: object):
            if frame.f_code.co_filename != predicates.__file__:
                return None
            frame.f_trace_opcodes, frame.f_trace_lines = True, False
            return each_instruction

        source = training_file(loops)
        sys.settrace(each_call)
        try:
            analyze(source, "g.py")
        finally:
            sys.settrace(None)
        return count

    few, many = work(40) / 40, work(160) / 160
    assert many <= 1.05 * few, (few, many)
