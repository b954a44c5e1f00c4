"""Which files to lint, and reading them. Bad input becomes a per-file error with a one-line reason."""

from __future__ import annotations

import codecs
import contextlib
import fnmatch
import io
import os
import stat
import tempfile
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
                # Dangling links, FIFOs and devices in a tree are not source files (named, they are errors).
                if not _excluded(path, exclude, root) and path.is_file():
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


@dataclass(frozen=True)
class Source:
    """A file's text and the codec its bytes were decoded with, so that what is written back is the
    same bytes except where a fix changed the text (line breaks are never translated)."""

    text: str
    codec: str  # "utf-8-sig" when the file starts with a byte order mark (encoding writes it back)

    def encode(self, text: str) -> bytes:
        try:
            return text.encode(self.codec)
        except UnicodeEncodeError as exc:
            raise UnwritableFile(f"the fixed text cannot be encoded as {self.codec} ({exc.reason}); "
                                 "left unchanged") from None


class UnwritableFile(Exception):
    """str(self) is the one-line reason."""


def read_text(target: Target, stdin: io.BufferedReader | None = None) -> str:
    return read_source(target, stdin).text


def read_source(target: Target, stdin: io.BufferedReader | None = None) -> Source:
    """Read and decode a file the way Python would (PEP 263 cookie, UTF-8 default, BOM)."""
    if target.path is None:
        if stdin is None:
            raise UnreadableFile("standard input is closed")
        try:
            data = stdin.read()
        except (OSError, ValueError) as exc:  # ValueError: read of a closed file
            raise UnreadableFile(f"cannot read standard input: {exc}") from None
    else:
        data = _read_regular_file(target.path)
    return decode_source(data, notebook=target.is_notebook)


def _read_regular_file(path: Path) -> bytes:
    """The file's bytes; anything but a regular file (after following links) is refused before it is
    read, so a FIFO cannot hang the run nor a link to /dev/zero fill the memory."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise UnreadableFile("is a directory") from None
    except OSError as exc:
        raise UnreadableFile(exc.strerror or str(exc)) from None
    with os.fdopen(descriptor, "rb") as handle:
        kind = _KINDS.get(stat.S_IFMT(os.fstat(descriptor).st_mode))
        if kind is not None:
            raise UnreadableFile(f"not a regular file ({kind})")
        try:
            return handle.read()
        except OSError as exc:
            raise UnreadableFile(exc.strerror or str(exc)) from None


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def decode(data: bytes, notebook: bool = False) -> str:
    return decode_source(data, notebook).text


def decode_source(data: bytes, notebook: bool = False) -> Source:
    if b"\x00" in data:
        raise UnreadableFile("contains NUL bytes (binary file?)")
    if notebook:  # JSON: UTF-8, perhaps with a byte order mark
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
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
    return Source(text, encoding)


def write_source(path: Path, data: bytes) -> None:
    """Replace the file's bytes the way an editor saves: into a temporary file beside it, renamed over
    it, so a run killed or interrupted midway leaves the old bytes or the new ones, never a part.
    The permission bits (and, where allowed, the owner) are kept; a symbolic link is followed and
    stays a link. A file without any write permission is refused, as it would be without the rename."""
    real = Path(os.path.realpath(path))
    try:
        info = real.stat()
    except OSError as exc:
        raise UnwritableFile(exc.strerror or str(exc)) from None
    if not info.st_mode & 0o222 or not os.access(real, os.W_OK):
        raise UnwritableFile("the file is read-only; left unchanged")
    try:
        descriptor, temporary = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".accumcheck")
    except OSError as exc:
        raise UnwritableFile(f"cannot write beside it: {exc.strerror or exc}; left unchanged") from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, stat.S_IMODE(info.st_mode))
        if (info.st_uid, info.st_gid) != (os.getuid(), os.getgid()):
            with contextlib.suppress(OSError):
                os.chown(temporary, info.st_uid, info.st_gid)
        os.replace(temporary, real)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise UnwritableFile(f"cannot write: {exc.strerror or exc}; left unchanged") from None
        raise
