"""Training loops as projects write them: correct idioms and seeded bugs. Top-level functions, so
they pickle for start_method='spawn' too."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def micro_loss(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


# --- correct idioms ---------------------------------------------------------------------------


def guarded_with_flush(model, optimizer, micro_batches, n):
    model.train()
    for i, batch in enumerate(micro_batches):
        loss = micro_loss(model, batch) / n
        loss.backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def nested_nanogpt(model, optimizer, micro_batches, n):
    for start in range(0, len(micro_batches), n):
        window = micro_batches[start:start + n]
        for micro_step in range(len(window)):
            loss = micro_loss(model, window[micro_step]) / len(window)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def grad_scaler(model, optimizer, micro_batches, n):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for i, batch in enumerate(micro_batches):
        scaler.scale(micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e6)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def scheduler_per_window(model, optimizer, micro_batches, n):
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()


def ddp_no_sync(model, optimizer, micro_batches, n):
    from contextlib import nullcontext

    for i, batch in enumerate(micro_batches):
        boundary = (i + 1) % n == 0 or i + 1 == len(micro_batches)
        with nullcontext() if boundary else model.no_sync():
            (micro_loss(model, batch) / n).backward()
        if boundary:
            optimizer.step()
            optimizer.zero_grad()


# --- seeded bugs -------------------------------------------------------------------------------


def zero_grad_every_micro_batch(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        optimizer.zero_grad()
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()


def never_cleared(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()


def step_every_micro_batch(model, optimizer, micro_batches, n):
    for batch in micro_batches:
        (micro_loss(model, batch) / n).backward()
        optimizer.step()
        optimizer.zero_grad()


def loss_not_divided(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        micro_loss(model, batch).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def remainder_dropped(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0:
            optimizer.step()
            optimizer.zero_grad()


def scheduler_every_micro_batch(model, optimizer, micro_batches, n):
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        scheduler.step()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def boundary_off_by_one(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        if i % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def zero_grad_before_step(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.zero_grad()
            optimizer.step()


def mean_of_means(model, optimizer, micro_batches, n):
    """Correct for equal micro-batches; over-weights small ones when sizes differ."""
    guarded_with_flush(model, optimizer, micro_batches, n)


def weights_moved_inside_window(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        (micro_loss(model, batch) / n).backward()
        with torch.no_grad():  # e.g. a hand-rolled weight decay applied per micro-batch
            for p in model.parameters():
                p.mul_(0.99)
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def manual_lr_every_micro_batch(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        for group in optimizer.param_groups:
            group["lr"] = 0.1 / (1 + i)
        (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def raises(model, optimizer, micro_batches, n):
    raise RuntimeError("data loader exhausted")


# --- distributed -------------------------------------------------------------------------------


def ddp_never_syncs(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        with model.no_sync():
            (micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()


def ddp_rank1_raises(model, optimizer, micro_batches, n):
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank one is broken")
    ddp_no_sync(model, optimizer, micro_batches, n)


def ddp_rank1_hangs(model, optimizer, micro_batches, n):
    import time

    import torch.distributed as dist

    if dist.get_rank() == 1:
        time.sleep(60)
    ddp_no_sync(model, optimizer, micro_batches, n)


def own_optimizer(model, optimizer, micro_batches, n):
    mine = torch.optim.SGD(model.parameters(), lr=0.1)
    guarded_with_flush(model, mine, micro_batches, n)


def ddp_no_sync_backward_only(model, optimizer, micro_batches, n):
    for i, batch in enumerate(micro_batches):
        loss = micro_loss(model, batch) / n  # forward outside no_sync: DDP is armed to reduce anyway
        boundary = (i + 1) % n == 0 or i + 1 == len(micro_batches)
        if boundary:
            loss.backward()
        else:
            with model.no_sync():
                loss.backward()
        if boundary:
            optimizer.step()
            optimizer.zero_grad()


def rank1_exits(rank, world_size):
    import os

    if rank == 1:
        os._exit(3)
    return rank


def rank1_raises_others_wait(rank, world_size):
    import torch.distributed as dist

    if rank == 1:
        raise KeyError("the real cause")
    t = torch.ones(1)
    dist.all_reduce(t)
    return t


def grad_scaler_never_cleared(model, optimizer, micro_batches, n):
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for i, batch in enumerate(micro_batches):
        scaler.scale(micro_loss(model, batch) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            scaler.step(optimizer)
            scaler.update()


def two_forwards_per_micro_batch(model, optimizer, micro_batches, n):
    for i, (x, y) in enumerate(micro_batches):
        with torch.no_grad():
            model(x)  # e.g. logging a metric with a second forward
        (micro_loss(model, (x, y)) / n).backward()
        if (i + 1) % n == 0 or i + 1 == len(micro_batches):
            optimizer.step()
            optimizer.zero_grad()
