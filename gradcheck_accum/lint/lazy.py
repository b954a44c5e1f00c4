"""libcst, imported on first use.

Importing libcst costs about 0.2 s, more than screening a whole file tree with the prefilter: a run
in which no file gets past the prefilter never needs it (a pre-commit hook on files that hold no
training loop), and pool workers that only screen never pay it (runner.py). Modules write
`from gradcheck_accum.lint.lazy import cst` and use `cst.X` inside functions only; annotations are
strings (`from __future__ import annotations`), and type checkers see the real module.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING


class _OnFirstUse(types.ModuleType):
    def __getattr__(self, name: str):  # called only for names not yet copied in
        import libcst

        self.__dict__.update(vars(libcst))  # later lookups are plain attribute reads
        return getattr(libcst, name)


if TYPE_CHECKING:
    import libcst as cst
else:
    cst = _OnFirstUse("libcst")


def load() -> None:
    """Import libcst now (when a process knows it will parse and has time to spare)."""
    cst.Module  # noqa: B018 - the attribute read is the import
