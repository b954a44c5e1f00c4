"""The one place that defines what a finding is."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, is_dataclass
from functools import total_ordering

# A rule's severity (Rule.severity), most severe first: "error", the gradients or weights come out
# wrong; "warning", right but slow or memory-hungry. `--fail-on` picks the least severe that fails.
SEVERITIES = ("error", "warning")


@dataclass(frozen=True, order=True)
class Edit:
    """A fix as one replacement in the file's text: `length` characters at `offset` become `text`."""

    offset: int
    length: int
    text: str


# The related place of a finding moved to the call in this file that runs its line in another file
# (a finding never points into another file): the line itself.
RUN_LINE = "the line this call runs"
RUN_FUNCTION = "the function this call runs"  # and the function of another file that the call itself runs


@dataclass(frozen=True)
class Related:
    """Another place a finding depends on: the call that runs the reported line in a training loop,
    the loop in another file, the line in another file that a call here runs."""

    path: str
    line: int
    column: int
    message: str
    snippet: str | None = None  # the source text of `line`


@total_ordering
@dataclass(frozen=True)
class Finding:
    """One reported problem. Lines and columns are 1-based; the end is exclusive (ruff's convention).

    A finding carries what every output needs, so none reads the file again or re-runs the analysis:
    the text of its first line (`snippet`), and its fix: safety and description always, the edit when
    the run asked for edits (SARIF).
    """

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
    snippet: str | None = None  # the source text of `line`
    fix_edit: Edit | None = None  # the fix as a text replacement (computed on request: runner.Options.fix_edits)
    related: tuple[Related, ...] = ()  # the other places it depends on (calls, loops in other files)

    def __lt__(self, other: "Finding") -> bool:
        """Field by field in their declaration order (path, line, column, ..., code, message), as
        order=True would compare, except that an absent value sorts first instead of being compared
        (a finding with a fix and one without, a Related without its snippet)."""
        for name in _FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                return _order(mine) < _order(theirs)
        return False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Finding":
        edit = data.get("fix_edit")
        related = tuple(Related(**r) for r in data.get("related") or ())
        return cls(**{**data, "fix_edit": Edit(**edit) if edit else None, "related": related})


_FIELDS = tuple(f.name for f in fields(Finding))


def _order(value: object) -> tuple:
    """A value as a key that sorts an absent value (None, at any depth) first instead of comparing it."""
    if value is None:
        return (0,)
    if is_dataclass(value):
        return (1, tuple(_order(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, tuple):
        return (1, tuple(_order(item) for item in value))
    return (1, value)


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted (unreadable, undecodable, not parseable)."""

    path: str
    reason: str
