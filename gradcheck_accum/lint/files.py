"""Which files to lint, and reading them. Bad input becomes a per-file error with a one-line reason."""

from __future__ import annotations

import codecs
import contextlib
import fnmatch
import io
import os
import stat
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple

if TYPE_CHECKING:
    from gradcheck_accum.lint.config import Resolver, Settings

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
    """A file to lint: its path as shown to the user, where to read it (None: standard input), and the
    settings of the directory it lives in."""

    display: str
    path: Path | None
    settings: Settings | None = field(default=None, compare=False, repr=False)

    @property
    def is_notebook(self) -> bool:
        return self.display.endswith(".ipynb")


def discover(paths: Iterable[str], resolver: Resolver | None = None, stdin_filename: str | None = None,
             ) -> tuple[list[Target], list[tuple[str, str]]]:
    """Expand files and directories into lint targets, in a stable order.

    Directories are walked without what the settings there exclude or git ignores; a file named
    explicitly is skipped only when excluded (as with ruff's --force-exclude). Standard input takes
    the settings, and the excludes, of `--stdin-filename`. Returns (targets, errors); each error is
    (path, reason)."""
    if resolver is None:
        from gradcheck_accum.lint.config import Resolver

        resolver = Resolver()
    targets: list[Target] = []
    errors: list[tuple[str, str]] = []
    seen: set[Path] = set()
    ignores = GitIgnores()
    for raw in paths:
        if raw == STDIN:
            if any(target.path is None for target in targets):
                continue  # standard input is read once
            named = Path(stdin_filename) if stdin_filename else Path.cwd() / "-"
            settings = resolver.for_path(named)
            if not (stdin_filename and excluded(named, settings)):
                targets.append(Target(stdin_filename or STDIN, None, settings))
            continue
        path = Path(raw)
        if not path.exists() and not path.is_symlink():
            errors.append((raw, "no such file or directory"))
            continue
        if path.is_symlink() and not path.exists():
            errors.append((raw, "broken symbolic link"))
            continue
        if path.is_dir():
            for found, settings in _walk(path, resolver, ignores, errors):
                if found.resolve() not in seen:
                    seen.add(found.resolve())
                    targets.append(Target(str(found), found, settings))
            continue
        settings = resolver.for_path(path)
        if excluded(path, settings):
            continue
        if not raw.endswith(PYTHON_SUFFIXES):
            errors.append((raw, "not a Python file (expected .py, .pyi or .ipynb)"))
            continue
        if path.resolve() not in seen:
            seen.add(path.resolve())
            targets.append(Target(raw, path, settings))
    return targets, errors


def _walk(top: Path, resolver: Resolver, ignores: GitIgnores, errors: list[tuple[str, str]],
          ) -> list[tuple[Path, Settings]]:
    visited: set[str] = set()
    found: list[tuple[Path, Settings]] = []

    def on_error(exc: OSError) -> None:
        errors.append((exc.filename or str(top), exc.strerror or str(exc)))

    # A directory named explicitly is linted even when git ignores it (a vendored checkout, say): then
    # only the ignore files inside it count.
    floor = top.absolute() if ignores.ignored(top, True) else None
    for current, dirs, files in os.walk(top, followlinks=True, onerror=on_error):
        real = os.path.realpath(current)
        if real in visited:  # a symlink loop, or a directory reached twice through links
            dirs[:] = []
            continue
        visited.add(real)
        settings = resolver.for_directory(Path(current))
        gitignored = (lambda path, is_dir: ignores.ignored(path, is_dir, floor)) if settings.respect_gitignore \
            else (lambda path, is_dir: False)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")
                         and not excluded(Path(current, d), settings) and not gitignored(Path(current, d), True))
        for name in sorted(files):
            if name.endswith(PYTHON_SUFFIXES):
                path = Path(current, name)
                # Dangling links, FIFOs and devices in a tree are not source files (named, they are errors).
                if not excluded(path, settings) and not gitignored(path, False) and path.is_file():
                    found.append((path, settings))
    return found


class GitIgnores:
    """git's ignore rules: `.gitignore` files from the repository's root down to a path, and the
    repository's `.git/info/exclude`; the deepest file with a matching pattern decides. Outside a git
    repository the `.gitignore` files of the path's ancestors still count (ruff does the same)."""

    def __init__(self) -> None:
        self._specs: dict[tuple[Path, bool], object | None] = {}
        self._roots: dict[Path, Path | None] = {}

    def ignored(self, path: Path, is_dir: bool, floor: Path | None = None) -> bool:
        """Does git ignore `path`? Ignore files above `floor` (a directory) are not consulted."""
        path = path.absolute()
        directory = path.parent
        top = floor or self._repository(directory)
        while True:
            spec = self._spec(directory, info_exclude=directory == top and floor is None)
            if spec is not None:
                relative = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
                verdict = spec.check_file(relative).include
                if verdict is not None:
                    return verdict
            if directory == top or directory.parent == directory:
                return False
            directory = directory.parent

    def _repository(self, directory: Path) -> Path | None:
        if directory not in self._roots:
            if (directory / ".git").exists():
                self._roots[directory] = directory
            else:
                self._roots[directory] = None if directory.parent == directory else self._repository(directory.parent)
        return self._roots[directory]

    def _spec(self, directory: Path, info_exclude: bool):
        key = (directory, info_exclude)
        if key not in self._specs:
            lines: list[str] = []
            sources = [directory / ".gitignore"] + ([directory / ".git" / "info" / "exclude"] if info_exclude else [])
            for source in sources:
                try:
                    lines += source.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
            if lines:
                import pathspec  # only runs that walk directories pay for it

                self._specs[key] = pathspec.GitIgnoreSpec.from_lines(lines)
            else:
                self._specs[key] = None
        return self._specs[key]


def excluded(path: Path, settings: Settings) -> bool:
    """Do the settings' `exclude` or `extend-exclude` globs cover this path?"""
    patterns = settings.excludes()
    return bool(patterns) and matches(path, patterns, settings.root)


def matches(path: Path | str, patterns: Iterable[str], root: Path | None) -> bool:
    """Glob match against the path relative to the config's directory, against the file name, and
    (for absolute patterns: those inherited through `extend` or given on the command line) against
    the absolute path."""
    path = Path(path)
    candidates = {path.as_posix(), path.name}
    absolute = path.absolute()
    if any(p.startswith("/") for p in patterns):
        candidates.add(absolute.as_posix())
        candidates.add(path.resolve().as_posix())
    if root is not None:
        try:
            candidates.add(absolute.relative_to(root.absolute()).as_posix())
        except ValueError:
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


class Source(NamedTuple):
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
        import tempfile  # imported when used (as in config.py): a pre-commit run on one file pays for little
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
