"""Per-file results, keyed on content hash, tool version and effective settings.

One JSON file per (linter, settings) in `.accumcheck_cache/` at the project root. A warm run over an unchanged tree
only stats files: an entry whose size and mtime match is reused without reading the file; when
they differ the file is read and its hash compared before anything is parsed.

A file's findings also depend on the other files of its project (a helper that backpropagates, a
loop elsewhere that calls it): every entry records the state of its project's files (`project`,
project_state()), and is reused only while that state is the same.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from gradcheck_accum.version import __version__
from gradcheck_accum.lint.config import Settings
from gradcheck_accum.lint.diagnostics import Finding
from gradcheck_accum.lint.digests import blake2b

DEFAULT_DIR = Path(".accumcheck_cache")


@functools.cache
def linter_key() -> str:
    """The release, and the size and mtime of every source file and rule page of the linter: a
    checkout or an editable install whose rules changed must not restore findings the old rules
    made (a release's files never change, so this costs one stat per file and nothing more)."""
    package = Path(__file__).parent
    stamp = blake2b(digest_size=6)
    for path in sorted([*package.rglob("*.py"), *package.parent.parent.glob("rules/*.md")]):
        stat = path.stat()
        stamp.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    return f"v{__version__}-{stamp.hexdigest()}"


@dataclass
class Entry:
    mtime_ns: int
    size: int
    digest: str
    findings: list[dict]
    error: str | None
    project: str  # project_state() of the file's project when it was linted

    def restore(self, display: str) -> tuple[list[Finding], str | None]:
        return [Finding.from_dict({**f, "path": display}) for f in self.findings], self.error


_ENTRY_FIELDS = {f.name for f in fields(Entry)}
_FINDING_FIELDS = {f.name for f in fields(Finding)} - {"path"}
_REQUIRED_FINDING_FIELDS = {f.name for f in fields(Finding) if f.default is MISSING} - {"path"}


def entries(raw: object) -> dict[str, Entry]:
    """The entries of a cache file that this version can restore. A file written by another version
    of accumcheck (other fields, a damaged write) loses the entries it cannot vouch for; those files
    are simply linted again."""
    if not isinstance(raw, dict):
        return {}
    kept = {}
    for path, value in raw.items():
        if not isinstance(value, dict) or set(value) != _ENTRY_FIELDS:
            continue
        findings = value["findings"]
        if not isinstance(findings, list) or not all(_restorable(f) for f in findings):
            continue
        kept[path] = Entry(**value)
    return kept


def _restorable(record: object) -> bool:
    return isinstance(record, dict) and _REQUIRED_FINDING_FIELDS <= set(record) <= _FINDING_FIELDS \
        and all(isinstance(record[name], int) for name in ("line", "column", "end_line", "end_column")) \
        and all(isinstance(record[name], str) for name in ("code", "name", "message"))


class Cache:
    """The entries of every settings table this run uses, one JSON file each, loaded on first use."""

    def __init__(self, directory: Path | None = None, fix_edits: bool = False) -> None:
        self.directory = directory or DEFAULT_DIR
        # Findings with their fixes as edits (SARIF runs) are kept apart: other runs store none.
        self.suffix = "-edits" if fix_edits else ""
        self._tables: dict[str, dict[str, Entry]] = {}
        self._dirty: set[str] = set()
        # A run shares one Settings object among the files of a directory tree: its digest (asdict and
        # a hash) is computed once per object, not once per file. The object is kept so its id stays its own.
        self._settings_keys: dict[int, tuple[Settings, str]] = {}

    def _settings_key(self, settings: Settings) -> str:
        known = self._settings_keys.get(id(settings))
        if known is None:
            known = self._settings_keys[id(settings)] = (settings, settings.key())
        return known[1]

    def _table(self, settings: Settings) -> dict[str, Entry]:
        key = self._settings_key(settings)
        table = self._tables.get(key)
        if table is None:
            try:
                table = entries(json.loads(self._file(key).read_text(encoding="utf-8")))
            except (OSError, ValueError):
                table = {}
            self._tables[key] = table
        return table

    @property
    def linter_directory(self) -> Path:
        """Where this linter's files go: its result tables, and the project summaries they were computed
        from (runner.Options.summaries), so an edited checkout restores neither."""
        return self.directory / linter_key()

    def _file(self, key: str) -> Path:
        return self.linter_directory / f"{key}{self.suffix}.json"

    @staticmethod
    def key(path: Path) -> str:
        return os.path.abspath(path)

    def fresh(self, path: Path, settings: Settings, project: str) -> Entry | None:
        """The entry for an unchanged file (by size and mtime) of an unchanged project, without
        reading it."""
        entry = self.candidate(path, settings, project)
        if entry is None:
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        return entry if (stat.st_mtime_ns, stat.st_size) == (entry.mtime_ns, entry.size) else None

    def candidate(self, path: Path, settings: Settings, project: str) -> Entry | None:
        """A possibly stale entry of an unchanged project, reusable if the file's content hash still
        matches."""
        entry = self._table(settings).get(self.key(path))
        return entry if entry is not None and entry.project == project else None

    def store(self, path: Path, settings: Settings, project: str, stat: os.stat_result, digest: str,
              findings: list[Finding], error: str | None) -> None:
        records = [{k: v for k, v in f.to_dict().items() if k != "path"} for f in findings]
        self._table(settings)[self.key(path)] = Entry(stat.st_mtime_ns, stat.st_size, digest, records, error,
                                                      project)
        self._dirty.add(self._settings_key(settings))

    def save(self) -> None:
        for key in sorted(self._dirty):
            try:
                self._write(key)
            except OSError:
                pass  # a read-only tree still lints, just without a cache
        self._dirty.clear()

    def _write(self, key: str) -> None:
        file = self._file(key)
        file.parent.mkdir(parents=True, exist_ok=True)
        gitignore = self.directory / ".gitignore"
        if not gitignore.exists():
            gitignore.write_text("*\n", encoding="utf-8")
        data = {path: entry.__dict__ for path, entry in self._tables[key].items()}
        import tempfile
        with tempfile.NamedTemporaryFile("w", dir=file.parent, delete=False, suffix=".tmp",
                                         encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(handle.name, file)


def project_state(digests: list[tuple[str, str | None]]) -> str:
    """What a project's files are now, from (path, content hash) pairs: any file added, removed or
    edited changes it; a file touched but unchanged does not."""
    state = blake2b(digest_size=16)
    for path, digest in digests:
        state.update(f"{path}\0{digest}\n".encode("utf-8", "surrogatepass"))
    return state.hexdigest()


def default_directory(start: Path, config_root: Path | None) -> Path:
    """Where the cache lives when no --cache-dir is given: ACCUMCHECK_CACHE_DIR, else the project root
    (the directory of the configuration that applies to `start`, else the nearest directory above it
    with a pyproject.toml or a .git, else `start`), so runs from any subdirectory share one cache."""
    configured = os.environ.get("ACCUMCHECK_CACHE_DIR")
    if configured:
        return Path(configured)
    if config_root is not None:
        return config_root / DEFAULT_DIR
    start = start.absolute()
    for directory in [start, *start.parents]:
        if (directory / "pyproject.toml").is_file() or (directory / ".git").exists():
            return directory / DEFAULT_DIR
    return start / DEFAULT_DIR


def remove(top: Path, extra: Path | None = None) -> list[Path]:
    """Remove every cache directory at or below `top` (ruff's `clean`), and `extra` (the cache this
    directory's runs use, which may sit above it). Returns what was removed."""
    import shutil

    removed = []
    candidates = [extra] if extra is not None else []
    for current, dirs, _ in os.walk(top):
        if DEFAULT_DIR.name in dirs:
            candidates.append(Path(current, DEFAULT_DIR.name))
        dirs[:] = [d for d in dirs if d != DEFAULT_DIR.name and d not in (".git", ".hg", ".venv", "node_modules")]
    for directory in candidates:
        if directory.is_dir() and directory.resolve() not in {r.resolve() for r in removed}:
            shutil.rmtree(directory)
            removed.append(directory)
    return removed
