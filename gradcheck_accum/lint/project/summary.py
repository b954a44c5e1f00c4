"""What one file offers the rest of the project, read cheaply and kept small enough to cache.

A summary holds what resolving a call across files needs (imports, functions, classes with their
bases, methods and the constructors their attributes are bound to, module-level bindings) and a
coarse screen of each function's behaviour: the calls it makes (as written, and whether inside a
loop) and which of the catalogue's effect names it calls. It is built on CPython's parser, walking
statements only; calls are found by one regular-expression pass over the text with comments and
strings blanked (outline.py), like the prefilter. That over-approximates (what libcst later walks
decides what a call really does), which is what a screen must do: keep more, never less.

Summaries are plain data (JSON-ready through `to_json`/`from_json`) so that a pre-commit run on one
file reads its neighbours' summaries from the cache, not their syntax.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass, field
from functools import cached_property

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.outline import blank_strings_and_comments, one_newline, python_tree

STAR = "*"  # the key prefix of a star import in ModuleSummary.imports
MODULE_CODE = "<module>"  # the qualified name of a file's top-level statements, as a pseudo-function
# The summary's shape: caches written for another shape are not read (store.py keys them by it).
FORMAT = 14
# Joins the alternatives of a value that is one of several (`return A(...)` and `return B(...)` in one
# function, `A(...) if fast else B(...)`, `cls = A` or `cls = B` then `cls(...)`): "A|B" (index.py reads it).
EITHER = "|"
# What a call of a module's registry makes, as written (`models.__dict__[args.model](...)` ->
# "models.__dict__[]", `globals()[name](...)` -> "__dict__[]"): one of the module's factories,
# chosen by name at run time (index.resolve_class reads it).
REGISTRY = "__dict__[]"
REGISTRY_ENTRY = "[*]"  # `MODELS[*]`: any value of the module-level dict MODELS (`MODELS[*][1]`: position 1 of it)
# The prefix of an effect name that counts only on a gradient (`grad.clamp_`: `p.grad.clamp_(...)`).
GRADIENT_ONLY = "grad."
_FORWARD = "forward"  # a module's forward: computes outputs, never edits gradients
# A watched constructor's keyword standing for settings the call does not spell out: `Trainer(**cfg)`,
# `Trainer.from_argparse_args(args)` (each of them may set any keyword).
UNSPELLED = "**"


@dataclass
class FunctionSummary:
    line: int  # first line (its `def`), and below its last
    params: tuple[str, ...]  # positional-or-keyword parameters in order, `self` included
    calls: dict[str, bool] = field(default_factory=dict)  # callee as written -> called inside a loop here
    effects: frozenset[str] = frozenset()  # catalogue effect names this function calls or sets directly
    returns: bool = False  # has a `return <value>`
    decorators: tuple[str, ...] = ()  # dotted names of its decorators (`staticmethod`, `torch.no_grad`)
    locals: dict[str, str] = field(default_factory=dict)  # `name = Ctor(...)` in its body -> "Ctor"
    end: int = 0  # last line
    # returns a parameter or an attribute of one (`model.module if hasattr(model, "module") else model`,
    # `self.model`): what it returns has the roles of what the caller passes
    passes_through: bool = False
    # What it returns, as written where that is a construction: "Ctor" (`return Ctor(...)`, a local
    # bound to one, `model.to(device)`), "f[0]" (element 0 of what project function f returns), a
    # list of such for a tuple ("" where unknown); None when unknown or when its returns disagree.
    produces: str | list[str] | None = None
    stub: bool = False  # its body only raises or does nothing (`raise NotImplementedError`): a hook to override


@dataclass
class ClassSummary:
    line: int
    bases: tuple[str, ...]  # as written: `pl.LightningModule`, `Base`
    methods: tuple[str, ...]  # names; each is in ModuleSummary.functions as "Class.method"
    attributes: dict[str, str] = field(default_factory=dict)  # `self.x = Ctor(...)` / `x = Ctor(...)` -> "Ctor"
    literals: dict[str, str] = field(default_factory=dict)  # `automatic_optimization = False` -> "False"


@dataclass
class Import:
    module: str  # dotted module as written, without leading dots
    name: str | None  # the imported attribute (`from m import name`), None for `import m`
    level: int = 0  # leading dots of a relative import


@dataclass
class ModuleSummary:
    imports: dict[str, Import] = field(default_factory=dict)  # local name -> what it binds
    functions: dict[str, FunctionSummary] = field(default_factory=dict)  # "f", "C.m", "f.inner", "<module>"
    classes: dict[str, ClassSummary] = field(default_factory=dict)  # "C", "C.Inner"
    bindings: dict[str, str] = field(default_factory=dict)  # module-level `name = Ctor(...)` -> "Ctor"
    # Constructor calls anywhere in the file whose last name is in `watched`, with their keywords:
    # what a framework is configured with in another file (`Trainer(accumulate_grad_batches=4)`).
    constructions: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    # The watched words (a framework setting such as `accumulate_grad_batches`) the file's code names,
    # outside strings and comments: as a parameter, an attribute, a keyword; or as the key of a dict.
    names: frozenset[str] = frozenset()
    # The file's code uses the compile wrapper's state-dict key prefix as data (a loader strips it)
    compiled_prefix_keys: bool = False

    @cached_property
    def mentioned(self) -> frozenset[str]:
        """The last name of every call in the file, of every base its classes name, and every keyword
        passed to a watched constructor: gathered once, for the question asked per function name (a
        scan of the file's calls for each made a file of many functions cost the square of its size)."""
        called = {callee.rsplit(".", 1)[-1] for function in self.functions.values() for callee in function.calls}
        bases = {base.rsplit(".", 1)[-1] for cls in self.classes.values() for base in cls.bases}
        return frozenset(called.union(*(keywords for _, keywords in self.constructions)) | bases | self.names)

    def to_json(self) -> dict:
        return {
            "imports": {k: [v.module, v.name, v.level] for k, v in self.imports.items()},
            "functions": {k: [f.line, list(f.params), f.calls, sorted(f.effects), f.returns, list(f.decorators),
                              f.locals, f.end, f.passes_through, f.produces, f.stub]
                          for k, f in self.functions.items()},
            "classes": {k: [c.line, list(c.bases), list(c.methods), c.attributes, c.literals]
                        for k, c in self.classes.items()},
            "bindings": self.bindings,
            "constructions": [[callee, keywords] for callee, keywords in self.constructions],
            "names": sorted(self.names),
            "compiled_prefix_keys": self.compiled_prefix_keys,
        }

    @classmethod
    def from_json(cls, data: dict) -> "ModuleSummary":
        return cls(
            {k: Import(*v) for k, v in data["imports"].items()},
            {k: FunctionSummary(v[0], tuple(v[1]), v[2], frozenset(v[3]), v[4], tuple(v[5]), v[6], v[7], v[8], v[9],
                                v[10])
             for k, v in data["functions"].items()},
            {k: ClassSummary(v[0], tuple(v[1]), tuple(v[2]), v[3], v[4]) for k, v in data["classes"].items()},
            data["bindings"],
            [(callee, keywords) for callee, keywords in data["constructions"]],
            frozenset(data["names"]),
            data["compiled_prefix_keys"],
        )


def summarize(text: str, effect_names: frozenset[str], watched: frozenset[str] = frozenset(),
              words: frozenset[str] = frozenset()) -> ModuleSummary:
    """The summary of one file's text. Text CPython cannot parse gives an empty summary: nothing
    in it can be resolved, so everything it would have offered stays unknown. `watched`: the
    constructors whose keywords are kept; `words`: the names whose mention in code is kept."""
    text = one_newline(text)
    tree = python_tree(text)
    if tree is None:
        return ModuleSummary()
    summary = _Summarizer(text, tree, effect_names, watched, words).summary
    summary.compiled_prefix_keys = cat.COMPILED_INNER in text and _uses_compiled_prefix(tree)
    return summary


def _keyed_words(tree: ast.Module, words: frozenset[str]) -> frozenset[str]:
    """The words given as a key of settings held in a dict (`{"accumulate_grad_batches": 4}`,
    `kwargs["accumulate_grad_batches"] = n`): keywords in waiting, for a constructor that unpacks the
    dict (`Trainer(**kwargs)`)."""
    if not words:
        return frozenset()
    keys: set[str] = set()
    for node in ast.walk(tree):
        candidates = node.keys if isinstance(node, ast.Dict) else \
            [node.slice] if isinstance(node, ast.Subscript) else []
        keys.update(key.value for key in candidates if isinstance(key, ast.Constant) and key.value in words)
    return frozenset(keys)


def _uses_compiled_prefix(tree: ast.Module) -> bool:
    """A string that is the compile wrapper's key prefix handed to a call or bound to a name (or to an
    element of a bound list): `k.removeprefix("_orig_mod.")`, `prefix = "_orig_mod."`."""
    pattern = re.compile(cat.COMPILED_KEY_PREFIX)
    for node in ast.walk(tree):
        values = node.args + [k.value for k in node.keywords] if isinstance(node, ast.Call) else \
            [node.value] if isinstance(node, ast.Assign) else node.elts if isinstance(node, ast.List) else []
        if any(isinstance(v, ast.Constant) and isinstance(v.value, str) and pattern.fullmatch(v.value) for v in values):
            return True
    return False


# `name(`, `a.b.name(` (spaces, line breaks and backslashes allowed around the dots), and what precedes it
# `\b` first: a match can only start where a word does, and without it the engine retried from every
# letter inside each word (the same answer, at three times the cost on the torch package).
_CALL = re.compile(r"\b(?P<chain>(?:\w+(?:\s|\\)*\.(?:\s|\\)*)*)(?P<name>\w+)(?:\s|\\)*\(")
_SUPER_CALL = re.compile(r"\bsuper(?:\s|\\)*\((?:\s|\\)*\)(?:\s|\\)*\.(?:\s|\\)*(\w+)(?:\s|\\)*\(")
_SPACE = re.compile(r"(?:\s|\\)+")
_NOT_CALLEES = frozenset({"super", "if", "elif", "while", "for", "in", "not", "and", "or", "is", "return", "yield",
                          "assert", "del", "with", "as", "lambda", "await", "raise", "print", "except", "def",
                          "class", "import", "from", "else", "match", "case"})


@dataclass
class _Call:
    offset: int
    callee: str | None  # dotted as written, "super().m", or None for a call on an expression's result
    name: str  # the last name: what effects are screened by


class _Summarizer:
    def __init__(self, text: str, tree: ast.Module, effect_names: frozenset[str], watched: frozenset[str],
                 words: frozenset[str] = frozenset()) -> None:
        self.text, self.effect_names, self.watched = text, effect_names, watched
        self.line_starts = [0]
        self.line_starts += [m.end() for m in re.finditer("\n", text)]
        self.line_starts.append(len(text) + 1)
        code = blank_strings_and_comments(text)
        self.calls = _calls(code)
        self.offsets = [call.offset for call in self.calls]
        self._annotated: dict[int, dict[str, str]] = {}  # id(function summary) -> parameter -> annotated class
        self._forwards: set[int] = set()  # id(function summary) of the forward methods of classes
        # id(function summary) -> local name -> the names it is bound to, where every binding so far
        # is a name (`cls = FastTrainer` in one branch, `cls = Trainer` in the other); None otherwise
        self._aliases: dict[int, dict[str, list[str] | None]] = {}
        self.summary = ModuleSummary(names=frozenset(
            word for word in words if word in code and re.search(rf"\b{re.escape(word)}\b", code))
            | _keyed_words(tree, frozenset(word for word in words if word in text)))
        module = FunctionSummary(1, (), end=text.count("\n") + 1)
        self.summary.functions[MODULE_CODE] = module
        self._block(tree.body, "", None, module, in_loop=False)

    # -- offsets --------------------------------------------------------------------------------------
    def _offset(self, line: int, column: int) -> int:
        """Character offset of a (line, UTF-8 byte column) position, as CPython's tree gives them."""
        start = self.line_starts[line - 1]
        text = self.text[start:self.line_starts[line]]
        if text.isascii():
            return start + column
        return start + len(text.encode("utf-8")[:column].decode("utf-8", errors="ignore"))

    def _span(self, node: ast.AST) -> tuple[int, int]:
        end_line = getattr(node, "end_lineno", None) or node.lineno
        end_column = getattr(node, "end_col_offset", None)
        end = self._offset(end_line, end_column) if end_column is not None else self.line_starts[end_line]
        return self._offset(node.lineno, node.col_offset), end

    def _calls_in(self, start: int, end: int) -> list[_Call]:
        lo, hi = bisect.bisect_left(self.offsets, start), bisect.bisect_left(self.offsets, end)
        return self.calls[lo:hi]

    # -- statements -----------------------------------------------------------------------------------
    def _block(self, body: list[ast.stmt], prefix: str, cls: ClassSummary | None, function: FunctionSummary,
               in_loop: bool) -> None:
        for stmt in body:
            self._statement(stmt, prefix, cls, function, in_loop)

    def _statement(self, stmt: ast.stmt, prefix: str, cls: ClassSummary | None, function: FunctionSummary,
                   in_loop: bool) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(stmt, prefix, cls)
            return
        if isinstance(stmt, ast.ClassDef):
            self._class(stmt, prefix)
            return
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self._import(stmt)
            return
        loop = in_loop or isinstance(stmt, (ast.For, ast.AsyncFor, ast.While))
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self._assignment(stmt, prefix, cls, function)
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            produced = _produced_value(stmt.value, function.locals, self._aliases.get(id(function)))
            if produced is None and isinstance(stmt.value, (ast.Name, ast.Attribute)):
                produced = ""  # one value, not a tuple, of a class not known (`return model`)
            function.produces = produced if not function.returns else _either(function.produces, produced)
            function.returns = True
            function.passes_through = function.passes_through or _passes_parameter(stmt.value, function.params)
        compound = any(_bodies(stmt))
        if compound:
            # the header's calls (an `if` test, a `with` item, a `for` iterable) belong here; the bodies
            # are statements of their own
            self._record_calls(self._header_span(stmt), function, in_loop or isinstance(stmt, ast.While))
            for child_body in _bodies(stmt):
                self._block(child_body, prefix, cls, function, loop)
        else:
            self._record_calls(self._span(stmt), function, loop)

    def _header_span(self, stmt: ast.stmt) -> tuple[int, int]:
        start, _ = self._span(stmt)
        first_body = next(child for body in _bodies(stmt) for child in body)
        return start, self._offset(first_body.lineno, first_body.col_offset)

    def _record_calls(self, span: tuple[int, int], function: FunctionSummary, in_loop: bool) -> None:
        effects = set()
        for call in self._calls_in(*span):
            if call.callee is not None:
                function.calls[call.callee] = function.calls.get(call.callee, False) or in_loop
            # a gradient-only method (`clamp_`, `mul_`) in a module's forward works on activations
            # (`snr.clamp_(max=5.0)`): the forward computes outputs, not gradients
            if call.name in self.effect_names or GRADIENT_ONLY + call.name in self.effect_names and (
                    id(function) not in self._forwards or _on_gradient(call)):
                effects.add(call.name)
        if effects:
            function.effects = function.effects | effects

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str, cls: ClassSummary | None) -> None:
        arguments = node.args
        params = tuple(a.arg for a in [*arguments.posonlyargs, *arguments.args])
        decorators = tuple(filter(None, (_dotted(d.func if isinstance(d, ast.Call) else d)
                                         for d in node.decorator_list)))
        summary = FunctionSummary(node.lineno, params, decorators=decorators, end=node.end_lineno or node.lineno,
                                  stub=_does_nothing(node.body))
        # `model: MyModel`: what an attribute bound to the parameter is (`self.model = model`). Calls
        # of the parameter itself are left to the inliner, which reads the annotated class's subclasses
        # too (the annotation may name a Protocol or an abstract base)
        self._annotated[id(summary)] = {
            argument.arg: annotated for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            if (annotated := _annotated_class(argument.annotation))}
        qualname = prefix + node.name
        self.summary.functions[qualname] = summary
        if cls is not None and node.name == _FORWARD:
            self._forwards.add(id(summary))
        # decorators and defaults run where the function is defined, not when it is called
        self._block(node.body, qualname + ".", cls, summary, False)

    def _class(self, node: ast.ClassDef, prefix: str) -> None:
        bases = tuple(filter(None, (_dotted(b) for b in node.bases)))
        methods = tuple(s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
        summary = ClassSummary(node.lineno, bases, methods)
        qualname = prefix + node.name
        self.summary.classes[qualname] = summary
        body_code = FunctionSummary(node.lineno, ())  # class-level statements: what the class body calls
        for stmt in node.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self._class_attribute(stmt, summary)
            self._statement(stmt, qualname + ".", summary, body_code, False)

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        imports = self.summary.imports
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = Import(alias.name, None)
                else:
                    top = alias.name.split(".")[0]
                    imports.setdefault(top, Import(top, None))
            return
        for alias in node.names:
            # `from models import *`: kept under a key no Python name can be (STAR + module), with the
            # name "*"; a name the file neither defines nor imports by name is looked up there
            key = STAR + "." * node.level + (node.module or "") if alias.name == "*" else alias.asname or alias.name
            imports[key] = Import(node.module or "", alias.name, node.level)

    def _assignment(self, stmt: ast.Assign | ast.AnnAssign | ast.AugAssign, prefix: str, cls: ClassSummary | None,
                    function: FunctionSummary) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in self.effect_names:
                function.effects = function.effects | {target.attr}  # `p.grad = None`, `m.require_backward_grad_sync = ...`
        if isinstance(stmt, ast.AugAssign) or stmt.value is None:
            return
        value = stmt.value
        callee = _dotted(value.func) if isinstance(value, ast.Call) else None
        if isinstance(value, ast.Call) and callee:
            parts = callee.split(".")
            if parts[-1] in self.watched:
                self.summary.constructions.append((callee, _keywords(value)))
            elif len(parts) > 1 and parts[-2] in self.watched and parts[-1].startswith("from_"):
                # `Trainer.from_argparse_args(args)`: a constructor taking its settings from elsewhere
                self.summary.constructions.append((callee, {**_keywords(value), UNSPELLED: "?"}))
        aliases = self._aliases.setdefault(id(function), {})
        made = _produced(value, function.locals if prefix else self.summary.bindings, aliases)
        if not prefix and isinstance(value, ast.Dict):
            for target in targets:
                if isinstance(target, ast.Name):
                    self.summary.bindings.update(_registry_entries(target.id, value))
        looked_up = _registry_lookup(value)
        for target in targets:
            if isinstance(target, ast.Name) or _self_attribute(target):  # bound to names (a class picked by a setting)
                key = _dotted(target) or ""
                named = [looked_up] if looked_up else _names_of(value)
                known = aliases.get(key, [])
                aliases[key] = None if named is None or known is None else known + named
            elif isinstance(target, (ast.Tuple, ast.List)) and looked_up:
                # `config_class, model_class = MODEL_CLASSES[args.model_type]`: each, the classes at its position
                for i, element in enumerate(target.elts):
                    if isinstance(element, ast.Name) or _self_attribute(element):
                        aliases[_dotted(element) or ""] = [f"{looked_up}[{i}]"]
        for target in targets:
            if isinstance(target, ast.Name) and made:
                if prefix:
                    function.locals.setdefault(target.id, made)
                elif not _rewraps(value, target.id):
                    self.summary.bindings[target.id] = made
            elif isinstance(target, (ast.Tuple, ast.List)) and callee:
                # `model, tokenizer = load(...)`: element i of what a project function returns, and
                # `self.model, self.optimizer = self._setup()` binds attributes the same way
                for i, element in enumerate(target.elts):
                    if isinstance(element, ast.Name):
                        (function.locals if prefix else self.summary.bindings).setdefault(element.id, f"{callee}[{i}]")
                    elif cls is not None and isinstance(element, ast.Attribute) \
                            and isinstance(element.value, ast.Name) and element.value.id == "self":
                        cls.attributes.setdefault(element.attr, f"{callee}[{i}]")
            elif cls is not None and isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                    and target.value.id == "self":
                if made and REGISTRY_ENTRY in made:  # `self.model = self.model_class(...)`, picked from a registry
                    cls.attributes.setdefault(target.attr, made)
                elif callee:
                    cls.attributes.setdefault(target.attr, callee)
                elif isinstance(value, ast.Name) and value.id in self._annotated.get(id(function), {}):
                    # `self.model = model` where the parameter is annotated `model: MyModel`
                    cls.attributes.setdefault(target.attr, self._annotated[id(function)][value.id])
                elif isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, str)):
                    cls.literals.setdefault(target.attr, repr(value.value))

    def _class_attribute(self, stmt: ast.Assign | ast.AnnAssign, cls: ClassSummary) -> None:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        value = stmt.value
        for target in targets:
            if not isinstance(target, ast.Name) or value is None:
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, str)):
                cls.literals[target.id] = repr(value.value)
            elif isinstance(value, ast.Call) and _dotted(value.func):
                cls.attributes[target.id] = _dotted(value.func)


def _calls(code: str) -> list[_Call]:
    calls = []
    for match in _SUPER_CALL.finditer(code):
        calls.append(_Call(match.start(), f"super().{match.group(1)}", match.group(1)))
    for match in _CALL.finditer(code):
        name = match.group("name")
        chain = match.group("chain")
        if not chain and name in _NOT_CALLEES:
            continue
        before = _code_before(code, match.start())
        if not chain and before in ("def", "class"):
            continue
        parts = [p for p in _SPACE.sub("", chain).split(".") if p]
        on_result = before == "." and not parts  # `f(x).name(`: a call on a call's result
        if before == "." and parts:
            callee = None  # `f(x).a.name(`
        else:
            callee = None if on_result else ".".join([*parts, name])
        if parts and parts[0].isdigit():
            callee = None
        calls.append(_Call(match.start("name") if callee is None else match.start(), callee, name))
    calls.sort(key=lambda call: call.offset)
    return calls


def _code_before(code: str, offset: int) -> str:
    """The word or the one other character that precedes `offset`, past blanks and line continuations
    ("" at the start). Read backwards from the offset, never by slicing the text before it: a file
    has a call every few words, and a copy of everything before each would make the summary cost the
    square of the file's length."""
    end = offset
    while end and code[end - 1] in " \t\\\n":
        end -= 1
    start = end
    while start and (code[start - 1].isalnum() or code[start - 1] == "_"):
        start -= 1
    return code[start:end] if start < end else code[end - 1:end]


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    bodies = []
    for name in ("body", "orelse", "finalbody"):
        value = getattr(stmt, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            bodies.append(value)
    for handler in getattr(stmt, "handlers", ()) or ():
        bodies.append(handler.body)
    for case in getattr(stmt, "cases", ()) or ():
        bodies.append(case.body)
    return bodies


def _dotted(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


# Module methods that return the module itself: `Ctor(...).to(device)` is still a `Ctor` (the catalogue's,
# and `share_memory()`, which only class resolution reads)
_RETURNS_SELF = cat.MODULE_RETURNING_METHODS | {"share_memory"}


def _produced(value: ast.expr, bound: dict[str, str], aliases: dict[str, list[str] | None] | None = None) -> str | None:
    """What a value is, as written where it was made: a call's callee (`Ctor(...)` -> "Ctor"), what a
    name was bound to, the receiver of a module method that returns it (`Ctor(...).to(device)`); for
    a choice of values, their alternatives joined by EITHER (`A() if fast else B()` -> "A|B"), as for
    a call of a local bound to one of several names (`cls(...)` after `cls = A` or `cls = B`)."""
    if isinstance(value, ast.Name):
        return bound.get(value.id)
    if isinstance(value, ast.IfExp):
        sides = [_produced(value.body, bound, aliases), _produced(value.orelse, bound, aliases)]
        return None if None in sides else _either(*sides)
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    callee = _dotted(func)
    picked = aliases.get(callee) if aliases is not None and callee is not None else None
    picked = _names_of(func) if isinstance(func, ast.IfExp) else picked  # `(A if fast else B)(...)`
    if picked:
        return EITHER.join(dict.fromkeys(picked))
    if callee is not None and value.args and (
            callee.rsplit(".", 1)[-1] in _MODEL_WRAPPERS or callee == cat.COMPILE.qualname):
        return _produced(value.args[0], bound)  # `DDP(Ctor().cuda(), ...)`: the wrapper runs the model it is given
    if callee is not None and value.args and callee.rsplit(".", 1)[-1] == cat.DEEP_COPY_FUNCTION:
        return _produced(value.args[0], bound)  # `copy.deepcopy(Ctor())`: another instance of the same class
    if isinstance(func, ast.Attribute) and func.attr in _RETURNS_SELF and (
            isinstance(func.value, ast.Call) or (isinstance(func.value, ast.Name) and func.value.id in bound)):
        return _produced(func.value, bound)
    if isinstance(func, ast.Subscript):
        return _registry(func.value) or _registry_lookup(func)
    if isinstance(func, ast.Attribute) and func.attr in cat.INSTANCE_CLASSMETHODS:
        # `Tagger.from_pretrained(name)`: an instance of the class it is called on, as `Tagger(...)` is
        return _produced(ast.Call(func=func.value, args=[], keywords=[]), bound, aliases)
    return _dotted(func)


_MODEL_WRAPPERS = cat.WRAPPERS.names | {"DataParallel"}


def _on_gradient(call: _Call) -> bool:
    """Is the call a method of a gradient (`p.grad.clamp_(...)`, `param.grad.data.mul_(...)`)?"""
    return call.callee is not None and "grad" in call.callee.split(".")[:-1]


def _registry(node: ast.expr) -> str | None:
    """`models.__dict__` or `globals()`: a module's namespace, looked up by a name chosen at run time."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "globals" and not node.args:
        return REGISTRY
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        module = _dotted(node.value)
        return f"{module}.{REGISTRY}" if module else None
    return None


def _annotated_class(annotation: ast.expr | None) -> str | None:
    """The class an annotation names, as written: `MyModel`, `models.MyModel`, `"MyModel"` (a
    forward reference). Unions, generics and `Optional[...]` name no one class: None."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        written = annotation.value.strip()
        return written if re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", written) else None
    return _dotted(annotation)


def _produced_value(value: ast.expr, bound: dict[str, str],
                    aliases: dict[str, list[str] | None] | None = None) -> str | list[str] | None:
    """`_produced` of a returned value; a tuple gives one entry per element ("" where unknown)."""
    if isinstance(value, ast.Tuple):
        return [_produced(element, bound, aliases) or "" for element in value.elts]
    return _produced(value, bound, aliases)


def _either(first: str | list[str] | None, second: str | list[str] | None) -> str | list[str] | None:
    """What a function returns when one return gives `first` and another `second`: the alternatives of
    both (`return A(...)` and `return B(...)`: "A|B"); of a tuple and a single value, the tuple, which
    is all that unpacking the result can take (`return net, opt` and `return net`, then `net, opt =
    make(net)`); of two tuples of one length, each element's alternatives; None where one is unknown
    ("" is a single value of an unknown class)."""
    if first is None or second is None:
        return None
    if isinstance(first, list) and isinstance(second, list):
        return [_either(a, b) or "" for a, b in zip(first, second)] if len(first) == len(second) else None
    if isinstance(first, list) or isinstance(second, list):
        return first if isinstance(first, list) else second
    if not first or not second:
        return None
    return EITHER.join(dict.fromkeys([*first.split(EITHER), *second.split(EITHER)]))


def _registry_entries(name: str, table: ast.Dict) -> dict[str, str]:
    """A dict written at module level whose values are names, or tuples of names
    (`MODEL_CLASSES = {"bert": (BertConfig, JointBERT, BertTokenizer), ...}`): the names it maps its keys
    to, under `NAME[*]`, and for tuples of one length the names at each position where every tuple has
    a name (or None), under `NAME[*][i]`; alternatives joined by EITHER."""
    values = [value for value in table.values if value is not None]  # (None: a `**other` spread)
    names = [_dotted(value) for value in values]
    if values and len(values) == len(table.values) and None not in names:
        return {f"{name}{REGISTRY_ENTRY}": EITHER.join(dict.fromkeys(n for n in names if n))}
    rows = [value.elts for value in values if isinstance(value, ast.Tuple)]
    if not rows or len(rows) != len(table.values) or len({len(row) for row in rows}) != 1:
        return {}
    entries = {}
    for i, column in enumerate(zip(*rows)):
        names = [_dotted(e) for e in column if not (isinstance(e, ast.Constant) and e.value is None)]
        if names and None not in names:
            entries[f"{name}{REGISTRY_ENTRY}[{i}]"] = EITHER.join(dict.fromkeys(n for n in names if n))
    return entries


def _registry_lookup(value: ast.expr) -> str | None:
    """`MODELS[key]`, `registry.MODELS[args.arch]`: an entry of a module's registry dict, `MODELS[*]`."""
    if not isinstance(value, ast.Subscript) or isinstance(value.slice, ast.Slice):
        return None
    table = _dotted(value.value)
    return f"{table}{REGISTRY_ENTRY}" if table is not None and not table.startswith("self.") else None


def _self_attribute(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _names_of(value: ast.expr) -> list[str] | None:
    """The dotted names a value is one of (`Trainer`, `FastTrainer if fast else Trainer`), else None."""
    if isinstance(value, ast.IfExp):
        sides = [_names_of(value.body), _names_of(value.orelse)]
        return None if None in sides else sides[0] + sides[1]
    name = _dotted(value)
    return [name] if name is not None else None


def _rewraps(value: ast.expr, name: str) -> bool:
    """`model = torch.compile(model)`, `model = DDP(model, ...)`: the name keeps standing for the object
    it wraps, whose forward the wrapper runs."""
    return isinstance(value, ast.Call) and bool(value.args) and isinstance(value.args[0], ast.Name) \
        and value.args[0].id == name


def _passes_parameter(value: ast.expr, params: tuple[str, ...]) -> bool:
    """Is the value a parameter, an attribute of one, or a choice between such (`m.module if ... else m`)?"""
    if isinstance(value, ast.IfExp):
        return _passes_parameter(value.body, params) or _passes_parameter(value.orelse, params)
    if isinstance(value, ast.BoolOp):
        return any(_passes_parameter(v, params) for v in value.values)
    name = _dotted(value)
    return name is not None and name.split(".")[0] in params


def _keywords(call: ast.Call) -> dict[str, str]:
    """Keyword arguments of a call: literal values as written, anything else as '?'."""
    out = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            out[UNSPELLED] = "?"  # `**settings`: any keyword
            continue
        value = keyword.value
        if isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, float, str)) or value is None:
            out[keyword.arg] = repr(value.value)
        else:
            out[keyword.arg] = "?"
    return out


def _does_nothing(body: list[ast.stmt]) -> bool:
    """A body of a docstring, `pass`, `...` and `raise` only: a hook its subclasses fill in."""
    return all(isinstance(statement, (ast.Pass, ast.Raise)) or isinstance(statement, ast.Expr)
               and isinstance(statement.value, ast.Constant) for statement in body)
