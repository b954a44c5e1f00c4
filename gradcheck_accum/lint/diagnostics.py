"""The one place that defines what a finding is."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class Finding:
    """One reported problem. Lines and columns are 1-based; the end is exclusive (ruff's convention)."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    message: str
    fix_safety: str | None = None  # "safe" or "unsafe" when the rule can fix this finding
    fix_description: str | None = None
    cell: int | None = None  # notebooks: 1-based cell number; line and end_line then count inside the cell

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted (unreadable, undecodable, not parseable)."""

    path: str
    reason: str
