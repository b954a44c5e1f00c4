"""The guard inside the real Hugging Face Trainer (a tiny GPT-2 built from a config): a clean run,
and bugs injected the way they reach real jobs, through callbacks and model subclasses."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from gradcheck_accum.guards import GuardError  # noqa: E402
from gradcheck_accum.guards.hf import GuardCallback  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fresh_accelerate_state")]  # a Trainer per test

N = 3
ROWS = 14  # 7 micro-batches of 2 rows per epoch: windows of 3, 3 and a flushed 1


def tiny_gpt2(cls=GPT2LMHeadModel):
    torch.manual_seed(0)
    return cls(GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2))


def dataset():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 32, (ROWS, 8), generator=g)
    return [{"input_ids": row, "labels": row} for row in ids]


def train(tmp_path, *callbacks, model=None, epochs=2, **args):
    arguments = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, gradient_accumulation_steps=N,
        num_train_epochs=epochs, learning_rate=1e-3, warmup_steps=2, max_grad_norm=1.0, use_cpu=True,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        **args)
    guard = GuardCallback()
    trainer = Trainer(model=model or tiny_gpt2(), args=arguments, train_dataset=dataset(),
                      callbacks=[*callbacks, guard])
    try:
        trainer.train()
    except GuardError as exc:
        return exc.violation, trainer
    return None, trainer


def test_trainer_runs_clean_with_clipping_a_schedule_and_a_flushed_remainder(tmp_path):
    violation, trainer = train(tmp_path)
    assert violation is None
    assert trainer.state.global_step == 6  # 3 windows per epoch, 2 epochs


class ZeroGradEachMicroBatch(TrainerCallback):
    def on_substep_end(self, args, state, control, model=None, **kwargs):
        model.zero_grad()


class SchedulerEachMicroBatch(TrainerCallback):
    def on_substep_end(self, args, state, control, lr_scheduler=None, **kwargs):
        lr_scheduler.step()


class LearningRateEachMicroBatch(TrainerCallback):
    def on_substep_end(self, args, state, control, optimizer=None, **kwargs):
        for group in optimizer.param_groups:
            group["lr"] = group["lr"] * 0.5 + 1e-5


class StepEachMicroBatch(TrainerCallback):
    def on_substep_end(self, args, state, control, optimizer=None, **kwargs):
        optimizer.optimizer.step()  # past accelerate's gate: a step on every micro-batch
        optimizer.optimizer.zero_grad()


class ZeroGradBeforeStep(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        model.zero_grad()


class DecayEachMicroBatch(TrainerCallback):
    def on_substep_end(self, args, state, control, model=None, **kwargs):
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.999)


class NeverClears(GPT2LMHeadModel):
    def zero_grad(self, set_to_none=True):  # the Trainer clears through the model
        pass


INJECTED = [
    ("zero_grad each micro-batch", ZeroGradEachMicroBatch(), None, "ACC101", 1, 0),
    ("never cleared", None, NeverClears, "ACC102", 2, 1),
    ("zero_grad before the step", ZeroGradBeforeStep(), None, "ACC103", 1, 0),
    ("step each micro-batch", StepEachMicroBatch(), None, "ACC104", 2, 0),
    ("scheduler each micro-batch", SchedulerEachMicroBatch(), None, "ACC401", 1, 0),
    ("learning rate each micro-batch", LearningRateEachMicroBatch(), None, "ACC401", 1, 0),
    ("weights decayed each micro-batch", DecayEachMicroBatch(), None, None, 1, 0),
]


@pytest.mark.parametrize("label, callback, model_class, code, window, global_step", INJECTED, ids=[c[0] for c in INJECTED])
def test_injected_bug_raises_at_its_window(tmp_path, label, callback, model_class, code, window, global_step):
    callbacks = [callback] if callback is not None else []
    violation, trainer = train(tmp_path, *callbacks, model=tiny_gpt2(model_class) if model_class else None)
    assert violation is not None, f"{label} ran clean"
    assert (violation.code, violation.window) == (code, window), str(violation)
    assert trainer.state.global_step == global_step  # the Trainer's steps done when it raised
