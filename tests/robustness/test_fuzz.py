"""Generated programs never crash the linter, unsafe fixes always leave code that parses, and
hollowing (leaving out definitions no training loop depends on) never changes the findings.

CI runs a small derandomized sample; `pytest --nightly` (or ACCUMCHECK_FUZZ_EXAMPLES=5000) a nightly-size
one: hypothesmith draws one program in ten (generated.py says why), the seeded generator the rest.
"""

import os

import hypothesmith
import libcst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradcheck_accum.lint.engine import ParseFailure, analyze, fix_source, lint_source
from gradcheck_accum.lint.prefilter import screen
from gradcheck_accum.lint import registry
from generated import HYPOTHESMITH_SHARE_AT_NIGHTLY_SIZE, TRAINING_LINES, seed, seeded_programs

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("ACCUMCHECK_FUZZ_EXAMPLES", "60"))
NIGHTLY = "ACCUMCHECK_FUZZ_EXAMPLES" in os.environ
DRAWN = EXAMPLES // HYPOTHESMITH_SHARE_AT_NIGHTLY_SIZE if NIGHTLY else EXAMPLES  # per hypothesis test below
SEEDED = EXAMPLES - 3 * DRAWN if NIGHTLY else EXAMPLES // 5
FUZZ = settings(max_examples=max(DRAWN, 1), deadline=None, derandomize=not NIGHTLY,
                suppress_health_check=list(HealthCheck))


def check(source: str) -> None:
    try:
        lint_source(source, "fuzz.py")
    except ParseFailure:
        return
    rules, hollowed = screen(source, list(registry.rules()))
    if hollowed is not None:
        assert analyze(source, "fuzz.py", rules, hollowed=hollowed).findings == \
            analyze(source, "fuzz.py", rules).findings
    fixed = fix_source(source, "fuzz.py", unsafe=True).source
    libcst.parse_module(fixed)


@FUZZ
@given(hypothesmith.from_grammar())
def test_programs_from_the_grammar(source):
    check(source)


@FUZZ
@given(hypothesmith.from_node())
def test_programs_from_syntax_trees(source):
    check(source)


def indent(lines: list[str], depth: int) -> str:
    pad = "    " * depth
    return "".join(pad + line.replace("\n", "\n" + pad) + "\n" for line in lines)


@FUZZ
@given(st.lists(TRAINING_LINES, min_size=1, max_size=8), st.lists(TRAINING_LINES, max_size=4),
       hypothesmith.from_node(), st.sampled_from(["for i, batch in enumerate(loader):",
                                                   "while True:", "for micro in range(accum):"]),
       st.sampled_from(["", "def generated():", "class Generated:", "@decorated\nasync def generated():"]),
       st.integers(0, 8))
def test_training_loops_with_generated_code(body, tail, generated, header, wrapper, where):
    """Generated code, at the top or inside a definition (which hollowing may leave out), before a
    loop that reaches a backward call."""
    prefix = "import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"
    body.insert(where % (len(body) + 1), "loss.backward()")
    if wrapper:
        generated = wrapper + "\n" + indent(generated.splitlines() or ["pass"], 1)
    source = prefix + generated + "\n" + header + "\n" + indent(body, 1) + indent(tail, 0)
    check(source)


def test_seeded_programs():
    chosen = seed() if NIGHTLY else 0
    for number, source in enumerate(seeded_programs(SEEDED, chosen)):
        try:
            check(source)
        except Exception as error:
            raise AssertionError(f"seeded program {number} of seed {chosen}:\n{source}") from error
