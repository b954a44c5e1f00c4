"""Standard input the way editors use it: `--fix -` prints the source alone on stdout (fixed or not,
in its own bytes), findings and the summary on stderr; `-` named twice is read once."""

from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-c", "from gradcheck_accum.cli import main; main()", "lint", "--no-cache"]
COMPILED_SAVE = 'import torch\nmodel = torch.compile(model)\ntorch.save(model.state_dict(), "m.pt")\n'


def lint(*args: str, input: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), input=input, capture_output=True, timeout=120)


@pytest.mark.parametrize("text, printed", [
    (COMPILED_SAVE + "lr = 0.1  # noqa: ACC101\r\n", COMPILED_SAVE + "lr = 0.1\r\n"),  # fixed, findings left
    ("x = 1\n", "x = 1\n"),  # nothing to fix
    ("# -*- coding: latin-1 -*-\nname = 'caf\xe9'  # noqa: ACC101\n", "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n"),
])
def test_fix_of_standard_input_prints_only_the_source(text, printed):
    encoding = "latin-1" if "latin-1" in text else "utf-8"
    run = lint("--fix", "-", input=text.encode(encoding))
    assert run.stdout == printed.encode(encoding)
    assert run.returncode == (1 if "model" in text else 0)
    if "model" in text:
        assert b"-:3:12: ACC302" in run.stderr


def test_standard_input_named_twice_is_read_once():
    run = lint("-", "-", input=COMPILED_SAVE.encode())
    assert run.returncode == 1 and run.stdout.count(b"ACC302") == 1
    assert b"in 1 of 1 file" in run.stderr
