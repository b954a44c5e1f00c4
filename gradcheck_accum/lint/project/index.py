"""The project: the files around the ones being linted, and how a call in one resolves to a
function in another.

The project root is the nearest directory, from a file upwards, holding a `pyproject.toml`,
`setup.cfg`, `setup.py` or `.git`; its Python files are the project. Each file is known by its
summary (summary.py), computed on first use or read from the cache (store.py). A call resolves
through imports (absolute and relative, re-exports of a package's `__init__`), `self.method`
(along the class's method resolution order, bases in other files included), `super().method`,
attributes bound in a method or the class body (`self.scaler = NativeScaler()`,
`self.scaler(...)`), module attributes (`module.function`), names bound to a constructor, and
`Class.method`. What does not resolve stays unknown: the analysis treats the call as opaque.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, TypeVar

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.project.summary import (EITHER, MODULE_CODE, REGISTRY, REGISTRY_ENTRY, STAR, ClassSummary,
                                                 FunctionSummary, ModuleSummary)

T = TypeVar("T")

ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
# Directories never part of a project (environments, caches, build outputs): files.py skips the same.
_SKIPPED = {".git", ".hg", ".svn", ".venv", "venv", ".env", "__pycache__", "build", "dist", "node_modules", ".tox",
            ".nox", ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".accumcheck_cache",
            ".ipynb_checkpoints", "site-packages"}
CALLABLE_METHODS = ("__call__", "forward")  # what calling an instance runs (nn.Module.__call__ runs forward)
_MAX_DEPTH = 8  # re-exports, attribute chains and base classes followed at most this deep
_ELEMENT = re.compile(r"(.+)\[(\d+)\]")  # "f[0]": element 0 of what f returns (summary.py)


def find_root(path: Path, fallback: Path | None = None) -> Path:
    """The project root of a file or directory: the nearest directory upwards with a root marker;
    else `fallback` when it contains the path (the directory the linter runs in); else the
    directory above the path's top package."""
    path = path.absolute()
    start = path if path.is_dir() else path.parent
    for directory in (start, *start.parents):
        if is_marked(directory):
            return directory
    if fallback is not None:
        fallback = fallback.absolute()
        if fallback == start or fallback in start.parents:
            return fallback
    top = start
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return top


def is_marked(root: Path) -> bool:
    """Does the directory hold a root marker?"""
    return any((root / marker).exists() for marker in ROOT_MARKERS)


def python_files(root: Path, packages_only: bool = False) -> list[Path]:
    """Every Python source file of the project, in a stable order: not in environments, caches or
    build outputs, nor where the project's `.gitignore` files say (fetched or generated trees).
    `packages_only`: below the root, only directories that are packages (hold an `__init__.py`): what
    a script standing in a directory that marks no project can import."""
    found = []
    ignores: list[tuple[Path, object]] = []  # (directory, its .gitignore's patterns), outermost first
    for current, dirs, files in os.walk(root):
        here = Path(current)
        ignores = [(d, spec) for d, spec in ignores if d == here or d in here.parents]
        if ".gitignore" in files:
            spec = _gitignore(here / ".gitignore")
            if spec is not None:
                ignores.append((here, spec))
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED and not d.endswith(".egg-info")
                         and not _ignored(here / d, True, ignores)
                         and not (packages_only and not os.path.isfile(here / d / "__init__.py")))
        # regular files only: a FIFO or a device named *.py would block (or never end) when read
        found.extend(here / name for name in sorted(files)
                     if name.endswith((".py", ".pyi")) and not _ignored(here / name, False, ignores)
                     and os.path.isfile(here / name))
    return found


def _gitignore(path: Path):
    try:
        import pathspec

        return pathspec.PathSpec.from_lines("gitwildmatch", path.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError, ValueError, ImportError):
        return None


def _ignored(path: Path, is_dir: bool, ignores: list[tuple[Path, object]]) -> bool:
    for directory, spec in ignores:
        relative = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
        if spec.match_file(relative):  # type: ignore[attr-defined]
            return True
    return False


@dataclass(frozen=True, order=True)
class FunctionRef:
    """A function or method of the project: its file and its qualified name in that file
    (`train`, `Trainer.fit`, `Trainer.fit.inner`, or `<module>` for top-level code)."""

    path: Path
    qualname: str

    def __str__(self) -> str:
        return f"{self.path.name}:{self.qualname}"


@dataclass(frozen=True, order=True)
class ClassRef:
    path: Path
    qualname: str

    def method(self, name: str) -> FunctionRef:
        return FunctionRef(self.path, f"{self.qualname}.{name}")


class CallSite(NamedTuple):
    caller: FunctionRef
    callee: str  # as written in the caller
    in_loop: bool  # the call sits inside a loop of the caller
    receiver: ClassRef | None = None  # `self.m()` dispatched to a subclass's override: the class of `self`


class Project:
    """The Python files under one root and the summaries that resolve calls between them."""

    def __init__(self, root: Path, summaries: "SummarySource", files: list[Path] | None = None,
                 packages_only: bool = False) -> None:
        self.root = root.absolute()
        self.packages_only = packages_only  # python_files: a root no marker (and no choice of the user) made
        self.summaries = summaries
        self._files: list[Path] | None = files  # None: every Python file under the root, listed when needed
        self._listed = files
        self._by_name: dict[str, Path] | None = None  # the files by path string (_files_by_name)
        self._module_paths: dict[tuple[Path, str, int], Path | None] = {}  # module_path's answers
        self._pins: dict[tuple[str, tuple[int, ...]], bool] = {}  # requires_below's answers

    def refresh(self) -> None:
        """Forget what this run learned: the file list and what was derived from summaries; each
        summary is checked against its file on its next use."""
        self._files = self._listed
        self._by_name = None
        self._module_paths.clear()
        self._pins.clear()
        self.summaries.memo.clear()
        refresh = getattr(self.summaries, "refresh", None)
        if refresh is not None:
            refresh()

    # -- declared dependencies ------------------------------------------------------------------------
    def requires_below(self, package: str, version: tuple[int, ...]) -> bool:
        """Does every requirement of `package` the project declares at its root (requirements*.txt,
        pyproject.toml, setup.py, setup.cfg) cap it below `version` (`accelerate==0.15.0`,
        `accelerate<0.16`)? Then its code runs on the older semantics. False when it is not declared or
        some declaration leaves it open (`accelerate>=0.14`, `accelerate`): a current version may run."""
        key = (package, version)
        if key not in self._pins:
            caps = [_cap(specifiers) for specifiers in _requirements_of(self.root, package)]
            self._pins[key] = bool(caps) and all(cap is not None and cap <= version for cap in caps)
        return self._pins[key]

    # -- files and modules ----------------------------------------------------------------------------
    @property
    def files(self) -> list[Path]:
        if self._files is None:
            self._files = python_files(self.root, self.packages_only)
        return self._files

    def contains(self, path: Path) -> bool:
        return os.fspath(path) in self._files_by_name()

    def _files_by_name(self) -> dict[str, Path]:
        """The project's files by their path as a string: module lookups build candidate names as
        strings, several per import and directory searched, where building Paths cost most of it."""
        if self._by_name is None:
            self._by_name = {os.fspath(path): path for path in self.files}
        return self._by_name

    def reaching(self, path: Path) -> list[Path]:
        """The files whose code can run a definition in `path`, by a call that resolves to it or by
        name: every project file; for a file outside the project's files (linted from an environment
        or an ignored directory), only itself, since imports resolve to project files alone."""
        return self.files if self.contains(path) else [path]

    def summary(self, path: Path) -> ModuleSummary:
        return self.summaries.get(path)

    def module_path(self, importer: Path, module: str, level: int = 0) -> Path | None:
        """The file a module name refers to from `importer` (None outside the project). Asked for every
        call through an import (`torch.nn.utils.clip_grad_norm_` asks for four modules), so answered
        once per name and importing directory (all the importer decides is where to look from)."""
        key = (importer.parent, module, level)
        if key not in self._module_paths:
            self._module_paths[key] = self._find_module(importer.parent, module, level)
        found = self._module_paths[key]
        if found == importer and not level:
            # `from optpkg import Optim` in helpers/optpkg.py names the package `optpkg` at the root, not
            # the importing file (which defines no Optim): it is found past the file's own directory
            key = (importer.parent, module, level, "past")
            if key not in self._module_paths:
                self._module_paths[key] = self._find_module(importer.parent, module, level, past_directory=True)
            found = self._module_paths[key]
        return found

    def _find_module(self, directory: Path, module: str, level: int, past_directory: bool = False) -> Path | None:
        parts = [p for p in module.split(".") if p]
        if level:
            base = directory
            for _ in range(level - 1):
                base = base.parent
            return self._module_file(base, parts)
        for base in self._search_bases(directory):
            if past_directory and base == directory:
                continue
            found = self._module_file(base, parts)
            if found is not None:
                return found
        return None

    def _search_bases(self, directory: Path) -> Iterator[Path]:
        """Where absolute imports from a file in `directory` are looked for, in order: the directory
        itself (what `python dir/script.py` puts first on sys.path), the directory above its top
        package, the project root and its `src/`, and the directory above the root (a project that
        is itself the package its files import by name: `from mae_st.util import misc` inside a
        checkout named `mae_st`; only the project's own files are ever found there)."""
        yield directory
        top = directory
        while (top / "__init__.py").is_file() and top != self.root:
            top = top.parent
        if top != directory:
            yield top
        yield self.root
        yield self.root / "src"
        yield self.root.parent

    def _module_file(self, base: Path, parts: list[str]) -> Path | None:
        files = self._files_by_name()
        stem = os.path.join(os.fspath(base), *parts)
        candidates = [stem + ".py"] if parts else []  # `a.b`: a/b.py, else the package a/b/
        candidates.append(os.path.join(stem, "__init__.py"))
        return next((files[name] for name in candidates if name in files), None)

    # -- resolution -----------------------------------------------------------------------------------
    def function(self, ref: FunctionRef) -> FunctionSummary | None:
        return self.summary(ref.path).functions.get(ref.qualname)

    def class_of(self, ref: FunctionRef) -> ClassRef | None:
        """The class whose method `ref` is (for a nested function, of the method around it)."""
        classes = self.summary(ref.path).classes
        parts = ref.qualname.split(".")
        for end in range(len(parts) - 1, 0, -1):
            prefix = ".".join(parts[:end])
            if prefix in classes:
                return ClassRef(ref.path, prefix)
        return None

    def resolve_call(self, caller: FunctionRef, callee: str) -> FunctionRef | None:
        """The project function that a call written `callee` inside `caller` runs, if it is known.
        Answered once per run: `calls` and `callers` both ask (see calls)."""
        return self.summaries.remember(("resolve", caller, callee), lambda: self._resolve_call(caller, callee))

    def _resolve_call(self, caller: FunctionRef, callee: str) -> FunctionRef | None:
        summary = self.summary(caller.path)
        parts = callee.split(".")
        cls = self.class_of(caller)
        if parts[0] == "super()" and len(parts) == 2:
            return self._super_method(cls, parts[1], caller) if cls is not None else None
        if parts[0] in ("self", "cls") and cls is not None:
            if len(parts) == 1:
                return self.member_call(cls, [])  # `self(...)`: the instance's __call__/forward
            if len(parts) == 2:
                method = self.lookup_method(cls, parts[1])
                if method is not None:
                    return method
            owner = self.attribute_class(cls, parts[1])
            if owner is None:
                return None
            return self.member_call(owner, parts[2:])
        # a function nested in the caller (or in the functions around it; a class body around it
        # encloses nothing: `backprop(...)` in a method `backprop` is the module's function)
        scopes = caller.qualname.split(".")
        for end in range(len(scopes), 0, -1):
            if ".".join(scopes[:end]) in summary.classes:
                continue
            nested = ".".join(scopes[:end] + parts)
            if nested in summary.functions and len(parts) == 1:
                return FunctionRef(caller.path, nested)
        # a name bound to a constructor in the caller, or in a function around it (a closure)
        for end in range(len(scopes), 0, -1):
            local = summary.functions.get(".".join(scopes[:end]))
            constructor = local.locals.get(parts[0]) if local is not None else None
            if constructor is not None:
                # one of several classes (a factory returning either): the method all of them run
                ran = self._methods_run(caller.path, constructor, parts[1:])
                return ran.pop() if len(ran) == 1 else None
        return self._resolve_global(caller.path, parts, 0)

    def _methods_run(self, path: Path, constructor: str, rest: list[str]) -> set[FunctionRef | None]:
        """What calling `rest` on an object made by `constructor` runs, for each class it may make."""
        return {self.member_call(owner, rest) for owner in self.resolve_classes(path, constructor)}

    def resolve_call_alternatives(self, caller: FunctionRef, callee: str) -> tuple[FunctionRef, ...]:
        """The project functions a call may run when its receiver is one of several project classes
        (`trainer = build_trainer(cfg)`, which returns a `DetTrainer` or a `SegTrainer`, then
        `trainer.fit(model)`): each class's method, where they differ; () where resolve_call knows the
        one function, or nothing. Answered once per run, like resolve_call."""
        def find() -> tuple[FunctionRef, ...]:
            parts = callee.split(".")
            if len(parts) < 2 or self.resolve_call(caller, callee) is not None:
                return ()
            local = self.function(caller)
            constructor = local.locals.get(parts[0]) if local is not None else None
            if constructor is None:
                return ()
            ran = self._methods_run(caller.path, constructor, parts[1:])
            ran.discard(None)
            return tuple(sorted(ran, key=str)) if len(ran) > 1 else ()
        return self.summaries.remember(("alternatives", caller, callee), find)

    def _resolve_global(self, path: Path, parts: list[str], depth: int) -> FunctionRef | None:
        """`name`, `name.attr...` read at module level of `path`."""
        if depth > _MAX_DEPTH or not parts:
            return None
        summary = self.summary(path)
        head = parts[0]
        if len(parts) == 1 and head in summary.functions:
            return FunctionRef(path, head)
        if head in summary.classes:
            return self.member_call(ClassRef(path, head), parts[1:], constructor=len(parts) == 1)
        if head in summary.bindings:
            owner = self.resolve_class(path, summary.bindings[head], depth + 1)
            return self.member_call(owner, parts[1:]) if isinstance(owner, ClassRef) else None
        imported = summary.imports.get(head)
        if imported is None:
            module = self._star_source(path, head)
            return self._resolve_global(module, parts, depth + 1) if module is not None else None
        if imported.name is None:  # `import a.b as m`: m.f -> a.b.f; `import a`: a.b.f -> a.b.f
            module_parts = imported.module.split(".")
            return self._in_module(path, module_parts, parts[1:], imported.level, depth)
        # `from m import name`: name is a module (a package's submodule) or an attribute of m
        target = self.module_path(path, f"{imported.module}.{imported.name}".strip("."), imported.level)
        if target is not None:
            return self._resolve_global(target, parts[1:], depth + 1) if len(parts) > 1 else None
        module = self.module_path(path, imported.module, imported.level)
        if module is None:
            return None
        return self._resolve_global(module, [imported.name, *parts[1:]], depth + 1)

    def _in_module(self, importer: Path, module: list[str], rest: list[str], level: int, depth: int) -> FunctionRef | None:
        # the longest prefix of module + rest that is a project module; the remainder is read inside it
        names = module + rest
        for end in range(len(names), len(module) - 1, -1):
            found = self.module_path(importer, ".".join(names[:end]), level)
            if found is not None:
                return self._resolve_global(found, names[end:], depth + 1)
        return None

    def member_call(self, owner: ClassRef, rest: list[str], constructor: bool = False) -> FunctionRef | None:
        """A call of `Owner.rest...`: a method (rest = [name]), an attribute's method, or the instance
        itself (rest = []: its __call__/forward). A constructor call (`Owner(...)`) runs no method
        the analysis follows."""
        if constructor:
            return None
        if not rest:
            for name in CALLABLE_METHODS:
                found = self.lookup_method(owner, name)
                if found is not None:
                    return found
            return None
        if len(rest) == 1:
            return self.lookup_method(owner, rest[0])
        attribute = self.attribute_class(owner, rest[0])
        return self.member_call(attribute, rest[1:]) if attribute is not None else None

    def resolve_class(self, path: Path, written: str, depth: int = 0) -> ClassRef | str | None:
        """The class a name written in `path` refers to: a project class, the qualified name of a
        class from outside the project (`torch.nn.Module`), or None. A project function's name
        (`build_model`, or `load_model[0]` for element 0 of what it returns) refers to the project
        class of the object it returns (FunctionSummary.produces). Where it may be one of several
        classes, only what they all are (resolve_classes has each)."""
        found = set(self._classes(path, written, depth))
        return found.pop() if len(found) == 1 and None not in found else None

    def resolve_classes(self, path: Path, written: str) -> list[ClassRef]:
        """Each project class a name written in `path` may refer to: one for most, several for one of
        several (a factory returning a `DetTrainer` or a `SegTrainer`, `cls = A if fast else B`); none
        where one of them is not a project class (what runs there is not known)."""
        found = self._classes(path, written, 0)
        return list(dict.fromkeys(found)) if all(isinstance(cls, ClassRef) for cls in found) else []

    def _classes(self, path: Path, written: str, depth: int) -> list[ClassRef | str | None]:
        """What each alternative of a name may refer to (None where it is not known)."""
        if depth > _MAX_DEPTH:
            return [None]
        if EITHER in written:
            return [found for alternative in written.split(EITHER)
                    for found in self._classes(path, alternative, depth + 1)]
        if written.endswith(REGISTRY):
            return [self._registry_class(path, written[:-len(REGISTRY)].rstrip("."), depth)]
        if REGISTRY_ENTRY in written:
            return self._entry_classes(path, written, depth)
        element = _ELEMENT.fullmatch(written)
        if element is None:
            found = self._named_class(path, written, depth)
            if found is not None:
                return [found]
        name, index = (element.group(1), int(element.group(2))) if element else (written, None)
        ref = self._resolve_global(path, name.split("."), depth + 1)
        return self._produced_classes(ref, index, depth) if ref is not None else [None]

    def _entry_classes(self, path: Path, written: str, depth: int) -> list[ClassRef | str | None]:
        """What an entry of a registry dict may be (`MODELS[*]`, `MODELS[*][1]`: summary._registry_entries),
        read in the module that writes the dict: `from registry import MODELS` leads there."""
        table, _, position = written.partition(REGISTRY_ENTRY)
        summary = self.summary(path)
        entries = summary.bindings.get(f"{table}{REGISTRY_ENTRY}{position}")
        if entries is not None:
            return self._classes(path, entries, depth + 1)
        head, *rest = table.split(".")
        imported = summary.imports.get(head)
        if imported is None or depth > _MAX_DEPTH:
            return [None]
        if rest:  # `import registry` ... `registry.MODELS[key]`
            module, name = self._module_named(path, ".".join([head, *rest[:-1]]), depth), rest[-1]
        elif imported.name is not None:  # `from registry import MODELS`
            module, name = self.module_path(path, imported.module, imported.level), imported.name
        else:
            return [None]
        return self._entry_classes(module, f"{name}{REGISTRY_ENTRY}{position}", depth + 1) if module else [None]

    def _produced_class(self, ref: FunctionRef, index: int | None, depth: int) -> ClassRef | None:
        """The project class of what a project function returns (element `index` of it), where it is one."""
        found = set(self._produced_classes(ref, index, depth))
        return found.pop() if len(found) == 1 and None not in found else None

    def _produced_classes(self, ref: FunctionRef, index: int | None, depth: int) -> list[ClassRef | None]:
        """The project classes a project function may return (element `index` of it); None where unknown."""
        function = self.function(ref)
        produced = function.produces if function is not None else None
        if isinstance(produced, list):
            produced = produced[index] if index is not None and index < len(produced) else None
        elif produced and index is not None:
            # `return load(...)`: element `index` of what that function returns
            produced = None if _ELEMENT.fullmatch(produced) or EITHER in produced else f"{produced}[{index}]"
        if not produced:
            return [None]
        return [found if isinstance(found, ClassRef) else None
                for found in self._classes(ref.path, produced, depth + 1)]

    def _overridden_class(self, owner: ClassRef, name: str, index: int | None) -> ClassRef | None:
        """What a method of `owner` that makes nothing itself (an abstract `_build_model` a base trainer
        calls in its __init__) makes in the project subclasses that override it: the one class all of
        them that make a project class agree on, else None."""
        def made() -> ClassRef | None:
            classes = {self._produced_class(ref, index, 0) for cls in self.subclasses(owner)
                       if name in getattr(self.class_summary(cls), "methods", ()) for ref in [cls.method(name)]}
            classes.discard(None)
            return classes.pop() if len(classes) == 1 else None
        return self.summaries.remember(("overridden class", owner, name, index), made)

    def _registry_class(self, path: Path, module: str, depth: int) -> ClassRef | None:
        """The class a module's factory makes when the factory is looked up by a name chosen at run time
        (`models_mae.__dict__[args.model](...)`, `globals()[arch]()`): the one project class that every
        factory of that module returning a project class makes (`def vit_base(**kw): return ViT(...)`);
        None when they make different ones."""
        found = self._module_named(path, module, depth) if module else path
        if found is None:
            return None
        made = {self._produced_class(FunctionRef(found, name), None, depth + 1)
                for name in self.summary(found).functions if "." not in name and name != MODULE_CODE}
        made.discard(None)
        return made.pop() if len(made) == 1 else None

    def _module_named(self, path: Path, written: str, depth: int) -> Path | None:
        """The project module a name read in `path` refers to (`import models`, `from pkg import models`)."""
        imported = self.summary(path).imports.get(written.split(".")[0])
        if imported is None or depth > _MAX_DEPTH:
            return None
        rest = written.split(".")[1:]
        if imported.name is None:
            return self.module_path(path, ".".join([imported.module, *rest]), imported.level)
        return self.module_path(path, ".".join(filter(None, [imported.module, imported.name, *rest])), imported.level)

    def _named_class(self, path: Path, written: str, depth: int) -> ClassRef | str | None:
        summary = self.summary(path)
        parts = written.split(".")
        if written in summary.classes:
            return ClassRef(path, written)
        imported = summary.imports.get(parts[0])
        if imported is None:
            module = self._star_source(path, parts[0])
            return self.resolve_class(module, written, depth + 1) if module is not None else None
        if imported.name is None:
            qualified = ".".join([imported.module, *parts[1:]])
            for end in range(len(parts), 0, -1):
                module = self.module_path(path, ".".join([imported.module, *parts[1:end]]), imported.level)
                if module is not None and end < len(parts):
                    return self.resolve_class(module, ".".join(parts[end:]), depth + 1)
            return qualified if not imported.level else None
        # `from m import name`: name is a module (a package's submodule: `from . import misc`, as
        # _resolve_global reads it) or an attribute of m
        submodule = self.module_path(path, f"{imported.module}.{imported.name}".strip("."), imported.level)
        if submodule is not None and len(parts) > 1:
            return self.resolve_class(submodule, ".".join(parts[1:]), depth + 1)
        module = self.module_path(path, imported.module, imported.level)
        if module is None:
            return None if imported.level else ".".join([imported.module, imported.name, *parts[1:]])
        return self.resolve_class(module, ".".join([imported.name, *parts[1:]]), depth + 1)

    def _star_source(self, path: Path, name: str) -> Path | None:
        """The project module a `from m import *` of `path` takes `name` from: the first that defines
        or imports it by name; of several, the last one, as Python binds it. Asked for every name a
        module resolves, so answered once per module and name."""
        return self.summaries.remember(("star", path, name), lambda: self._find_star_source(path, name))

    def _find_star_source(self, path: Path, name: str) -> Path | None:
        for key, imported in reversed(self.summary(path).imports.items()):
            if not key.startswith(STAR):
                continue
            module = self.module_path(path, imported.module, imported.level)
            if module is None or module == path:
                continue
            found = self.summary(module)
            if name in found.functions or name in found.classes or name in found.bindings or name in found.imports:
                return module
        return None

    def attribute_class(self, owner: ClassRef, attribute: str) -> ClassRef | None:
        """The project class of `self.attribute` in `owner` (or a base), from the constructor call it
        was bound to. `model.module` of a DDP-wrapped model (or `_orig_mod` of a compiled one), where
        the class binds no such attribute, is the model the wrapper was given: the class the name
        resolved to through the wrapping."""
        found = self._bound_attribute_class(owner, attribute)
        return owner if found is None and attribute in cat.WRAPPED_MODULE_ATTRIBUTES \
            and not self._binds_attribute(owner, attribute) else found

    def _binds_attribute(self, owner: ClassRef, attribute: str) -> bool:
        return any(isinstance(cls, ClassRef) and attribute in getattr(self.class_summary(cls), "attributes", {})
                   for cls in self.mro(owner))

    def _bound_attribute_class(self, owner: ClassRef, attribute: str) -> ClassRef | None:
        for cls in self.mro(owner):
            if not isinstance(cls, ClassRef):
                continue
            summary = self.class_summary(cls)
            constructor = summary.attributes.get(attribute) if summary is not None else None
            if constructor is None:
                continue
            element = _ELEMENT.fullmatch(constructor)
            written, index = (element.group(1), int(element.group(2))) if element else (constructor, None)
            if written.startswith("self."):
                # `self.model, self.optimizer = self._setup()`: what the instance's own method returns
                name = written.removeprefix("self.")
                method = self.lookup_method(owner, name)
                found = self._produced_class(method, index, 0) if method is not None else None
                return found if found is not None or method is None else self._overridden_class(owner, name, index)
            found = self.resolve_class(cls.path, constructor)
            return found if isinstance(found, ClassRef) else None
        return None

    def attribute_classes(self, owner: ClassRef, attribute: str) -> list[ClassRef]:
        """Each project class `self.attribute` may be an instance of, where it is bound to one of several
        (`self.model = self.model_class(...)` with the class picked from a registry of model types); the
        one class where attribute_class knows it; empty where any of them is not a project class."""
        found = self.attribute_class(owner, attribute)
        if found is not None:
            return [found]
        for cls in self.mro(owner):
            summary = self.class_summary(cls) if isinstance(cls, ClassRef) else None
            constructor = summary.attributes.get(attribute) if summary is not None else None
            if constructor is not None:
                return [] if constructor.startswith("self.") else self.resolve_classes(cls.path, constructor)
        return []

    def class_summary(self, cls: ClassRef) -> ClassSummary | None:
        """The summary of a class; None where its file's summary has no such class (a file CPython here
        cannot parse, such as Python 3.12 syntax under 3.11, is summarised empty while libcst reads it)."""
        return self.summary(cls.path).classes.get(cls.qualname)

    def lookup_method(self, owner: ClassRef, name: str) -> FunctionRef | None:
        """The method `name` that an instance of `owner` runs: the first definition along its MRO
        within the project (None when it is defined outside, or not at all)."""
        for cls in self.mro(owner):
            summary = self.class_summary(cls) if isinstance(cls, ClassRef) else None
            if summary is None:
                return None  # an outside base comes first (or one not summarised): its method, unknown here
            if name in summary.methods:
                return cls.method(name)
        return None

    def hook_overrides(self, name: str) -> list[FunctionRef]:
        """The methods `name` that override a method of that name of a project base class: the hooks
        of a protocol the project defines (`Callback.on_backward_end`, a no-op that subclasses fill
        in), which a caller holding objects of unknown classes may run by that name."""
        return self.summaries.remember(("hook overrides", name), lambda: self._find_hook_overrides(name))

    def _find_hook_overrides(self, name: str) -> list[FunctionRef]:
        found = []
        pattern, read = f"def {name}", getattr(self.summaries, "text", None)
        for path in self.files:
            text = read(path) if read is not None else None
            if text is not None and pattern not in text:
                continue  # a cheap screen before summarising every file of the project
            for qualname, cls in self.summary(path).classes.items():
                if name in cls.methods and self.overrides(ClassRef(path, qualname).method(name)):
                    found.append(ClassRef(path, qualname).method(name))
        return found

    def overrides(self, method: FunctionRef) -> bool:
        """Does this method override one of the same name in a project base class of its class?"""
        owner, name = self.class_of(method), method.qualname.rsplit(".", 1)[-1]
        return owner is not None and any(
            isinstance(base, ClassRef) and name in getattr(self.class_summary(base), "methods", ())
            for base in self.mro(owner)[1:])

    def mentioning(self, name: str, files: list[Path] | None = None) -> list[FunctionRef]:
        """The functions (innermost) whose source names `name` as a word, strings included: where a
        hook is run by name (`cb.on_backward_end(self)`, `self.fire("on_backward_end")`). In the
        files given (`reaching(...)` of the hook's file), or in all."""
        files = self.files if files is None else files
        return self.summaries.remember(("mentioning", name, self._files_key(files)),
                                       lambda: self._find_mentioning(name, files))

    def _find_mentioning(self, name: str, files: list[Path]) -> list[FunctionRef]:
        found: list[FunctionRef] = []
        read = getattr(self.summaries, "text", None)
        word = re.compile(rf"\b{re.escape(name)}\b")
        for path in files:
            text = read(path) if read is not None else None
            if text is None or name not in text:
                continue
            functions = self.summary(path).functions
            for line, content in enumerate(text.split("\n"), 1):
                if not word.search(content) or content.lstrip().startswith(("def ", "#")):
                    continue
                spans = [(f.line, q) for q, f in functions.items() if f.line <= line <= f.end and q != MODULE_CODE]
                if spans:
                    ref = FunctionRef(path, max(spans)[1])
                    if ref not in found:
                        found.append(ref)
        return found

    def _files_key(self, files: list[Path]) -> tuple[Path, ...] | None:
        """`files` in a memo key: None for all the project's files (the common case, not spelled out)."""
        return None if files is self.files else tuple(files)

    def _super_method(self, cls: ClassRef, name: str, caller: FunctionRef) -> FunctionRef | None:
        order = self.mro(cls)
        for base in order[1:]:
            summary = self.class_summary(base) if isinstance(base, ClassRef) else None
            if summary is None:
                return None
            if name in summary.methods:
                return base.method(name)
        return None

    # -- classes --------------------------------------------------------------------------------------
    def bases(self, cls: ClassRef) -> list[ClassRef | str]:
        summary = self.summary(cls.path).classes.get(cls.qualname)
        if summary is None:
            return []
        out: list[ClassRef | str] = []
        for written in summary.bases:
            found = self.resolve_class(cls.path, written)
            out.append(found if found is not None else written)
        return out

    def mro(self, cls: ClassRef) -> list[ClassRef | str]:
        return list(_mro(self, cls))

    def derives_from(self, cls: ClassRef, qualified: Iterable[str], by_last_name: bool = True) -> bool:
        """Does the class derive (through project classes) from one of these outside classes?
        Matched on the qualified name, or (`by_last_name`) on its last part, for an import that could
        not be followed or a class named by its last part alone."""
        wanted = set(qualified)
        last = {name.rsplit(".", 1)[-1] for name in wanted} if by_last_name else set()
        for base in self.mro(cls)[1:]:
            if isinstance(base, str) and (base in wanted or base.rsplit(".", 1)[-1] in last):
                return True
        return False

    def classes(self) -> Iterator[ClassRef]:
        for path in self.files:
            for qualname in self.summary(path).classes:
                yield ClassRef(path, qualname)

    def subclasses(self, cls: ClassRef, candidates: Iterable[Path] | None = None) -> list[ClassRef]:
        """Project classes that derive from `cls`, directly or not (among the files given, or all that
        can reach it). A subclass names its base, or a class between: only the files that mention
        the name of `cls` or of a subclass found are summarised (a cold run on a large project would
        otherwise read every file for one question)."""
        files = list(candidates) if candidates is not None else self.reaching(cls.path)
        found: dict[ClassRef, None] = {}
        names, asked = [cls.qualname.rsplit(".", 1)[-1]], set()
        while names:
            name = names.pop()
            if name in asked:
                continue
            asked.add(name)
            for path in files:
                if not self.summaries.may_mention(path, name):
                    continue
                for qualname in self.summary(path).classes:
                    other = ClassRef(path, qualname)
                    if other != cls and other not in found and cls in self.mro(other):
                        found[other] = None
                        names.append(qualname.rsplit(".", 1)[-1])
        order = {path: index for index, path in enumerate(files)}
        return sorted(found, key=lambda c: (order.get(c.path, len(order)),
                                            self.summary(c.path).classes[c.qualname].line))

    # -- calls between functions ----------------------------------------------------------------------
    def functions(self, path: Path) -> Iterator[FunctionRef]:
        for qualname in self.summary(path).functions:
            yield FunctionRef(path, qualname)

    def calls(self, caller: FunctionRef) -> Iterator[tuple[str, bool, FunctionRef]]:
        """The calls of `caller` that resolve: (as written, inside a loop, the function). Resolved once
        per run: the prefilter asks again for every file whose functions call it or are called by it
        (on the torch package, 150,000 questions about a few thousand functions)."""
        return iter(self.summaries.remember(("calls", caller), lambda: self._resolved_calls(caller)))

    def _resolved_calls(self, caller: FunctionRef) -> tuple[tuple[str, bool, FunctionRef], ...]:
        summary = self.function(caller)
        return () if summary is None else tuple(
            (callee, in_loop, target) for callee, in_loop in summary.calls.items()
            if (target := self.resolve_call(caller, callee)) is not None)

    def effects(self, ref: FunctionRef) -> frozenset[str]:
        """The effect names `ref` may have, its own and those of what it calls (transitively): the
        union over every function reachable from it. Computed a strongly connected component of the
        call graph at a time (Tarjan's algorithm, iteratively), each function's answer kept: a large
        library's call graph, walked path by path, is exponential."""
        memo = self.summaries.memo
        cached = memo.get(("effects", ref))
        if cached is not None:
            return cached
        index: dict[FunctionRef, int] = {}
        low: dict[FunctionRef, int] = {}
        stack: list[FunctionRef] = []
        on_stack: set[FunctionRef] = set()
        found: dict[FunctionRef, set[str]] = {}

        def enter(node: FunctionRef) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            summary = self.function(node)
            found[node] = set(summary.effects) if summary is not None else set()

        enter(ref)
        work = [(ref, iter(self._effect_edges(ref)))]
        while work:
            node, edges = work[-1]
            advanced = False
            for target in edges:
                known = memo.get(("effects", target))  # a finished component's answer is kept
                if known is not None:
                    found[node] |= known
                elif target not in index:
                    enter(target)
                    work.append((target, iter(self._effect_edges(target))))
                    advanced = True
                    break
                else:  # entered and unfinished: on the stack, in this node's component
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:  # the root of a component: every member has the same effects
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                result = frozenset().union(*(found[m] for m in members))
                for member in members:
                    memo[("effects", member)] = result
            if work:
                found[work[-1][0]] |= memo.get(("effects", node), found[node])
        return memo[("effects", ref)]

    def _effect_edges(self, ref: FunctionRef) -> list[FunctionRef]:
        """What a call of `ref` may run next: the functions its calls resolve to, and for a template
        method's hook (`self.handle(x)`, whose base body only raises) the subclasses' overrides."""
        if self.function(ref) is None:
            return []
        edges = []
        for callee, _, target in self.calls(ref):
            edges.append(target)
            if callee.startswith("self.") and callee.count(".") == 1 and self._is_hook_stub(target):
                owner = self.class_of(target)
                name = callee[len("self."):]
                for sub in self._subclasses_of(owner) if owner is not None else ():
                    override = self.lookup_method(sub, name)
                    if override is not None and override != target:
                        edges.append(override)
        return edges

    def _subclasses_of(self, cls: ClassRef) -> list[ClassRef]:
        return self.summaries.remember(("subclasses", cls), lambda: self.subclasses(cls))

    def _is_hook_stub(self, ref: FunctionRef) -> bool:
        """A method that does nothing but maybe raise (`raise NotImplementedError`, `pass`, `...`)."""
        summary = self.function(ref)
        return summary is not None and summary.stub

    def callers(self, target: FunctionRef, candidates: Iterable[Path] | None = None) -> list[CallSite]:
        """Every call in the project (or in the files given) that may run `target`, including
        `self.name()` in a base class when `target` overrides `name` in a subclass."""
        name = target.qualname.rsplit(".", 1)[-1]
        calls = self._calls_named(name, list(candidates) if candidates is not None else self.reaching(target.path))
        found = {i: calls.sites[i] for i in calls.by_target.get(target, ())}
        owner = self.class_of(target)
        if owner is not None and self.lookup_method(owner, name) == target:
            # a base's `self.name()` runs the override on instances of the subclass
            for base in set(self.mro(owner)) - {owner}:
                for i in calls.self_calls_by_class.get(base, ()):
                    site = calls.sites[i]
                    if i not in found:
                        found[i] = CallSite(site.caller, site.callee, site.in_loop, receiver=owner)
        return [found[i] for i in sorted(found)]

    def unresolved_calls_named(self, target: FunctionRef) -> list[CallSite]:
        """The calls in the project with the last name of `target` that resolve to nothing known
        (`trainer.fit()` on a parameter): any of them may run it."""
        name = target.qualname.rsplit(".", 1)[-1]
        calls = self._calls_named(name, self.reaching(target.path))
        return [calls.sites[i] for i in calls.by_target.get(None, ())]

    def _calls_named(self, name: str, files: list[Path]) -> "_CallsNamed":
        """The calls whose last name is `name` (`f(`, `self.f(`, `a.b.f(`) in the files given, by
        what they run. Found and resolved once per name: functions of one name (`forward`,
        `train_step`) are many in a large project, and looking for each one's callers among all the
        calls of that name took time quadratic in the project's size."""
        return self.summaries.remember(("calls named", name, self._files_key(files)),
                                       lambda: self._find_calls_named(name, files))

    def _find_calls_named(self, name: str, files: list[Path]) -> "_CallsNamed":
        calls = _CallsNamed([], {}, {})
        for path in files:
            if not self.summaries.may_mention(path, name):
                continue
            for qualname, function in self.summary(path).functions.items():
                caller = FunctionRef(path, qualname)
                for callee, in_loop in function.calls.items():
                    if callee.rsplit(".", 1)[-1] != name:
                        continue
                    i = len(calls.sites)
                    calls.sites.append(CallSite(caller, callee, in_loop))
                    target = self.resolve_call(caller, callee)
                    calls.by_target.setdefault(target, []).append(i)
                    for alternative in self.resolve_call_alternatives(caller, callee) if target is None else ():
                        calls.by_target.setdefault(alternative, []).append(i)  # it may run each
                    if callee in (f"self.{name}", f"cls.{name}"):
                        calls.self_calls_by_class.setdefault(self.class_of(caller), []).append(i)
        return calls

    def constructors_of(self, cls: ClassRef) -> list[FunctionRef]:
        """The functions of the project (module code included) that call `cls` to make an instance."""
        name = cls.qualname.rsplit(".", 1)[-1]
        files = self.reaching(cls.path)
        # every class of this name at once (see _calls_named)
        by_class = self.summaries.remember(("constructors named", name, self._files_key(files)),
                                           lambda: self._find_constructors_named(name, files))
        return list(by_class.get(cls, ()))

    def _find_constructors_named(self, name: str, files: list[Path]) -> dict[ClassRef | None, list[FunctionRef]]:
        by_class: dict[ClassRef | None, list[FunctionRef]] = {}
        for path in files:
            if not self.summaries.may_mention(path, name):
                continue
            for qualname, function in self.summary(path).functions.items():
                made = {self.resolve_class(path, callee) for callee in function.calls
                        if callee.rsplit(".", 1)[-1] == name}
                for made_class in made:
                    by_class.setdefault(made_class, []).append(FunctionRef(path, qualname))
        return by_class


@dataclass
class _CallsNamed:
    """The calls of one last name in some files (Project._calls_named), by index in `sites`."""

    sites: list[CallSite]
    by_target: dict[FunctionRef | None, list[int]]              # what each call resolves to
    self_calls_by_class: dict[ClassRef | None, list[int]]       # `self.name()` calls, by the caller's class


class SummarySource:
    """Where summaries come from: the cache (store.py) or the parser. Also memoises derived facts
    for one run."""

    def __init__(self) -> None:
        self.memo: dict = {}

    def get(self, path: Path) -> ModuleSummary:  # pragma: no cover - interface
        raise NotImplementedError

    def remember(self, key: tuple, compute: Callable[[], T]) -> T:
        """The fact memoised under `key`, computed on first use."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    def may_mention(self, path: Path, name: str) -> bool:
        """A cheap necessary condition for the file to call `name`, or to pass it as a keyword to a
        watched constructor (False: it certainly does not)."""
        return True


def _mro(project: Project, cls: ClassRef) -> list[ClassRef | str]:
    memo = project.summaries.memo
    key = ("mro", cls)
    if key in memo:
        return memo[key]
    memo[key] = [cls]  # a cycle in the bases (broken code) ends here
    sequences = []
    for base in project.bases(cls):
        sequences.append(_mro(project, base) if isinstance(base, ClassRef) else [base])
    result = [cls] + _merge(sequences + [list(project.bases(cls))])
    memo[key] = result
    return result


def _merge(sequences: list[list]) -> list:
    """C3 linearisation's merge; an inconsistent hierarchy falls back to depth-first order."""
    sequences = [list(s) for s in sequences if s]
    out: list = []
    while sequences:
        for sequence in sequences:
            head = sequence[0]
            if not any(head in other[1:] for other in sequences):
                break
        else:
            for sequence in sequences:  # inconsistent: keep what is left in depth-first order
                out.extend(item for item in sequence if item not in out)
            return out
        out.append(head)
        sequences = [[item for item in s if item != head] for s in sequences]
        sequences = [s for s in sequences if s]
    return out


@lru_cache(maxsize=None)
def module_code(path: Path) -> FunctionRef:
    return FunctionRef(path, MODULE_CODE)


__all__ = ["Project", "FunctionRef", "ClassRef", "CallSite", "SummarySource", "find_root", "python_files",
           "ClassSummary", "module_code"]


_REQUIREMENT_FILES = ("pyproject.toml", "setup.py", "setup.cfg")
_VERSION = r"\d+(?:\.\d+)*"
_SPECIFIER = re.compile(rf"(==|<=|<|>=|>|~=|!=)\s*({_VERSION})")


def _requirements_of(root: Path, package: str) -> list[str]:
    """The version specifiers (`==0.15.0`, `>=0.14,<0.16`, or "" for none) of each requirement of
    `package` written in the project's dependency files, comments left out."""
    files = sorted(root.glob("requirements*.txt")) + sorted(root.glob("requirements/*.txt")) \
        + [root / name for name in _REQUIREMENT_FILES]
    requirement = re.compile(rf"(?:^|[\s\"'\[,])(?i:{re.escape(package)})(?:\[[^\]]*\])?\s*"
                             rf"((?:(?:==|<=|<|>=|>|~=|!=)\s*{_VERSION}(?:\.\*)?\s*,?\s*)*)(?=$|[\s\"';#])",
                             re.MULTILINE)
    found = []
    for file in files:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        text = re.sub(r"(?m)#.*$", "", text)  # commented-out requirements are no requirements
        found += [match.group(1) for match in requirement.finditer(text)]
    return found


def _cap(specifiers: str) -> tuple[int, ...] | None:
    """Just above the newest version the specifiers allow (`==0.15.0` and `<=0.15.0` allow 0.15.0,
    `<0.16` nothing from 0.16 on), compared as tuples; None when they set no upper bound."""
    caps = []
    for operator, version in _SPECIFIER.findall(specifiers):
        numbers = tuple(int(part) for part in version.split("."))
        if operator in ("==", "<="):
            caps.append(numbers + (1,))  # 0.15.0 < (0, 15, 0, 1) <= the next release
        elif operator == "<":
            caps.append(numbers)
    return min(caps) if caps else None
