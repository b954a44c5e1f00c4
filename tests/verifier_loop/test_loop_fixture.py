"""The `accumcheck` pytest fixture accepts verify_loop's arguments too."""

from __future__ import annotations

import torch

import verify_loop_cases as cases

pytest_plugins = ["pytester"]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def micro_batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 4, generator=g), torch.randn(2, 2, generator=g)) for _ in range(5)]


def test_fixture_runs_loop_by_keyword(accumcheck):
    report = accumcheck(train_fn=cases.nested_nanogpt, model=make_model(), micro_batches=micro_batches(),
                        loss_fn=cases.micro_loss, accumulation_steps=2)
    assert report.settings["optimizer_steps"] == 3


def test_fixture_positional_loop_and_expected_mismatch(accumcheck):
    report = accumcheck(cases.loss_not_divided, make_model(), micro_batches(), cases.micro_loss, 2,
                        loop=True, expect="mismatch")
    assert report.settings["findings"][0] == "loss-not-divided"


def test_fixture_fails_the_test_with_the_loop_diagnosis(pytester):
    pytester.makepyfile(
        """
        import torch

        def train(model, optimizer, micro_batches, n):
            for batch in micro_batches:
                optimizer.zero_grad()
                (model(batch).pow(2).mean() / n).backward()
            optimizer.step()

        def test_loop(accumcheck):
            batches = [torch.randn(2, 3) for _ in range(2)]
            accumcheck(train_fn=train, model=torch.nn.Linear(3, 1), micro_batches=batches,
                       loss_fn=lambda m, b: m(b).pow(2).mean(), accumulation_steps=2)
        """
    )
    result = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*gradients cleared every micro-batch*"])
