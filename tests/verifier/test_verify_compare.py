import json
import math

import pytest
import torch

from gradcheck_accum.verifier.compare import _BLOCK, Tolerance, compare, global_scale_cosine, norms64
from gradcheck_accum.verifier.report import ModeResult, Report, Row

TOL = Tolerance.for_dtype(torch.float32)


def _gradients(seed=0):
    """A float64 'truth', its float32 rounding (the baseline) and a differently rounded float32 sum."""
    g = torch.Generator().manual_seed(seed)
    parts = [torch.randn(64, 32, dtype=torch.float64, generator=g) for _ in range(4)]
    exact = sum(parts)
    baseline = exact.float()
    accumulated = sum(p.float() for p in parts)
    return exact, baseline, accumulated


@pytest.mark.parametrize("numel", [0, 1, _BLOCK, 2 * _BLOCK + 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_block_norms_are_the_float64_norms(numel, dtype):
    g = torch.Generator().manual_seed(numel)
    x = torch.randn(numel, generator=g).to(dtype).reshape(-1, 1)
    other = x.double() + 1e-6 * torch.randn(numel, 1, dtype=torch.float64, generator=g)
    size, distance = norms64(x, other)
    assert math.isclose(size, float(torch.linalg.vector_norm(x.double())), rel_tol=1e-12, abs_tol=1e-300)
    assert math.isclose(distance, float(torch.linalg.vector_norm(x.double() - other)), rel_tol=1e-12,
                        abs_tol=1e-300)
    assert norms64(x) == (size, 0.0)


def test_rounding_of_a_sum_passes():
    exact, baseline, accumulated = _gradients()
    result = compare(accumulated, baseline, exact, TOL, steps=4)
    assert result.ok and result.error > 0 and math.isclose(result.scale, 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("factor", [1.001, 0.999, 4.0, 0.25])
def test_scaled_gradient_fails(factor):
    exact, baseline, accumulated = _gradients()
    result = compare(accumulated * factor, baseline, exact, TOL, steps=4)
    assert not result.ok
    assert math.isclose(result.scale, factor, rel_tol=1e-5)


def test_missing_and_unused_gradients():
    exact = torch.ones(3, dtype=torch.float64)
    assert compare(None, None, None, TOL).ok
    assert not compare(None, exact.float(), exact, TOL).ok
    assert compare(None, None, torch.zeros(3, dtype=torch.float64), TOL).ok
    assert not compare(torch.ones(3), None, None, TOL).ok


def test_non_finite_and_shape_mismatch_fail_with_a_note():
    exact = torch.ones(3, dtype=torch.float64)
    bad = torch.tensor([1.0, float("nan"), 1.0])
    assert compare(bad, exact.float(), exact, TOL).note == "NaN/inf gradient"
    assert "shape" in compare(torch.ones(4), exact.float(), exact, TOL).note


def test_exact_zero_reference_uses_absolute_error():
    zero = torch.zeros(5, dtype=torch.float64)
    assert compare(torch.zeros(5), torch.zeros(5), zero, TOL).ok
    assert not compare(torch.full((5,), 1e-3), torch.zeros(5), zero, TOL).ok


def test_nondeterminism_widens_the_budget():
    exact, baseline, accumulated = _gradients()
    noisy = accumulated + 1e-4
    assert not compare(noisy, baseline, exact, TOL).ok
    assert compare(noisy, baseline, exact, TOL, nondeterminism=float(torch.linalg.vector_norm(noisy.double() - exact))).ok


def test_lower_precision_gets_more_headroom():
    assert Tolerance.for_dtype(torch.bfloat16).multiplier > TOL.multiplier
    assert Tolerance.for_dtype(torch.bfloat16).eps > TOL.eps


def test_global_scale_and_cosine():
    ref = {"a": torch.ones(4, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64), "c": None}
    cand = {"a": 2 * torch.ones(4), "b": 2 * torch.ones(2), "c": None}
    scale, cosine = global_scale_cosine(cand, ref)
    assert math.isclose(scale, 2.0) and math.isclose(cosine, 1.0)


def _report(verdict="mismatch"):
    rows = [Row("eager", "fc.weight", (3, 2), 0.5, 1e-7, 2e-7, 4.0, 1.0, False),
            Row("eager", "fc.bias", (3,), math.inf, 0.0, 0.0, math.nan, math.nan, False, "NaN/inf gradient")]
    modes = [ModeResult("eager", False, 4.0, 1.0, (4.0, 4.0), "4.00x: loss not divided", 0.01),
             ModeResult("compiled", True, compilations=2, recompilations=0, graph_breaks=1)]
    return Report(verdict, "4.00x: loss not divided by the accumulation steps", rows, modes, ["a note"],
                  {"accumulation_steps": 2, "splits": [2, 2]})


def test_report_serialises_to_strict_json():
    data = json.loads(json.dumps(_report().to_dict(), allow_nan=False))
    assert data["ok"] is False and data["verdict"] == "mismatch"
    assert data["rows"][0]["shape"] == [3, 2] and data["rows"][1]["error"] == "inf"
    assert data["modes"][1]["graph_breaks"] == 1


def test_report_rendering_and_assert_ok():
    report = _report()
    text = report.render()
    assert "MISMATCH" in text and "4.00x" in text and "fc.weight" in text and "note: a note" in text
    assert "2 compiled, 0 recompiled, 1 breaks" in text
    with pytest.raises(AssertionError, match="4.00x"):
        report.assert_ok()
    ok = Report("match", "fine")
    ok.assert_ok()
    assert ok.ok and not _report("inherent").ok


def test_report_rejects_unknown_verdicts():
    with pytest.raises(ValueError):
        Report("maybe", "?")
