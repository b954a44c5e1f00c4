"""Rule pages: one per rule, fixed sections, and their code blocks behave as the page says."""

import re
from pathlib import Path

import pytest

from gradcheck_accum.lint.engine import lint_source
from gradcheck_accum.lint import registry

CHECKS = {check.code: check for check in registry.checks()}
PAGES = sorted((Path(__file__).parent.parent / "rules").glob("ACC*.md"))
SECTIONS = ["What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "References"]


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2])}


def python_block(body: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", body, re.S)
    assert len(blocks) == 1, "exactly one python block"
    return blocks[0]


def test_every_rule_has_exactly_one_page():
    codes = [page.name.split("-")[0] for page in PAGES]
    assert sorted(codes) == [check.code for check in registry.checks()]
    for page in PAGES:
        rule = CHECKS[page.name.split("-")[0]]
        assert page.name == f"{rule.code}-{rule.name}.md"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_page_structure(page):
    text = page.read_text()
    rule = CHECKS[page.name.split("-")[0]]
    assert text.splitlines()[0] == f"# {rule.code} {rule.name}"
    present = list(sections(text))
    assert present == [s for s in SECTIONS if s in present], "sections out of order"
    assert {"What it does", "Why is this bad?", "Example", "Use instead", "References"} <= set(present)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_example_triggers_only_this_rule_and_use_instead_is_clean(page):
    parts = sections(page.read_text())
    code = page.name.split("-")[0]
    example = lint_source(python_block(parts["Example"]), "example.py")
    assert example and {f.code for f in example} == {code}, [(f.line, f.code) for f in example]
    assert lint_source(python_block(parts["Use instead"]), "use_instead.py") == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_fix_safety_section_matches_the_fix(page):
    parts = sections(page.read_text())
    example = lint_source(python_block(parts["Example"]), "example.py")
    safety = {f.fix_safety for f in example}
    assert len(safety) == 1
    [safety] = safety
    if safety is None:
        assert "Fix safety" not in parts
    else:
        assert "Fix safety" in parts
        assert re.search(rf"\bis\s+{safety}\b", parts["Fix safety"]), f"the section must say the fix is {safety}"
