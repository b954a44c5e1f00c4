"""Settings: `[tool.accumcheck]` in the nearest pyproject.toml, overridden by command-line options."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from gradcheck_accum.lint.registry import codes as known_codes


class ConfigError(Exception):
    """Bad configuration or selection; str(self) is a one-line reason."""


_LIST_KEYS = ("select", "extend-select", "ignore", "exclude")
_KNOWN_KEYS = set(_LIST_KEYS) | {"per-file-ignores"}


@dataclass
class Settings:
    select: list[str] = field(default_factory=lambda: ["ALL"])
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    root: Path | None = None  # directory of the config file; globs are relative to it
    source: Path | None = None  # the pyproject.toml read, if any

    def selected(self) -> list[str]:
        """The codes of the checks these settings enable, in code order."""
        chosen = expand(self.select) | expand(self.extend_select)
        dropped = expand(self.ignore)
        return [code for code in known_codes() if code in chosen - dropped]

    def key(self) -> str:
        """A digest of everything that changes results (for the cache)."""
        data = asdict(self)
        data.pop("source")
        data["root"] = str(self.root)
        import hashlib  # here and below: imported when used, a pre-commit run on one file pays for little
        import json

        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def show(self) -> str:
        lines = [f"config file: {self.source or '(none)'}",
                 f"enabled rules: {', '.join(self.selected()) or '(none)'}"]
        for name in ("select", "extend_select", "ignore", "exclude"):
            lines.append(f"{name.replace('_', '-')}: {getattr(self, name)}")
        lines.append(f"per-file-ignores: {self.per_file_ignores}")
        return "\n".join(lines)


def expand(selectors: Iterable[str]) -> set[str]:
    """`ALL`, a code (`ACC101`), or a prefix (`ACC4`, `ACC`) -> the set of codes; unknown ones are errors."""
    codes: set[str] = set()
    for selector in selectors:
        selector = selector.strip().upper()
        if not selector:
            continue
        if selector == "ALL":
            codes |= set(known_codes())
            continue
        matched = {code for code in known_codes() if code.startswith(selector)}
        if not matched:
            raise ConfigError(f"unknown rule selector {selector!r} (expected ALL, a code like ACC101 or a "
                              f"prefix like ACC4)")
        codes |= matched
    return codes


def find_config(start: Path) -> Path | None:
    """The nearest pyproject.toml, from `start` upwards, that has a [tool.accumcheck] table."""
    start = start.resolve()
    for directory in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            tomllib = _toml()
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                data = {"tool": {"accumcheck": {}}}  # report it when loading, not silently skip
            if "accumcheck" in data.get("tool", {}):
                return candidate
    return None


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


def load(path: Path | None) -> Settings:
    if path is None:
        return Settings()
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
    settings = Settings(root=path.parent, source=path)
    for key, value in table.items():
        normal = key.replace("_", "-")
        if normal not in _KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.accumcheck] "
                              f"(known: {', '.join(sorted(_KNOWN_KEYS))})")
        if normal in _LIST_KEYS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: [tool.accumcheck] {key} must be a list of strings")
            setattr(settings, normal.replace("-", "_"), list(value))
        else:
            if not isinstance(value, dict) or not all(
                    isinstance(v, list) and all(isinstance(c, str) for c in v) for v in value.values()):
                raise ConfigError(f"{path}: [tool.accumcheck] per-file-ignores must map globs to lists of codes")
            settings.per_file_ignores = {glob: list(codes) for glob, codes in value.items()}
    # Validate selectors now, so a typo is reported once with the file it came from.
    try:
        for selectors in [settings.select, settings.extend_select, settings.ignore,
                          *settings.per_file_ignores.values()]:
            expand(selectors)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return settings
