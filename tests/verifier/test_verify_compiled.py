"""Compiled mode. Compiles cost seconds on CPU, so each configuration runs once per module and
most use the aot_eager backend (the compile path without code generation); one inductor case."""

import pytest
import torch
from torch import nn

from gradcheck_accum import verify
from verifier_models import MLP, ce_mean, classification_batch, mlp


class ShapeSensitive(MLP):
    """Computes something else when compiled and the batch is small: a compiler bug stand-in
    that only accumulation (small micro-batches) exposes."""

    def forward(self, x):
        out = super().forward(x)
        if torch.compiler.is_compiling() and x.shape[0] < 8:
            out = out * 1.01
        return out


class Breaks(MLP):
    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


def _seeded(cls):
    def factory():
        torch.manual_seed(0)
        return cls()
    return factory


@pytest.fixture(scope="module")
def correct_report():
    return verify(mlp(), classification_batch(16), ce_mean, compile_backend="aot_eager")


@pytest.fixture(scope="module")
def unscaled_report():
    return verify(mlp(), classification_batch(16), ce_mean, scaling="none", modes=("compiled",),
                  compile_backend="aot_eager")


def test_correct_config_matches_in_both_modes(correct_report):
    assert correct_report.ok, correct_report.render()
    assert [m.mode for m in correct_report.modes] == ["eager", "compiled", "compiled big batch"]
    assert {r.mode for r in correct_report.rows} == {"eager", "compiled", "compiled big batch"}
    assert "eager, compiled" in correct_report.diagnosis


def test_dynamic_batch_dim_means_no_recompiles(correct_report):
    compiled = correct_report.mode("compiled")
    assert compiled.compilations >= 1
    assert compiled.recompilations == 0
    assert compiled.graph_breaks == 0
    assert "recompiled" in correct_report.render()


def test_compiled_mode_names_missing_scaling(unscaled_report):
    assert unscaled_report.verdict == "mismatch"
    assert unscaled_report.diagnosis.startswith("4.00x: loss not divided"), unscaled_report.diagnosis


def test_mismatch_only_when_compiled_and_the_recompile_is_counted():
    report = verify(_seeded(ShapeSensitive), classification_batch(16), ce_mean, compile_backend="aot_eager")
    assert report.verdict == "mismatch"
    assert report.diagnosis.startswith("mismatch only when compiled: 1.01x"), report.diagnosis
    assert report.mode("eager").ok and not report.mode("compiled").ok
    assert report.mode("compiled big batch").ok
    assert report.mode("compiled").recompilations >= 1


def test_graph_breaks_are_counted():
    report = verify(_seeded(Breaks), classification_batch(16), ce_mean, modes=("compiled",),
                    compile_backend="aot_eager")
    assert report.ok, report.render()
    assert report.mode("compiled").graph_breaks >= 1
    assert report.mode("compiled").compilations >= 2


def test_module_compile_on_a_plain_sequential_falls_back_to_a_wrapper():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    report = verify(model, classification_batch(16), ce_mean, modes=("compiled",), compile_backend="aot_eager")
    assert report.ok and report.mode("compiled").compilations >= 1
    assert any("torch.compile(model)" in n for n in report.notes)
    assert not hasattr(model, "_orig_mod") and model._compiled_call_impl is None


def test_inductor_end_to_end():
    report = verify(mlp(hidden=8), classification_batch(8), ce_mean, accumulation_steps=2, modes=("compiled",))
    assert report.ok, report.render()
    assert report.settings["compile_backend"] == "inductor"
    assert report.mode("compiled").recompilations == 0


def test_an_already_compiled_model_is_unwrapped():
    wrapped = torch.compile(mlp(), backend="aot_eager")
    report = verify(wrapped, classification_batch(16), ce_mean, modes=("eager",))
    assert report.ok and "fc1.weight" in {r.name for r in report.rows}
    assert any("OptimizedModule" in n for n in report.notes)
