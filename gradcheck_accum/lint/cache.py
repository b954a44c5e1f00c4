"""Per-file results, keyed on content hash, tool version and effective settings.

One JSON file per (version, settings) in `.accumcheck_cache/`. A warm run over an unchanged tree
only stats files: an entry whose size and mtime match is reused without reading the file; when
they differ the file is read and its hash compared before anything is parsed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from gradcheck_accum import __version__
from gradcheck_accum.lint.config import Settings
from gradcheck_accum.lint.diagnostics import Finding

DEFAULT_DIR = Path(".accumcheck_cache")


def content_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


@dataclass
class Entry:
    mtime_ns: int
    size: int
    digest: str
    findings: list[dict]
    error: str | None

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
    def __init__(self, directory: Path | None, settings: Settings, fix_edits: bool = False) -> None:
        self.directory = directory or DEFAULT_DIR
        # Findings with their fixes as edits (SARIF runs) are kept apart: other runs store none.
        self.file = self.directory / f"v{__version__}" / f"{settings.key()}{'-edits' * fix_edits}.json"
        self.entries: dict[str, Entry] = {}
        self.dirty = False
        try:
            self.entries = entries(json.loads(self.file.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            self.entries = {}

    @staticmethod
    def key(path: Path) -> str:
        return os.path.abspath(path)

    def fresh(self, path: Path) -> Entry | None:
        """The entry for an unchanged file (by size and mtime), without reading it."""
        entry = self.entries.get(self.key(path))
        if entry is None:
            return None
        try:
            stat = path.stat()
        except OSError:
            return None
        return entry if (stat.st_mtime_ns, stat.st_size) == (entry.mtime_ns, entry.size) else None

    def candidate(self, path: Path) -> Entry | None:
        """A possibly stale entry, reusable if the file's content hash still matches."""
        return self.entries.get(self.key(path))

    def store(self, path: Path, stat: os.stat_result, digest: str, findings: list[Finding],
              error: str | None) -> None:
        records = [{k: v for k, v in f.to_dict().items() if k != "path"} for f in findings]
        self.entries[self.key(path)] = Entry(stat.st_mtime_ns, stat.st_size, digest, records, error)
        self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.directory / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n", encoding="utf-8")
            data = {path: entry.__dict__ for path, entry in self.entries.items()}
            with tempfile.NamedTemporaryFile("w", dir=self.file.parent, delete=False, suffix=".tmp",
                                             encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(handle.name, self.file)
        except OSError:
            pass  # a read-only tree still lints, just without a cache


def remove(directory: Path | None) -> Path | None:
    directory = directory or DEFAULT_DIR
    if directory.is_dir():
        shutil.rmtree(directory)
        return directory
    return None
