"""diagnose() on real gradients, as a loop verifier feeds it: the accumulated gradient comes from
somewhere else (the user's loop), the contributions from independent micro-batch backwards."""

import pytest

from gradcheck_accum.verifier.accumulate import run_window
from gradcheck_accum.verifier.batches import split_batch
from gradcheck_accum.verifier.diagnose import diagnose
from verifier_models import ce_mean, classification_batch, mlp


@pytest.fixture(scope="module")
def gradients():
    model = mlp()
    batch = classification_batch(16)
    micro = split_batch(batch, [4, 4, 4, 4])
    window = run_window(model, micro, ce_mean, [4] * 4, label="test")
    model64 = mlp().double()
    big = run_window(model64, [(batch[0].double(), batch[1])], ce_mean, [1], label="ref", capture=False)
    return window, big.grads


def _combine(contributions, weights):
    out = {}
    for name in contributions[0]:
        out[name] = sum(w * c[name] for w, c in zip(weights, contributions))
    return out


@pytest.mark.parametrize("weights, code, text", [
    ((1, 1, 1, 1), None, None),
    ((0, 0, 0, 1), "only_last", "only the last micro-batch contributes: gradients cleared every micro-batch"),
    ((1, 0, 1, 1), "dropped", "micro-batch 2 contribute(s) nothing"),
    ((4, 4, 4, 4), "not_divided", "4.00x: loss not divided by the accumulation steps"),
    ((0.25, 0.25, 0.25, 0.25), "scaled_twice", "0.25x: scaled twice"),
    ((1.5, 1, 1, 1), "uneven_weights", "micro-batches weighted [1.5, 1, 1, 1]"),
])
def test_named_causes_from_a_users_accumulated_gradient(gradients, weights, code, text):
    window, reference = gradients
    accumulated = _combine(window.contributions, weights)
    d = diagnose(accumulated, window.contributions, reference, steps=4)
    if code is None:
        assert abs(d.scale - 1) < 1e-5 and d.cosine > 1 - 1e-9 and d.residual < 1e-4
        return
    assert d.code == code and d.cause.startswith(text), d.cause


def test_mean_of_means_needs_the_item_counts(gradients):
    window, reference = gradients
    accumulated = _combine(window.contributions, (0.5, 1, 1, 2))
    d = diagnose(accumulated, window.contributions, reference, steps=4, item_counts={"tokens": [8, 4, 4, 2]})
    assert d.code == "mean_of_means" and "tokens = [8, 4, 4, 2]" in d.cause
    assert diagnose(accumulated, window.contributions, reference, steps=4).code == "uneven_weights"


def test_non_finite_accumulated_gradient(gradients):
    window, reference = gradients
    accumulated = _combine(window.contributions, (1, 1, 1, 1))
    accumulated["fc1.bias"] = accumulated["fc1.bias"] * float("nan")
    d = diagnose(accumulated, window.contributions, reference, losses=[0.1, float("nan"), 0.2, 0.3])
    assert d.code == "non_finite" and "micro-batch 2" in d.cause
