"""The concise line, then the source line with a caret under the reported span."""

from __future__ import annotations

from gradcheck_accum.lint.diagnostics import Finding


def render(findings: list[Finding], color: bool = False) -> str:
    from gradcheck_accum.lint.output import location

    red, bold, reset = ("\x1b[31m", "\x1b[1m", "\x1b[0m") if color else ("", "", "")
    out = []
    for f in findings:
        out.append(f"{bold}{location(f)}{reset}: {red}{bold}{f.code}{reset} {f.message}\n")
        if f.snippet is not None:
            text = f.snippet
            width = (f.end_column - f.column) if f.end_line == f.line else len(text) - f.column + 1
            gutter = f"{f.line} | "
            out.append(f"{gutter}{text}\n{' ' * (len(gutter) + f.column - 1)}{red}{'^' * max(1, width)}{reset}\n")
        for related in f.related:  # the other places: the call that runs this line, a loop elsewhere
            out.append(f"  {bold}{related.path}:{related.line}:{related.column}{reset}: {related.message}\n")
            if related.snippet is not None:
                out.append(f"  {related.line} | {related.snippet.strip()}\n")
        if f.fix_safety:
            out.append(f"  = help: {f.fix_description} ({f.fix_safety} fix)\n")
        out.append("\n")
    return "".join(out)
