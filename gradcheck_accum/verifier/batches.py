"""Splitting a batch into micro-batches.

A batch is a Tensor or a tuple/list/dict (nested freely) whose tensor leaves share dim 0, the
item dimension; other leaves (ints, strings, None, 0-d tensors) are passed to every micro-batch
unchanged.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import torch

from gradcheck_accum.verifier.errors import VerifyError


def _leaves(batch: Any, path: str = "batch") -> Iterator[tuple[str, Any]]:
    if isinstance(batch, dict):
        for key, value in batch.items():
            yield from _leaves(value, f"{path}[{key!r}]")
    elif isinstance(batch, (tuple, list)):
        for i, value in enumerate(batch):
            yield from _leaves(value, f"{path}[{i}]")
    else:
        yield path, batch


def tensor_leaves(batch: Any) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor with at least one dimension, in a stable order."""
    return [(p, v) for p, v in _leaves(batch) if isinstance(v, torch.Tensor) and v.dim() > 0]


def map_batch(batch: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    """Apply fn to every tensor leaf with at least one dimension, keeping the structure."""
    if isinstance(batch, dict):
        mapped = {k: map_batch(v, fn) for k, v in batch.items()}
        return mapped if type(batch) is dict else type(batch)(mapped)
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # namedtuple
        return type(batch)(*(map_batch(v, fn) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map_batch(v, fn) for v in batch)
    if isinstance(batch, torch.Tensor) and batch.dim() > 0:
        return fn(batch)
    return batch


def batch_size(batch: Any) -> int:
    leaves = tensor_leaves(batch)
    if not leaves:
        raise VerifyError("the batch holds no tensor with a batch dimension (dim 0) to split")
    first_path, first = leaves[0]
    size = first.shape[0]
    for path, tensor in leaves[1:]:
        if tensor.shape[0] != size:
            raise VerifyError(
                f"{path} has {tensor.shape[0]} items in dim 0 but {first_path} has {size}: "
                "all tensors in the batch must share dim 0"
            )
    return int(size)


def even_splits(total: int, steps: int) -> list[int]:
    """As even as possible, larger micro-batches first: 10 items in 4 steps -> [3, 3, 2, 2]."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise VerifyError(f"accumulation_steps must be a positive integer, got {steps!r}")
    if total < steps:
        raise VerifyError(f"a batch of {total} items cannot be split into {steps} non-empty micro-batches")
    base, extra = divmod(total, steps)
    return [base + 1] * extra + [base] * (steps - extra)


def check_splits(splits: Sequence[int], total: int) -> list[int]:
    try:
        sizes = [int(s) for s in splits]
    except (TypeError, ValueError):
        raise VerifyError(f"splits must be a sequence of positive integers, got {splits!r}") from None
    if not sizes or any(s < 1 for s in sizes) or any(isinstance(s, bool) for s in splits):
        raise VerifyError(f"splits must be non-empty positive integers, got {list(splits)!r}")
    if sum(sizes) != total:
        raise VerifyError(f"splits {sizes} sum to {sum(sizes)}, but the batch has {total} items")
    return sizes


def split_batch(batch: Any, splits: Sequence[int]) -> list[Any]:
    """Cut every tensor leaf along dim 0 into consecutive pieces of the given sizes."""
    starts = [0]
    for size in splits:
        starts.append(starts[-1] + size)
    return [map_batch(batch, lambda t, a=a, b=b: t[a:b]) for a, b in zip(starts, starts[1:])]


def item_counts(micro_batches: Sequence[Any], ignore_index: int = -100) -> dict[str, list[int]]:
    """Candidate 'item' counts per micro-batch for the diagnosis: rows, non-ignored entries of
    each integer tensor (labels with ignore_index), and True entries of each bool tensor (masks)."""
    counts: dict[str, list[int]] = {"rows": [batch_size(mb) for mb in micro_batches]}
    paths = [p for p, _ in tensor_leaves(micro_batches[0])]
    for index, path in enumerate(paths):
        values = []
        for mb in micro_batches:
            tensor = tensor_leaves(mb)[index][1]
            if tensor.dtype == torch.bool:
                values.append(int(tensor.sum()))
            elif not tensor.is_floating_point() and not tensor.is_complex():
                values.append(int((tensor != ignore_index).sum()))
            else:
                values = []
                break
        if values and values != counts["rows"]:
            kind = "True entries of" if tensor.dtype == torch.bool else f"entries != {ignore_index} in"
            counts[f"{kind} {path}"] = values
            if tensor.dtype != torch.bool and tensor.dim() == 2:
                # Causal language models shift labels by one: the first position of each row never counts.
                shifted = [int((tensor_leaves(mb)[index][1][:, 1:] != ignore_index).sum()) for mb in micro_batches]
                counts[f"{kind} {path}[:, 1:]"] = shifted
    return counts


def check_finite_data(micro_batches: Sequence[Any]) -> None:
    """NaN or inf in the data makes every gradient it reaches NaN, in the big batch and in the
    micro-batch alike: nothing can be compared, so say where it is, in one line."""
    for index, micro_batch in enumerate(micro_batches):
        for path, tensor in tensor_leaves(micro_batch):
            if not (tensor.is_floating_point() or tensor.is_complex()) or bool(torch.isfinite(tensor).all()):
                continue
            bad = ~torch.isfinite(tensor.reshape(tensor.shape[0], -1)).all(dim=1)
            row = int(bad.nonzero()[0])
            kind = "NaN" if bool(torch.isnan(tensor[row]).any()) else "inf"
            raise VerifyError(f"micro-batch {index + 1} of {len(micro_batches)} holds {kind} in {path} (row {row} of "
                              f"its {tensor.shape[0]}): fix or filter the data; no gradient can be compared through it")


def shard(micro_batch: Any, world_size: int, index: int) -> list[Any]:
    """Split one micro-batch into world_size equal slices; unequal slices would make DDP's average
    of per-rank means differ from the global mean, which is not an accumulation bug."""
    items = batch_size(micro_batch)
    if items % world_size:
        raise VerifyError(
            f"micro-batch {index} has {items} items, which world_size={world_size} cannot split evenly; "
            "use micro-batch sizes divisible by the world size"
        )
    return split_batch(micro_batch, [items // world_size] * world_size)
