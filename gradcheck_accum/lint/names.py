"""Small helpers over libcst expressions: dotted names, import aliases, qualified names."""

from __future__ import annotations

import re
from typing import Iterator

from gradcheck_accum.lint.lazy import cst


_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_SKIPPED_FIELDS = {"lpar", "rpar", "whitespace", "comma", "semicolon", "dot", "equal", "colon", "lbracket",
                   "rbracket", "lbrace", "rbrace", "operator", "header", "footer", "leading_lines",
                   "trailing_whitespace", "newline", "indent", "star", "asynchronous", "decorators",
                   "lines_after_decorators", "whitespace_before_args", "whitespace_after_func"}


def children(node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
    """The syntactic children of a node, without whitespace and punctuation.

    libcst's own `children` property rebuilds every child through a visitor, which dominates the
    analysis time on large files; reading the dataclass fields directly is an order of magnitude faster.
    Every walk of the analysis goes through here, and the walks of one file meet each node several
    times (the walker, the bindings, the inliner and the rules each look inside a statement), so the
    answer is kept until `forget_children` (engine.analyze calls it after each file).
    """
    known = _CHILDREN.get(id(node))
    if known is not None and known[0] is node:
        return known[1]
    fields = _CHILD_FIELDS.get(type(node))
    if fields is None:
        fields = _CHILD_FIELDS[type(node)] = tuple(
            name for name in node.__dataclass_fields__
            if name not in _SKIPPED_FIELDS and not name.startswith("whitespace"))
    out: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            out.extend([item for item in value if _NODE_TYPES.get(type(item)) or _is_node(item)])
        elif _NODE_TYPES.get(kind) or _is_node(value):
            out.append(value)
    found = _CHILDREN[id(node)] = (node, tuple(out))  # the node is kept: its id is not reused meanwhile
    return found[1]


# id(node) -> (node, its children); see `children`
_CHILDREN: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}


def forget_children() -> None:
    """Drop the children kept by `children`, and with them the nodes they hold."""
    _CHILDREN.clear()


_NODE_TYPES: dict[type, bool] = {}


def _is_node(value: object) -> bool:
    """isinstance(value, cst.CSTNode), answered once per type: CSTNode is an abstract class, whose
    isinstance checks cost several times a dictionary lookup."""
    known = _NODE_TYPES.get(type(value))
    if known is None:
        known = _NODE_TYPES[type(value)] = isinstance(value, cst.CSTNode)
    return known


def is_one(node: cst.CSTNode | None) -> bool:
    """The literal 1 (`1`, `1.`, `1.0`)."""
    return isinstance(node, (cst.Integer, cst.Float)) and node.value in ("1", "1.", "1.0")


def dotted(node: cst.CSTNode | None) -> str | None:
    """`a.b.c` for Name/Attribute chains (also `self.x`), else None."""
    # Here and in the walks below, types are compared exactly: a libcst node class is never
    # subclassed, and `isinstance` against one (an abstract class's subclass) costs an ABC check.
    kind = type(node)
    if kind is cst.Name:
        return node.value
    if kind is cst.Attribute:
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


def item_name(node: cst.CSTNode | None) -> str | None:
    """`out["loss"]`, `parts[0]`: an entry of a named container under a constant key, written as one
    name (`out["loss"]`) so that what is stored there has bindings of its own; else None."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1:
        return None
    base, index = dotted(node.value), node.slice[0].slice
    if base is None or not isinstance(index, cst.Index):
        return None
    key = index.value
    if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str):
        return f"{base}[{key.evaluated_value!r}]"
    if isinstance(key, cst.Integer):
        return f"{base}[{key.evaluated_value}]"
    return None


def summed_loss_name(expr: cst.BaseExpression | None) -> str | None:
    """`loss`, or `loss * inputs.size(0)` / `loss / n`: arithmetic keeps the graph just the same."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Multiply, cst.Divide)):
        return summed_loss_name(expr.left) or summed_loss_name(expr.right)
    return dotted(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None


def last_part(name: str | None) -> str:
    return name.rsplit(".", 1)[-1] if name else ""


def call_receiver(call: cst.Call) -> tuple[cst.BaseExpression | None, str | None]:
    """For `x.y.method(...)` return (`x.y` node, "method"); for `f(...)` return (None, "f")."""
    return callee_parts(call.func)


def callee_parts(func: cst.BaseExpression) -> tuple[cst.BaseExpression | None, str | None]:
    """call_receiver of what calls `func` (`x.y.method` -> (`x.y`, "method"); `f` -> (None, "f"))."""
    if isinstance(func, cst.Attribute):
        return func.value, func.attr.value
    if isinstance(func, cst.Name):
        return None, func.value
    return None, None


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def positional(call: cst.Call, index: int) -> cst.BaseExpression | None:
    args = [a for a in call.args if a.keyword is None and not a.star]
    return args[index].value if index < len(args) else None


def parameter_names(function: cst.FunctionDef, starred: bool = False) -> set[str]:
    """The names a function's parameters bind; with `starred`, `*args` and `**kwargs` too."""
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    if starred:
        every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return {p.name.value for p in every}


def parameter(function: cst.FunctionDef, name: str) -> cst.Param | None:
    """The function's parameter of that name (not `*args` or `**kwargs`)."""
    params = function.params
    return next((p for p in [*params.posonly_params, *params.params, *params.kwonly_params] if p.name.value == name),
                None)


def source(node: cst.CSTNode) -> str:
    """The node's source text as written."""
    return cst.Module(body=[]).code_for_node(node)


def code(node: cst.CSTNode) -> str:
    """Canonical source text of an expression, used to compare expressions structurally."""
    return re.sub(r"\s+", "", cst.Module(body=[]).code_for_node(node))


def iter_names(node: cst.CSTNode) -> Iterator[str]:
    """Every dotted name (and each prefix-free Name) read inside an expression."""
    stack = [node]
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind is cst.Name or kind is cst.Attribute:
            name = dotted(current)
            if name:
                yield name
                if kind is cst.Attribute:
                    yield from iter_names(current.value)
                continue
        stack.extend(children(current))


def full_names(node: cst.CSTNode) -> Iterator[str]:
    """The dotted names read in an expression, longest chain only (`a.b.c`, not `a` or `a.b`)."""
    stack = [node]
    while stack:
        current = stack.pop()
        name = dotted(current)
        if name:
            yield name
            continue
        stack.extend(children(current))


def iter_calls(node: cst.CSTNode) -> Iterator[cst.Call]:
    """Calls inside an expression or small statement, outermost first, not entering lambdas or defs."""
    stack = [node]
    call, closed = cst.Call, (cst.Lambda, cst.FunctionDef, cst.ClassDef)
    while stack:
        current = stack.pop()
        kind = type(current)
        if kind in closed:
            continue
        if kind is call:
            yield current
        stack.extend(reversed(children(current)))


def walk(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`root` and every node inside it (syntactic children only, see `children`)."""
    stack = [root]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))


def statement_blocks(statement: cst.CSTNode) -> list[list[cst.CSTNode]]:
    """The statement lists directly inside a compound statement: its body, each `elif`/`else`, each
    `except` handler, `finally`."""
    blocks = []
    body = getattr(statement, "body", None)
    if body is not None and hasattr(body, "body"):
        blocks.append(list(body.body))
    for name in ("orelse", "finalbody"):
        other = getattr(statement, name, None)
        if other is not None:
            blocks.extend(statement_blocks(other) if isinstance(other, cst.If) else [list(other.body.body)])
    for handler in getattr(statement, "handlers", ()) or ():
        blocks.append(list(handler.body.body))
    return blocks


def contains(root: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Is `node` inside `root` (or `root` itself)?"""
    return any(current is node for current in walk(root))


class ImportMap:
    """Local name -> fully qualified name, from `import` and `from ... import` statements."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name)
                if not full:
                    continue
                if alias.asname is not None:
                    local = dotted(alias.asname.name)
                    if local:
                        self.aliases[local] = full
                else:
                    # `import torch.nn` binds `torch`
                    top = full.split(".")[0]
                    self.aliases.setdefault(top, top)
            return
        if node.relative or isinstance(node.names, cst.ImportStar):
            return
        module = dotted(node.module) if node.module else None
        if not module:
            return
        for alias in node.names:
            name = dotted(alias.name)
            if not name:
                continue
            local = dotted(alias.asname.name) if alias.asname is not None else name
            if local:
                self.aliases[local] = f"{module}.{name}"

    def qualify(self, node: cst.CSTNode | None) -> str | None:
        """`t.optim.AdamW` -> `torch.optim.AdamW` when `t` is an import alias of torch; None when the
        head of the chain is not an imported name."""
        name = dotted(node)
        if not name:
            return None
        head, _, rest = name.partition(".")
        full = self.aliases.get(head)
        if full is None:
            return None
        return f"{full}.{rest}" if rest else full


SELF_NAMES = ("self", "cls")  # the first parameter of a method


def is_static(function: cst.FunctionDef) -> bool:
    """A method not bound to an instance: a staticmethod or a classmethod."""
    return any(dotted(d.decorator) in ("staticmethod", "classmethod") for d in function.decorators)


def is_class_method(function: cst.FunctionDef) -> bool:
    return any(dotted(d.decorator) == "classmethod" for d in function.decorators)


def paired_arguments(call: cst.Call, function: cst.FunctionDef, receiver: cst.BaseExpression | None) \
        -> list[tuple[str, cst.BaseExpression]]:
    """(parameter, argument) pairs: `self` to the receiver, positionals in order, keywords by name."""
    params = [*function.params.posonly_params, *function.params.params]
    names = [p.name.value for p in params]
    pairs: list[tuple[str, cst.BaseExpression]] = []
    if receiver is not None and names:
        pairs.append((names[0], receiver))
        names = names[1:]
    elif names and (names[0] in SELF_NAMES and not is_static(function) or is_class_method(function)):
        # `Class.method(obj, ...)` or an unknown receiver: self stays unknown; a classmethod's class
        # (whatever its first parameter is named) is bound by the call itself, not by an argument
        names = names[1:]
    positional = []
    for a in call.args:
        if a.star == "*":
            break  # `f(x, *args)`: which parameter gets what after `x` is unknown
        if a.keyword is None and not a.star:
            positional.append(a.value)
    pairs.extend(zip(names, positional))
    keywords = {p.name.value for p in [*function.params.params, *function.params.kwonly_params]}
    pairs.extend((a.keyword.value, a.value) for a in call.args if a.keyword is not None and a.keyword.value in keywords)
    return pairs


def assigned_names(statement: cst.Assign | cst.AnnAssign | cst.AugAssign) -> list[str]:
    """The dotted names an assignment binds (the elements of a tuple target included)."""
    targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    names = []
    for target in targets:
        names.extend(e.value for e in target.elements) if isinstance(target, (cst.Tuple, cst.List)) else \
            names.append(target)
    return [dotted(name) or "" for name in names]


def top_level_statements(function: cst.FunctionDef) -> list[cst.BaseSmallStatement]:
    """The simple statements of a function's own block, outside any branch or loop."""
    return [small for line in function.body.body if isinstance(line, cst.SimpleStatementLine) for small in line.body]


def is_infinite(node: cst.BaseExpression) -> bool:
    """`float("inf")`, `math.inf`, `torch.inf`, `np.inf`: positive infinity written out."""
    if isinstance(node, cst.Call) and dotted(node.func) == "float" and len(node.args) == 1:
        value = node.args[0].value
        return isinstance(value, cst.SimpleString) and value.evaluated_value.strip().lower() in ("inf", "infinity")
    return dotted(node) in ("math.inf", "torch.inf", "np.inf", "numpy.inf")
