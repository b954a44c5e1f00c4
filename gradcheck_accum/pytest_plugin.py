"""pytest plugin (entry point `pytest11`): the `accumcheck` fixture.

    def test_accumulation(accumcheck):
        accumcheck(model, batch, loss_fn, accumulation_steps=4)

It takes `verify`'s arguments, fails the test with the rendered report when accumulated
gradients do not match, and returns the report. Given `train_fn=` (or `loop=True`) it takes
`verify_loop`'s arguments instead and checks the training loop. `expect="mismatch"` (or
"inherent", "uncheckable") asserts the opposite, for negative controls. Torch is imported only when the fixture is called, so the
plugin costs nothing in test runs that do not use it.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest


def _check(*args: Any, expect: str = "match", loop: bool = False, **kwargs: Any) -> Any:
    from gradcheck_accum.verifier.check import verify
    from gradcheck_accum.verifier.errors import VerifyError

    if loop or "train_fn" in kwargs:
        # The training loop itself: accumcheck(train_fn=..., model=..., micro_batches=..., loss_fn=...)
        # or accumcheck(train_fn, model, micro_batches, loss_fn, loop=True), as verify_loop takes them.
        from gradcheck_accum.verifier.loop import verify_loop as verify

    from gradcheck_accum.verifier.report import VERDICTS

    if expect not in VERDICTS:
        raise ValueError(f"expect must be one of {VERDICTS}, got {expect!r}")
    try:
        report = verify(*args, **kwargs)
    except VerifyError as exc:
        pytest.fail(f"accumcheck could not verify: {exc}", pytrace=False)
    if report.verdict != expect:
        pytest.fail(f"expected verdict {expect!r}, got {report.verdict!r}\n{report.render()}", pytrace=False)
    return report


# Session scope: the fixture is a stateless function, and hypothesis rejects @given tests that
# use function-scoped fixtures.
@pytest.fixture(scope="session")
def accumcheck() -> Callable[..., Any]:
    """Callable like `gradcheck_accum.verify`; fails the test unless the verdict is `expect`."""
    return _check
