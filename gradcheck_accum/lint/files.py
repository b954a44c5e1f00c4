"""Which files to lint, and reading them. Bad input becomes a per-file error with a one-line reason."""

from __future__ import annotations

import fnmatch
import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")
SKIPPED_DIRS = {
    ".git", ".hg", ".svn", ".venv", "venv", ".env", "__pycache__", "build", "dist", "node_modules", ".tox",
    ".nox", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".accumcheck_cache", ".ipynb_checkpoints",
}
STDIN = "-"


class UnreadableFile(Exception):
    """str(self) is the one-line reason."""


@dataclass(frozen=True)
class Target:
    """A file to lint: its path as shown to the user, and where to read it (None: standard input)."""

    display: str
    path: Path | None

    @property
    def is_notebook(self) -> bool:
        return self.display.endswith(".ipynb")


def discover(paths: Iterable[str], exclude: list[str], root: Path | None,
             stdin_filename: str | None = None) -> tuple[list[Target], list[tuple[str, str]]]:
    """Expand files and directories into lint targets, in a stable order.

    Returns (targets, errors); each error is (path, reason)."""
    targets: list[Target] = []
    errors: list[tuple[str, str]] = []
    seen: set[Path] = set()
    for raw in paths:
        if raw == STDIN:
            targets.append(Target(stdin_filename or STDIN, None))
            continue
        path = Path(raw)
        if not path.exists() and not path.is_symlink():
            errors.append((raw, "no such file or directory"))
            continue
        if path.is_symlink() and not path.exists():
            errors.append((raw, "broken symbolic link"))
            continue
        if path.is_dir():
            for found in _walk(path, exclude, root, errors):
                if found.resolve() not in seen:
                    seen.add(found.resolve())
                    targets.append(Target(str(found), found))
            continue
        if _excluded(path, exclude, root):
            continue
        if not raw.endswith(PYTHON_SUFFIXES):
            errors.append((raw, "not a Python file (expected .py, .pyi or .ipynb)"))
            continue
        if path.resolve() not in seen:
            seen.add(path.resolve())
            targets.append(Target(raw, path))
    return targets, errors


def _walk(top: Path, exclude: list[str], root: Path | None, errors: list[tuple[str, str]]) -> Iterable[Path]:
    visited: set[str] = set()
    found: list[Path] = []

    def on_error(exc: OSError) -> None:
        errors.append((exc.filename or str(top), exc.strerror or str(exc)))

    for current, dirs, files in os.walk(top, followlinks=True, onerror=on_error):
        real = os.path.realpath(current)
        if real in visited:  # a symlink loop, or a directory reached twice through links
            dirs[:] = []
            continue
        visited.add(real)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                         and not _excluded(Path(current, d), exclude, root))
        for name in sorted(files):
            if name.endswith(PYTHON_SUFFIXES):
                path = Path(current, name)
                if not _excluded(path, exclude, root):
                    found.append(path)
    return found


def _excluded(path: Path, patterns: list[str], root: Path | None) -> bool:
    if not patterns:
        return False
    return matches(path, patterns, root)


def matches(path: Path | str, patterns: Iterable[str], root: Path | None) -> bool:
    """Glob match against the path relative to the config's directory, and against the file name."""
    path = Path(path)
    candidates = {path.as_posix(), path.name}
    if root is not None:
        try:
            candidates.add(path.resolve().relative_to(root.resolve()).as_posix())
        except ValueError:
            pass
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        for candidate in candidates:
            if fnmatch.fnmatchcase(candidate, pattern) or fnmatch.fnmatchcase(candidate, pattern + "/*") \
                    or candidate.startswith(pattern + "/"):
                return True
    return False


def read_text(target: Target, stdin: io.BufferedReader | None = None) -> str:
    """Read and decode a file the way Python would (PEP 263 cookie, UTF-8 default, BOM)."""
    try:
        data = stdin.read() if target.path is None and stdin is not None else target.path.read_bytes()
    except IsADirectoryError:
        raise UnreadableFile("is a directory") from None
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from None
    return decode(data, notebook=target.is_notebook)


def decode(data: bytes, notebook: bool = False) -> str:
    if b"\x00" in data:
        raise UnreadableFile("contains NUL bytes (binary file?)")
    if notebook:
        encoding = "utf-8-sig"
    else:
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        except SyntaxError as exc:
            if b"coding" in b"\n".join(data.splitlines()[:2]):
                raise UnreadableFile(f"bad encoding declaration: {exc.msg}") from None
            encoding = "utf-8"  # no cookie: the first lines are simply not UTF-8, say so below
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        if isinstance(exc, UnicodeDecodeError):
            line = data[:exc.start].count(b"\n") + 1
            reason = f"{exc.reason} at line {line}"
        else:
            reason = str(exc)
        raise UnreadableFile(f"cannot decode as {encoding}: {reason}") from None
    return text.removeprefix("\ufeff")
