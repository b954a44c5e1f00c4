"""The `accumcheck` pytest fixture (registered through the pytest11 entry point)."""

import subprocess
import sys
import textwrap

from verifier_models import ce_mean, classification_batch, mlp


def test_fixture_returns_the_report_when_gradients_match(accumcheck):
    report = accumcheck(mlp(), classification_batch(16), ce_mean, modes=("eager",))
    assert report.ok


def test_fixture_can_assert_a_negative_control(accumcheck):
    report = accumcheck(mlp(), classification_batch(16), ce_mean, scaling="none", modes=("eager",),
                        expect="mismatch")
    assert report.diagnosis.startswith("4.00x")


def test_fixture_fails_the_test_with_the_rendered_report(tmp_path):
    test_file = tmp_path / "test_user.py"
    test_file.write_text(textwrap.dedent("""
        import torch
        import torch.nn.functional as F

        def test_accumulation(accumcheck):
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 2)
            batch = (torch.randn(8, 4), torch.randn(8, 2))
            accumcheck(model, batch, lambda m, b: F.mse_loss(m(b[0]), b[1]), scaling="none", modes=("eager",))

        def test_bad_input(accumcheck):
            accumcheck(torch.nn.ReLU(), torch.randn(8, 4), lambda m, b: m(b).sum(), modes=("eager",))
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 failed" in out.stdout
    assert "accumcheck verify: MISMATCH" in out.stdout and "4.00x: loss not divided" in out.stdout
    assert "accumcheck could not verify: the model has no parameters" in out.stdout


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gradcheck_accum.strategies import split_plans  # noqa: E402
from verifier_models import ce_sum, window_rows  # noqa: E402


@settings(max_examples=10, deadline=None)
@given(split_plans(total=st.integers(2, 24), steps=st.integers(1, 5)))
def test_fixture_works_under_hypothesis_given(accumcheck, plan):
    rows, splits = plan
    accumcheck(mlp(), classification_batch(rows), ce_sum, splits=splits, scaling=window_rows, modes=("eager",))
