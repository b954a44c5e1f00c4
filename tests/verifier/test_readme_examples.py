"""The README's verify examples run as written (each Python block of the Verify sections, in a
fresh namespace); the hypothesis property runs under the accumcheck fixture, and its mean-of-means
twin fails and shrinks (a negative control)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gradcheck_accum.pytest_plugin import _check

README = Path(__file__).parents[2] / "README.md"
SECTIONS = ("## Verify\n", "## Verify the training loop (and DDP)\n")


def blocks() -> list[str]:
    text = README.read_text()
    found = []
    for heading in SECTIONS:
        body = text[text.index(heading) + len(heading):]
        body = body[: body.index("\n## ")] if "\n## " in body else body
        found += re.findall(r"```python\n(.*?)```", body, re.S)
    return found


def test_the_verify_sections_hold_the_examples():
    names = [b for b in blocks() if "verify(" in b or "verify_loop(" in b or "split_plans" in b]
    assert len(names) == 3


@pytest.mark.parametrize("index", range(3))
def test_readme_example_runs_as_written(index):
    code = [b for b in blocks() if "verify(" in b or "verify_loop(" in b or "split_plans" in b][index]
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, f"README.md example {index + 1}", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_") and callable(f)]
    for test in tests:
        test(accumcheck=_check)


def test_the_property_fails_and_shrinks_on_a_mean_of_means():
    code = next(b for b in blocks() if "split_plans" in b)
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(code, "README.md property", "exec"), namespace)

    token_sum = namespace["token_loss_sum"]

    def token_mean(model, batch):  # per-micro-batch mean over its own tokens: the 2024 bug
        return token_sum(model, batch) / int((batch["labels"] != -100).sum())

    namespace["token_loss_sum"] = token_mean
    namespace["window_tokens"] = lambda micro_batch, window: len(window)
    with pytest.raises(pytest.fail.Exception, match="mean-of-means"):
        namespace["test_loss_accumulates"](accumcheck=_check)
