"""Hollowing: definitions no training loop depends on are left out of the libcst parse.

Each condition of hollow.py gets a file where leaving the definition out *would* change the
findings (shown by hollowing it by hand), and the check that hollow.py keeps it. Over fixtures
and real code the findings with and without hollowing are compared in tests/lint_cli/test_runner.py.
"""

import ast
import textwrap
from pathlib import Path

import pytest

from gradcheck_accum.lint.engine import analyze
from gradcheck_accum.lint.prefilter import screen
from gradcheck_accum.lint import registry

ROOT = Path(__file__).parents[2]


def findings(source: str, hollowed: str | None = None) -> list[tuple[int, str]]:
    rules, _ = screen(source, list(registry.rules()))
    return [(f.line, f.code) for f in analyze(source, "t.py", rules, hollowed=hollowed).findings]


def by_hand(source: str, name: str) -> str:
    """The source with the top-level definition `name` reduced to `...`, as hollow.py would."""
    lines = source.split("\n")
    node = next(n for n in ast.parse(source).body if getattr(n, "name", None) == name)
    first = node.body[0].lineno
    lines[first - 1] = " " * node.body[0].col_offset + "..."
    for index in range(first, node.end_lineno):
        lines[index] = ""
    return "\n".join(lines)


def hollowed(source: str) -> str | None:
    return screen(source, list(registry.rules()))[1]


TRAIN = """
    def train(model, data, optimizer, n):
        for i, (x, y) in enumerate(data):
            loss = model(x, y)
            loss.backward()
            if (i + 1) % n == 0:
                optimizer.step()
                optimizer.zero_grad()
"""

# name of the definition that must stay -> a file where it matters
MUST_STAY = {
    # it imports a name the training loop uses (one import map serves the file; functions are walked
    # last to first)
    "unrelated": """
        def train(model, data, n):
            o = Solver(model.parameters())
            for i, (x, y) in enumerate(data):
                loss = model(x, y)
                loss.backward()
                if (i + 1) % n == 0:
                    o.step()
                    o.zero_grad()

        def unrelated():
            from torch.optim import SGD as Solver
            return 1
    """,
    # a helper the loop calls
    "do_step": """
        def do_step(opt):
            opt.step()
            opt.zero_grad()

        def train(model, data, optimizer, n):
            for i, (x, y) in enumerate(data):
                loss = model(x, y)
                loss.backward()
                if (i + 1) % n == 0:
                    do_step(optimizer)
    """,
    # it assigns the self.criterion the loop traces
    "Config": """
        import torch.nn as nn

        class Config:
            def __init__(self):
                self.criterion = nn.CrossEntropyLoss(reduction="sum")

        class Trainer:
            def fit(self, model, data, optimizer, n):
                for i, (x, y) in enumerate(data):
                    loss = self.criterion(model(x), y)
                    loss.backward()
                    if (i + 1) % n == 0:
                        optimizer.step()
                        optimizer.zero_grad()
    """,
    # ACC406 reads the callers of the training function: called once, the last partial window is
    # dropped once (no finding); with no caller in the file the epoch may repeat
    "main": """
        def train(model, loader, optimizer, n):
            for i, (x, y) in enumerate(loader):
                loss = model(x, y) / n
                loss.backward()
                if (i + 1) % n == 0:
                    optimizer.step()
                    optimizer.zero_grad()

        def main():
            train(build(), make_loader(), make_optimizer(), 4)
    """,
    # ACC402 reads schedulers built anywhere
    "build": """
        from transformers import get_linear_schedule_with_warmup

        def build(optimizer, loader):
            scheduler = get_linear_schedule_with_warmup(optimizer, 0, num_training_steps=len(loader) * 3)
            return scheduler

        def train(model, loader, optimizer, scheduler, n):
            for i, (x, y) in enumerate(loader):
                loss = model(x, y) / n
                loss.backward()
                if (i + 1) % n == 0 or i + 1 == len(loader):
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", MUST_STAY)
def test_a_definition_that_matters_is_kept(name):
    source = textwrap.dedent(MUST_STAY[name])
    assert findings(source) != findings(source, by_hand(source, name))  # leaving it out would matter
    reduced = hollowed(source)
    assert reduced is None or reduced.count("\n") == source.count("\n") and \
        ast.get_source_segment(source, next(n for n in ast.parse(source).body if getattr(n, "name", "") == name)) \
        in reduced
    assert findings(source, reduced) == findings(source)


def test_unrelated_definitions_are_left_out_and_lines_stay():
    source = textwrap.dedent('''
        import torch

        @register
        class Net(torch.nn.Module):
            """A model."""

            @property
            def size(self):
                return 3

            def forward(self, x):
                return self.layer(x)

        async def serve():
            await thing()

        def one_liner(): return 1
    ''') + textwrap.dedent(TRAIN) + "\nfor batch in data:\n    loss = m(batch)\n    loss.backward()\n    opt.step()\n"
    reduced = hollowed(source)
    assert reduced is not None
    original, kept = source.split("\n"), reduced.split("\n")
    assert len(kept) == len(original)
    assert "    ..." in kept and "def one_liner(): return 1" in kept
    assert "async def serve():" in kept and "    await thing()" not in kept
    assert "        return self.layer(x)" not in kept and "@register" in kept
    for before, after in zip(original, kept):
        assert after in (before, "", before[: len(before) - len(before.lstrip())] + "...")
    assert "def train(model, data, optimizer, n):" in kept and "            optimizer.step()" in kept


def test_a_rule_that_reads_the_whole_file_keeps_everything(monkeypatch):
    source = textwrap.dedent(TRAIN) + "\ndef unrelated():\n    return 1\n"
    assert hollowed(source) is not None
    rule = registry.rules()[0]
    monkeypatch.setattr(rule, "reads_outside_windows", None)
    assert hollowed(source) is None


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted((ROOT / "fixtures").glob("*.py")), ids=lambda p: p.name)
def test_fixtures_lint_the_same_hollowed(path):
    source = path.read_text(encoding="utf-8")
    reduced = hollowed(source)
    if reduced is not None:
        assert findings(source, reduced) == findings(source)


def test_every_rule_states_what_it_reads_outside_windows():
    # The default (None) is safe but turns hollowing off for every file the rule could fire on.
    assert [rule.code for rule in registry.rules() if "reads_outside_windows" not in vars(rule)] == []
