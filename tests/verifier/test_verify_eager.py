"""verify() in eager mode on real models: matches, named bugs, and awkward models."""

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from gradcheck_accum import Report, verify
from gradcheck_accum.verifier.errors import VerifyError
from verifier_models import (
    MLP, ce_mean, ce_sum, classification_batch, mlp, token_batch, token_mean, token_model, token_sum,
    window_rows, window_tokens,
)

EAGER = {"modes": ("eager",)}


def test_correct_mean_loss_matches_with_unit_scale():
    report = verify(mlp(), classification_batch(16), ce_mean, accumulation_steps=4, **EAGER)
    assert isinstance(report, Report)
    assert report.ok and report.verdict == "match", report.render()
    eager = report.mode("eager")
    assert abs(eager.scale - 1) < 1e-6 and abs(eager.cosine - 1) < 1e-8  # float32 products, float64 sums
    assert eager.weights is None  # weights are fitted to explain a mismatch; a match needs none
    assert {r.name for r in report.rows} == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    json.dumps(report.to_dict(), allow_nan=False)


def test_missing_scaling_is_named_with_its_factor():
    report = verify(mlp(), classification_batch(16), ce_mean, scaling="none", **EAGER)
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith("4.00x: loss not divided by the accumulation steps"), report.diagnosis


def test_double_scaling_is_named_when_the_intended_objective_is_given():
    report = verify(mlp(), classification_batch(16), lambda m, b: ce_mean(m, b) / 4,
                    reference_loss_fn=ce_mean, **EAGER)
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith("0.25x: scaled twice"), report.diagnosis


def test_mean_of_means_over_unequal_token_counts():
    report = verify(token_model(), token_batch(16), token_mean, **EAGER)
    assert report.verdict == "mismatch"
    assert "weights proportional to 1/items" in report.diagnosis and "mean-of-means" in report.diagnosis
    assert "labels" in report.diagnosis


def test_token_sum_over_window_count_matches():
    report = verify(token_model(), token_batch(16), token_sum, scaling=window_tokens, **EAGER)
    assert report.ok, report.render()


def test_mean_loss_with_a_ragged_tail_is_mean_of_means_over_rows():
    report = verify(mlp(), classification_batch(14), ce_mean, splits=[4, 4, 4, 2], **EAGER)
    assert "weights proportional to 1/items" in report.diagnosis and "rows" in report.diagnosis
    fixed = verify(mlp(), classification_batch(14), ce_sum, splits=[4, 4, 4, 2], scaling=window_rows, **EAGER)
    assert fixed.ok, fixed.render()


def test_zero_grad_inside_the_loss_code_leaves_only_the_last_micro_batch():
    def loss_with_zero_grad(model, batch):
        model.zero_grad()  # the bug: clears what earlier micro-batches accumulated
        return ce_mean(model, batch)

    report = verify(mlp(), classification_batch(16), loss_with_zero_grad, reference_loss_fn=ce_mean, **EAGER)
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith("only the last micro-batch contributes: gradients cleared every micro-batch")


def test_batchnorm_is_inherent_unless_frozen():
    def factory():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))

    report = verify(factory, classification_batch(16), ce_mean, **EAGER)
    assert report.verdict == "inherent" and not report.ok
    # Frozen for a second pass, the rest of the model matches: the deviation is measured, not blamed.
    assert "BatchNorm1d" in report.diagnosis and "with it taken out (BatchNorm frozen) the rest matches" \
        in report.diagnosis
    assert "relative error" in report.diagnosis
    frozen = verify(factory, classification_batch(16), ce_mean, freeze_batchnorm=True, **EAGER)
    assert frozen.ok, frozen.render()
    assert any("frozen" in n for n in frozen.notes)


def test_batchnorm_model_with_a_real_scaling_bug_is_still_a_mismatch():
    def factory():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))

    report = verify(factory, classification_batch(16), lambda m, b: (m.zero_grad(), ce_mean(m, b))[1],
                    reference_loss_fn=ce_mean, **EAGER)
    assert report.verdict == "mismatch" and "only the last micro-batch" in report.diagnosis


def test_dropout_is_switched_off_and_said_so_and_the_callers_model_is_untouched():
    model = mlp(dropout=0.5)
    model.fc1.weight.grad = torch.full_like(model.fc1.weight, 7.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = verify(model, classification_batch(16), ce_mean, **EAGER)
    assert report.ok, report.render()
    assert any("dropout switched off" in n and "drop" in n for n in report.notes)
    assert model.drop.p == 0.5 and model.training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(model.fc1.weight.grad, torch.full_like(model.fc1.weight, 7.0))
    assert model.fc2.weight.grad is None


def test_frozen_and_unused_parameters_are_reported_not_failed():
    class Partly(MLP):
        def __init__(self):
            super().__init__()
            self.unused = nn.Linear(2, 2)

    torch.manual_seed(0)
    model = Partly()
    model.fc1.requires_grad_(False)
    report = verify(model, classification_batch(16), ce_mean, **EAGER)
    assert report.ok, report.render()
    assert any("requires_grad=False" in n for n in report.notes)
    assert any("no gradient" in n and "unused.weight" in n for n in report.notes)
    assert "fc1.weight" not in {r.name for r in report.rows}


def test_nan_from_a_micro_batch_without_valid_tokens_is_named():
    batch = token_batch(8)
    batch["labels"][6:] = -100  # the last micro-batch has no valid token: its mean is 0/0
    report = verify(token_model(), batch, token_mean, **EAGER)
    assert report.verdict == "mismatch"
    # cross_entropy gives a NaN loss but a zero gradient there; the rest is mean-of-means.
    assert report.diagnosis.startswith("loss of micro-batch 4 is NaN/inf"), report.diagnosis
    assert "mean-of-means" in report.diagnosis


def test_nan_gradient_is_named():
    def sqrt_loss(model, batch):
        out = model(batch[0])
        shift = -1.0 if len(batch[0]) == 4 else 1.0  # the 4-row micro-batch takes sqrt of a negative
        return torch.sqrt(out[0, 0] - out[0, 0].detach() + shift) + ce_mean(model, batch)

    report = verify(mlp(), classification_batch(13), sqrt_loss, splits=[3, 3, 3, 4], **EAGER)
    assert report.verdict == "mismatch" and report.diagnosis.startswith("NaN/inf in the accumulated gradient")
    assert "micro-batch 4" in report.diagnosis


def test_integer_inputs_and_dict_batches_work_in_float64():
    report = verify(token_model(), token_batch(12), token_sum, scaling=window_tokens, splits=[5, 4, 3], **EAGER)
    assert report.ok and report.settings["splits"] == [5, 4, 3] and report.settings["accumulation_steps"] == 3


@pytest.mark.parametrize("dtype", ["bfloat16", torch.float16])
def test_low_precision_matches_and_still_catches_missing_scaling(dtype):
    good = verify(mlp(), classification_batch(32), ce_mean, dtype=dtype, **EAGER)
    assert good.ok, good.render()
    bad = verify(mlp(), classification_batch(32), ce_mean, dtype=dtype, scaling="none", **EAGER)
    assert bad.diagnosis.startswith("4.00x"), bad.diagnosis


def test_nondeterministic_loss_is_reported_as_such():
    big_batch_runs = iter([1.0, 1.0, 1.001])  # float64, the rounding budget, its rerun

    def jittery(model, batch):
        # State that seeding torch cannot pin: two identical big-batch runs differ (and the
        # micro-batches are off by far more, so the check fails and looks for a reason).
        factor = next(big_batch_runs) if len(batch[0]) == 16 else 1.01
        return ce_mean(model, batch) * factor

    report = verify(mlp(), classification_batch(16), jittery, **EAGER)
    assert not report.ok
    assert any("nondeterministic" in n for n in report.notes)


def test_tf32_settings_are_restored():
    torch.set_float32_matmul_precision("high")
    try:
        verify(mlp(), classification_batch(8), ce_mean, **EAGER)
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("kwargs, message", [
    ({"model": nn.ReLU()}, "no parameters"),
    ({"model": nn.Linear(6, 3).requires_grad_(False)}, "requires_grad=False"),
    ({"model": 3}, "nn.Module or a zero-argument factory"),
    ({"model": lambda: "nope"}, "not a torch.nn.Module"),
    ({"loss_fn": lambda m, b: m(b[0])}, "scalar tensor"),
    ({"loss_fn": lambda m, b: ce_mean(m, b).detach()}, "does not require grad"),
    ({"loss_fn": lambda m, b: 1 / 0}, "loss_fn raised ZeroDivisionError"),
    ({"loss_fn": lambda m, b: ce_mean(m, b) * 0 + m(b[0]).sum() * float("nan")}, "NaN/inf even in float64"),
    ({"accumulation_steps": 0}, "positive integer"),
    ({"accumulation_steps": 40}, "cannot be split into 40"),
    ({"splits": [8, 7]}, "sum to 15"),
    ({"scaling": "mean"}, "scaling must be"),
    ({"scaling": lambda mb, w: 0}, "cannot be divided"),
    ({"modes": ("lazy",)}, "modes must be"),
    ({"dtype": "int8"}, "unsupported dtype"),
    ({"device": "cuda:7"} if not torch.cuda.is_available() else {"device": "nowhere"}, "device"),
])
def test_bad_input_gets_one_clear_line(kwargs, message):
    args = {"model": mlp(), "batch": classification_batch(16), "loss_fn": ce_mean, "modes": ("eager",)}
    args.update(kwargs)
    with pytest.raises(VerifyError, match=message) as info:
        verify(**args)
    assert "\n" not in str(info.value)


def test_float64_failure_explains_itself():
    class Hardcoded(MLP):
        def forward(self, x):
            return super().forward(x @ torch.eye(6, dtype=torch.float32))

    torch.manual_seed(0)
    # A match within the floor of the float32 big batch needs no float64 run; a mismatch does.
    assert verify(Hardcoded(), classification_batch(16), ce_mean, **EAGER).ok
    with pytest.raises(VerifyError, match="float64"):
        verify(Hardcoded(), classification_batch(16), ce_mean, scaling="none", **EAGER)


def test_sparse_embedding_gradients_are_compared_densely():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(12, 6, sparse=True), nn.Flatten(), nn.Linear(30, 12))
    batch = token_batch(8)
    report = verify(model, batch["ids"], lambda m, ids: F.cross_entropy(m(ids), ids[:, 0]), **EAGER)
    assert report.ok, report.render()


def test_lazy_modules_must_be_initialised_first():
    model = nn.Sequential(nn.LazyLinear(4), nn.Tanh(), nn.Linear(4, 3))
    with pytest.raises(VerifyError, match="uninitialised lazy parameters"):
        verify(model, classification_batch(8), ce_mean, **EAGER)


def test_loss_coupling_items_across_the_batch_is_inherent():
    torch.manual_seed(0)

    def in_batch_negatives(model, batch):
        z = model(batch[0])
        return torch.logsumexp(z @ z.T, dim=1).mean()

    report = verify(nn.Linear(6, 4), classification_batch(16), in_batch_negatives, **EAGER)
    assert report.verdict == "inherent"
    assert "couples items across micro-batches" in report.diagnosis


def test_integer_tensor_fed_to_a_float_layer_explains_the_dtype_rule():
    with pytest.raises(VerifyError, match="integer ones keep theirs"):
        verify(mlp(), torch.randint(0, 3, (8, 6)), lambda m, b: m(b).sum(), **EAGER)


def test_functional_dropout_that_cannot_be_switched_off_is_replayed():
    class FunctionalDropout(MLP):
        def forward(self, x):
            # One dropout mask per feature, shared by the batch: each micro-batch is given the big
            # batch's mask, so the check stays exact.
            h = torch.tanh(self.fc1(x))
            return self.fc2(h * F.dropout(torch.ones(h.shape[1]), 0.3, training=True))

    torch.manual_seed(0)
    report = verify(FunctionalDropout(), classification_batch(16), ce_mean, **EAGER)
    assert report.ok, report.render()
    assert any("random draws (bernoulli_) recorded" in n for n in report.notes)
    bad = verify(FunctionalDropout(), classification_batch(16), ce_mean, scaling="none", **EAGER)
    assert bad.diagnosis.startswith("4.00x"), bad.render()


def test_switched_off_dropout_and_attention_are_not_random_ops():
    report = verify(mlp(dropout=0.5), classification_batch(16), ce_mean, **EAGER)
    assert report.ok and not any("random ops run" in n for n in report.notes)
