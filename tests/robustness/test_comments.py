"""Suppression comments are read and written as tokens: ACC900's fix and --add-noqa never touch a
string, never turn what followed a code into code, and count lines as Python does (a form feed or
a lone CR)."""

from __future__ import annotations

import ast

import pytest
from click.testing import CliRunner

from gradcheck_accum.cli import main
from gradcheck_accum.lint.engine import fix_source, lint_source

SAVE_COMPILED = 'import torch\nmodel = torch.compile(model)\ntorch.save(model.state_dict(), "m.pt"{})\n'


def lint(tmp_path, *args: str) -> str:
    result = CliRunner().invoke(main, ["lint", "--no-cache", *args, str(tmp_path / "t.py")], catch_exceptions=False)
    return result.output


def written(tmp_path, text: str, *args: str) -> str:
    path = tmp_path / "t.py"
    path.write_bytes(text.encode())
    lint(tmp_path, *args)
    return path.read_bytes().decode()


@pytest.mark.parametrize("before, after", [
    ("lr = 0.1  # noqa: ACC101 * 10\n", "lr = 0.1  # * 10\n"),
    ("lr = 0.1  # noqa: ACC101  # the old rate\n", "lr = 0.1  # the old rate\n"),
    ("lr = 0.1  # accumcheck: ignore[ACC101] see #12\n", "lr = 0.1  # see #12\n"),
    ("lr = 0.1  # noqa: ACC101, E501\n", "lr = 0.1  # noqa: E501\n"),
    ('MARKER = "# noqa: ACC101"  # noqa: ACC101\n', 'MARKER = "# noqa: ACC101"\n'),
    ("\x0c\nx = 1\n\x0cy = 2  # noqa: ACC101\n", "\x0c\nx = 1\n\x0cy = 2\n"),
    ("x = 1\ry = 2  # noqa: ACC101\rz = 3\r", "x = 1\ry = 2\rz = 3\r"),
])
def test_the_unused_suppression_fix_removes_only_the_code(before, after):
    fixed = fix_source(before, "t.py").source
    assert fixed == after
    assert ast.dump(ast.parse(fixed)) == ast.dump(ast.parse(before))


def test_an_unused_suppression_is_reported_on_its_line_whatever_breaks_the_lines():
    for text in ["x = 1\ry = 2  # noqa: ACC101\r", "x = 1\x0c\ny = 2  # noqa: ACC101\n", "s = 'a\u2028b'\ny = 2  # noqa: ACC101\n"]:
        assert [(f.line, f.column) for f in lint_source(text, "t.py")] == [(2, 8)], repr(text)


@pytest.mark.parametrize("call, expected", [
    ("", 'torch.save(model.state_dict(), "m.pt")  # noqa: ACC302\n'),
    # The reported line ends inside a string: the comment goes where the string ends.
    (', f("""\n""")', 'torch.save(model.state_dict(), "m.pt", f("""\n"""))  # noqa: ACC302\n'),
    (", \\\n    1", 'torch.save(model.state_dict(), "m.pt", \\\n    1)  # noqa: ACC302\n'),
    # A noqa inside a string is text, not a suppression.
    (', "# noqa: E501"', 'torch.save(model.state_dict(), "m.pt", "# noqa: E501")  # noqa: ACC302\n'),
])
def test_add_noqa_writes_a_comment_token_that_hides_the_finding(tmp_path, call, expected):
    before = "\x0c\n" + SAVE_COMPILED.format(call)
    after = written(tmp_path, before, "--add-noqa")
    assert after == "\x0c\nimport torch\nmodel = torch.compile(model)\n" + expected
    assert ast.dump(ast.parse(after)) == ast.dump(ast.parse(before))
    assert "All checks passed" in lint(tmp_path)


def test_add_noqa_extends_an_existing_comment(tmp_path):
    before = SAVE_COMPILED.format("").replace('"m.pt")\n', '"m.pt")  # noqa: E501  (long)\n')
    assert written(tmp_path, before, "--add-noqa") == before.replace("E501", "E501, ACC302")


def test_the_full_format_shows_the_reported_line(tmp_path):
    (tmp_path / "t.py").write_text("s = 'a\u2028b'\n\x0c\n" + SAVE_COMPILED.format(""))
    assert '5 | torch.save(model.state_dict(), "m.pt")' in lint(tmp_path, "--format", "full")
