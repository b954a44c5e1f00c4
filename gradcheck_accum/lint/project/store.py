"""Summaries of a project's files, kept across runs.

One JSON file per project root and accumcheck version in the cache directory
(`.accumcheck_cache/project/`). An entry is reused without reading its file when the file's size
and modification time are unchanged, and after reading it when its content hash is. JSON rather
than pickle: a cache directory inside a cloned repository is not trusted code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from stat import S_ISREG

from gradcheck_accum.version import __version__
from gradcheck_accum.lint.digests import content_hash
from gradcheck_accum.lint.project.index import SummarySource
from gradcheck_accum.lint.project.summary import FORMAT, ModuleSummary, summarize


class SummaryStore(SummarySource):
    """Summaries computed on first use, from the cache when the file is unchanged."""

    def __init__(self, root: Path, effect_names: frozenset[str], watched: frozenset[str] = frozenset(),
                 directory: Path | None = None, texts: dict[Path, str] | None = None,
                 words: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.root = root.absolute()
        self.effect_names, self.watched, self.words = effect_names, watched, words
        # Summaries depend on what they screen for and on their shape: another catalogue is another cache.
        vocabulary = content_hash(json.dumps([sorted(effect_names), sorted(watched), sorted(words), FORMAT]))[:12]
        self.file = (directory / "project" / f"v{__version__}-{vocabulary}-{content_hash(str(self.root))[:12]}.json"
                     if directory is not None else None)
        self.texts = texts or {}  # files whose text the caller already holds (the files being linted)
        # the texts may_mention read, for the next name asked of the same file (until refresh)
        self._read: dict[Path, str] = {}
        self._summaries: dict[Path, ModuleSummary] = {}
        self._stats: dict[Path, tuple[int, int]] = {}  # the (mtime, size) each summary was read at
        self._checked: dict[Path, int] = {}  # the generation in which each summary was last checked
        self.generation = 0
        self._entries: dict[str, list] = self._load()
        self.dirty = False
        self.computed = 0  # summaries parsed in this run (the rest came from the cache)

    def _load(self) -> dict[str, list]:
        if self.file is None:
            return {}
        try:
            data = json.loads(self.file.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, path: Path) -> ModuleSummary:
        known = self._summaries.get(path)
        if known is not None and self._checked.get(path) == self.generation:
            return known
        if known is not None and path not in self.texts:
            try:
                stat = path.stat()
                unchanged = self._stats.get(path) == (stat.st_mtime_ns, stat.st_size)
            except OSError:
                unchanged = False
            if unchanged:
                self._checked[path] = self.generation
                return known
        summary = self._summaries[path] = self._compute(path)
        self._checked[path] = self.generation
        return summary

    def refresh(self) -> None:
        """Check files again on their next use (a long-running process between two lints)."""
        self.generation += 1
        self.texts = {}
        self._read = {}

    def may_mention(self, path: Path, name: str) -> bool:
        """Can the file call `name`, or pass it as a keyword to a watched constructor? Known summaries
        answer exactly; otherwise the file's text must contain the name (so a cold run reads the
        files, but summarises only those that can matter)."""
        summary = self._summaries.get(path)
        if summary is None:
            entry = self._entries.get(self._key(path))
            if entry is not None and path not in self.texts:
                try:
                    stat = path.stat()
                except OSError:
                    return False
                if entry[0] == stat.st_mtime_ns and entry[1] == stat.st_size and entry[3] is not None:
                    summary = self.get(path)
        if summary is not None:
            return name in summary.mentioned
        text = self._read.get(path)
        if text is None:
            text = self._read[path] = self.text(path) or ""
        return name in text

    def state(self, path: Path) -> str | None:
        """The content hash of a file: from its entry while its size and mtime are unchanged, else
        read (and kept, with or without a summary, so the next run only stats it)."""
        key = self._key(path)
        entry = self._entries.get(key)
        try:
            stat = path.stat()
        except OSError:
            return None
        if not S_ISREG(stat.st_mode):
            return None  # never read a FIFO or a device
        if entry is not None and entry[0] == stat.st_mtime_ns and entry[1] == stat.st_size:
            return entry[2]
        text = self.text(path)
        if text is None:
            return None
        digest = content_hash(text)
        if entry is not None and entry[2] == digest:
            entry[0], entry[1] = stat.st_mtime_ns, stat.st_size
        else:
            self._entries[key] = [stat.st_mtime_ns, stat.st_size, digest, None]  # summarised on first use
        self.dirty = True
        return digest

    def text(self, path: Path) -> str | None:
        if path in self.texts:
            return self.texts[path]
        try:
            return path.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return None

    def _compute(self, path: Path) -> ModuleSummary:
        key = self._key(path)
        entry = self._entries.get(key)
        stat = None
        if path not in self.texts:
            try:
                stat = path.stat()
            except OSError:
                return ModuleSummary()
            self._stats[path] = (stat.st_mtime_ns, stat.st_size)
            if entry is not None and entry[0] == stat.st_mtime_ns and entry[1] == stat.st_size \
                    and entry[3] is not None:
                return self._restore(entry)
        text = self.text(path)
        if text is None:
            return ModuleSummary()
        digest = content_hash(text)
        if entry is not None and entry[2] == digest and entry[3] is not None:
            if stat is not None and (entry[0], entry[1]) != (stat.st_mtime_ns, stat.st_size):
                entry[0], entry[1] = stat.st_mtime_ns, stat.st_size
                self.dirty = True
            return self._restore(entry)
        summary = summarize(text, self.effect_names, self.watched, self.words)
        self.computed += 1
        if stat is None:
            try:
                stat = path.stat()
            except OSError:
                return summary
        self._entries[key] = [stat.st_mtime_ns, stat.st_size, digest, summary.to_json()]
        self.dirty = True
        return summary

    def _restore(self, entry: list) -> ModuleSummary:
        try:
            return ModuleSummary.from_json(entry[3])
        except (KeyError, IndexError, TypeError, ValueError):
            return ModuleSummary()  # a damaged entry: as if the file said nothing

    def _key(self, path: Path) -> str:
        try:
            return path.absolute().relative_to(self.root).as_posix()
        except ValueError:
            return path.absolute().as_posix()

    def save(self) -> None:
        if not self.dirty or self.file is None:
            return
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            import tempfile
            with tempfile.NamedTemporaryFile("w", dir=self.file.parent, delete=False, suffix=".tmp",
                                             encoding="utf-8") as handle:
                json.dump(self._entries, handle, separators=(",", ":"))
            os.replace(handle.name, self.file)
            self.dirty = False
        except OSError:
            pass  # a read-only tree still lints, just without the cache
