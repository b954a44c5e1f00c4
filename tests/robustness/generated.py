"""Generated input for the fuzz tests: programs from Python's grammar and syntax trees, training
loops with generated code around them, and notebooks built from both, in the layouts editors write."""

from __future__ import annotations

import ast
import json

import hypothesmith
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

# Statements the rules care about, to splice into generated code so the fuzz reaches the rules.
TRAINING_LINES = st.sampled_from([
    "optimizer.zero_grad()", "loss.backward()", "optimizer.step()", "scheduler.step()",
    "scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()", "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "loss = model(batch) / accum",
    "model = torch.compile(model)", "torch.save(model.state_dict(), 'p')", "total += loss",
    "with model.no_sync():\n    loss.backward()", "if (i + 1) % accum == 0:\n    optimizer.step()",
    "for p in model.parameters():\n    p.grad = None", "scaler.scale(loss_a + loss_b).backward()",
    "try:\n    optimizer.step()\nexcept RuntimeError:\n    pass", "if ok:\n    optimizer.step()\nelse:\n    skip()",
    "lr = 0.1  # noqa: ACC101", "x = 1  # noqa: ACC302 * 2",
])
HEADERS = st.sampled_from(["for i, batch in enumerate(loader):", "while True:", "for micro in range(accum):"])
WRAPPERS = st.sampled_from(["", "def generated():", "class Generated:", "@decorated\nasync def generated():"])
PREFIX = "import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"


def indent(lines: list[str], depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + line.replace("\n", "\n" + pad) + "\n" for line in lines)


@st.composite
def training_programs(draw) -> str:
    """Generated code, at the top or inside a definition, before a loop that reaches a backward call."""
    body = draw(st.lists(TRAINING_LINES, min_size=1, max_size=8))
    tail = draw(st.lists(TRAINING_LINES, max_size=4))
    generated, header, wrapper = draw(hypothesmith.from_node()), draw(HEADERS), draw(WRAPPERS)
    body.insert(draw(st.integers(0, 8)) % (len(body) + 1), "loss.backward()")
    if wrapper:
        lines = generated.splitlines() + (["pass"] if not ast.parse(generated).body else [])
        generated = wrapper + "\n" + indent(lines, 1)
    return PREFIX + generated + "\n" + header + "\n" + indent(body, 1) + indent(tail, 0)


PROGRAMS = st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node(), training_programs(), training_programs())

IPYTHON_LINES = st.sampled_from([
    "%matplotlib inline", "!pip install \\\n    torch \\\n    accelerate", "%env A=1 \\\n  B=2", "model?",
    "np.*load*??", "files = !ls", "%time x = 1", "!nvidia-smi", "# is this right?", "label = 'a\u2028b'",
    "# accumcheck-cell 1",
])


@st.composite
def notebooks(draw) -> str:
    """A notebook's text: cells cut from generated programs at top-level lines, IPython lines among
    them, markdown and raw cells, written with one of the layouts notebook tools use."""
    program = draw(st.one_of(training_programs(), hypothesmith.from_node()))
    lines = program.splitlines(keepends=True)
    starts = [min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))]) - 1
              for node in ast.parse(program).body]  # cells break between top-level statements
    cuts = sorted(draw(st.sets(st.sampled_from(starts or [0]), max_size=4)))
    pieces = [lines[a:b] for a, b in zip([0, *cuts], [*cuts, len(lines)]) if lines[a:b]]
    cells = []
    for piece in pieces:
        if draw(st.booleans()):
            piece = [draw(IPYTHON_LINES) + "\n", *piece]
        if draw(st.integers(0, 5)) == 0:
            cells.append({"cell_type": "markdown", "metadata": {}, "source": ["# Notes?\n", "%not magic\n"]})
        if draw(st.integers(0, 7)) == 0:
            piece = ["%%time\n", *piece]
        text = "".join(piece)
        source = text.splitlines(keepends=True) if draw(st.booleans()) else text
        cells.append({"cell_type": "code", "execution_count": draw(st.one_of(st.none(), st.integers(1, 99))),
                      "metadata": {"scrolled": draw(st.booleans())}, "outputs": [], "source": source})
    data = {"cells": cells, "metadata": {"kernelspec": {"language": "python", "name": "python3"},
                                         "language_info": {"name": "python", "version": "3.11.4"},
                                         "lr": 1e-5, "name": "caf\u00e9"},
            "nbformat": 4, "nbformat_minor": draw(st.sampled_from([2, 4, 5]))}
    text = json.dumps(data, indent=draw(st.sampled_from([None, 1, 2])), ensure_ascii=draw(st.booleans())) + "\n"
    if draw(st.integers(0, 4)) == 0:
        text = text.replace("\n", "\r\n")
    return ("\ufeff" if draw(st.integers(0, 5)) == 0 else "") + text


def collect(strategy: st.SearchStrategy, count: int, derandomize: bool) -> list:
    """`count` examples of `strategy` (fewer when it has fewer)."""
    found: list = []

    @settings(max_examples=count, deadline=None, derandomize=derandomize, database=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(strategy)
    def gather(example) -> None:
        found.append(example)

    gather()
    return found
