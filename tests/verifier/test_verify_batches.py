import pytest
import torch

from gradcheck_accum.verifier.batches import (
    batch_size, check_splits, even_splits, item_counts, split_batch,
)
from gradcheck_accum.verifier.errors import VerifyError


def test_even_splits_put_the_remainder_first():
    assert even_splits(10, 4) == [3, 3, 2, 2]
    assert even_splits(8, 4) == [2, 2, 2, 2]


def test_split_keeps_structure_and_passes_other_leaves_through():
    batch = {"x": torch.arange(10).float(), "pair": (torch.arange(10), "tag"), "n": 7, "scalar": torch.tensor(2.0)}
    parts = split_batch(batch, [3, 3, 4])
    assert [p["x"].tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert parts[2]["pair"][0].tolist() == [6, 7, 8, 9] and parts[2]["pair"][1] == "tag"
    assert all(p["n"] == 7 and p["scalar"].item() == 2.0 for p in parts)
    assert torch.equal(torch.cat([p["x"] for p in parts]), batch["x"])


@pytest.mark.parametrize("bad, message", [
    ({"a": torch.zeros(4), "b": torch.zeros(5)}, "share dim 0"),
    ({"a": 1, "b": "text"}, "no tensor"),
])
def test_batch_size_errors_name_the_problem(bad, message):
    with pytest.raises(VerifyError, match=message):
        batch_size(bad)


def test_split_errors():
    with pytest.raises(VerifyError, match="cannot be split into 4"):
        even_splits(3, 4)
    with pytest.raises(VerifyError, match="sum to 5"):
        check_splits([2, 3], 6)
    with pytest.raises(VerifyError, match="positive"):
        check_splits([3, 0, 3], 6)
    with pytest.raises(VerifyError, match="positive integer"):
        even_splits(6, 0)


def test_item_counts_find_rows_valid_labels_and_masks():
    labels = torch.tensor([[1, -100], [2, 3], [-100, -100], [4, 5]])
    mask = torch.tensor([[True, False], [True, True], [False, False], [True, True]])
    counts = item_counts(split_batch({"labels": labels, "mask": mask, "x": torch.zeros(4, 2)}, [1, 3]))
    assert counts["rows"] == [1, 3]
    assert counts["entries != -100 in batch['labels']"] == [1, 4]
    assert counts["True entries of batch['mask']"] == [1, 4]
