"""verify_hf_trainer against the installed transformers: the Trainer's real loop on tiny models."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # a Trainer per test

from trainer_cases import MeanLossLM, predicted_tokens, tiny_llama, token_batch, token_micro_batches  # noqa: E402

from gradcheck_accum import verify_trainer  # noqa: E402
from gradcheck_accum.verifier.errors import VerifyError  # noqa: E402
from gradcheck_accum.verifier.trainers.hf_trainer import model_loss, verify_hf_trainer  # noqa: E402

N = 4


def trainer_for(model, tmp_path, cls=None, **kwargs):
    settings = dict(output_dir=str(tmp_path), gradient_accumulation_steps=N, per_device_train_batch_size=2,
                    learning_rate=1e-3, max_grad_norm=0.0, report_to="none", use_cpu=True)
    args = transformers.TrainingArguments(**{**settings, **kwargs})
    return (cls or transformers.Trainer)(model=model, args=args)


def test_token_loss_of_a_causal_lm_matches_every_step_with_clipping_that_binds(tmp_path):
    trainer = trainer_for(tiny_llama(), tmp_path, max_grad_norm=0.1)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    report = verify_hf_trainer(trainer, token_micro_batches(), device="cpu")
    assert report.ok, report.render()
    # 9 micro-batches, N=4: two full windows and the last one of a single micro-batch, each checked.
    assert report.settings["optimizer_steps"] == 3
    assert [m.mode for m in report.modes] == ["step 1", "step 2", "step 3"] and all(m.ok for m in report.modes)
    assert all("clipped to" in m.diagnosis for m in report.modes)  # judged before the clip, then the clip
    assert report.settings["framework"] == f"transformers {transformers.__version__}"
    # The user's Trainer is neither trained nor advanced.
    assert trainer.state.global_step == 0
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())


def test_model_without_loss_kwargs_gets_mean_of_means(tmp_path):
    # The Trainer cannot pass the window's token count to a forward without **kwargs, so it
    # divides each micro-batch's own token mean by N: the 2024 accumulation bug, still live here.
    trainer = trainer_for(MeanLossLM(), tmp_path)
    micro_batches = token_micro_batches()
    report = verify_trainer(trainer, micro_batches, device="cpu", item_counts_fn=predicted_tokens)
    assert report.verdict == "mismatch"
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    assert str([predicted_tokens(mb) for mb in micro_batches[:N]]) in report.diagnosis
    step1 = report.mode("step 1")
    counts = [predicted_tokens(mb) for mb in micro_batches[:N]]
    # Effective weights, as verify gives them (1 = what the big batch gives a micro-batch): a
    # per-micro-batch token mean divided by N weighs micro-batch i total / (N * tokens_i).
    assert step1.weights == pytest.approx([sum(counts) / (N * c) for c in counts], rel=1e-3)


class DividesAgain(transformers.Trainer):
    """A compute_loss override that divides by N on top of the Trainer's own division."""

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        loss = super().compute_loss(model, inputs, return_outputs=False, **kwargs)
        return loss / self.args.gradient_accumulation_steps


def test_compute_loss_override_needs_the_objective_and_then_is_named(tmp_path):
    trainer = trainer_for(MeanLossLM(), tmp_path, cls=DividesAgain)
    with pytest.raises(VerifyError, match="overrides compute_loss"):
        verify_hf_trainer(trainer, token_micro_batches(), device="cpu")
    report = verify_hf_trainer(trainer, token_micro_batches(), loss_fn=model_loss, device="cpu")
    # Both bugs at once: the Trainer's per-micro-batch mean (no loss kwargs) and the second / N.
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    assert "on top, it is divided by the accumulation steps twice (0.25x)" in report.diagnosis


def pad_rows(rows):
    """A collator of the user's: pads token rows to the longest, labels with -100."""
    width = max(len(r["input_ids"]) for r in rows)
    lengths = [len(r["input_ids"]) for r in rows]
    batch = token_batch(torch.Generator().manual_seed(0), lengths, width)
    for i, r in enumerate(rows):
        batch["input_ids"][i, : lengths[i]] = torch.tensor(r["input_ids"])
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


def test_default_micro_batches_come_from_the_trainers_dataset_and_collator(tmp_path):
    g = torch.Generator().manual_seed(3)
    rows = [{"input_ids": torch.randint(1, 64, (int(n),), generator=g).tolist()}
            for n in torch.randint(2, 9, (16,), generator=g)]
    trainer = trainer_for(tiny_llama(), tmp_path)
    trainer.train_dataset, trainer.data_collator = rows, pad_rows
    report = verify_hf_trainer(trainer, windows=1, device="cpu")
    assert report.ok, report.render()
    assert report.settings["micro_batches"] == N + 1 and report.settings["optimizer_steps"] == 2
