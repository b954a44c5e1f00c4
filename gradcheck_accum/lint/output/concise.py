"""`path:line:col: CODE message`, one line per finding (ruff's concise shape)."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding


def render(findings: list[Finding], color: bool = False) -> str:
    from gradcheck_accum.lint.output import location

    bold, red, reset = ("\x1b[1m", "\x1b[31m", "\x1b[0m") if color else ("", "", "")
    return "".join(f"{bold}{location(f)}{reset}: {red}{bold}{f.code}{reset} {f.message}\n" for f in findings)
