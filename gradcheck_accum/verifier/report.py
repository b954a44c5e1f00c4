"""The result of a verification: a verdict, one sentence naming the cause, and the evidence.

Torch-free on purpose: the CLI renders reports and other checkers (the loop and DDP verifiers)
build the same object, so this module only holds plain numbers and strings.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

# uncheckable: the check could not be made (random draws that cannot be replayed, ...); the
# diagnosis says why.
VERDICTS = ("match", "mismatch", "inherent", "uncheckable")


@dataclass(frozen=True)
class Row:
    """One parameter in one mode.

    Errors are relative L2 errors against the float64 big-batch gradient (absolute when that
    gradient is exactly zero); `reference_error` is the low-precision big batch's own error, the
    rounding budget the accumulated run is held to; `tolerance` is the budget actually applied.
    """

    mode: str
    name: str
    shape: tuple[int, ...]
    error: float
    reference_error: float
    tolerance: float
    scale: float
    cosine: float
    ok: bool
    note: str = ""

    @classmethod
    def from_comparison(cls, mode: str, name: str, shape: Sequence[int], comparison: Any, note: str = "") -> "Row":
        """A row from compare.Comparison (read by attribute, so this module stays free of torch)."""
        c = comparison
        return cls(mode, name, tuple(shape), c.error, c.reference_error, c.tolerance, c.scale, c.cosine, c.ok,
                   c.note or note)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["shape"] = list(self.shape)
        return {k: _jsonable(v) for k, v in out.items()}


@dataclass(frozen=True)
class ModeResult:
    """Summary of one mode (eager, compiled, loop, ddp, ...): whole-model scale and cosine,
    the per-micro-batch effective weights when they could be fitted, and compile statistics."""

    mode: str
    ok: bool
    scale: float = math.nan
    cosine: float = math.nan
    weights: tuple[float, ...] | None = None
    diagnosis: str = ""
    seconds: float = math.nan
    compilations: int | None = None
    recompilations: int | None = None
    graph_breaks: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.weights is not None:
            out["weights"] = [_jsonable(w) for w in self.weights]
        return {k: _jsonable(v) for k, v in out.items()}


@dataclass(frozen=True)
class Report:
    """What `verify` (and `verify_loop`) return, built once with everything it says: rows,
    modes and notes are tuples and no field can be reassigned.

    `ok` is true only for verdict "match": an "inherent" deviation (BatchNorm and other layers
    that couple the items of a batch) still means accumulation does not reproduce the big batch.
    """

    verdict: str
    diagnosis: str
    rows: tuple[Row, ...] = ()
    modes: tuple[ModeResult, ...] = ()
    notes: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        for name in ("rows", "modes", "notes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "settings", dict(self.settings))

    @property
    def ok(self) -> bool:
        return self.verdict == "match"

    def assert_ok(self) -> None:
        if not self.ok:
            raise AssertionError(self.render())

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)

    def failing_rows(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "verdict": self.verdict,
            "diagnosis": self.diagnosis,
            "modes": [m.to_dict() for m in self.modes],
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
            "settings": {k: _jsonable(v) for k, v in self.settings.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def render(self, max_rows: int = 20) -> str:
        return render_text(self, max_rows=max_rows)

    def __str__(self) -> str:
        return self.render()


def _jsonable(value: Any) -> Any:
    """NaN and inf are not JSON: spell them as strings so json.dumps(strict) round-trips."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _num(x: float) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.2e}" if (x != 0 and (abs(x) < 1e-2 or abs(x) >= 1e4)) else f"{x:.4f}"


def _table(headers: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in body]


def render_text(report: Report, max_rows: int = 20) -> str:
    """A plain-text report: verdict and diagnosis first, then per-mode summary, then the rows
    (failing rows first, then the worst passing ones, capped at max_rows)."""
    out = [f"accumcheck verify: {report.verdict.upper()}", f"  {report.diagnosis}"]
    if report.settings:
        keys = ("accumulation_steps", "splits", "scaling", "dtype", "device")
        shown = [f"{k}={report.settings[k]}" for k in keys if k in report.settings]
        if shown:
            out.append("  " + ", ".join(shown))
    if report.modes:
        out.append("")
        body = []
        for m in report.modes:
            weights = "-" if m.weights is None else "[" + ", ".join(f"{w:.3g}" for w in m.weights) + "]"
            compile_info = "-"
            if m.compilations is not None:
                compile_info = f"{m.compilations} compiled, {m.recompilations or 0} recompiled, {m.graph_breaks or 0} breaks"
            said = m.diagnosis
            if said and report.diagnosis.endswith(said):
                said = "(as above)"
            elif len(said) > 80:
                said = said[:77] + "..."
            body.append([m.mode, "ok" if m.ok else "FAIL", _num(m.scale), _num(m.cosine), weights, compile_info, said])
        out += _table(["mode", "", "scale", "cosine", "micro-batch weights", "compile", "diagnosis"], body)
    if report.rows:
        failing = [r for r in report.rows if not r.ok]
        passing = sorted((r for r in report.rows if r.ok), key=lambda r: -(r.error / r.tolerance if r.tolerance else 0))
        shown = (failing + passing)[:max_rows]
        out.append("")
        body = [
            [r.mode, r.name, "x".join(map(str, r.shape)) or "()", _num(r.error), _num(r.reference_error),
             _num(r.tolerance), _num(r.scale), _num(r.cosine), ("ok" if r.ok else "FAIL") + (f" ({r.note})" if r.note else "")]
            for r in shown
        ]
        out += _table(["mode", "parameter", "shape", "error", "ref error", "tolerance", "scale", "cosine", ""], body)
        hidden = len(report.rows) - len(shown)
        if hidden:
            out.append(f"... {hidden} more passing rows (Report.rows has all of them)")
    if report.notes:
        out.append("")
        out += [f"note: {n}" for n in report.notes]
    return "\n".join(out)
