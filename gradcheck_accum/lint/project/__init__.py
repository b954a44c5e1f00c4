"""The project model: the files around the ones being linted, summarised and cached, and calls
resolved between them (index.py). What one function does to an accumulation window in its
caller's loop, and what the caller's loop means for it, are built on this."""

from gradcheck_accum.lint.project.index import CallSite, ClassRef, FunctionRef, Project, find_root, python_files
from gradcheck_accum.lint.project.store import SummaryStore

__all__ = ["CallSite", "ClassRef", "FunctionRef", "Project", "SummaryStore", "find_root", "python_files"]
