"""What a fix promises, over every fixture and the fuzz corpus: a safe fix leaves the syntax tree
unchanged; every fix, safe or not, alone or with the others of its pass, keeps every line outside
the lines of the nodes it replaces; and --fix writes a file back in its own encoding, byte order
mark and line breaks, changing nothing but the fix.

CI runs the fixtures and a small derandomized corpus; ACCUMCHECK_FUZZ_EXAMPLES sets the corpus size.
"""

from __future__ import annotations

import ast
import codecs
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from generated import corpus, seed
from gradcheck_accum.cli import main
from gradcheck_accum.lint import deep
from gradcheck_accum.lint.engine import ParseFailure, analyze, fix_source
from gradcheck_accum.lint.fixes import Fix, fixed_source, independent
from gradcheck_accum.lint.lines import split_lines
from gradcheck_accum.lint.positions import whole_module

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("ACCUMCHECK_FUZZ_EXAMPLES", "60"))
NIGHTLY = "ACCUMCHECK_FUZZ_EXAMPLES" in os.environ
FIXTURES = sorted((Path(__file__).parents[2] / "fixtures").glob("*.py"))


@pytest.fixture(scope="module")
def sources() -> dict[str, str]:
    found = {path.name: path.read_text(encoding="utf-8") for path in FIXTURES}
    chosen = seed() if NIGHTLY else 0
    print(f"fuzz corpus seed {chosen}")
    for i, program in enumerate(corpus(EXAMPLES, NIGHTLY, chosen)):
        found[f"program_{i:05}.py"] = program
    return found


def covered(positions, fix: Fix) -> set[int]:
    """The lines a fix may change: those of the nodes it replaces (with the blank and comment lines
    above a statement, which libcst holds in the statement) and of the comment it edits."""
    lines = set()
    for node, _ in fix.replacements:
        span = positions[node]
        lines.update(range(span.start.line - len(getattr(node, "leading_lines", ())), span.end.line + 1))
    if fix.line_edit is not None:
        lines.add(fix.line_edit[0])
    return lines


def kept_outside(old: str, new: str, lines: set[int]) -> bool:
    """Every run of lines outside `lines` is in `new`, in order, the first at its start and the last at its end."""
    old_lines = split_lines(old, keepends=True)
    runs, current = [], []
    for number, line in enumerate(old_lines, 1):
        if number in lines:
            runs.append("".join(current))
            current = []
        else:
            current.append(line)
    runs.append("".join(current))
    if not (new.startswith(runs[0]) and new.endswith(runs[-1])):
        return False
    at = len(runs[0])
    for run in runs[1:-1]:
        found = new.find(run, at)
        if found < 0:
            return False
        at = found + len(run)
    return at <= len(new) - len(runs[-1])


def check_fixes(name: str, source: str) -> tuple[int, int]:
    """(fixes, safe fixes) checked in one file."""
    try:
        analysis = deep.call(analyze, source, name)
    except (ParseFailure, RecursionError):
        return 0, 0
    if not analysis.fixes:
        return 0, 0
    positions = whole_module(analysis.module)
    tree = ast.dump(ast.parse(source))
    for finding, fix in analysis.fixes.items():
        new = fix.apply(source, analysis.module)
        assert kept_outside(source, new, covered(positions, fix)), (name, finding)
        if fix.safe:
            assert ast.dump(ast.parse(new)) == tree, (name, finding)
    batch = [fix for _, fix in independent(analysis.module, list(analysis.fixes.items()))]
    together = fixed_source(source, analysis.module, batch)
    assert kept_outside(source, together, set().union(*(covered(positions, fix) for fix in batch))), name
    return len(analysis.fixes), sum(fix.safe for fix in analysis.fixes.values())


def test_fixes_keep_the_tree_or_the_lines_they_promise(sources):
    counts = [check_fixes(name, source) for name, source in sources.items()]
    assert sum(total for total, _ in counts) >= 30 and sum(safe for _, safe in counts) >= 5, counts


COOKIE = "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n"
VARIANTS = {  # name -> (prefix, line break, encoding, byte order mark)
    "crlf": ("", "\r\n", "utf-8", b""),
    "cr": ("", "\r", "utf-8", b""),
    "bom": ("", "\n", "utf-8", codecs.BOM_UTF8),
    "latin1": (COOKIE, "\r\n", "latin-1", b""),
    "formfeed": ("\x0c\n", "\n", "utf-8", b""),
}


def encoded(text: str, variant: str) -> bytes:
    _, line_break, encoding, bom = VARIANTS[variant]
    return bom + text.replace("\n", line_break).encode(encoding)


def test_fix_writes_back_the_files_own_bytes(sources, tmp_path):
    expected = {}
    names = list(VARIANTS)
    for index, (name, source) in enumerate(sources.items()):
        if "\r" in source or "\x0c" in source:
            continue
        # each source in one variant, the variants taken in turn (every variant meets many fixes); the
        # nightly run writes every source in every variant
        chosen = names if NIGHTLY else [names[index % len(names)]]
        for variant in chosen:
            prefix = VARIANTS[variant][0]
            try:
                before = encoded(prefix + source, variant)
            except UnicodeEncodeError:
                continue
            try:
                after = deep.call(fix_source, prefix + source, name, None, True).source
            except (ParseFailure, RecursionError):
                continue
            if after == prefix + source:
                continue
            (tmp_path / f"{variant}_{name}").write_bytes(before)
            expected[f"{variant}_{name}"] = encoded(after, variant)
    per_variant = {variant: sum(key.startswith(f"{variant}_") for key in expected) for variant in names}
    assert all(count >= 10 for count in per_variant.values()), per_variant
    CliRunner().invoke(main, ["lint", "--fix", "--unsafe-fixes", "--no-cache", "--exit-zero", str(tmp_path)],
                       catch_exceptions=False)
    wrong = [name for name, data in expected.items() if (tmp_path / name).read_bytes() != data]
    assert wrong == []
