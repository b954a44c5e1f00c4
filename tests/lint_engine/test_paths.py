"""Which tests exclude each other: what passing a guard decides, and which calls a run settles."""

import libcst as cst
import pytest

from gradcheck_accum.lint.paths import excluded_by, implied
from gradcheck_accum.lint.vocabulary import Context, Guard


def guard(test: str, positive: bool = True) -> Guard:
    return Guard(cst.parse_expression(test), positive, cst.parse_statement("pass"), 0)


def keys(found) -> list[tuple[str, bool]]:
    """Each decision's test (canonical text, spaces dropped here too) and the value it is decided to."""
    return [(d.key.replace(" ", ""), d.value) for d in found]


def test_passing_a_conjunction_decides_each_side():
    assert keys(implied(guard("sharded() and resume is not None"))) == [
        ("sharded()andresumeisnotNone", True), ("sharded()", True), ("resume", True)]


def test_failing_a_disjunction_decides_each_side_false():
    assert keys(implied(guard("a or not b", positive=False))) == [("aornotb", False), ("a", False), ("b", True)]


def test_failing_a_conjunction_decides_neither_side():
    assert keys(implied(guard("a and b", positive=False))) == [("aandb", False)]


@pytest.mark.parametrize("bound, here, excluded", [
    # the caller hands the value over under `sharded() and resume`; the read is in the callee's `else`
    (["sharded() and resume"], [("sharded()", False)], True),
    (["sharded() and resume"], [("sharded()", True)], False),
    # a call with arguments, or a method of an object, may read live state: no exclusion
    (["ready(step) and resume"], [("ready(step)", False)], False),
    (["loader.exhausted()"], [("loader.exhausted()", False)], False),
])
def test_a_module_function_called_with_nothing_is_settled_for_the_run(bound, here, excluded):
    bound_ctx = Context(tuple(guard(test) for test in bound))
    here_ctx = Context(tuple(guard(test, positive) for test, positive in here))
    assert excluded_by(bound_ctx, here_ctx, lambda _: False) is excluded
