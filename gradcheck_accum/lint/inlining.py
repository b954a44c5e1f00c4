"""Calls walked in place: a function that backpropagates, steps, clears or clips, called inside a
loop, is walked as part of that loop's body, so its events join the caller's accumulation window.

The project model (project/) says which function a call runs (through imports, `self`, `super()`,
attributes, other files) and whether it can matter at all (its effects, transitively). The
function's parameters are bound to the call's arguments as definitions read in the caller's scope
(vocabulary.Def.scope), so a counter, an accumulation count or a loss flows from the caller into
the callee; its own names stay in its own scope (vocabulary.Frame). A function that returns the
loss is read the same way by the loss tracer (`returns`). What does not resolve stays a plain call.
"""

from __future__ import annotations

from collections import OrderedDict

import unicodedata

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.bindings import (loop_index, module_constants, module_literals, pass_from_zero,
                                           roles_from_name)
from gradcheck_accum.lint.names import (SELF_NAMES, ImportMap, assigned_names, call_receiver, children, code, dotted,
                                        is_one, is_static, iter_calls, keyword, paired_arguments, parameter,
                                        parameter_names, positional, statement_blocks, walk)
from gradcheck_accum.lint.diagnostics import RUN_FUNCTION, RUN_LINE
from gradcheck_accum.lint.outline import blank_strings_and_comments
from gradcheck_accum.lint.project import (CALLABLE_METHODS, ClassRef, FunctionRef, Project, SummaryStore, effect_names,
                                          watched_names, watched_words)
from gradcheck_accum.lint.project.summary import MODULE_CODE, UNSPELLED, FunctionSummary
from gradcheck_accum.lint.predicates import Count, bound_argument, compares_n_with_one, is_accumulation_count
from gradcheck_accum.lint.vocabulary import NO_ROLES, Context, Def, DefOp, Event, EventKind, Frame, Guard, Role, Scope
from gradcheck_accum.lint.walker import ScopeWalker

MAX_DEPTH = 4  # calls walked in place within calls walked in place
MAX_IMPLEMENTATIONS = 6  # a call to an annotated parameter is read through at most this many classes' __call__
# Calls that make an object with a role (catalogue constructors, prepare/setup/initialize, compile)
_ROLE_MAKERS = frozenset().union(*(c.names | {c.qualname.rsplit(".", 1)[-1]} if c.qualname else c.names
                                   for c in cat.CONSTRUCTORS)) | cat.PREPARE_METHODS | {"initialize", "compile"}
_COUNT = frozenset({Role.ACCUMULATION_COUNT})
_PASS = frozenset({Role.PASS_FROM_ZERO})
_INDEX = frozenset({Role.PASS_INDEX})
_EVERY_CALLER = _COUNT | _PASS | _INDEX  # roles a parameter keeps only when every caller's argument has them
_BACKWARDS = frozenset(api.name for api in cat.APIS if api.event is EventKind.BACKWARD)
_STEPS = frozenset(api.name for api in cat.APIS if api.event is EventKind.STEP)
_UNSCALES = frozenset(api.name for api in cat.APIS if api.event is EventKind.UNSCALE)
_PROPERTIES = frozenset({cat.PROPERTY, "cached_property", "functools.cached_property"})  # read as attributes
_MAX_PROGRAM_FILES = 40  # ProjectContext.program: the file and the project modules it imports, at most
_STATE_DICT_TOKENS = frozenset(api.token for api in cat.APIS if api.event is EventKind.STATE_DICT)


@dataclass
class LoadedModule:
    """A project file parsed by libcst, with what walking its functions needs."""

    path: Path
    module: cst.Module
    text: str
    functions: dict[str, cst.FunctionDef] = field(default_factory=dict)  # qualname -> def
    qualnames: dict[int, str] = field(default_factory=dict)  # id(def) -> qualname
    classes: dict[str, cst.ClassDef] = field(default_factory=dict)
    qualnames_of_classes: dict[int, str] = field(default_factory=dict)  # id(class) -> qualname
    _class_envs: dict[tuple, dict[str, frozenset[Role]]] = field(default_factory=dict)

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    @cached_property
    def constants(self) -> dict[str, bool]:
        return module_constants(self.module, self.code)

    @cached_property
    def literals(self) -> dict[str, bool | int]:
        return module_literals(self.module, self.code)

    @cached_property
    def code(self) -> str:
        """The text with strings and comments blanked."""
        return blank_strings_and_comments(self.text)

    @classmethod
    def build(cls, path: Path, module: cst.Module, text: str) -> "LoadedModule":
        loaded = cls(path, module, text)
        stack: list[tuple[str, cst.CSTNode]] = [("", module)]
        while stack:
            prefix, node = stack.pop()
            for child in _statements(node):
                if isinstance(child, cst.FunctionDef):
                    qualname = prefix + _identifier(child.name.value)
                    loaded.functions[qualname] = child
                    loaded.qualnames[id(child)] = qualname
                    stack.append((qualname + ".", child))
                elif isinstance(child, cst.ClassDef):
                    qualname = prefix + _identifier(child.name.value)
                    loaded.classes[qualname] = child
                    loaded.qualnames_of_classes[id(child)] = qualname
                    stack.append((qualname + ".", child))
        return loaded

    @property
    def imports(self) -> ImportMap:
        return self._module_level[0]

    @property
    def env(self) -> dict[str, frozenset[Role]]:
        """The roles of the module-level names."""
        return self._module_level[1]

    @cached_property
    def _module_level(self) -> tuple[ImportMap, dict[str, frozenset[Role]]]:
        """The imports and module-level bindings, walked when first asked for: only walking the file's
        functions in place of calls needs them, and for the file being linted the walk would repeat
        much of the file model's."""
        imports = ImportMap()
        module_scope = Scope(self.module, MODULE_CODE)
        walker = ScopeWalker(module_scope, imports, {}, set(), [0])
        for statement in self.module.body:  # no calls walked in place
            if isinstance(statement, cst.SimpleStatementLine):
                walker.walk_stmt(statement, Context())
        return imports, dict(module_scope.env)

    def class_env(self, cls: cst.ClassDef | None, constructed_with: dict[str, frozenset[Role]] | None = None,
                  inliner: "Inliner | None" = None) -> dict[str, frozenset[Role]]:
        """Roles of the `self.x` attributes the class's methods bind, in any of them: a model wrapped
        in DDP in `setup()` is wrapped in every method that runs after it. Compiled modules are left
        out (whether a load runs before or after the compile depends on the order, stated by the
        methods themselves). `constructed_with`: roles of `__init__`'s parameters, from the calls
        that construct the class (`Trainer(ddp_model, ...)` makes `self.model = model` a DDP model).
        `inliner`: reads what the project functions they call return (`self._accelerator =
        self._create_accelerator()`)."""
        if cls is None:
            return {}
        key = (id(cls), frozenset((constructed_with or {}).items()))
        if key not in self._class_envs:
            self._class_envs[key] = {}
            env: dict[str, frozenset[Role]] = {}
            methods = [s for s in cls.body.body if isinstance(s, cst.FunctionDef)]
            methods.sort(key=lambda m: m.name.value != "__init__")
            for method in methods:
                scope = Scope(method, method.name.value, imports=self.imports)
                if inliner is not None:
                    inliner.register(scope, self, self.qualnames[id(method)])
                if method.name.value == "__init__":
                    parameters = constructed_with or {}
                else:  # a setter (`attach(self, net): self.net = net`): what the project's calls of it hand over
                    parameters = inliner.setter_roles(self, method) if inliner is not None else {}
                walker = ScopeWalker(scope, self.imports, {**self.env, **env, **parameters}, set(), [0],
                                     inliner=_ReturnsOnly(inliner) if inliner is not None else None)
                for statement, ctx in _attribute_bindings_in_context(method):
                    walker.walk_stmt(statement, ctx)
                for name, roles in scope.env.items():
                    roles = roles - {Role.COMPILED, Role.WRAPS_COMPILED}
                    if name.startswith("self.") and roles:
                        env[name] = env.get(name, NO_ROLES) | roles
            for method in methods:  # `self.model` read through a property: what it returns
                if any(dotted(d.decorator) in _PROPERTIES for d in method.decorators):
                    scope = Scope(method, method.name.value, imports=self.imports)
                    walker = ScopeWalker(scope, self.imports, {**self.env, **env}, set(), [0],
                                         inliner=_ReturnsOnly(inliner) if inliner is not None else None)
                    walker.walk_block(method.body.body, Context())
                    roles = frozenset().union(*(e.roles for e in scope.events if e.kind is EventKind.RETURN))
                    roles -= {Role.COMPILED, Role.WRAPS_COMPILED}
                    if roles:
                        env[f"self.{method.name.value}"] = roles
            self._class_envs[key] = env
        return self._class_envs[key]

    def class_of(self, qualname: str) -> cst.ClassDef | None:
        parts = qualname.split(".")
        for end in range(len(parts) - 1, 0, -1):
            found = self.classes.get(".".join(parts[:end]))
            if found is not None:
                return found
        return None


# The other files the last analyses parsed, kept for the next files of the process: the files a
# project's training code reaches (a base trainer, a model's module) are the same for most of its
# files, and parsing them again for each is most of the cost of linting a large project. libcst's
# trees are immutable, so analyses can share them; each builds its own LoadedModule around the tree.
_PARSED: OrderedDict[tuple[Path, str], "cst.Module | None"] = OrderedDict()
_PARSED_KEPT = 24


def _parsed(path: Path, text: str, parse: Callable[[str], "cst.Module | None"]) -> "cst.Module | None":
    key = (path, text)
    if key in _PARSED:
        _PARSED.move_to_end(key)
        return _PARSED[key]
    module = _PARSED[key] = parse(text)
    if len(_PARSED) > _PARSED_KEPT:
        _PARSED.popitem(last=False)
    return module


class ProjectContext:
    """The project around one file being analysed: resolution (Project) and the other files'
    syntax, parsed when a call first reaches into them."""

    def __init__(self, project: Project, path: Path, module: cst.Module, text: str,
                 parse: Callable[[str], "cst.Module | None"] | None = None) -> None:
        self.project = project
        self.path = path
        # how other files are parsed (the engine's parser; it sits above this module), None on failure
        self.parse = parse or _parse_trusted
        self.this = LoadedModule.build(path, module, text)
        self._modules: dict[Path, LoadedModule | None] = {path: self.this}
        self.alone = False  # a file standing alone: nothing else to resolve into
        self._whole: cst.Module | None = None  # this file parsed whole (program)

    @classmethod
    def alone(cls, module: cst.Module, text: str, path: str = "<file>", source: str | None = None) -> "ProjectContext":
        """A project of one file (a snippet, standard input): calls resolve inside it only. `source`:
        the whole file when `module` and `text` are its hollowed form (as a project's store holds it)."""
        file = Path(path).absolute()
        store = SummaryStore(file.parent, effect_names(), watched_names(), texts={file: source or text},
                             words=watched_words())
        context = cls(Project(file.parent, store, files=[file]), file, module, text)
        context.alone = True
        return context

    def load(self, path: Path) -> LoadedModule | None:
        if path not in self._modules:
            text = self.project.summaries.text(path) if isinstance(self.project.summaries, SummaryStore) else None
            module = _parsed(path, text, self.parse) if text is not None else None
            self._modules[path] = LoadedModule.build(path, module, text) if module is not None else None
        return self._modules[path]

    def program(self, token: str) -> list[cst.Module]:
        """The syntax of this file and of the project modules it imports (and those their package
        `__init__` files import), keeping only files whose text holds `token`: a cheap screen before
        parsing, for questions about what the training program does to its data."""
        paths, frontier = [self.path], [self.path]
        for _ in range(2):
            found = []
            for importer in frontier:
                for imported in self.project.summary(importer).imports.values():
                    dotted_name = ".".join(filter(None, (imported.module, imported.name)))
                    target = self.project.module_path(importer, dotted_name, imported.level) \
                        or self.project.module_path(importer, imported.module, imported.level)
                    if target is not None and target not in paths and len(paths) < _MAX_PROGRAM_FILES:
                        paths.append(target)
                        found.append(target)
            frontier = [path for path in found if path.name == "__init__.py"]
        out = []
        for path in paths:
            text = self.project.summaries.text(path) if isinstance(self.project.summaries, SummaryStore) else None
            if text is None or token not in text:
                continue
            if path == self.path:
                # the file being linted is parsed hollow (definitions no rule needs left out): read it whole
                if self._whole is None:
                    self._whole = self.parse(text) or self.this.module
                out.append(self._whole)
                continue
            loaded = self.load(path)
            if loaded is not None:
                out.append(loaded.module)
        return out

    def display(self, path: Path) -> str:
        try:
            return path.relative_to(self.project.root).as_posix()
        except ValueError:
            return path.name


def project_evidence(project: Project, path: Path, text: str) -> tuple[bool, str]:
    """What the project adds to one file for the prefilter (before libcst): whether a training loop
    reaches this file's code through calls (its loops call a function elsewhere that backpropagates,
    a loop elsewhere calls its function that does, or a framework's loop calls its class's hooks),
    and the source of the functions elsewhere that take part, whose words count as the file's own
    when rules screen for theirs."""
    store = project.summaries
    if isinstance(store, SummaryStore):
        store.texts[path] = text
    summary = project.summary(path)
    reached, pieces, seen = False, [], set()
    lines = text.split("\n")

    def take(ref: FunctionRef) -> None:
        if ref.path != path and ref not in seen:
            seen.add(ref)
            pieces.append(_source_of(project, ref))
        for _, _, target in project.calls(ref):
            # what builds the objects it uses: a helper elsewhere returning `DistributedDataParallel(model)`
            if target.path != path and target not in seen and _returns_made_object(project, target):
                seen.add(target)
                pieces.append(_source_of(project, target))

    for qualname, function in summary.functions.items():
        caller = FunctionRef(path, qualname)
        for _, in_loop, target in project.calls(caller):
            if _returns_made_object(project, target):
                take(target)
            effects = project.effects(target)
            if not effects:
                continue
            take(target)
            if effects & _BACKWARDS and (in_loop or not effects & _STEPS) or _trains(effects) and target.path != path:
                # a loop of this file runs it, or it leaves its window open for this file to close, or it
                # is a complete training function of another file, whose windows step what this file
                # builds and hands it (FileModel.windows_handed)
                reached = True
        resolved = {callee for callee, _, _ in project.calls(caller)}  # functions, read above
        for callee in function.calls.keys() - resolved:  # `Loop(model, sched=sched).run()`: a training class
            cls = project.resolve_class(path, callee)
            if not isinstance(cls, ClassRef) or cls.path == path:
                continue
            methods = getattr(project.class_summary(cls), "methods", ())
            if any(_trains(project.effects(cls.method(m))) for m in methods):
                reached = True
                for method in methods:
                    take(cls.method(method))
        passed = set(function.params) - set(SELF_NAMES)
        calls_passed = any(in_loop and callee.split(".")[0] in passed for callee, in_loop in function.calls.items())
        if qualname != MODULE_CODE and (project.effects(caller) & _BACKWARDS or calls_passed):
            # called in a loop elsewhere, or calling in its loop what its callers pass (a loss scaler)
            for site in project.callers(caller):
                if site.caller.path != path:
                    take(site.caller)
                    reached = reached or site.in_loop or calls_passed
                if calls_passed:  # what the caller may pass: the project objects it builds
                    built = project.function(site.caller)
                    for written in (built.locals.values() if built is not None else ()):
                        cls = project.resolve_class(site.caller.path, written)
                        if isinstance(cls, ClassRef):
                            for method in getattr(project.class_summary(cls), "methods", ()):
                                take(cls.method(method))
                                # a loss scaler built here and called in this file's loop: the loop backpropagates
                                reached = reached or bool(project.effects(cls.method(method)) & _BACKWARDS)
        if qualname != MODULE_CODE and _takes_state_dict(function, lines):
            for site in project.callers(caller):  # what they hand it to save (a compiled model)
                if site.caller.path != path:
                    take(site.caller)
    for qualname, cls in summary.classes.items():
        ref = ClassRef(path, qualname)
        if any(project.effects(ref.method(m)) & _BACKWARDS for m in cls.methods):
            for site in project.constructors_of(ref):  # what its constructors are given (a DDP model)
                take(site)
            for method in cls.methods:  # ... and its setters (`learner.attach(DistributedDataParallel(net))`)
                setter = project.function(ref.method(method))
                if method != "__init__" and setter is not None and len(setter.params) > 1 and not setter.returns \
                        and not project.effects(ref.method(method)):
                    for site in project.callers(ref.method(method)):
                        if site.caller.path != path:
                            take(site.caller)
    for qualname, cls in summary.classes.items():  # a framework's loop calls this class's hooks
        for driver in cat.DRIVERS:
            if driver.hook in cls.methods and project.derives_from(ClassRef(path, qualname), driver.bases):
                reached = True
                pieces.append(driver.source)
        for method in cls.methods:  # a trainer elsewhere runs it by name (a callback's on_backward_end)
            ref = ClassRef(path, qualname).method(method)
            if project.effects(ref) and project.overrides(ref):
                for site in project.mentioning(method, project.reaching(path)):
                    if site.path != path:
                        reached = True
                        take(site)
    return reached, "\n".join(pieces)


def _returns_made_object(project: Project, ref: FunctionRef, depth: int = 0) -> bool:
    """May the function return something with a role (Inliner.returned_roles reads it)? Something it
    builds (`return DistributedDataParallel(model)`), what it is given (`return m.module if
    hasattr(m, "module") else m`: the roles of the argument, unwrapped), or what a project function it
    calls returns (`return wrap(model)`)."""
    summary = project.function(ref)
    if summary is None or not summary.returns:
        return False
    if summary.passes_through or any(_makes_role(callee) for callee in summary.calls):
        return True
    return depth < 2 and any(_returns_made_object(project, target, depth + 1) for _, _, target in project.calls(ref)
                             if target != ref)


def _trains(effects: frozenset[str]) -> bool:
    """Effects of a complete training function: it backpropagates and steps."""
    return bool(effects & _BACKWARDS and effects & _STEPS)


def _makes_role(callee: str) -> bool:
    """Does a call written `callee(...)` make an object with a role: a catalogue constructor named
    (`AdamW`) or matched by shape (`get_cosine_schedule_with_warmup`, `create_optimizer_v2`)?"""
    last = callee.rsplit(".", 1)[-1]
    return last in _ROLE_MAKERS or any(c.pattern is not None and c.pattern.match(last)
                                       or c.factory_prefix is not None and last.startswith(c.factory_prefix)
                                       for c in cat.CONSTRUCTORS)


def _takes_state_dict(function: FunctionSummary, lines: list[str]) -> bool:
    """Does the function's text call `state_dict()` (a screen: the walk decides what is saved)?"""
    return any(token in line for line in lines[function.line - 1:function.end] for token in _STATE_DICT_TOKENS)


def _source_of(project: Project, ref: FunctionRef) -> str:
    function = project.function(ref)
    text = project.summaries.text(ref.path) if isinstance(project.summaries, SummaryStore) else None
    if function is None or text is None:
        return ""
    return "\n".join(text.split("\n")[function.line - 1:function.end])


class Inliner:
    """Walks called functions in place of their calls (ScopeWalker's hook), and reads what a called
    function returns (the loss tracer's hook)."""

    def __init__(self, context: ProjectContext) -> None:
        self.context = context
        self.project = context.project
        # id(scope) -> its file, qualname, and the class `self` is an instance of when it is a subclass
        # of the method's class (a base's loop calling `self.train_step()` runs the subclass's)
        self._origin: dict[int, tuple[LoadedModule, str, ClassRef | None]] = {}
        self._call_counters: dict[int, str] = {}  # id(loop over a method's calls) -> the attribute counting them
        self._engine_loops: dict[int, str] = {}  # id(an engine's loop around a process function) -> the engine
        self._partials: dict[int, tuple[cst.Call, cst.Call]] = {}  # id(call) -> (the call, the call it makes)
        self.roots: list[Scope] = []  # functions of other files that call into this one in a loop
        self.frames: list[Scope] = []  # every scope walked in place of a call, in walking order
        self._returns: dict[int, list[tuple[cst.BaseExpression, Scope, int]] | None] = {}
        self._inlined: dict[int, Scope] = {}  # id(call) -> the scope walked for it
        self._root_of: dict[int, Scope] = {}  # id(walked scope) -> the scope holding its events
        self._capturing: FunctionRef | None = None  # parameter_roles: the function whose calls are read
        self._captured: dict[str, frozenset[Role]] = {}
        self._captured_classes: dict[str, ClassRef] = {}
        self._compiled_under: dict[str, list[Context]] = {}  # parameter_roles: where a compiled module is handed
        self._captured_callables: dict[str, FunctionRef | None] = {}  # None: the calls pass different ones
        self._passed: set[str] | None = set()  # parameter_roles: the parameters the calls read pass (None: any)
        self._calls_read = 0  # parameter_roles: how many calls of the function a caller's walk read
        self._classes: dict[int, dict[str, ClassRef]] = {}  # id(scope) -> its parameters' project classes
        # id(function) -> the hook names it runs on loop targets, and the parameters it runs hooks by
        self._hooks_of: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
        self._resolved: dict[tuple, tuple[Scope, cst.Call, tuple[FunctionRef, LoadedModule, cst.FunctionDef] | None]] = {}
        # id(scope) -> what calling each of its parameters runs (a loss function or loss module passed in)
        self._callables: dict[int, dict[str, FunctionRef]] = {}

    def register(self, scope: Scope, module: LoadedModule | None = None, qualname: str | None = None,
                 self_class: ClassRef | None = None) -> None:
        """Say where a scope's code is (the file's own functions are registered by the file model)."""
        module = module or self.context.this
        if qualname is None:
            qualname = MODULE_CODE if isinstance(scope.node, cst.Module) else module.qualnames.get(id(scope.node))
        if qualname is not None:
            self._origin[id(scope)] = (module, qualname, self_class)

    # -- resolution ---------------------------------------------------------------------------------
    def resolve(self, scope: Scope, call: cst.Call) -> tuple[FunctionRef, LoadedModule, cst.FunctionDef] | None:
        key = (id(scope), id(call), self._capturing)
        known = self._resolved.get(key)
        if known is None:  # the scope and call are kept with the answer: their ids stay theirs
            known = self._resolved[key] = (scope, call, self._resolve(scope, call))
        return known[2]

    def _resolve(self, scope: Scope, call: cst.Call) -> tuple[FunctionRef, LoadedModule, cst.FunctionDef] | None:
        origin = self._origin.get(id(scope))
        text = _callee_text(self.made_call(scope, call))
        if origin is None or text is None:
            return None
        module, qualname, self_class = origin
        ref = None
        if self._capturing is not None and self._capturing.qualname.endswith(".__init__"):
            constructed = self.project.resolve_class(module.path, text)  # `Trainer(...)` runs its __init__
            if isinstance(constructed, ClassRef):
                ref = self.project.lookup_method(constructed, "__init__")
        if ref is None and self_class is not None and text.startswith("self.") and text.count(".") == 1:
            ref = self.project.lookup_method(self_class, text[5:])
        head, *rest = text.split(".")
        known = self._classes.get(id(scope), {}).get(head)
        if ref is None and known is not None:  # a parameter the callers bind to an instance of a project class
            ref = self.project.member_call(known, rest)
        if ref is None and not rest:  # a parameter the callers bind to a function, or a loss module
            ref = self._callables.get(id(scope), {}).get(head)
        if ref is None:
            ref = self.project.resolve_call(FunctionRef(module.path, qualname), text)
        if ref is None and self._capturing in self.project.resolve_call_alternatives(FunctionRef(module.path, qualname),
                                                                                     text):
            ref = self._capturing  # a caller read for what it passes to one of the functions the call may run
        if ref is None and head in SELF_NAMES and len(rest) == 1:  # `self.criterion = criterion` in __init__
            owner = self._self_class(origin)
            ref = self._attribute_callable(owner, rest[0]) if owner is not None else None
        if ref is None and head in SELF_NAMES and len(rest) == 2:  # `self.hook.after_iter(self)`, the hook given
            owner = self._self_class(origin)
            given = self._attribute_class_given(owner, rest[0]) if owner is not None else None
            ref = self.project.member_call(given, rest[1:]) if given is not None else None
        if ref is None:
            return None
        loaded = self.context.load(ref.path)
        function = loaded.functions.get(ref.qualname) if loaded is not None else None
        if function is None:
            return None
        if _is_stub(function) and head in SELF_NAMES and len(rest) == 1:
            return self._only_override(ref)  # a template method's hook, filled in by a subclass
        return ref, loaded, function

    def _only_override(self, stub: FunctionRef) -> tuple[FunctionRef, LoadedModule, cst.FunctionDef] | None:
        """The one project subclass method that fills in a stub its base class calls on `self`
        (`loss = self._calc_loss(...)` in the base's loop, `_calc_loss` written by the SFT trainer). With
        several, which one runs depends on the object: None."""
        owner = self.project.class_of(stub)
        if owner is None:
            return None
        name = stub.qualname.rsplit(".", 1)[-1]
        found = {ref for sub in self.project.subclasses(owner)
                 if (ref := self.project.lookup_method(sub, name)) is not None and ref != stub}
        if len(found) != 1:
            return None
        ref = found.pop()
        loaded = self.context.load(ref.path)
        function = loaded.functions.get(ref.qualname) if loaded is not None else None
        return (ref, loaded, function) if function is not None and not _is_stub(function) else None

    def made_call(self, scope: Scope, call: cst.Call) -> cst.Call:
        """The call a call of a name bound once to `functools.partial(f, *args, **kwargs)` makes:
        `f(*args, <the call's arguments>, **kwargs)` (`compute_losses = functools.partial(
        self.diffusion.training_losses, model, micro, t)` then `compute_losses()`); other calls as
        they are."""
        known = self._partials.get(id(call))
        if known is not None:
            return known[1]
        if not isinstance(call.func, cst.Name):
            return call
        defs = scope.defs_of(call.func.value)
        bound = defs[0].value if len(defs) == 1 and defs[0].op is DefOp.ASSIGN else None
        imports = self._origin[id(scope)][0].imports if id(scope) in self._origin else None
        if not isinstance(bound, cst.Call) or not bound.args or bound.args[0].keyword or bound.args[0].star or \
                (imports.qualify(bound.func) if imports is not None else None) != cat.PARTIAL:
            return call
        given = [a for a in bound.args[1:] if a.keyword is None and not a.star]
        named = [a for a in bound.args[1:] if a.keyword is not None or a.star]
        made = cst.Call(func=bound.args[0].value, args=[*given, *call.args, *named])
        self._partials[id(call)] = (call, made)  # the call is kept: its id stays its own
        return made

    def _handed(self, scope: Scope, call: cst.Call, ref: FunctionRef, loaded: LoadedModule,
                function: cst.FunctionDef) -> list[tuple[str, cst.BaseExpression]]:
        """Each parameter of the function a call runs with the argument it gets: the receiver as
        `self`, and a partial's arguments first (`functools.partial(f, model, x)()` hands `model` to f)."""
        made = self.made_call(scope, call)
        return list(paired_arguments(made, function, _receiver(made, function, loaded.class_of(ref.qualname))))

    def iterated_argument(self, scope: Scope, call: cst.Call) -> cst.BaseExpression | None:
        """The argument a call hands to a project generator that yields each item of it, in one loop
        over that parameter (`def log_every(self, iterable, freq): for obj in iterable: ...; yield obj`):
        iterating the call is iterating the argument, as finite as it is."""
        found = self.resolve(scope, call)
        if found is None:
            return None
        ref, loaded, function = found
        iterated = _yields_each_item_of(function)
        if iterated is None:
            return None
        return dict(self._handed(scope, call, ref, loaded, function)).get(iterated)

    def runs_project_function(self, walker: ScopeWalker, call: cst.Call) -> bool:
        return self.resolve(walker.scope, call) is not None

    def delegates_step(self, walker: ScopeWalker, call: cst.Call) -> bool:
        """Does the call run a project method that decides whether to step another optimizer (an
        accumulation wrapper's `step()`: `if self._calls == self._steps: self._optimizer.step()`, or
        an early `return` before it)? Then the call is no step by its name: walked in place, its body
        says when the step happens. An optimizer that updates parameters itself, through
        `super().step()`, or steps what it wraps on every call, is a step."""
        found = self.resolve(walker.scope, call)
        if found is None:
            return False
        tests = [node for node in walk(found[2].body) if isinstance(node, (cst.If, cst.IfExp))]
        return any(call_receiver(inner)[1] in _STEPS and not _self_or_super(call_receiver(inner)[0])
                   for inner in iter_calls(found[2].body)) \
            and any(isinstance(node, cst.Return) or isinstance(node, cst.Call) and call_receiver(node)[1] in _STEPS
                    for test in tests for node in walk(test))

    def backpropagates(self, walker: ScopeWalker, call: cst.Call) -> bool:
        """Does the call run a function of the project that backpropagates (`self.mp_trainer.backward(loss)`
        whose body calls `loss.backward()`)?"""
        found = self.resolve(walker.scope, call)
        return found is not None and bool(self._effects(found[0], found[2], call) & _BACKWARDS)

    # -- walking in place ---------------------------------------------------------------------------
    def inline(self, walker: ScopeWalker, call: cst.Call, ctx: Context) -> bool:
        depth = walker.scope.frame.depth if walker.scope.frame is not None else 0
        if depth >= MAX_DEPTH:
            return False
        found = self.resolve(walker.scope, call)
        if found is None:
            if self._capturing is not None or not ctx.loops:
                return False
            hooks = [h for h in self._dispatched(walker.scope, call)
                     if self._effects(h[0], h[2], call) and not _on_stack(walker.scope, h[2])]
            for (ref, loaded, function), hook_ctx in zip(hooks, self._as_alternatives(call, hooks, ctx)):
                caller = _Caller(walker.scope, walker.env, walker.roles, walker.counter, walker.tick(), walker.root)
                self._walk(caller, call, hook_ctx, ref, loaded, function)  # each hook the call may run, in place
            return bool(hooks)
        ref, loaded, function = found
        if self._capturing is not None:  # reading a caller for the roles it passes, nothing else
            if ref == self._capturing:
                handed = self._handed(walker.scope, call, ref, loaded, function)
                self._calls_read += 1
                if self._passed is not None:
                    unpaired = any(a.star for a in self.made_call(walker.scope, call).args)  # `f(*args, **kw)`
                    self._passed = None if unpaired else self._passed | {name for name, _ in handed}
                for name, argument in handed:
                    roles = walker.roles(argument)
                    if is_accumulation_count(argument, None, walker.scope):
                        roles |= _COUNT  # kept where every caller passes N (parameter_roles)
                    if pass_from_zero(argument, ctx, walker.scope):
                        roles |= _PASS  # kept where every caller passes one (parameter_roles)
                    if loop_index(argument, ctx):
                        roles |= _INDEX
                    if roles:
                        self._captured[name] = self._captured.get(name, NO_ROLES) | roles
                    if Role.COMPILED in roles:
                        self._compiled_under.setdefault(name, []).append(ctx)
                    cls = self.class_of_expression(walker.scope, argument)
                    if cls is not None:
                        self._captured_classes.setdefault(name, cls)
                    target = self.callable_of_expression(walker.scope, argument)
                    if target is not None and self._captured_callables.get(name, target) != target:
                        target = None  # calls that pass different callables: which one runs is unknown
                    if target is not None or name in self._captured_callables:
                        self._captured_callables[name] = target
            return False
        effects = self._effects(ref, function, call)
        if not effects or _on_stack(walker.scope, function):
            return False
        if effects & _BACKWARDS and any(f.node is function and self._root_of.get(id(f)) is walker.root
                                        for f in self.frames) and self._loop_backpropagates(ref, function):
            # walked in place twice into one scope, its loop would be one loop (loops are told apart
            # by their node) holding both calls' micro-batches: the second call stays a plain call.
            # A function whose loops do not backpropagate (a check of every parameter's gradient after
            # the backward, a clip helper's loop over parameters) has no window of its own to merge and
            # is walked at every call.
            return False
        if not ctx.loops and not (effects & _BACKWARDS and not effects & _STEPS) and not (
                effects & (_STEPS | _UNSCALES) and not effects & _BACKWARDS and _micro_step_loop_open(walker, ctx)):
            # Outside a loop a call matters only when it leaves its window open: it backpropagates
            # (a micro-step loop, say) and the caller steps, or it closes such a window (an `update()`
            # that clips and steps after the micro-step loop, or the unscale an fp16 optimizer's step
            # runs first). A complete training function is analysed where it is defined.
            return False
        caller = _Caller(walker.scope, walker.env, walker.roles, walker.counter, walker.tick(), walker.root)
        self._inlined[id(call)] = self._walk(caller, call, ctx, ref, loaded, function)
        return True

    def _loop_backpropagates(self, ref: FunctionRef, function: cst.FunctionDef) -> bool:
        """Does a loop of the function call a backward, or a function of the project that reaches one?"""
        for loop in _loops(function):
            for call in iter_calls(loop.body):
                callee = dotted(call.func)
                if call_receiver(call)[1] in _BACKWARDS or callee is not None and (
                        (found := self.project.resolve_call(ref, callee)) is not None
                        and self.project.effects(found) & _BACKWARDS):
                    return True
        return False

    # -- hooks run by name ----------------------------------------------------------------------------
    def _effects(self, ref: FunctionRef, function: cst.FunctionDef, call: cst.Call) -> frozenset[str]:
        """What calling `ref` here may do: its effects, and those of the hooks it runs by name (a
        callback system's `fire(self, event): for cb in self.callbacks: getattr(cb, event)(self)`
        called as `fire("on_backward_end")`, or `cb.on_backward_end(self)` in its body)."""
        effects = self.project.effects(ref)
        if id(function) not in self._hooks_of:  # read once per function
            calls = _hook_calls(function)
            self._hooks_of[id(function)] = (frozenset(_hook_names(calls)), frozenset(_hook_keys(function, calls)))
        names, keys = set(self._hooks_of[id(function)][0]), self._hooks_of[id(function)][1]
        if keys:
            for parameter, argument in paired_arguments(call, function, None):
                if parameter in keys and isinstance(argument, cst.SimpleString):
                    names.add(argument.evaluated_value)
        for name in names:
            for hook in self.project.hook_overrides(name):
                effects = effects | self.project.effects(hook)
        return effects

    def _as_alternatives(self, call: cst.Call, hooks: list[tuple[FunctionRef, LoadedModule, cst.FunctionDef]],
                         ctx: Context) -> list[Context]:
        """The context each hook of a dispatch is walked in. Hooks of unrelated classes all run (an
        optimizer hook and a scheduler hook in one list), one after the other; a class and its subclass
        that both define the hook are one object's two possible classes (an `OptimizerHook` or its
        `Fp16OptimizerHook`), so their hooks are alternatives: each under a test of its own that path
        splitting (paths.py) decides, as it decides `if use_amp: ... else: ...`."""
        classes = [self.project.class_of(ref) for ref, _, _ in hooks]
        lineages: list[list[int]] = []
        for index, cls in enumerate(classes):
            related = next((lineage for lineage in lineages if cls is not None and any(
                classes[other] is not None and (cls in self.project.mro(classes[other])
                                                or classes[other] in self.project.mro(cls))
                for other in lineage)), None)
            if related is None:
                lineages.append([index])
            else:
                related.append(index)
        contexts = [ctx] * len(hooks)
        for lineage in lineages:
            passed = ctx  # the alternatives before this one not taken, as in an if/elif chain
            for position, index in enumerate(lineage):
                if position == len(lineage) - 1:
                    contexts[index] = passed
                    break
                test = cst.Name(f"runs_{hooks[index][2].name.value}_of_{classes[index].qualname.replace('.', '_')}"
                                f"_at_{id(call)}")
                contexts[index] = passed.push_guard(Guard(test, True, hooks[index][2], len(ctx.loops)))
                passed = passed.push_guard(Guard(test, False, hooks[index][2], len(ctx.loops)))
        return contexts

    def _dispatched(self, scope: Scope, call: cst.Call) -> list[tuple[FunctionRef, LoadedModule, cst.FunctionDef]]:
        """The hooks a call runs by name on each object of a collection whose classes are unknown:
        `cb.on_backward_end(self)` or `getattr(cb, event)(self)` for `cb` a loop's target, `event` a
        string (written, or bound by the calls walked in place to a parameter); the project methods
        of that name overriding a project base's (Project.hook_overrides)."""
        receiver, name = _hook_call(scope, call)
        if receiver is None or name is None:
            return []
        defs = scope.defs_of(receiver)
        if not defs or any(d.op is not DefOp.LOOP_TARGET for d in defs):
            return []  # not one of a collection's objects
        found = []
        for hook in self.project.hook_overrides(name):
            loaded = self.context.load(hook.path)
            function = loaded.functions.get(hook.qualname) if loaded is not None else None
            if function is not None and _takes(function, call):
                found.append((hook, loaded, function))
        return found

    def runs_hooks(self, scope: Scope, loop: cst.For | cst.While) -> bool:
        """Is the loop a callback system's pass over its objects (`for hk in self._hooks:
        hk.after_train_iter()`), running a hook with training effects on each? Its passes are the hooks
        of one event on one micro-batch, not micro-batches."""
        if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name):
            return False
        for call in iter_calls(loop.body):
            receiver, name = _hook_call(scope, call)
            if receiver == loop.target.value and name is not None \
                    and any(self.project.effects(hook) for hook in self.project.hook_overrides(name)):
                return True
        return False

    def _walk(self, caller: "_Caller", call: cst.Call, ctx: Context, ref: FunctionRef, loaded: LoadedModule,
              function: cst.FunctionDef) -> Scope:
        """Walk `function` for this call: a scope of its own whose parameters are the arguments."""
        scope, seed = self._enter(caller, call, ctx, ref, loaded, function)
        walker = ScopeWalker(scope, loaded.imports, seed, set(loaded.functions), caller.counter,
                             root=caller.root if caller.root is not None else scope, inliner=self,
                             constants=loaded.constants)
        walker.walk_block(function.body.body, ctx)
        self._root_of[id(scope)] = walker.root
        scope.env = {}
        return scope

    def _enter(self, caller: "_Caller", call: cst.Call, ctx: Context, ref: FunctionRef, loaded: LoadedModule,
               function: cst.FunctionDef, site: cst.CSTNode | None = None) -> tuple[Scope, dict[str, frozenset[Role]]]:
        """The scope of `function` called here, its parameters bound to the call's arguments, and the
        roles its names start with. `site`: the node that runs it, when that is not a call (a property read)."""
        foreign = loaded is not self.context.this
        cls = loaded.class_of(ref.qualname)
        frame = Frame(site or call, caller.scope, f"{self.context.display(ref.path)}:{ref.qualname}",
                      self.context.display(ref.path) if foreign else None, in_loop=bool(ctx.loops),
                      for_returns=caller.root is None)
        scope = Scope(function, function.name.value, _bases(cls), frame=frame,
                      imports=loaded.imports if foreign else None)
        call = self.made_call(caller.scope, call)  # its arguments: a partial's first, then the call's
        receiver = _receiver(call, function, cls)
        same_self = receiver is not None and dotted(receiver) in SELF_NAMES
        caller_self = self._origin.get(id(caller.scope), (None, None, None))[2]
        self.register(scope, loaded, ref.qualname, caller_self if same_self else None)
        self.frames.append(scope)
        seed = dict(loaded.env) if foreign else {}
        if cls is not None:
            seed.update(self.inherited_env(loaded, loaded.qualnames_of_classes[id(cls)]))
        for name, argument in paired_arguments(call, function, receiver):
            scope.defs[name] = [Def(name, argument, caller.order, ctx, node=call, scope=caller.scope)]
            cls = self.class_of_expression(caller.scope, argument)
            if cls is not None:
                self._classes.setdefault(id(scope), {})[name] = cls
            target = self.callable_of_expression(caller.scope, argument)
            if target is not None:
                self._callables.setdefault(id(scope), {})[name] = target
            roles = caller.roles(argument)
            if roles:
                seed[name] = roles
            if name in SELF_NAMES and dotted(argument) is not None:
                # the attributes the caller knows of the object, under the callee's name for it
                prefix = dotted(argument) + "."
                seed.update({name + "." + attribute[len(prefix):]: attribute_roles
                             for attribute, attribute_roles in caller.env.items() if attribute.startswith(prefix)})
        return scope, seed

    def predicate(self, walker: ScopeWalker, test: cst.BaseExpression, ctx: Context, at: int | None = None) \
            -> tuple[cst.BaseExpression, Scope] | None:
        """A test that calls a project function, or reads a project property, whose body only returns
        an expression (`if self._is_update_step(step):`, `if self.clock.is_optimizer_step:`): that
        expression, and the scope of the function entered for this call, where it is read (its
        parameters bound to the arguments: the caller's counter arrives by them, as it stands at program
        point `at`: where the call is made, by default now)."""
        depth = walker.scope.frame.depth if walker.scope.frame is not None else 0
        if depth >= MAX_DEPTH or self._capturing is not None:
            return None
        read = isinstance(test, cst.Attribute)
        call = cst.Call(func=test) if read else test
        if not isinstance(call, cst.Call) or (read and dotted(test) is None):
            return None
        found = self.resolve(walker.scope, call)
        if found is None:
            return None
        ref, loaded, function = found
        if read != any(dotted(d.decorator) == cat.PROPERTY for d in function.decorators):
            return None  # a method read without a call, or a property called
        returned = _only_return(function)
        if returned is None or _on_stack(walker.scope, function):
            return None
        order = walker.counter[0] if at is None else at
        caller = _Caller(walker.scope, walker.env, walker.roles, walker.counter, order, walker.root)
        scope, _ = self._enter(caller, call, ctx, ref, loaded, function, site=test)
        return returned, scope

    def returned_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        returns = self._return_events(walker, call)
        return frozenset().union(*(event.roles for event in returns)) if returns else NO_ROLES

    def returned_element_roles(self, walker: ScopeWalker, call: cst.Call, count: int) -> list[frozenset[Role]] | None:
        """The roles of each element of what the project function a call runs returns, when every one
        of its returns is a tuple of `count` (`return optimizer, scheduler, DDP(model)`)."""
        tuples = [event.element_roles for event in self._return_events(walker, call)]
        if not tuples or any(len(roles) != count for roles in tuples):
            return None
        return [frozenset().union(*(roles[i] for roles in tuples)) for i in range(count)]

    def returned_item_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        """The roles every item of what the project function a call runs returns holds, when each of its
        returns is a container of such items (`return {name: AdamW(...) for name in names}`)."""
        returns = self._return_events(walker, call)
        return frozenset.intersection(*(event.item_roles for event in returns)) if returns else NO_ROLES

    def _return_events(self, walker: ScopeWalker, call: cst.Call) -> list[Event]:
        """The returns of the project function a call runs, walked for this call; none when it builds
        nothing with a role (a DDP wrapper, an optimizer), which is not worth reading."""
        found = self.resolve(walker.scope, call)
        if found is None or not _returns_made_object(self.project, found[0]):
            return []
        returned = self.returns(call, walker.scope, walker.counter[0], walker.roles, walker.env)
        if not returned:
            return []
        walked = returned[0][1]
        return [event for event in self._root_of[id(walked)].events
                if event.kind is EventKind.RETURN and event.scope is walked]

    def forwarded_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        """The roles of the distributed models (DDP, FSDP, prepared) that the project function this
        call runs calls itself: `self.model(x)` in `compute_loss(self, batch)`, `model(x)` for a
        `model` parameter; read through the call's receiver and arguments, one call deep."""
        found = self.resolve(walker.scope, call)
        summary = self.project.function(found[0]) if found is not None else None
        if summary is None:
            return NO_ROLES
        ref, loaded, function = found
        handed = dict(self._handed(walker.scope, call, ref, loaded, function))
        roles: frozenset[Role] = NO_ROLES
        for callee in summary.calls:
            head, _, rest = callee.removesuffix(".forward").partition(".")
            argument = handed.get(head)
            if argument is None or "." in rest:
                continue
            base = dotted(argument)
            held = walker.roles(argument) if not rest else walker.name_roles(f"{base}.{rest}") if base else NO_ROLES
            if held & cat.DISTRIBUTED_MODEL_ROLES and not held & cat.NOT_MODEL_ROLES:
                roles |= held
        return roles

    def inherited_env(self, module: LoadedModule, qualname: str) -> dict[str, frozenset[Role]]:
        """Roles of `self.x` attributes bound by the class `qualname` of `module` and its bases in the
        project (a base trainer's `setup()` wrapping the model in DDP, in another file)."""
        env: dict[str, frozenset[Role]] = {}
        constructed = ClassRef(module.path, qualname)
        init = self.project.lookup_method(constructed, "__init__")
        for base in reversed(self.project.mro(constructed)):
            if not isinstance(base, ClassRef):
                continue
            loaded = self.context.load(base.path)
            cls = loaded.classes.get(base.qualname) if loaded is not None else None
            if cls is not None:
                defines_init = init is not None and init.qualname == f"{base.qualname}.__init__" and init.path == base.path
                env.update(loaded.class_env(cls, self.constructor_roles(constructed, init) if defines_init else None,
                                            self))
        return env

    def constructor_roles(self, cls: ClassRef, init: FunctionRef) -> dict[str, frozenset[Role]]:
        """Roles the calls constructing `cls` in the project give the parameters of its `__init__`
        (the union over the calls: some construction passes them). Only for classes whose methods
        reach a backward, whose attributes a window may read."""
        return self._constructed_with(cls, init)[0]

    def _constructed_with(self, cls: ClassRef, init: FunctionRef) \
            -> tuple[dict[str, frozenset[Role]], dict[str, FunctionRef | None], dict[str, ClassRef | None]]:
        """What the calls constructing `cls` give the parameters of its `__init__`: their roles, what
        calling each runs, and the project class of each (the same in every call, else None)."""
        memo = self.project.summaries.memo
        key = ("constructed with", cls)
        if key in memo:
            return memo[key]
        memo[key] = ({}, {}, {})
        summary = self.project.summary(cls.path).classes.get(cls.qualname)
        if self.context.alone or summary is None or not any(
                self.project.effects(cls.method(m)) & _BACKWARDS for m in summary.methods):
            return memo[key]
        memo[key] = self._handed_by_calls(init, [(caller, None) for caller in self.project.constructors_of(cls)])
        return memo[key]

    def _handed_by_calls(self, target: FunctionRef, callers: list[tuple[FunctionRef, ClassRef | None]]) \
            -> tuple[dict[str, frozenset[Role]], dict[str, FunctionRef | None], dict[str, ClassRef | None]]:
        """What the calls of `target` that these callers make (each walked with `self` an instance of
        its class, when given) hand its parameters: their roles, the union over the calls, what calling
        each runs and the project class of each (the same in every call, else None)."""
        roles: dict[str, frozenset[Role]] = {}
        callables: dict[str, FunctionRef | None] = {}
        classes: dict[str, ClassRef | None] = {}
        for caller, receiver in callers:
            self._capturing, self._captured, self._captured_classes = target, {}, {}
            self._captured_callables = {}
            try:
                self._walk_root(caller, receiver, keep=False)
            finally:
                self._capturing = None
            for name, found in self._captured.items():
                roles[name] = roles.get(name, NO_ROLES) | found
            for name, made in self._captured_callables.items():
                callables[name] = made if callables.get(name, made) == made else None
            for name, cls in self._captured_classes.items():
                classes[name] = cls if classes.get(name, cls) == cls else None
        return roles, callables, classes

    def setter_roles(self, module: LoadedModule, method: cst.FunctionDef) -> dict[str, frozenset[Role]]:
        """Roles the project's calls of a method other than `__init__` that keeps a parameter on `self`
        (`attach(self, net): self.net = net`, called as `learner.attach(DistributedDataParallel(net))`)
        give its parameters: the union over the calls, as for a constructor. Only for classes whose
        methods reach a backward."""
        qualname = module.qualnames.get(id(method))
        if qualname is None or self.context.alone or not _keeps_a_parameter(method):
            return {}
        ref = FunctionRef(module.path, qualname)
        memo = self.project.summaries.memo
        key = ("set with", ref)
        if key in memo:
            return memo[key]
        memo[key] = {}
        cls = self.project.class_of(ref)
        summary = self.project.summary(cls.path).classes.get(cls.qualname) if cls is not None else None
        if summary is None or not any(self.project.effects(cls.method(m)) & _BACKWARDS for m in summary.methods):
            return memo[key]
        callers = [(site.caller, site.receiver) for site in self.project.callers(ref) if site.caller != ref]
        memo[key] = self._handed_by_calls(ref, callers)[0]
        return memo[key]

    def _init_parameter(self, owner: ClassRef, attribute: str) -> tuple[FunctionRef, str] | None:
        """The class's `__init__` and the parameter it binds `self.attribute` to (`self.hook = hook`)."""
        init = self.project.lookup_method(owner, "__init__")
        loaded = self.context.load(init.path) if init is not None else None
        function = loaded.functions.get(init.qualname) if loaded is not None else None
        bound = bound_parameter(function, attribute) if function is not None else None
        return (init, bound) if init is not None and bound is not None else None

    def _self_class(self, origin: tuple[LoadedModule, str, ClassRef | None]) -> ClassRef | None:
        """The class `self` is an instance of in a scope of this origin: the one it was walked as (a subclass
        calling an inherited method), else the class its function is written in."""
        module, qualname, self_class = origin
        return self_class or self.project.class_of(FunctionRef(module.path, qualname))

    def _attribute_callable(self, owner: ClassRef, attribute: str) -> FunctionRef | None:
        """What calling `self.attribute` runs when `__init__` binds it to a parameter (`self.criterion =
        criterion`) that every construction of the class passes the same callable for."""
        found = self._init_parameter(owner, attribute)
        return self._constructed_with(owner, found[0])[1].get(found[1]) if found is not None else None

    def _attribute_class_given(self, owner: ClassRef, attribute: str) -> ClassRef | None:
        """The project class of `self.attribute` when `__init__` binds it to a parameter (`self.hook =
        hook`) that every construction of the class passes an instance of that class for
        (`Runner(model, optimizer, AccumHook(4))`)."""
        found = self._init_parameter(owner, attribute) if not self.context.alone else None
        if found is None:
            return None
        init, bound = found
        memo = self.project.summaries.memo
        key = ("classes given", owner)
        if key not in memo:
            memo[key] = {}  # a construction inside the class's own methods: unknown while it is read
            callers = [(caller, None) for caller in self.project.constructors_of(owner)]
            memo[key] = self._handed_by_calls(init, callers)[2]
        return memo[key].get(bound)

    def attribute_constructions(self, scope: Scope, attribute: str) -> list[cst.Call]:
        """The calls the class of a method of another file, walked in place, binds `self.<attribute>` to
        in its methods (`self.criterion = nn.CrossEntropyLoss(ignore_index=0)` in `__init__`). The linted
        file's own bindings are in its scopes."""
        origin = self._origin.get(id(scope))
        if origin is None or origin[0] is self.context.this:
            return []
        loaded, qualname, _ = origin
        cls = loaded.class_of(qualname)
        if cls is None:
            return []
        bound = {f"{name}.{attribute}" for name in SELF_NAMES}
        return [small.value for method in cls.body.body if isinstance(method, cst.FunctionDef)
                for statement in _attribute_bindings(method) for small in statement.body
                if isinstance(small, cst.Assign) and isinstance(small.value, cst.Call)
                and any(dotted(target.target) in bound for target in small.targets)]

    def module_of(self, scope: Scope) -> cst.Module | None:
        """The module a scope's function is written in (a function walked in place: its own file's)."""
        origin = self._origin.get(id(scope))
        return origin[0].module if origin is not None else None

    def attribute_roles(self, scope: Scope, attribute: str) -> frozenset[Role]:
        """The roles the constructions of a method's class hand the `__init__` parameter it keeps as
        `self.<attribute>` (the union: some construction passes it)."""
        origin = self._origin.get(id(scope))
        if origin is None or self.context.alone:
            return NO_ROLES
        owner = self._self_class(origin)
        found = self._init_parameter(owner, attribute) if owner is not None else None
        return self._constructed_with(owner, found[0])[0].get(found[1], NO_ROLES) if found is not None else NO_ROLES

    def callable_of_expression(self, scope: Scope, node: cst.BaseExpression) -> FunctionRef | None:
        """What calling the value of an expression runs: a project function passed by name
        (`loss_fn=masked_nll`, `self.compute_loss`), a loss module built in place or bound to a
        name (`MaskedLoss()`, `criterion`): its `__call__`/`forward`."""
        origin = self._origin.get(id(scope))
        if origin is None:
            return None
        module, qualname, _ = origin
        cls = self.class_of_expression(scope, node)  # a constructor call, or a name bound to an instance
        if cls is not None:
            return self.project.member_call(cls, [])
        name = dotted(node)
        if name is None:
            return None
        if "." not in name and name in self._callables.get(id(scope), {}):
            return self._callables[id(scope)][name]
        ref = self.project.resolve_call(FunctionRef(module.path, qualname), name)
        head, *rest = name.split(".")
        if ref is None and head in SELF_NAMES and len(rest) == 1 and not self.context.alone:
            # `collate_fn=self.data_collator`, kept by `__init__` from what the constructions pass: a
            # function, or an instance of a project class (its `__call__`)
            owner = self._self_class(origin)
            if owner is not None:
                ref = self._attribute_callable(owner, rest[0])
                given = self._attribute_class_given(owner, rest[0]) if ref is None else None
                ref = self.project.member_call(given, []) if given is not None else ref
        return ref

    def called_function(self, scope: Scope, node: cst.BaseExpression) -> cst.FunctionDef | None:
        """The syntax of what callable_of_expression says calling the value runs."""
        ref = self.callable_of_expression(scope, node)
        loaded = self.context.load(ref.path) if ref is not None else None
        return loaded.functions.get(ref.qualname) if loaded is not None else None

    def class_of_expression(self, scope: Scope, node: cst.BaseExpression) -> ClassRef | None:
        """The project class of the object an expression names: a parameter bound to one, a name or
        `self.x` bound to a constructor call of one, or such a call itself (`Runner(AccumHook(4))`)."""
        origin = self._origin.get(id(scope))
        node = _same_instance_class(node)
        if isinstance(node, cst.Call) and origin is not None and dotted(node.func):
            made = self.project.resolve_class(origin[0].path, dotted(node.func))
            return made if isinstance(made, ClassRef) else None
        return self.class_of_name(scope, dotted(node))

    def class_of_name(self, scope: Scope, name: str | None) -> ClassRef | None:
        """class_of_expression of a (dotted) name."""
        origin = self._origin.get(id(scope))
        if name is None or origin is None:
            return None
        module, qualname, self_class = origin
        head, *rest = name.split(".")
        known = self._classes.get(id(scope), {}).get(head)
        project = self.project
        if known is None:
            function = project.function(FunctionRef(module.path, qualname))
            written = function.locals.get(head) if function is not None else None
            written = written or project.summary(module.path).bindings.get(head)
            found = project.resolve_class(module.path, written) if written else None
            known = found if isinstance(found, ClassRef) else None
        if known is None and head in SELF_NAMES and rest:
            owner = self._self_class(origin)
            known = project.attribute_class(owner, rest[0]) if owner is not None else None
            rest = rest[1:]
        for attribute in rest:
            known = project.attribute_class(known, attribute) if known is not None else None
        return known

    def parameter_roles(self, function: cst.FunctionDef, scope: Scope) -> dict[str, frozenset[Role]]:
        """Roles its callers give the parameters of one of this file's training functions (a loop
        reaching a backward) or checkpoint writers (a `state_dict()` call): the DDP model a script
        hands to `train_one_epoch(model, ...)`, the compiled model it hands to `save_checkpoint(model,
        ...)`, read at each call in the project (the union: some caller passes it). The project
        classes of the objects they pass (a loss scaler) are noted for resolving calls in `scope`."""
        this = self.context.this
        qualname = this.qualnames.get(id(function))
        if qualname is None or self.context.alone:
            return {}
        ref = FunctionRef(this.path, qualname)
        summary = self.project.function(ref)
        if summary is None or not (any(summary.calls.values()) or _takes_state_dict(summary, this.lines)):
            return {}  # no loop: no window of its own, and no weights saved
        roles: dict[str, frozenset[Role]] = {}
        classes: dict[str, ClassRef] = {}
        callables: dict[str, FunctionRef | None] = {}
        # the parameters every caller binds to N, and to the index of its loop over passes from 0
        everywhere: dict[Role, set[str] | None] = {role: None for role in _EVERY_CALLER}
        # the parameters some call passes (None: unknown, a call was not read or passes `*args`)
        passed: set[str] | None = set()
        sites = [site for site in self.project.callers(ref) if site.caller != ref]
        self._compiled_under = {}
        for site in sites:
            self._capturing, self._captured, self._captured_classes = ref, {}, {}
            self._captured_callables, self._passed, self._calls_read = {}, set(), 0
            try:
                self._walk_root(site.caller, site.receiver, keep=False)
            finally:
                self._capturing = None
            passed = None if passed is None or self._passed is None or not self._calls_read else passed | self._passed
            for name, found in self._captured.items():
                roles[name] = roles.get(name, NO_ROLES) | found
            for role, names in everywhere.items():
                given = {name for name, found in self._captured.items() if role in found}
                everywhere[role] = given if names is None else names & given
            for name, cls in self._captured_classes.items():
                classes.setdefault(name, cls)
            for name, target in self._captured_callables.items():
                callables[name] = target if callables.get(name, target) == target else None
        for role, names in everywhere.items():
            for name in set(roles) - (names or set()):
                roles[name] -= {role}  # from some callers only: what the parameter holds is not known
        if classes:
            self._classes[id(scope)] = classes
        scope.compiled_given_under, self._compiled_under = self._compiled_under, {}
        scope.passed = passed if sites else frozenset()
        if sites and passed is not None:
            params = function.params
            scope.defaulted = frozenset(p.name.value for p in [*params.params, *params.kwonly_params]
                                        if p.default is not None) - passed
        known = {name: target for name, target in callables.items() if target is not None}
        if known:
            self._callables[id(scope)] = known
        return roles

    # -- callers in other files -----------------------------------------------------------------------
    def walk_callers(self) -> list[Scope]:
        """The functions of other files whose loops call (directly or through one more call) a
        function of this file that backpropagates, each walked with that call in place: the windows
        this file's functions take part in. Functions this file already calls in place are left to it."""
        this = self.context.this
        # a call of this file walked in a scope of this file; not one walked while reading another file's
        # loop for what it passes in (parameter roles, a traced loss): that loop is the window wanted here
        walked_here = {id(s.node) for s in self.frames if s.frame is not None and s.frame.path is None
                       and not s.frame.for_returns and not _outermost(s).foreign}
        roots: dict[tuple[FunctionRef, ClassRef | None], None] = {}
        for qualname, function in this.functions.items():
            ref = FunctionRef(this.path, qualname)
            if id(function) in walked_here:
                continue
            if self.project.effects(ref) & _BACKWARDS:
                for root in self._loops_calling(ref, 2):
                    roots.setdefault(root)
            elif self.project.effects(ref) and not _run_by_python(function.name.value) \
                    and self.project.overrides(ref):
                # a hook other files run by name (a callback's on_backward_end): the loops around the
                # functions that name it
                for site in self.project.mentioning(function.name.value, self.project.reaching(this.path)):
                    if site.path != this.path:
                        for root in [(site, None), *self._loops_calling(site, 3)]:
                            roots.setdefault(root)
        for (ref, self_class) in roots:
            scope = self._walk_root(ref, self_class)
            if scope is not None:
                self.roots.append(scope)
        return self.roots

    def walk_drivers(self) -> list[Scope]:
        """The loops frameworks run around this file's classes (catalogue.DRIVERS): Lightning calls
        `training_step` once per batch of every epoch, and with automatic optimisation backpropagates
        and steps around it."""
        this = self.context.this
        walked = []
        for qualname in this.classes:
            cls = ClassRef(this.path, qualname)
            for driver in cat.DRIVERS:
                hook = self.project.lookup_method(cls, driver.hook)
                if hook is None or hook.path != this.path or not self.project.derives_from(cls, driver.bases):
                    continue
                if self._switched_off(cls, driver.switch) != driver.manual:
                    continue
                if driver.configured_by is not None and not self._configured(driver.configured_by):
                    continue
                walked.append(self._walk_driver(driver, cls))
        walked += [self._walk_process_function(ref, *engine) for ref, engine in self._process_functions().items()]
        self.roots.extend(walked)
        return walked

    def _process_functions(self) -> dict[FunctionRef, tuple[str, ClassRef | None]]:
        """The functions of this file handed to an engine that runs them once per batch
        (catalogue.PROCESS_FUNCTION_ENGINES: `trainer = Engine(update)` in `train()`), with the engine."""
        this = self.context.this
        found: dict[FunctionRef, tuple[str, ClassRef | None]] = {}
        if not any(engine.rsplit(".", 1)[-1] in this.text for engine in cat.PROCESS_FUNCTION_ENGINES):
            return found  # most files: no walk of their calls
        # the engine subclasses of this file whose `__init__` hands a parameter to the engine's (`class
        # Trainer(Engine): def __init__(self, func, ...): super().__init__(func)`), by the parameter's position
        handing: dict[str, tuple[str, int]] = {}
        for qualname in this.classes:
            engine = next((e for e in cat.PROCESS_FUNCTION_ENGINES
                           if self.project.derives_from(ClassRef(this.path, qualname), (e,), by_last_name=False)), None)
            init = this.functions.get(f"{qualname}.__init__")
            for call in iter_calls(init.body) if engine is not None and init is not None else ():
                handed = dotted(positional(call, 0) or keyword(call, cat.PROCESS_FUNCTION))
                if _is_super_init(call) and handed in (names := [p.name.value for p in init.params.params]):
                    handing[qualname] = (engine, names.index(handed) - 1)
        for qualname, function in this.functions.items():
            for call in iter_calls(function.body):
                engine = this.imports.qualify(call.func)
                given = positional(call, 0) or keyword(call, cat.PROCESS_FUNCTION)
                subclass = handing.get(dotted(call.func) or "")
                if subclass is not None:  # `SupervisedEngine(SupervisedEngine.update, net, ...)`
                    engine, given = subclass[0], positional(call, subclass[1])
                    made: ClassRef | None = ClassRef(this.path, dotted(call.func) or "")
                else:
                    made = None
                if engine not in cat.PROCESS_FUNCTION_ENGINES:
                    continue
                name = dotted(given)
                ref = self.project.resolve_call(FunctionRef(this.path, qualname), name) if name else None
                if ref is not None and ref.path == this.path and _takes_no_self(this.functions.get(ref.qualname)):
                    found.setdefault(ref, (engine, made))
        return found

    def _walk_process_function(self, process: FunctionRef, engine: str, made: ClassRef | None) -> Scope:
        """The engine's loop around a process function, walked with the function in place of its call
        and the engine an instance of the subclass it was handed to, if any."""
        loaded = _synthetic_module(cat.PROCESS_FUNCTION_LOOP, "<engine loop>")
        scope = self._walk_synthetic(loaded, made, {cat.PROCESS_FUNCTION: process})
        self._engine_loops[id(scope)] = engine
        return scope

    def walk_call_counted(self, scopes: list[Scope], steps_on_count: Callable[[Scope, str], bool]) -> list[Scope]:
        """Methods that count their own calls in an attribute and step when the count reaches N
        (`self.n_accumulated += 1` ... `if self.n_accumulated >= self.accum_iters: optimizer.step()`):
        each call is a micro-batch, so such a method is walked as the body of a loop over its calls.
        Only those no call in the project is known to run: a caller that resolves is walked as it is,
        and a model built through a registry (`MODEL_REGISTRY.get(opt["type"])(opt)`) leaves its
        caller's loop unknown. The loop has no end: whether an epoch's last micro-batches are lost is
        the caller's to say, so nothing is said of it. `steps_on_count(loop, counter)`: does the
        walked loop step on a boundary of that count (the file model's windows say)?"""
        this = self.context.this
        walked = []
        for scope in scopes:
            qualname = this.qualnames.get(id(scope.node))
            counter = _own_call_counter(scope)
            if qualname is None or scope.owner is None or counter is None:
                continue
            cls = ClassRef(this.path, this.qualnames_of_classes[id(scope.owner)])
            if self.project.callers(FunctionRef(this.path, qualname)) or any(
                    driver.hook == scope.name and self.project.derives_from(cls, driver.bases) for driver in cat.DRIVERS):
                continue
            function = scope.node
            arguments = ", ".join(p.name.value for p in function.params.params[1:] if p.default is None)
            loaded = _synthetic_module(f"def {scope.name}_calls(self, {arguments}):\n    while True:\n"
                                       f"        self.{scope.name}({arguments})\n", f"<calls of {scope.name}>")
            root = self._walk_synthetic(loaded, cls)
            if steps_on_count(root, counter):
                self._call_counters[id(root)] = counter
                walked.append(root)
        self.roots.extend(walked)
        return walked

    def _switched_off(self, cls: ClassRef, switch: str) -> bool:
        """`automatic_optimization = False` in the class body or a method, here or in a project base."""
        for base in self.project.mro(cls):
            if isinstance(base, ClassRef):
                summary = self.project.class_summary(base)
                literal = summary.literals.get(switch) if summary is not None else None
                if literal is not None:
                    return literal == "False"
        return False

    def _configured(self, keyword: str) -> bool:
        """Does some constructor call in the project set `keyword` to something other than 1? Or take
        settings it does not spell out (`Trainer(**cfg)`, `Trainer.from_argparse_args(args)`) in a
        project whose code names `keyword` (reads it from its arguments or config, passes it on)?"""
        key = ("configured", keyword)
        memo = self.project.summaries.memo
        if key not in memo:
            summaries = self.project.summaries
            named = unspelled = False
            for path in self.project.files:
                if not summaries.may_mention(path, keyword) and not summaries.may_mention(path, UNSPELLED):
                    continue
                summary = self.project.summary(path)
                named = named or keyword in summary.names
                for _, keywords in summary.constructions:
                    if keywords.get(keyword, "1") != "1":
                        memo[key] = True
                        return True
                    unspelled = unspelled or UNSPELLED in keywords
            memo[key] = named and unspelled
        return memo[key]

    def driven_class(self, scope: Scope) -> ClassRef | None:
        """The class whose hooks a framework's loop walked here calls (`self` in its code)."""
        origin = self._origin.get(id(scope))
        return origin[2] if origin is not None else None

    def _walk_driver(self, driver: cat.Driver, cls: ClassRef) -> Scope:
        label = f"<{driver.framework.value} {'manual' if driver.manual else 'automatic'} loop>"
        return self._walk_synthetic(_synthetic_module(driver.source, label), cls)

    def _walk_synthetic(self, loaded: LoadedModule, cls: ClassRef | None,
                        callables: dict[str, FunctionRef] | None = None) -> Scope:
        """A loop written here as code (a framework's, or one over a method's calls), walked with
        `self` an instance of `cls`, and the names of `callables` calling those functions."""
        function = next(iter(loaded.functions.values()))
        scope = Scope(function, function.name.value, imports=loaded.imports, foreign=True)
        self._origin[id(scope)] = (loaded, function.name.value, cls)
        if callables:
            self._callables[id(scope)] = dict(callables)
        seed = self.inherited_env(self.context.this, cls.qualname) if cls is not None else {}
        ScopeWalker(scope, loaded.imports, seed, set(), [0], inliner=self).walk_block(function.body.body, Context())
        scope.env = {}
        return scope

    def _loops_calling(self, ref: FunctionRef, levels: int) -> list[tuple[FunctionRef, ClassRef | None]]:
        found = []
        for site in self.project.callers(ref):
            if site.caller.path == self.context.path:
                continue  # this file's own callers are walked with it
            if site.in_loop:
                found.append((site.caller, site.receiver))
            elif levels > 1 and site.caller.qualname != MODULE_CODE:
                found.extend(self._loops_calling(site.caller, levels - 1))
        return found

    def called_in_loop(self, scope: Scope) -> bool:
        """Is a function of another file, walked here because its loop runs this file's code, itself
        called inside a loop of the project (a base trainer's `fit` runs `_fit_train` once per epoch)?"""
        origin = self._origin.get(id(scope))
        if origin is None or not scope.foreign or origin[1] == MODULE_CODE:
            return False
        return any(site.in_loop for site in self.project.callers(FunctionRef(origin[0].path, origin[1])))

    def _walk_root(self, ref: FunctionRef, self_class: ClassRef | None, keep: bool = True) -> Scope | None:
        loaded = self.context.load(ref.path)
        if loaded is None:
            return None
        if ref.qualname == MODULE_CODE:
            node, body, cls = loaded.module, loaded.module.body, None
        else:
            node = loaded.functions.get(ref.qualname)
            if node is None:
                return None
            body, cls = node.body.body, loaded.class_of(ref.qualname)
        scope = Scope(node, getattr(getattr(node, "name", None), "value", MODULE_CODE), _bases(cls),
                      imports=loaded.imports, foreign=loaded is not self.context.this, module=loaded.module)
        if keep:
            self.register(scope, loaded, ref.qualname, self_class)
        else:
            self._origin[id(scope)] = (loaded, ref.qualname, self_class)
        seed = {**loaded.env, **(self.inherited_env(loaded, loaded.qualnames_of_classes[id(cls)]) if cls else {})}
        ScopeWalker(scope, loaded.imports, seed, set(loaded.functions), [0], inliner=self,
                    constants=loaded.constants).walk_block(body, Context())
        scope.env = {}
        return scope

    # -- what a called function returns --------------------------------------------------------------
    def returns(self, call: cst.Call, scope: Scope, before: int,
                roles: Callable[[cst.BaseExpression | None], frozenset[Role]] | None = None,
                env: dict[str, frozenset[Role]] | None = None) -> list[tuple[cst.BaseExpression, Scope, int]] | None:
        """The expressions a project function called here returns, each with the scope it is read in
        and the point it is read at; None when the call does not resolve to one. `roles`/`env`: what
        the caller knows of the arguments (the walker's; the loss tracer reads names only)."""
        key = id(call)
        if key in self._returns:
            return self._returns[key]
        self._returns[key] = None  # a recursive function: unknown while it is being read
        walked = self._inlined.get(key)
        if walked is not None:
            targets = [walked]
        else:
            found = self.resolve(scope, call)
            candidates = [found] if found is not None else self.implementations(scope, call)
            depth = scope.frame.depth if scope.frame is not None else 0
            targets = []
            for target in candidates:
                if depth >= MAX_DEPTH or _on_stack(scope, target[2]):
                    targets = []
                    break
                caller = _Caller(scope, env or {}, roles or _guessed_roles, [before], before, None)
                targets.append(self._walk(caller, call, Context(), *target))
        result = None
        if targets:
            result = [(event.expr, one, event.order + 1) for one in targets for event in self._root_of[id(one)].events
                      if event.kind is EventKind.RETURN and event.scope is one and event.expr is not None]
        self._returns[key] = result
        return result

    def implementations(self, scope: Scope, call: cst.Call) -> list[tuple[FunctionRef, LoadedModule, cst.FunctionDef]]:
        """What calling a parameter annotated with a project class may run (`loss_fn: LossFunction`,
        called `loss_fn(logits, batch)`): the `__call__`/`forward` of that class and of its subclasses
        in the project, those with a body (a Protocol's or an abstract class's own stub is left
        out). Empty when there are none, or too many to read them all."""
        origin = self._origin.get(id(scope))
        function = scope.node
        if origin is None or not isinstance(function, cst.FunctionDef):
            return []
        refs = self._attribute_implementations(scope, call) if isinstance(call.func, cst.Attribute) else []
        if isinstance(call.func, cst.Name):
            annotation = _annotation(function, call.func.value)
            cls = self.project.resolve_class(origin[0].path, annotation) if annotation else None
            if not isinstance(cls, ClassRef):
                return []
            memo = self.project.summaries.memo
            key = ("implementations", cls)
            if key not in memo:
                found: dict[FunctionRef, None] = {}
                for candidate in [cls, *self.project.subclasses(cls)]:
                    ref = self.project.member_call(candidate, [])
                    if ref is not None:
                        found.setdefault(ref)
                memo[key] = list(found)
            refs = memo[key]
        out = []
        for ref in refs:
            loaded = self.context.load(ref.path)
            node = loaded.functions.get(ref.qualname) if loaded is not None else None
            if node is not None and not _is_stub(node):
                out.append((ref, loaded, node))
        return out if len(out) <= MAX_IMPLEMENTATIONS else []

    def _attribute_implementations(self, scope: Scope, call: cst.Call) -> list[FunctionRef]:
        """What calling `self.model(...)` may run where the attribute holds one of several project
        classes (picked from a registry of model types): the `forward` of each."""
        origin = self._origin.get(id(scope))
        head, *rest = (dotted(call.func) or "").split(".")
        if origin is None or head not in SELF_NAMES or len(rest) != 1:
            return []
        owner = self._self_class(origin)
        classes = self.project.attribute_classes(owner, rest[0]) if owner is not None else []
        refs = [self.project.member_call(cls, []) for cls in classes] if len(classes) > 1 else []
        return [ref for ref in refs if ref is not None] if all(refs) else []

    def foreign_nodes(self) -> dict[int, list[tuple[cst.Call | None, Scope]]]:
        """The nodes that belong to other files (walked in place here), by id, each with the calls in
        this file through which they run (None: a function of another file calling into this one)
        and the scopes they were walked in, the first one first. A finding never points into another
        file: it moves to the call its own scope was entered by, or is left to the other file's lint."""
        out: dict[int, list[tuple[cst.Call | None, Scope]]] = {}

        def add(node: cst.CSTNode, scope: Scope) -> None:
            places = out.setdefault(id(node), [])
            if all(walked is not scope for _, walked in places):
                places.append((_entry_call(scope), scope))

        scopes = [s for s in [*self.roots, *self.frames]
                  if (s.foreign or s.frame is not None and s.frame.path is not None) and self._in_window_walk(s)]
        for scope in scopes:  # a call that runs a line first (`f(clip=False)` then `f(clip=True)`: the second)
            root = self._root_of.get(id(scope), scope)
            for event in root.events:
                if event.scope is scope:
                    add(event.node, scope)
        for scope in scopes:
            stack = [scope.node]
            while stack:
                node = stack.pop()
                add(node, scope)
                stack.extend(children(node))
        return out

    def _in_window_walk(self, scope: Scope) -> bool:
        """Is the scope part of a walk whose events windows hold: one that starts in this file, or in a
        function of another file calling into it? Not the walks that only read what the methods of
        another file's class bind (LoadedModule.class_env), whose calls are written in that file."""
        scope = _outermost(scope)
        return scope.foreign or id(scope) in self._origin and self._origin[id(scope)][0] is self.context.this

    # -- naming the other places ------------------------------------------------------------------------
    def places(self, node: cst.CSTNode, scope: Scope | None) -> tuple[str, list[Place]]:
        """What a finding on `node` (walked in `scope`) says about the other places it depends on: a
        note for its message, with `{0}`, `{1}`... where the places' locations go, and the places."""
        if scope is None:
            return "", []
        places: list[Place] = []
        note = ""
        if scope.foreign or scope.frame is not None and scope.frame.path is not None:
            module = self._origin[id(scope)][0] if id(scope) in self._origin else None
            if module is not None and _entry_call(scope) is not None:
                places.append(Place(module, node, RUN_LINE))
                note = f"in `{_name(scope)}` at {{0}}, which this call runs"
                entered = _entered(scope)
                first = self._origin[id(entered)][0] if id(entered) in self._origin else None
                if first is not None and isinstance(entered.node, cst.FunctionDef):
                    places.append(Place(first, entered.node.name, RUN_FUNCTION))
            return note, places
        hops = []
        while scope.frame is not None:
            hops.append(scope)
            scope = scope.frame.caller
        if not hops:
            return "", []
        root, outer = scope, hops[-1]
        callee, inner = _name(outer), _name(hops[0])
        runs = f"`{inner}` runs it" + (f" (through `{callee}`)" if len(hops) > 1 else "")
        counter = self._call_counters.get(id(root))
        if counter is not None:
            return f"{runs}, and counts its calls in `{counter}`: each call is one micro-batch", []
        engine = self._engine_loops.get(id(root))
        if engine is not None:
            return f"{runs}; the `{engine.rsplit('.', 1)[-1]}` it is given to calls it once per batch", []
        driver = self._driver_of(root)
        if driver is not None:
            mode = "manual optimisation" if driver.manual else f"automatic optimisation ({driver.configured_by})"
            return f"{runs}; {driver.framework.display} calls `{callee}` once per batch ({mode})", []
        module = self._origin[id(root)][0] if id(root) in self._origin else self.context.this
        if not outer.frame.in_loop:  # the micro-step loop is the callee's; the caller steps after it
            places.append(Place(module, outer.frame.call, f"calls `{callee}` and then steps"))
            return f"{runs}, which {{0}} calls before it steps", places
        places.append(Place(module, outer.frame.call, f"calls `{callee}` in its training loop"))
        return f"{runs}, which {{0}} calls in its training loop", places

    def _driver_of(self, scope: Scope) -> cat.Driver | None:
        origin = self._origin.get(id(scope))
        if origin is None:
            return None
        return next((d for d in cat.DRIVERS if _SYNTHETIC_MODULES.get(d.source) is origin[0]), None)


class _ReturnsOnly:
    """The part of an Inliner that reads what called functions return, for walks that bind names
    only (a class's attribute bindings): nothing is walked in place of a call."""

    def __init__(self, inliner: Inliner) -> None:
        self.inliner = inliner

    def inline(self, walker: ScopeWalker, call: cst.Call, ctx: Context) -> bool:
        return False

    def runs_hooks(self, scope: Scope, loop: cst.For | cst.While) -> bool:
        return self.inliner.runs_hooks(scope, loop)

    def returned_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        return self.inliner.returned_roles(walker, call)

    def returned_item_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        return self.inliner.returned_item_roles(walker, call)

    def returned_element_roles(self, walker: ScopeWalker, call: cst.Call, count: int) -> list[frozenset[Role]] | None:
        return self.inliner.returned_element_roles(walker, call, count)

    def forwarded_roles(self, walker: ScopeWalker, call: cst.Call) -> frozenset[Role]:
        return NO_ROLES

    def runs_project_function(self, walker: ScopeWalker, call: cst.Call) -> bool:
        return self.inliner.runs_project_function(walker, call)

    def backpropagates(self, walker: ScopeWalker, call: cst.Call) -> bool:
        return False  # nothing is walked in place

    def delegates_step(self, walker: ScopeWalker, call: cst.Call) -> bool:
        return False  # nothing is walked in place

    def predicate(self, walker: ScopeWalker, test: cst.BaseExpression, ctx: Context, at: int | None = None) -> None:
        return None

    def iterated_argument(self, scope: Scope, call: cst.Call) -> cst.BaseExpression | None:
        return None  # no loop here is a window


class Place(NamedTuple):
    """A place in some file that a finding names: the module it is in, the node, what it does there."""

    module: LoadedModule
    node: cst.CSTNode
    message: str


def _identifier(name: str) -> str:
    """A name as Python (and the project summaries, read with `ast`) knows it: NFKC-normalised, so
    `class Aª` defines `Aa`."""
    return name if name.isascii() else unicodedata.normalize("NFKC", name)


def _name(scope: Scope) -> str:
    return scope.name


_SYNTHETIC_MODULES: dict[str, LoadedModule] = {}


def _parse_trusted(text: str) -> "cst.Module | None":
    """A file parsed without the engine's guards (a file standing alone has no others to parse)."""
    try:
        return cst.parse_module(text)
    except (cst.ParserSyntaxError, RecursionError):
        return None


def _synthetic_module(source: str, label: str) -> LoadedModule:
    """A loop the engine writes as code (catalogue.Driver.source, a loop over a method's calls),
    parsed once per process."""
    loaded = _SYNTHETIC_MODULES.get(source)
    if loaded is None:
        loaded = _SYNTHETIC_MODULES[source] = LoadedModule.build(Path(label), cst.parse_module(source), source)
    return loaded


def _yields_each_item_of(function: cst.FunctionDef) -> str | None:
    """The parameter a generator passes through: its one `yield` is of the target of a `for` over that
    parameter (`for obj in iterable: ... yield obj`), and nothing else loops around it."""
    parameters = set(parameter_names(function))
    yields: list[tuple[cst.Yield, tuple[cst.For, ...]]] = []
    stack: list[tuple[cst.CSTNode, tuple[cst.For, ...]]] = [(function.body, ())]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Yield):
            yields.append((node, loops))
        if isinstance(node, cst.While):
            return _draws_each_item_of(function, node, parameters)  # a loop that may go on past its data
        inner = loops + (node,) if isinstance(node, cst.For) else loops
        stack.extend((child, inner) for child in children(node))
    if len(yields) != 1:
        return None
    (found, loops), = yields
    if len(loops) != 1 or not isinstance(found.value, cst.Name):
        return None
    target, source = loops[0].target, loops[0].iter
    if isinstance(source, cst.Call) and call_receiver(source) == (None, "enumerate") and source.args \
            and isinstance(target, cst.Tuple) and len(target.elements) == 2:
        target, source = target.elements[1].value, source.args[0].value  # `for i, obj in enumerate(iterable)`
    if dotted(target) != found.value.value:
        return None
    return dotted(source) if dotted(source) in parameters else None


def _draws_each_item_of(function: cst.FunctionDef, loop: cst.While, parameters: set[str]) -> str | None:
    """The parameter a generator drawing by hand passes through: `it = iter(iterable)`, then `while True:`
    with `item = next(it)` and `yield item` inside a `try` whose `except StopIteration` leaves the
    loop; the one yield of the function, the one loop."""
    statements = [small for line in function.body.body if isinstance(line, cst.SimpleStatementLine)
                  for small in line.body]
    made = {dotted(small.targets[0].target): small.value for small in statements
            if isinstance(small, cst.Assign) and len(small.targets) == 1}
    yields = [node for node in walk(function.body) if isinstance(node, cst.Yield)]
    tries = [node for node in walk(loop.body) if isinstance(node, cst.Try)]
    if len(yields) != 1 or len(tries) != 1 or not isinstance(yields[0].value, cst.Name) or not any(
            dotted(handler.type) == "StopIteration" and any(isinstance(node, (cst.Break, cst.Return))
                                                           for node in walk(handler.body))
            for handler in tries[0].handlers):
        return None
    drawn = [node.value for node in walk(tries[0].body) if isinstance(node, cst.Assign) and len(node.targets) == 1
             and dotted(node.targets[0].target) == yields[0].value.value]
    if len(drawn) != 1 or not isinstance(drawn[0], cst.Call) or call_receiver(drawn[0]) != (None, "next") \
            or not drawn[0].args:
        return None
    source = dotted(drawn[0].args[0].value)
    started = made.get(source)
    if isinstance(started, cst.Call) and call_receiver(started) == (None, "iter") and started.args:
        source = dotted(started.args[0].value)
    return source if source in parameters else None


def _own_call_counter(scope: Scope) -> str | None:
    """The attribute a method counts its calls in (`self.n_accumulated += 1`, outside any loop of
    its own), when it also backpropagates (a loop over loss terms may) and steps under a test
    outside any loop: a candidate for a loop over its calls (walk_call_counted keeps it when that
    loop has a boundary on the count)."""
    counted = [name for name, defs in scope.defs.items() if name.startswith("self.")
               and any(d.op is DefOp.ADD and not d.ctx.loops for d in defs)]
    if not counted or not any(e.kind is EventKind.BACKWARD for e in scope.events):
        return None
    steps = any(e.kind is EventKind.STEP and e.ctx.guards and not e.ctx.loops for e in scope.events)
    return counted[0] if steps else None


def _entered(scope: Scope) -> Scope:
    """The scope of another file that the call in the linted file runs first (`_entry_call`'s callee)."""
    while scope.frame is not None and scope.frame.caller.frame is not None \
            and scope.frame.caller.frame.path is not None:
        scope = scope.frame.caller
    return scope


def _hook_call(scope: Scope, call: cst.Call) -> tuple[str | None, str | None]:
    """The object and the hook name of a call that may run a hook by name: `cb.on_backward_end(self)`,
    or `getattr(cb, event)(self)` with `event` a string (written, or bound by the calls walked in
    place to a parameter)."""
    func, receiver, name = call.func, None, None
    looked_up = _looked_up(func)
    if isinstance(func, cst.Attribute):
        receiver, name = func.value, func.attr.value
    elif looked_up is not None:
        receiver, key = looked_up
        key, _ = bound_argument(key, scope)
        name = key.evaluated_value if isinstance(key, cst.SimpleString) else None
    if not isinstance(receiver, cst.Name) or not isinstance(name, str):
        return None, None
    return receiver.value, name


def _entry_call(scope: Scope) -> cst.Call | None:
    """The call in the linted file through which a scope of another file runs: the first call, up
    the chain of callers, that is written in this file; None when the chain starts in another file."""
    while scope.frame is not None:
        caller = scope.frame.caller
        if caller.foreign:
            return None
        if caller.frame is None or caller.frame.path is None:
            return scope.frame.call
        scope = caller
    return None


@dataclass
class _Caller:
    """What walking a called function takes from the place of the call."""

    scope: Scope
    env: dict[str, frozenset[Role]]
    roles: Callable[[cst.BaseExpression | None], frozenset[Role]]
    counter: list[int]
    order: int  # the program point of the call: where the arguments are read
    root: Scope | None  # where the callee's events go (None: into its own scope)


def _same_instance_class(node: cst.BaseExpression) -> cst.BaseExpression:
    """The object whose class an expression's value has: `net` of `net.to(device)` (a module method
    that returns the module) and of `copy.deepcopy(net)` (a copy of it)."""
    while isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if receiver is not None and method in cat.MODULE_RETURNING_METHODS:
            node = receiver
        elif method == cat.DEEP_COPY_FUNCTION and len(node.args) == 1 and not node.args[0].keyword:
            node = node.args[0].value
        else:
            break
    return node


def _guessed_roles(node: cst.BaseExpression | None) -> frozenset[Role]:
    return roles_from_name(dotted(node)) if node is not None else NO_ROLES


def _micro_step_loop_open(walker: ScopeWalker, ctx: Context) -> bool:
    """Did a loop that has ended (deeper than `ctx`) backpropagate last, with no step since: a
    micro-step loop whose window a later call closes?"""
    last = next((e for e in reversed(walker.root.events) if e.kind in (EventKind.BACKWARD, EventKind.STEP)), None)
    return last is not None and last.kind is EventKind.BACKWARD and len(last.ctx.loops) > len(ctx.loops)


def _hook_calls(function: cst.FunctionDef) -> list[cst.Call]:
    """The calls in a function's body of a method on the target of one of its loops
    (`for cb in self.callbacks: cb.on_backward_end(self)`) or of `getattr(x, name)` (`getattr(cb, event)(self)`)."""
    targets: set[str] = set()
    found = []
    stack: list[cst.CSTNode] = list(function.body.body)
    closed = (cst.FunctionDef, cst.ClassDef, cst.Lambda)
    while stack:
        node = stack.pop()
        kind = type(node)  # exact types, as in names.iter_calls
        if kind in closed:
            continue
        if kind is cst.For:
            targets.update(n for n in [dotted(node.target)] if n)
        elif kind is cst.Call:
            found.append(node)
        stack.extend(children(node))
    return [c for c in found if (isinstance(c.func, cst.Attribute) and dotted(c.func.value) in targets)
            or _looked_up(c.func) is not None]


def _looked_up(func: cst.BaseExpression) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The object and the name of `getattr(obj, name)`, called (`getattr(cb, event)(self)` runs `cb`'s
    method of that name)."""
    if isinstance(func, cst.Call) and call_receiver(func) == (None, "getattr") and len(func.args) == 2:
        return func.args[0].value, func.args[1].value
    return None


def _hook_names(hook_calls: list[cst.Call]) -> list[str]:
    """The method names a function calls on its loop targets (`cb.on_backward_end(self)`), of its
    _hook_calls."""
    return [c.func.attr.value for c in hook_calls if isinstance(c.func, cst.Attribute)]


def _hook_keys(function: cst.FunctionDef, hook_calls: list[cst.Call]) -> list[str]:
    """The parameters a function runs a hook by (`getattr(cb, event)(self)`): its caller says which."""
    params = parameter_names(function)
    keys = [looked_up[1] for call in hook_calls if (looked_up := _looked_up(call.func)) is not None]
    return [key.value for key in keys if isinstance(key, cst.Name) and key.value in params]


def _only_return(function: cst.FunctionDef) -> cst.BaseExpression | None:
    """The expression a function returns when its body (past a docstring) is that one return."""
    body = list(function.body.body)
    if body and isinstance(body[0], cst.SimpleStatementLine) and isinstance(body[0].body[0], cst.Expr) \
            and isinstance(body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
        body = body[1:]
    while len(body) > 1 and _counts_own_call(body[0]):
        body = body[1:]  # `self.calls += 1`, then the test of it: the walk of the call binds the count
    if len(body) > 1:
        return _boundary_when_accumulating(body) or _returned_truth(body)
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    statement = body[0].body[0]
    return statement.value if isinstance(statement, cst.Return) else None


def _takes(method: cst.FunctionDef, call: cst.Call) -> bool:
    """Can this call, made on an object (`obj.name(...)`), bind the method's parameters: no more
    positional arguments than it has places for, every parameter without a default given? A
    staticmethod `train(engine, batch)` is not what `model.train()` runs (nn.Module's is)."""
    if any(a.star for a in call.args):
        return True  # `f(*args, **kwargs)`: any parameters may be filled
    params = [*method.params.posonly_params, *method.params.params]
    if params and not any(dotted(d.decorator) == "staticmethod" for d in method.decorators):
        params = params[1:]  # `self` (or a classmethod's `cls`) is the receiver
    positional = sum(1 for a in call.args if a.keyword is None)
    keywords = {a.keyword.value for a in call.args if a.keyword is not None}
    if positional > len(params) and not isinstance(method.params.star_arg, cst.Param):
        return False
    required = [p.name.value for p in params[positional:] if p.default is None] + \
        [p.name.value for p in method.params.kwonly_params if p.default is None]
    return all(name in keywords for name in required)


def _counts_own_call(statement: cst.BaseStatement) -> bool:
    """`self.calls += 1`: a method counting its own calls on its object (a gate that says when to step)."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    line = statement.body[0]
    return isinstance(line, cst.AugAssign) and isinstance(line.operator, cst.AddAssign) and is_one(line.value) \
        and isinstance(line.target, cst.Attribute) and isinstance(line.target.value, cst.Name) \
        and line.target.value.value in SELF_NAMES


def _boundary_when_accumulating(body: list[cst.BaseStatement]) -> cst.BaseExpression | None:
    """`if n > 1: return (count + 1) % n == 0 or last` then `return True`: the boundary test, read as
    the whole predicate. With n == 1 the test holds on every micro-batch too, as `return True` says."""
    if len(body) != 2 or _literal_return(body[1]) is not True:
        return None
    first = body[0]
    if not isinstance(first, cst.If) or first.orelse is not None or len(first.body.body) != 1:
        return None
    line = first.body.body[0]
    returned = line.body[0].value if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 \
        and isinstance(line.body[0], cst.Return) else None
    if returned is None:
        return None
    moduli = {code(node.right) for node in walk(returned)
              if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)}
    many, _ = compares_n_with_one(first.test, lambda node: code(node) in moduli)
    return returned if many is Count.MANY else None


def _returned_truth(body: list[cst.BaseStatement]) -> cst.BaseExpression | None:
    """A predicate written as early returns of True or False (`if i == 0: return False`, `if i % n == 0:
    return True`, ..., `return False`), as the one test it stands for (`i != 0 and (i % n == 0 or ...)`),
    built around the body's own conditions."""
    final = _literal_return(body[-1])
    if final is None:
        return None
    result: cst.BaseExpression = cst.Name(str(final))
    for statement in reversed(body[:-1]):
        if not isinstance(statement, cst.If) or statement.orelse is not None or len(statement.body.body) != 1:
            return None
        value = _literal_return(statement.body.body[0])
        if value is None:
            return None
        test = statement.test
        # the built operations hold the body's own conditions (findings point at them), uncopied
        if value:
            result = test if _is_literal_name(result, "False") else cst.BooleanOperation(test, cst.Or(), result)
        else:
            negated = _negated(test)
            result = negated if _is_literal_name(result, "True") else cst.BooleanOperation(negated, cst.And(), result)
    return None if isinstance(result, cst.Name) else result


def _literal_return(statement: cst.BaseStatement) -> bool | None:
    """True or False for `return True` / `return False`, else None."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 \
            or not isinstance(statement.body[0], cst.Return):
        return None
    value = statement.body[0].value
    return {"True": True, "False": False}.get(value.value) if isinstance(value, cst.Name) else None


def _is_literal_name(node: cst.BaseExpression, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _negated(test: cst.BaseExpression) -> cst.BaseExpression:
    """`a != b` for `a == b` (the form boundary tests are read in), `not (test)` otherwise."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
            and isinstance(test.comparisons[0].operator, cst.Equal):
        return cst.Comparison(test.left, [cst.ComparisonTarget(cst.NotEqual(), test.comparisons[0].comparator)])
    return cst.UnaryOperation(cst.Not(), test)


def _on_stack(scope: Scope | None, function: cst.FunctionDef) -> bool:
    while scope is not None:
        if scope.node is function:
            return True
        scope = scope.frame.caller if scope.frame is not None else None
    return False


def _callee_text(call: cst.Call) -> str | None:
    """The call as the project model writes callees: `f`, `self.m`, `mod.f`, `super().m`."""
    func = call.func
    name = dotted(func)
    if name is not None:
        return name
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
        inner_receiver, inner = call_receiver(func.value)
        if inner_receiver is None and inner == "super" and not func.value.args:
            return f"super().{func.attr.value}"
    return None


def _receiver(call: cst.Call, function: cst.FunctionDef, cls: cst.ClassDef | None) -> cst.BaseExpression | None:
    """What `self` is bound to: the object the method is called on (`obj` in `obj.m()` and in
    `getattr(obj, name)()`, `self` in `super().m()`, the instance itself when it is called:
    `self.scaler(...)` runs `__call__`)."""
    if cls is None or is_static(function) or function.name.value == "__init__":
        return None  # `Trainer(...)`: the instance is made by the call
    func = call.func
    if function.name.value in ("__call__", "forward") and not (isinstance(func, cst.Attribute)
                                                               and func.attr.value == function.name.value):
        return func  # the instance is called
    if isinstance(func, cst.Attribute):
        if isinstance(func.value, cst.Call):  # super().m()
            return cst.Name("self")
        return func.value
    looked_up = _looked_up(func)
    return looked_up[0] if looked_up is not None else None  # `getattr(cb, event)(runner)`: the method of `cb`


def _outermost(scope: Scope) -> Scope:
    """The scope a walk of calls in place started from."""
    while scope.frame is not None:
        scope = scope.frame.caller
    return scope


def _loops(function: cst.FunctionDef) -> Iterator[cst.For | cst.While]:
    """The loops of a function's own body (not those of functions defined in it)."""
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.For, cst.While)):
            yield node
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            stack.extend(children(node))


def _annotation(function: cst.FunctionDef, name: str) -> str | None:
    """The class a parameter is annotated with, as written (`LossFunction`, `losses.LossFn`)."""
    param = parameter(function, name)
    return dotted(param.annotation.annotation) if param is not None and param.annotation is not None else None


def _is_stub(function: cst.FunctionDef) -> bool:
    """A body that does nothing but document itself: `pass`, `...`, `raise NotImplementedError` (also
    on the line of the `def`)."""
    body = function.body
    lines = [body] if isinstance(body, cst.SimpleStatementSuite) else body.body
    for statement in lines:
        if not isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            return False
        for small in statement.body:
            if isinstance(small, cst.Pass) or isinstance(small, cst.Expr) and isinstance(
                    small.value, (cst.SimpleString, cst.ConcatenatedString, cst.Ellipsis)):
                continue
            if isinstance(small, cst.Raise) and "NotImplementedError" in (dotted(small.exc) or dotted(
                    getattr(small.exc, "func", None)) or ""):
                continue
            return False
    return True


def bound_parameter(function: cst.FunctionDef, attribute: str) -> str | None:
    """The parameter `__init__` binds `self.attribute` to (`self.criterion = criterion`, or one
    element of `self.model, self.criterion = model, criterion`), when that is the attribute's only
    binding there."""
    parameters = parameter_names(function)
    found = []
    for statement in _attribute_bindings(function):
        for small in statement.body:
            targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
                [small.target] if isinstance(small, cst.AnnAssign) else []
            for target in targets:
                if dotted(target) == f"self.{attribute}":
                    found.append(small.value)
                elif isinstance(target, cst.Tuple) and isinstance(small.value, cst.Tuple) \
                        and len(target.elements) == len(small.value.elements):
                    # `self.model, self.optimizer = model, optimizer`: element by element
                    found += [value.value for element, value in zip(target.elements, small.value.elements)
                              if dotted(element.value) == f"self.{attribute}"]
    if len(found) == 1 and isinstance(found[0], cst.Name) and found[0].value in parameters:
        return found[0].value
    return None


def _keeps_a_parameter(method: cst.FunctionDef) -> bool:
    """Does the method bind an attribute of `self` to one of its parameters (`self.net = net`)?"""
    parameters = set(parameter_names(method)) - set(SELF_NAMES)
    for statement in _attribute_bindings(method):
        for small in statement.body:
            if isinstance(small, (cst.Assign, cst.AnnAssign)) and _binds_self(small) \
                    and isinstance(small.value, cst.Name) and small.value.value in parameters:
                return True
    return False


def _attribute_bindings(method: cst.FunctionDef) -> list[cst.SimpleStatementLine]:
    """The assignments of a method, at any depth, in order, when some of them bind an attribute of
    `self` (the others bind what those read: `prepared = accelerator.prepare(*parts)`, then
    `self.model = prepared[0]`); none for a method that binds no attribute."""
    return [statement for statement, _ in _attribute_bindings_in_context(method)]


def _attribute_bindings_in_context(method: cst.FunctionDef) -> list[tuple[cst.SimpleStatementLine, Context]]:
    """_attribute_bindings, each with the branches and loops around it (a binding in one branch of an
    `if`/`elif` may not run: `self.net = DataParallel(self.net)` there leaves `self.net` the DDP
    wrapper that the other branch binds, as far as the class knows)."""
    out: list[tuple[cst.SimpleStatementLine, Context]] = []
    binds = False
    stack: list[tuple[cst.CSTNode, Context]] = [(statement, Context()) for statement in reversed(method.body.body)]
    while stack:
        statement, ctx = stack.pop()
        if isinstance(statement, cst.SimpleStatementLine):
            assignments = [small for small in statement.body if isinstance(small, (cst.Assign, cst.AnnAssign))]
            if assignments:
                out.append((statement, ctx))
                binds = binds or any(_binds_self(small) for small in assignments)
        elif not isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            for block, inner in reversed(_blocks_in_context(statement, ctx)):
                stack.extend((each, inner) for each in reversed(block))
    return out if binds else []


def _blocks_in_context(statement: cst.CSTNode, ctx: Context) -> list[tuple[list[cst.CSTNode], Context]]:
    """The blocks of a compound statement, in source order, each with the context it runs in."""
    if isinstance(statement, cst.If):
        blocks = [(list(statement.body.body), ctx.push_guard(Guard(statement.test, True, statement, len(ctx.loops))))]
        otherwise = ctx.push_guard(Guard(statement.test, False, statement, len(ctx.loops)))
        if isinstance(statement.orelse, cst.If):
            blocks += _blocks_in_context(statement.orelse, otherwise)
        elif statement.orelse is not None:
            blocks.append((list(statement.orelse.body.body), otherwise))
        return blocks
    if isinstance(statement, (cst.For, cst.While)):
        return [(block, ctx.push_loop(statement)) for block in statement_blocks(statement)]
    if isinstance(statement, cst.Try) or type(statement).__name__ == "TryStar":
        handled = ctx.handler()  # a handler runs only on an error, and `else` only without one
        blocks = [(list(statement.body.body), ctx)]
        blocks += [(list(handler.body.body), handled) for handler in statement.handlers]
        blocks += [(list(statement.orelse.body.body), handled)] if statement.orelse is not None else []
        blocks += [(list(statement.finalbody.body.body), ctx)] if statement.finalbody is not None else []
        return blocks
    return [(block, ctx) for block in statement_blocks(statement)]


def _binds_self(small: cst.Assign | cst.AnnAssign) -> bool:
    return any(name.startswith("self.") for name in assigned_names(small))


def _bases(cls: cst.ClassDef | None) -> tuple[str, ...]:
    if cls is None:
        return ()
    return tuple(dotted(base.value) or "" for base in cls.bases)


def _statements(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Statements directly in a module, class or function body, and inside its compound statements
    (definitions under `if TYPE_CHECKING:` or `try:` count), not inside nested definitions."""
    out: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        body = current.body if isinstance(current, cst.Module) else getattr(current, "body", None)
        statements = body if isinstance(current, cst.Module) else getattr(body, "body", ())
        for child in statements:
            if isinstance(child, (cst.FunctionDef, cst.ClassDef)):
                out.append(child)
            elif isinstance(child, (cst.If, cst.Try, cst.With, cst.For, cst.While)) or type(child).__name__ == "TryStar":
                stack.append(child)
                for extra in ("orelse", "finalbody"):
                    other = getattr(child, extra, None)
                    if other is not None:
                        stack.append(other)
                for handler in getattr(child, "handlers", ()) or ():
                    stack.append(handler)
    return out


__all__ = ["Inliner", "ProjectContext", "LoadedModule"]


def _run_by_python(name: str) -> bool:
    """A method Python or torch runs, never a hook code elsewhere fires by its name: `__init__`
    (every `super().__init__()` of a project names it), `forward` (every module's call runs it)."""
    return name in CALLABLE_METHODS or name.startswith("__") and name.endswith("__")


def _self_or_super(receiver: cst.BaseExpression | None) -> bool:
    """`self`, `cls` or `super()`: the object's own class, not another object."""
    if isinstance(receiver, cst.Call):
        return dotted(receiver.func) == "super"
    return receiver is None or dotted(receiver) in SELF_NAMES


def _is_super_init(call: cst.Call) -> bool:
    """`super().__init__(...)`."""
    receiver, method = call_receiver(call)
    return method == "__init__" and isinstance(receiver, cst.Call) and _self_or_super(receiver)


def _takes_no_self(function: cst.FunctionDef | None) -> bool:
    """A function called with the engine as its first argument: a module function or a staticmethod,
    not a method bound to an instance (whose first parameter the call does not fill)."""
    params = function.params.params if function is not None else ()
    return bool(params) and params[0].name.value not in SELF_NAMES
