"""Generated input for the fuzz tests: programs from Python's grammar and syntax trees, training
loops with generated code around them, and notebooks built from both, in the layouts editors write.

Two sources of programs. hypothesmith derives them from Python's grammar and from libcst's syntax
trees: varied to the whitespace, but about half a second each, most of it in hypothesmith's filtered
drawing of syntax trees and hypothesis's bookkeeping of each draw (5,000 took over half an hour).
seeded.py writes syntax trees from a seeded random generator, about a millisecond each, with the
training statements spliced into every kind of block. CI lints a small derandomized hypothesmith
sample and a few seeded programs; the nightly size takes one program in ten from hypothesmith and
the rest, and the notebooks, from the seeded generator (`corpus`, `notebook_corpus`).
"""

from __future__ import annotations

import ast
import json
import os
import random
from typing import Sequence, TypeVar

import hypothesmith
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gradcheck_accum.lint.lines import split_lines

import seeded

T = TypeVar("T")

# Statements the rules care about, to splice into generated code so the fuzz reaches the rules.
TRAINING_STATEMENTS = seeded.TRAINING_STATEMENTS
TRAINING_LINES = st.sampled_from(TRAINING_STATEMENTS)
HEADERS = ["for i, batch in enumerate(loader):", "while True:", "for micro in range(accum):"]
WRAPPERS = ["", "def generated():", "class Generated:", "@decorated\nasync def generated():"]
PREFIX = "import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"
IPYTHON_LINES = [
    "%matplotlib inline", "!pip install \\\n    torch \\\n    accelerate", "%env A=1 \\\n  B=2", "model?",
    "np.*load*??", "files = !ls", "%time x = 1", "!nvidia-smi", "# is this right?", "label = 'a\u2028b'",
    "# accumcheck-cell 1",
]
HYPOTHESMITH_SHARE_AT_NIGHTLY_SIZE = 10  # one program in ten


class Drawn:
    """The choices of the layouts below, drawn by hypothesis (which shrinks a failing example)."""

    def __init__(self, draw) -> None:
        self.draw = draw

    def one(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def several(self, options: Sequence[T], low: int, high: int) -> list[T]:
        return self.draw(st.lists(st.sampled_from(options), min_size=low, max_size=high))

    def distinct(self, options: Sequence[T], high: int) -> set[T]:
        return self.draw(st.sets(st.sampled_from(options), max_size=high))

    def boolean(self) -> bool:
        return self.draw(st.booleans())


class Seeded(random.Random):
    """The same choices from a seeded random generator."""

    def one(self, options: Sequence[T]) -> T:
        return self.choice(options)

    def integer(self, low: int, high: int) -> int:
        return self.randint(low, high)

    def several(self, options: Sequence[T], low: int, high: int) -> list[T]:
        return [self.choice(options) for _ in range(self.randint(low, high))]

    def distinct(self, options: Sequence[T], high: int) -> set[T]:
        return set(self.sample(sorted(set(options)), min(len(set(options)), self.randint(0, high))))

    def boolean(self) -> bool:
        return self.random() < 0.5


def indent(lines: list[str], depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + line.replace("\n", "\n" + pad) + "\n" for line in lines)


def training_program(choose: Drawn | Seeded, generated: str) -> str:
    """Generated code, at the top or inside a definition, before a loop that reaches a backward call."""
    body = choose.several(TRAINING_STATEMENTS, 1, 8)
    tail = choose.several(TRAINING_STATEMENTS, 0, 4)
    header, wrapper = choose.one(HEADERS), choose.one(WRAPPERS)
    body.insert(choose.integer(0, 8) % (len(body) + 1), "loss.backward()")
    if wrapper:
        lines = split_lines(generated) + (["pass"] if not ast.parse(generated).body else [])
        generated = wrapper + "\n" + indent(lines, 1)
    return PREFIX + generated + "\n" + header + "\n" + indent(body, 1) + indent(tail, 0)


def notebook(choose: Drawn | Seeded, program: str) -> str:
    """A notebook's text: cells cut from a program at top-level lines, IPython lines among them,
    markdown and raw cells, written with one of the layouts notebook tools use."""
    lines = split_lines(program, keepends=True)  # as Python counts lines: not at form feeds
    starts = [min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
              for node in ast.parse(program).body]  # cells break between top-level statements
    cuts = sorted(choose.distinct(starts or [0], 4))
    pieces = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)]) if lines[a:b]]
    cells = []
    for piece in pieces:
        if choose.boolean():
            piece = [choose.one(IPYTHON_LINES) + "\n", *piece]
        if choose.integer(0, 5) == 0:
            cells.append({"cell_type": "markdown", "metadata": {}, "source": ["# Notes?\n", "%not magic\n"]})
        if choose.integer(0, 7) == 0:
            piece = ["%%time\n", *piece]
        text = "".join(piece)
        source = split_lines(text, keepends=True) if choose.boolean() else text
        cells.append({"cell_type": "code", "execution_count": choose.one([None, *range(1, 100)]),
                      "metadata": {"scrolled": choose.boolean()}, "outputs": [], "source": source})
    data = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"},
                                         "language_info": {"name": "python", "version": "3.11.4"},
                                         "lr": 1e-5, "name": "caf\u00e9"},
            "nbformat": 4, "nbformat_minor": choose.one([2, 4, 5])}
    text = json.dumps(data, indent=choose.one([None, 1, 2]), ensure_ascii=choose.boolean()) + "\n"
    if choose.integer(0, 4) == 0:
        text = text.replace("\n", "\r\n")
    return ("\ufeff" if choose.integer(0, 5) == 0 else "") + text


@st.composite
def training_programs(draw) -> str:
    return training_program(Drawn(draw), draw(hypothesmith.from_node()))


@st.composite
def notebooks(draw) -> str:
    return notebook(Drawn(draw), draw(st.one_of(training_programs(), hypothesmith.from_node())))


PROGRAMS = st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node(), training_programs(), training_programs())


def collect(strategy: st.SearchStrategy, count: int, derandomize: bool) -> list:
    """`count` examples of `strategy` (fewer when it has fewer)."""
    found: list = []

    @settings(max_examples=count, deadline=None, derandomize=derandomize, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def gather(example) -> None:
        found.append(example)

    if count:
        gather()
    return found


def seeded_programs(count: int, seed: int) -> list[str]:
    """`count` programs of the seeded generator: half of them its code alone, half its code before a
    training loop."""
    choose = Seeded(seed)
    programs = []
    for i in range(count):
        generated = seeded.program(choose)
        programs.append(generated if i % 2 else training_program(choose, generated))
    return programs


def seed() -> int:
    """The nightly run's seed: ACCUMCHECK_FUZZ_SEED to repeat a run, else a new one (printed by the tests)."""
    return int(os.environ.get("ACCUMCHECK_FUZZ_SEED") or random.SystemRandom().randrange(2**32))


def corpus(count: int, nightly: bool, seed: int = 0) -> list[str]:
    """`count` programs. CI size: all from hypothesmith, derandomized, and a fifth as many seeded ones.
    Nightly size: one in HYPOTHESMITH_SHARE_AT_NIGHTLY_SIZE from hypothesmith, the rest seeded."""
    if not nightly:
        return collect(PROGRAMS, count, derandomize=True) + seeded_programs(count // 5, seed)
    drawn = collect(PROGRAMS, count // HYPOTHESMITH_SHARE_AT_NIGHTLY_SIZE, derandomize=False)
    return drawn + seeded_programs(count - len(drawn), seed)


def notebook_corpus(count: int, nightly: bool, seed: int = 0) -> list[str]:
    """`count` notebooks: from hypothesmith's programs at CI size, from seeded ones at nightly size."""
    if not nightly:
        return collect(notebooks(), count, derandomize=True)
    choose = Seeded(seed + 1)
    return [notebook(choose, program) for program in seeded_programs(count, seed + 2)]
