"""Padded transformers as people train them: tiny GPT-2 and Llama built from their configs (no
downloads), padding masks through scaled-dot-product attention, the model's own token-mean loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gradcheck_accum import verify, verify_loop

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # tiny GPT-2 and Llama, several verify runs each
transformers.logging.set_verbosity_error()

EAGER = {"modes": ("eager",)}


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                     bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                                      bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(config)


def padded_batch(rows: int = 8, length: int = 12, seed: int = 0) -> dict:
    """Right-padded rows of random lengths; padding is masked and labelled -100."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 64, (rows, length), generator=g)
    lengths = torch.randint(3, length + 1, (rows,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def model_loss(model, batch):
    """What HF training loops accumulate: the model's loss, a mean over the micro-batch's tokens."""
    return model(**batch).loss


def token_sum(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"][:, 1:].flatten(), ignore_index=-100,
                           reduction="sum")


def window_tokens(micro_batch, window):
    return sum(int((mb["labels"][:, 1:] != -100).sum()) for mb in window)


@pytest.mark.parametrize("factory", [gpt2, llama])
def test_padded_transformer_mean_of_means_is_named_not_blamed_on_attention(factory):
    batch = padded_batch()
    report = verify(factory, batch, model_loss, **EAGER)
    assert report.verdict == "mismatch", report.render()
    assert "mean-of-means" in report.diagnosis and "batch['labels'][:, 1:]" in report.diagnosis
    assert not any("random" in n for n in report.notes)
    right = verify(factory, batch, token_sum, scaling=window_tokens, **EAGER)
    assert right.ok, right.render()
    both = verify(factory, batch, model_loss, scaling="none", **EAGER)
    assert "mean-of-means" in both.diagnosis and "not divided by the accumulation steps (4.00x)" in both.diagnosis


def test_unpadded_transformer_loss_not_divided_is_named():
    batch = padded_batch()
    batch = {**batch, "attention_mask": torch.ones_like(batch["attention_mask"]), "labels": batch["input_ids"]}
    report = verify(gpt2, batch, model_loss, scaling="none", **EAGER)
    assert report.diagnosis.startswith("4.00x: loss not divided"), report.render()
    assert verify(gpt2, batch, model_loss, **EAGER).ok


def hf_style_loop(model, optimizer, micro_batches, n):
    """The loop of the 2024 bug: the model's mean loss divided by the accumulation steps."""
    model.train()
    for i, batch in enumerate(micro_batches):
        (model(**batch).loss / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


@pytest.mark.parametrize("factory", [gpt2, llama])
def test_loop_mean_of_means_weights_come_from_token_counts_not_rows(factory):
    micro_batches = [padded_batch(rows=2, seed=s) for s in range(4)]
    report = verify_loop(hf_style_loop, factory(), micro_batches, token_sum_mean, 4)
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    assert "batch['labels'][:, 1:]" in report.diagnosis and "expected" not in report.diagnosis


def token_sum_mean(model, batch):
    """The objective of a whole window: mean over its tokens."""
    return token_sum(model, batch) / int((batch["labels"][:, 1:] != -100).sum())
