"""Tiny models and padded token batches shared by the trainer-adapter tests (built in code, no downloads)."""

from __future__ import annotations

import torch

VOCAB = 64


def micro_batches(count: int = 9) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Regression micro-batches of two rows: nine, so N=4 leaves a last window of one."""
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 4, generator=g), torch.randn(2, 2, generator=g)) for _ in range(count)]


def mse(model, batch) -> torch.Tensor:
    x, y = batch
    return torch.nn.functional.mse_loss(model(x), y)


def token_batch(generator: torch.Generator, lengths: list[int], width: int) -> dict[str, torch.Tensor]:
    """Right-padded rows of the given lengths: labels are the tokens, -100 on padding."""
    rows = len(lengths)
    ids = torch.randint(1, VOCAB, (rows, width), generator=generator)
    mask = (torch.arange(width).expand(rows, width) < torch.tensor(lengths).unsqueeze(1)).long()
    ids = ids * mask
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


# Nine micro-batches of two rows: uneven token counts (what padding and packing give), widths
# that differ (the adapter pads them), and a last partial window of one micro-batch for N=4.
LENGTHS = [[8, 3], [6, 6], [2, 2], [8, 7], [5, 1], [8, 8], [4, 4], [8, 2], [7, 3]]


def token_micro_batches(seed: int = 1) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [token_batch(g, lengths, max(lengths)) for lengths in LENGTHS]


def predicted_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The items of a causal LM's loss: labels it predicts (every position but the first of a row)."""
    return int((batch["labels"][:, 1:] != -100).sum())


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config)


class MeanLossLM(torch.nn.Module):
    """A hand-written causal LM head whose forward takes no **kwargs: the Trainer cannot hand it
    the window's token count, so it falls back to dividing each micro-batch's mean by N."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.head = torch.nn.Linear(16, VOCAB)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(torch.tanh(self.embed(input_ids)))
        loss = None
        if labels is not None:
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1),
                                                     ignore_index=-100)
        return {"loss": loss, "logits": logits}
