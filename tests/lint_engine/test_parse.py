"""The engine's parse: libcst without per-node validation while parsing, and positions."""

import os
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from gradcheck_accum.lint import engine, positions
from gradcheck_accum.lint.names import children
from gradcheck_accum.lint.outline import one_newline, python_tree
from gradcheck_accum.lint.engine import ParseFailure


@pytest.mark.parametrize("source", ["x = 1\n", "for b in d\n    pass\n"])
def test_validation_is_back_on_after_a_parse(source):
    try:
        engine.parse(source)
    except ParseFailure:
        pass
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_unvalidated_parse_builds_the_same_tree(tmp_path):
    source = "import torch\n\nfor i, (x, y) in enumerate(loader):\n    loss = (model(x) - y).pow(2).mean() / 4\n" \
             "    loss.backward()\n    if (i + 1) % 4 == 0:\n        optimizer.step()  # boundary\n"
    module = engine.parse(source)
    assert module.code == source
    assert module.deep_equals(cst.parse_module(source))


ROOT = Path(__file__).parents[2]
TRICKY = {
    "duplicated statements": "for a in b:\n    if a:\n        step()\n    if a:\n        step()\nif a:\n    step()\n",
    "elif": "if a:\n    pass\nelif b:\n    f(x)\nelse:\n    f(x)\nif b:\n    f(x)\n",
    "no trailing newline": "for a in b:\n    f(a)",
    "tabs and odd indents": "for a in b:\n\tif a:\n\t  f(a)\n\tg(a)\n",
    "crlf and cr": "x = 1\r\nfor a in b:\r\n    f(a)\r\ny = 2\rz = f(3)\r",
    "comments and blank lines": "# head\n\nfor a in b:\n\n    # c\n    f(a)  # t\n\n# tail\n",
    "one-line suites": "for a in b: f(a); g(a)\nwhile c: f(a)\n",
    "decorators": "@d(f(1))\ndef h():\n    return f(1)\n",
    "multi-line call": "for a in b:\n    f(\n        a,\n  g(a),\n    )\n",
    "unicode": "for é in b:\n    f('ü', é)  # ß\n",
    "a statement's text inside another line": "x = 1; f(a)\nf(a)\nif b:\n    g(f(a))\n",
    "a statement's text in a string": 's = """\nf(a)\n"""\nf(a)\nfor a in b:\n    f(a)\n',
    "form feed": "x = 1\n\x0cfor a in b:\n    f(a)\n\x0c\ndef g():\n    f(a)\n",
    # statements whose text repeats, placed from a neighbour of their block whose text does not
    "after a neighbour": "for a in b:\n    x = f(a)\n    # c\n\n    step()\nfor c in d:\n    # c\n\n    step()\n",
    "before a neighbour": "for a in b:\n    step()\n    x = f(a)\nfor c in d:\n    step()\n    y = f(c)\n",
    "neighbours repeated too": "for a in b:\n    u = 1\n    step()\n    step()\nfor a in c:\n    v = 1\n    step()\n"
                               "    step()\nstep()\n",
    "a compound neighbour": "for a in b:\n    if a:\n        g()\n    step()\nfor a in c:\n    if a:\n        g()\n"
                            "    step()\n",
    "a multi-line neighbour": "for a in b:\n    x = f(\n        a)\n    step()\nfor a in c:\n    step()\n",
}


def all_nodes(module):
    out, stack = [], [module]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(children(node))
    return out


def sources():
    yield from TRICKY.items()
    for path in sorted((ROOT / "fixtures").glob("*.py")):
        yield path.name, path.read_text(encoding="utf-8")


# The engine places statements by the tree; the text is its fallback, which CI checks on the tricky
# cases and every third fixture, the nightly run (ACCUMCHECK_FUZZ_EXAMPLES set) on every fixture.
TEXT_STRIDE = 1 if "ACCUMCHECK_FUZZ_EXAMPLES" in os.environ else 3
CASES = [(name, source, placed_by) for i, (name, source) in enumerate(sources())
         for placed_by in ("tree", "text") if placed_by == "tree" or not name.endswith(".py") or i % TEXT_STRIDE == 0]


@pytest.mark.parametrize("name,source,placed_by", CASES, ids=lambda v: v if len(v) < 40 else "")
def test_positions_equal_libcsts_own(name, source, placed_by, monkeypatch):
    # Statements are placed by CPython's tree of the source (as the engine does), or without one by
    # their text; either way every node's range must be libcst's.
    module = engine.parse(source)
    nodes = all_nodes(module)[1:]  # not the module itself
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    whole, long_road = [], positions.whole_module
    monkeypatch.setattr(positions, "whole_module", lambda m: whole.append(m) or long_road(m))
    looked_up, text_lookup = [], positions._Lines.only_start
    monkeypatch.setattr(positions._Lines, "only_start", lambda self, text: looked_up.append(text)
                        or text_lookup(self, text))
    tree = python_tree(one_newline(source)) if placed_by == "tree" else None
    fast = positions.node_positions(module, source, nodes, tree)
    assert {n: fast[n] for n in nodes} == {n: expected[n] for n in nodes}
    if name.endswith(".py"):  # real scripts never need the long road (tricky cases may)
        assert not whole
        if tree is not None and "\r" not in source:
            # the text lookup is only the fallback: on real scripts CPython's tree places every statement
            assert looked_up == []


def test_non_ascii_names_are_the_ones_python_defines():
    # Python NFKC-normalises identifiers (`class Aª` defines `Aa`), and the project summaries read with
    # `ast` hold the normalised names: the classes and methods libcst reports must be looked up by them.
    source = ("import lightning as L\n\n\nclass Aª(L.LightningModule):\n    def training_step(self, batch, batch_idx):\n"
              "        loss = self(batch)\n        self.optimizer.zero_grad()\n        return loss\n\n\n"
              "for i, batch in enumerate(loader):\n    optimizer.zero_grad()\n")
    assert engine.lint_source(source, "train.py") == engine.lint_source(source.replace("Aª", "Aa"), "train.py")
