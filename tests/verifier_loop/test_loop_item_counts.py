"""verify_loop with item_counts_fn: a token loss judged against the tokens each micro-batch holds."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gradcheck_accum import verify_loop

N = 4
VOCAB = 16


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Tanh(), torch.nn.Linear(8, VOCAB))


def micro_batches():
    # Two rows each, a different number of valid tokens per micro-batch; 9 micro-batches.
    g = torch.Generator().manual_seed(2)
    out = []
    for valid in [3, 6, 1, 5, 2, 6, 4, 1, 3]:
        ids = torch.randint(0, VOCAB, (2, 6), generator=g)
        labels = ids.clone()
        labels[0, valid:] = -100
        labels[1, max(valid - 1, 1):] = -100
        out.append((ids, labels))
    return out


def tokens(batch):
    return int((batch[1] != -100).sum())


def token_sum(model, batch):
    ids, labels = batch
    return F.cross_entropy(model(ids).reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, reduction="sum")


def window_mean(model, batch):
    return token_sum(model, batch) / tokens(batch)


def windows(micro, n):
    return [micro[i:i + n] for i in range(0, len(micro), n)]


def divided_by_window_tokens(model, optimizer, micro, n, extra=0):
    for window in windows(micro, n):
        count = sum(tokens(b) + extra for b in window)
        for batch in window:
            (token_sum(model, batch) / count).backward()
        optimizer.step()
        optimizer.zero_grad()


def divided_by_padded_count(model, optimizer, micro, n):
    # The count includes one item per row that the loss never averages over.
    divided_by_window_tokens(model, optimizer, micro, n, extra=2)


def mean_per_micro_batch(model, optimizer, micro, n):
    for window in windows(micro, n):
        for batch in window:
            (window_mean(model, batch) / len(window)).backward()
        optimizer.step()
        optimizer.zero_grad()


def check(train_fn):
    return verify_loop(train_fn, make_model(), micro_batches(), window_mean, N, item_counts_fn=tokens)


def test_window_token_count_matches():
    report = check(divided_by_window_tokens)
    assert report.ok, report.render()


def test_mean_of_means_named_with_token_counts():
    report = check(mean_per_micro_batch)
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    assert str([tokens(b) for b in micro_batches()[:N]]) in report.diagnosis


def test_divisor_counting_other_items_is_named():
    report = check(divided_by_padded_count)
    assert report.settings["findings"][0] == "wrong-item-count", report.render()
    window = micro_batches()[:N]
    assert f"divided by {sum(tokens(b) + 2 for b in window)} instead of the {sum(tokens(b) for b in window)}" \
        in report.diagnosis


def test_without_item_counts_fn_the_labels_are_counted():
    # Every micro-batch has 2 rows, so rows alone cannot explain the weights; the labels' entries
    # != -100 can, and are tried by default.
    report = verify_loop(mean_per_micro_batch, make_model(), micro_batches(), window_mean, N)
    assert report.settings["findings"][0] == "mean-of-means", report.render()
    assert "entries != -100 in batch[1]" in report.diagnosis
