"""Rule pages: `rules/` in a checkout, `gradcheck_accum/rule_pages/` inside the wheel, and online in
the repository (the URL that SARIF's `helpUri`, JSON's `url` and the editor's links carry)."""

from __future__ import annotations

from pathlib import Path

# The project's home; pyproject.toml's [project.urls] names the same (a test checks they agree).
REPOSITORY = "https://github.com/accumcheck/accumcheck"
_PACKAGE = Path(__file__).resolve().parent.parent
_CANDIDATES = (_PACKAGE / "rule_pages", _PACKAGE.parent / "rules")


def pages_dir() -> Path | None:
    for candidate in _CANDIDATES:
        if candidate.is_dir() and any(candidate.glob("ACC*.md")):
            return candidate
    return None


def page_path(code: str) -> Path | None:
    directory = pages_dir()
    if directory is None:
        return None
    found = sorted(directory.glob(f"{code}-*.md"))
    return found[0] if found else None


def page_text(code: str) -> str | None:
    path = page_path(code)
    return path.read_text(encoding="utf-8") if path else None


def section(code: str, title: str) -> str | None:
    """The text of one `## title` section of a rule page (for SARIF help text)."""
    text = page_text(code)
    if text is None:
        return None
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].strip().lower() == title.lower()
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip() or None
