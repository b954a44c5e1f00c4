"""Every fixture script yields exactly the findings its `# expect:` markers name.

A marker sits at the end of the reported line: `# expect: ACC101` or `# expect: ACC101, ACC404`.
A fixture without markers must lint clean. Markers are read from comment tokens only, so a
string that happens to contain the text never counts.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from gradcheck_accum.lint.engine import lint_source
from gradcheck_accum.lint import registry

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# verify*.py are targets of the dynamic checker; pending/ holds scripts the engine disagrees with.
SCRIPTS = sorted(p for p in FIXTURES.glob("*.py") if not p.name.startswith("verify"))
MARKER = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z0-9,\s]+?)\s*$")


def expected_findings(text: str) -> set[tuple[int, str]]:
    expected = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        match = MARKER.search(token.string)
        if match is None:
            continue
        for code in filter(None, (c.strip() for c in match["codes"].split(","))):
            assert code in registry.codes(), f"line {token.start[0]}: unknown code {code} in marker"
            expected.add((token.start[0], code))
    return expected


def test_there_are_buggy_and_correct_fixtures():
    silent = [p for p in SCRIPTS if not expected_findings(p.read_text())]
    assert len(SCRIPTS) - len(silent) >= 20 and len(silent) >= 15


def test_every_rule_has_a_buggy_fixture():
    # ACC9xx are housekeeping rules about suppression comments, not training-code bugs.
    wanted = {code for code in registry.codes() if not code.startswith("ACC9")}
    covered = {code for path in SCRIPTS for _, code in expected_findings(path.read_text())}
    assert wanted <= covered, f"rules without a fixture: {sorted(wanted - covered)}"


def test_marker_parser_ignores_strings():
    text = 'x = "# expect: ACC101"\nzero()  # expect: ACC101, ACC404\n'
    assert expected_findings(text) == {(2, "ACC101"), (2, "ACC404")}


def mismatches(text: str, path: str) -> list[str]:
    """Readable differences between the linter's findings and the markers; empty when they agree."""
    findings = lint_source(text, path)
    actual = {(f.line, f.code) for f in findings}
    expected = expected_findings(text)
    lines = text.splitlines()
    messages = {(f.line, f.code): f.message for f in findings}
    report = [f"  missing    {line}:{code}  | {lines[line - 1].strip()}" for line, code in sorted(expected - actual)]
    report += [f"  unexpected {line}:{code}  | {lines[line - 1].strip()}\n             {messages[(line, code)]}"
               for line, code in sorted(actual - expected)]
    return report


def test_mismatches_name_missing_and_unexpected_findings():
    script = (
        "import torch\n"
        "def train(model, loader, optimizer, n):\n"
        "    for i, (x, y) in enumerate(loader):\n"
        "        optimizer.zero_grad()\n"
        "        loss = torch.nn.functional.mse_loss(model(x), y) / n\n"
        "        loss.backward()  # expect: ACC201\n"
        "        if (i + 1) % n == 0 or i + 1 == len(loader):\n"
        "            optimizer.step()\n"
    )
    report = mismatches(script, "t.py")
    assert report[0].startswith("  missing    6:ACC201")
    assert report[1].startswith("  unexpected 4:ACC101  | optimizer.zero_grad()")
    assert len(report) == 2


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_fixture_findings_match_markers(path: Path):
    report = mismatches(path.read_text(), str(path))
    if report:
        pytest.fail("\n".join([f"{path.name}: findings differ from the `# expect:` markers", *report]), pytrace=False)


def test_a_step_every_micro_batch_names_what_happened_to_the_losses():
    """ACC104 on a loop whose backward runs only with the step says the other losses are dropped;
    on a loop that backpropagates every micro-batch and steps each time, that parameters change
    inside the window."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    dropped = fixtures / "wakeword_backward_only_when_window_full.py"
    (finding,) = [f for f in lint_source(dropped.read_text(), str(dropped)) if f.code == "ACC104"]
    assert "computed and dropped" in finding.message
    every = fixtures / "manual_step_every_micro_batch.py"
    messages = [f.message for f in lint_source(every.read_text(), str(every)) if f.code == "ACC104"]
    assert messages and all("parameters change inside the window" in m for m in messages)
