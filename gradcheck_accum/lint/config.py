"""Settings: `[tool.accumcheck]` in the pyproject.toml nearest to each file, overridden by command-line
options.

Like ruff's hierarchical configuration, every directory takes its settings from the closest
pyproject.toml above it that has a `[tool.accumcheck]` table, so one run over a monorepo (or a
pre-commit batch spanning projects) lints each file by its own project's rules. `extend = "path"`
inherits another configuration file; `--config` pins one file for everything.
"""

from __future__ import annotations

import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Iterable, NamedTuple

from gradcheck_accum.lint.diagnostics import SEVERITIES
from gradcheck_accum.lint.registry import codes as known_codes


class ConfigError(Exception):
    """Bad configuration or selection; str(self) is a one-line reason."""


_LIST_KEYS = ("select", "extend-select", "ignore", "extend-ignore", "exclude", "extend-exclude")
_KNOWN_KEYS = set(_LIST_KEYS) | {"per-file-ignores", "extend", "fail-on", "respect-gitignore"}
_SELECTOR = re.compile(r"ALL|ACC\d{0,3}")


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["ALL"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    fail_on: str = "warning"  # the least severe finding that makes the exit status 1
    respect_gitignore: bool = True
    root: Path | None = None  # directory of the config file; globs are relative to it
    source: Path | None = None  # the pyproject.toml read, if any

    def selected(self) -> list[str]:
        """The codes of the checks these settings enable, in code order."""
        chosen = expand(self.select) | expand(self.extend_select)
        dropped = expand(self.ignore)
        return [code for code in known_codes() if code in chosen - dropped]

    def excludes(self) -> list[str]:
        return self.exclude + self.extend_exclude

    def fails(self, severity: str) -> bool:
        return SEVERITIES.index(severity) <= SEVERITIES.index(self.fail_on)

    def key(self) -> str:
        """A digest of everything that changes a file's findings (for the cache)."""
        data = {name: value for name, value in asdict(self).items()
                if name not in ("source", "fail_on", "respect_gitignore", "exclude", "extend_exclude")}
        data["root"] = str(self.root)
        import hashlib  # here and below: imported when used, a pre-commit run on one file pays for little
        import json

        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def show(self) -> str:
        lines = [f"config file: {self.source or '(none)'}",
                 f"enabled rules: {', '.join(self.selected()) or '(none)'}"]
        for name in ("select", "extend_select", "ignore", "exclude", "extend_exclude"):
            lines.append(f"{name.replace('_', '-')}: {getattr(self, name)}")
        lines += [f"per-file-ignores: {self.per_file_ignores}", f"fail-on: {self.fail_on}",
                  f"respect-gitignore: {str(self.respect_gitignore).lower()}"]
        return "\n".join(lines)


def expand(selectors: Iterable[str]) -> set[str]:
    """`ALL`, a code (`ACC101`), or a prefix (`ACC4`, `ACC`) -> the set of codes; unknown ones are errors."""
    codes: set[str] = set()
    for raw in selectors:
        selector = raw.strip().upper()
        matched = set(known_codes()) if selector == "ALL" else \
            {code for code in known_codes() if code.startswith(selector)} if _SELECTOR.fullmatch(selector) else set()
        if not matched:
            raise ConfigError(f"unknown rule selector {raw.strip()!r} (expected ALL, a code like ACC101 or a "
                              f"prefix like ACC4)")
        codes |= matched
    return codes


class Overrides(NamedTuple):
    """What the command line changes in every configuration it applies to."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_exclude: tuple[str, ...] = ()  # anchored patterns are already absolute (relative to the cwd)
    fail_on: str | None = None
    respect_gitignore: bool | None = None

    def validate(self) -> None:
        for option, selectors in (("--select", self.select or ()), ("--extend-select", self.extend_select),
                                  ("--ignore", self.ignore)):
            try:
                expand(selectors)
            except ConfigError as exc:
                raise ConfigError(f"{option}: {exc}") from None

    def apply(self, settings: Settings) -> Settings:
        changed = replace(
            settings,
            select=list(self.select) if self.select is not None else settings.select,
            extend_select=settings.extend_select + list(self.extend_select),
            ignore=settings.ignore + list(self.ignore),
            extend_exclude=settings.extend_exclude + list(self.extend_exclude),
            fail_on=self.fail_on or settings.fail_on,
            respect_gitignore=settings.respect_gitignore if self.respect_gitignore is None else self.respect_gitignore,
        )
        if not changed.selected():
            where = f" (with {settings.source})" if settings.source else ""
            raise ConfigError(f"no rules selected: select {changed.select + changed.extend_select} "
                              f"minus ignore {changed.ignore} leaves nothing to check{where}")
        return changed


class Resolver:
    """The settings of each directory: the nearest configuration above it, with the overrides applied.
    Looked up once per directory, so walking a large tree costs one stat per directory."""

    def __init__(self, overrides: Overrides = Overrides(), config: Path | None = None) -> None:
        overrides.validate()
        self.overrides = overrides
        self.pinned = overrides.apply(load(config)) if config is not None else None
        self._by_directory: dict[Path, Settings] = {}

    def for_path(self, path: Path) -> Settings:
        """Settings of a file (which need not exist: a `--stdin-filename`) or a directory."""
        path = Path(path).absolute()
        return self.for_directory(path if path.is_dir() else path.parent)

    def for_directory(self, directory: Path) -> Settings:
        if self.pinned is not None:
            return self.pinned
        directory = Path(directory).absolute()
        found = self._by_directory.get(directory)
        if found is None:
            config = _config_in(directory)
            if config is not None:
                found = self.overrides.apply(load(config))
            elif directory.parent != directory:
                found = self.for_directory(directory.parent)
            else:
                found = self.overrides.apply(Settings())
            self._by_directory[directory] = found
        return found


def _config_in(directory: Path) -> Path | None:
    """directory/pyproject.toml when it configures accumcheck (or cannot be read: that is reported)."""
    candidate = directory / "pyproject.toml"
    if not candidate.is_file():
        return None
    tomllib = _toml()
    try:
        data = tomllib.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return candidate  # report it when loading, not silently skip
    return candidate if "accumcheck" in data.get("tool", {}) else None


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml, from `start` upwards, that has a [tool.accumcheck] table."""
    start = Path(start).resolve()
    for directory in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        config = _config_in(directory)
        if config is not None:
            return config
    return None


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def load(path: Path | None, _seen: tuple[Path, ...] = ()) -> Settings:
    if path is None:
        return Settings()
    path = Path(path)
    tomllib = _toml()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table = data.get("tool", {}).get("accumcheck", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.accumcheck] must be a table")
    table = {key.replace("_", "-"): value for key, value in table.items()}
    for key in table:
        if key not in _KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.accumcheck] "
                              f"(known: {', '.join(sorted(_KNOWN_KEYS))})")
    settings = Settings(root=path.parent, source=path)
    if "extend" in table:
        settings = _extended(path, table["extend"], _seen)
    for key in _LIST_KEYS:
        if key not in table:
            continue
        value = table[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{path}: [tool.accumcheck] {key} must be a list of strings")
        if key == "extend-ignore":  # ruff's older spelling of adding to ignore
            settings.ignore = settings.ignore + list(value)
        elif key.startswith("extend-"):
            attribute = key.replace("-", "_")
            setattr(settings, attribute, getattr(settings, attribute) + list(value))
        else:
            setattr(settings, key, list(value))
    if "per-file-ignores" in table:
        value = table["per-file-ignores"]
        if not isinstance(value, dict) or not all(
                isinstance(v, list) and all(isinstance(c, str) for c in v) for v in value.values()):
            raise ConfigError(f"{path}: [tool.accumcheck] per-file-ignores must map globs to lists of codes")
        settings.per_file_ignores = {glob: list(codes) for glob, codes in value.items()}
    if "fail-on" in table:
        if table["fail-on"] not in SEVERITIES:
            raise ConfigError(f"{path}: [tool.accumcheck] fail-on must be one of {', '.join(SEVERITIES)}")
        settings.fail_on = table["fail-on"]
    if "respect-gitignore" in table:
        if not isinstance(table["respect-gitignore"], bool):
            raise ConfigError(f"{path}: [tool.accumcheck] respect-gitignore must be true or false")
        settings.respect_gitignore = table["respect-gitignore"]
    # Validate selectors now, so a typo is reported once with the file it came from.
    try:
        for selectors in [settings.select, settings.extend_select, settings.ignore,
                          *settings.per_file_ignores.values()]:
            expand(selectors)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return settings


def _extended(path: Path, extend: object, seen: tuple[Path, ...]) -> Settings:
    """The settings of the file `extend` names, re-rooted at `path`'s directory. Its globs keep meaning
    what they meant where they were written: anchored ones become absolute."""
    if not isinstance(extend, str):
        raise ConfigError(f"{path}: [tool.accumcheck] extend must be a path")
    base_path = (path.parent / Path(extend).expanduser()).resolve()
    if base_path in seen or base_path == path.resolve():
        raise ConfigError(f"{path}: extend forms a cycle through {base_path}")
    base = load(base_path, (*seen, path.resolve()))
    return replace(base, root=path.parent, source=path,
                   exclude=[anchored_glob(p, base.root) for p in base.exclude],
                   extend_exclude=[anchored_glob(p, base.root) for p in base.extend_exclude],
                   per_file_ignores={anchored_glob(g, base.root): c for g, c in base.per_file_ignores.items()})


def anchored_glob(pattern: str, root: Path | None) -> str:
    """A glob anchored to `root` (it has a `/` inside) as an absolute one; others match names anywhere.
    (`extend` re-roots a configuration's globs with it, the command line its `--extend-exclude`.)"""
    if root is None or "/" not in pattern.rstrip("/") or pattern.startswith("/"):
        return pattern
    return (root.resolve() / pattern).as_posix() + ("/" if pattern.endswith("/") else "")
