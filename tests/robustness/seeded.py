"""A seeded generator of Python programs for the nightly fuzz: random syntax trees written out by
`ast.unparse`, with the training statements the rules look at spliced into every kind of block
(branches, loops, handlers, `with`, functions, methods, async code, match cases), then comments,
blank lines, form feeds and tab indentation put where the tokenizer allows them.

What it writes is meant to compile: each construct is drawn only where CPython accepts it (`await`
in async functions, `break` in loops, one catch-all case last, distinct parameter and keyword
names). About a millisecond a program, so the nightly size is cheap to generate; hypothesmith
(generated.py) remains the source of odd whitespace and of every node libcst knows.
"""

from __future__ import annotations

import ast
import io
import random
import tokenize
from dataclasses import dataclass, replace

from gradcheck_accum.lint.lines import split_lines

TRAINING_STATEMENTS = [
    "optimizer.zero_grad()", "loss.backward()", "optimizer.step()", "scheduler.step()",
    "scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()", "scaler.unscale_(optimizer)",
    "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "loss = model(batch) / accum",
    "model = torch.compile(model)", "torch.save(model.state_dict(), 'p')", "total += loss",
    "with model.no_sync():\n    loss.backward()", "if (i + 1) % accum == 0:\n    optimizer.step()",
    "for p in model.parameters():\n    p.grad = None", "scaler.scale(loss_a + loss_b).backward()",
    "try:\n    optimizer.step()\nexcept RuntimeError:\n    pass", "if ok:\n    optimizer.step()\nelse:\n    skip()",
    "lr = 0.1  # noqa: ACC101", "x = 1  # noqa: ACC302 * 2",
]
_TRAINING = [ast.parse(statement).body for statement in TRAINING_STATEMENTS]
NAMES = ["loss", "model", "optimizer", "scheduler", "scaler", "accum", "i", "batch", "x", "y", "total", "step",
         "self", "_", "match", "case", "type", "λ", "données", "loader", "outputs", "grad_accum_steps"]
ATTRIBUTES = ["step", "zero_grad", "backward", "loss", "state_dict", "parameters", "grad", "item", "_orig_mod"]
STRINGS = ["", "p", "a\nb", "# noqa: ACC101", "\u2028", "é", "{x}", "\\", "'\"", "\x0c", "accumcheck-cell 1"]
COMMENTS = ["# noqa", "# noqa: ACC101", "# noqa: ACC101, ACC302", "# type: ignore", "# accumcheck-cell 1",
            "# é ✓", "# fmt: off", "#", "# loss.backward()"]
BINARY = [ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult, ast.BitOr,
          ast.BitAnd, ast.LShift]
COMPARE = [ast.Eq, ast.NotEq, ast.Lt, ast.GtE, ast.Is, ast.IsNot, ast.In, ast.NotIn]


@dataclass(frozen=True)
class Where:
    """What the code being drawn sits in: what CPython allows there."""

    depth: int = 0
    function: bool = False
    asynchronous: bool = False
    loop: bool = False  # directly in a loop of this function (`break`, `continue`)
    generator: bool = False  # `yield` allowed (not in async functions: no `return value` with it)


def program(rng: random.Random) -> str:
    """One program's text."""
    while True:
        module = ast.Module(body=_block(rng, Where(), rng.randint(1, 10)), type_ignores=[])
        try:
            text = ast.unparse(ast.fix_missing_locations(module)) + "\n"
        except ValueError:  # a backslash in an f-string's expression, which Python < 3.12 cannot write
            continue
        return _decorated(rng, text)


# -- statements --------------------------------------------------------------------------------------
def _block(rng: random.Random, where: Where, size: int) -> list[ast.stmt]:
    body: list[ast.stmt] = []
    for _ in range(max(size, 1)):
        if rng.random() < 0.3:
            body.extend(_training(rng))
        else:
            body.append(_statement(rng, where))
    return body


def _training(rng: random.Random) -> list[ast.stmt]:
    return list(rng.choice(_TRAINING))  # unparse writes a shared node as often as it occurs


def _statement(rng: random.Random, where: Where) -> ast.stmt:
    simple = ["assign", "augassign", "annassign", "expr", "pass", "assert", "raise", "delete", "import", "global"]
    compound = ["if", "for", "while", "with", "try", "def", "class", "match"] + (["trystar"] if hasattr(ast, "TryStar") else [])
    kinds = simple + (compound if where.depth < 3 else [])
    if where.function:
        kinds += ["return"] * 2
    if where.loop:
        kinds += ["break", "continue"]
    kind = rng.choice(kinds)
    inner = replace(where, depth=where.depth + 1)
    size = rng.randint(1, 4)
    expr = lambda: _expression(rng, where)  # noqa: E731 - the common case below
    if kind == "assign":
        return ast.Assign(targets=[_target(rng, where) for _ in range(rng.randint(1, 2))], value=expr())
    if kind == "augassign":
        return ast.AugAssign(target=_simple_target(rng, where), op=rng.choice(BINARY)(), value=expr())
    if kind == "annassign":
        return ast.AnnAssign(target=ast.Name(rng.choice(NAMES)), annotation=expr(),
                             value=expr() if rng.random() < 0.7 else None, simple=1)
    if kind == "expr":
        return ast.Expr(_call(rng, where))
    if kind == "pass":
        return ast.Pass()
    if kind == "assert":
        return ast.Assert(test=expr(), msg=expr() if rng.random() < 0.5 else None)
    if kind == "raise":
        return ast.Raise(exc=_call(rng, where), cause=expr() if rng.random() < 0.3 else None)
    if kind == "delete":
        return ast.Delete(targets=[_simple_target(rng, where)])
    if kind == "import":
        names = [ast.alias(name=rng.choice(["torch", "torch.nn", "os", "accelerate"]),
                           asname=rng.choice([None, "t"])) for _ in range(rng.randint(1, 2))]
        if rng.random() < 0.5:
            return ast.Import(names=names)
        level = rng.choice([0, 0, 1])
        return ast.ImportFrom(module=rng.choice(["torch", "torch.optim"] + ([None] if level else [])), names=[
            ast.alias(name=rng.choice(["AdamW", "nn", "compile"]), asname=None)], level=level)
    if kind == "global":
        return ast.Global(names=[f"g{rng.randint(0, 3)}"])
    if kind == "return":
        return ast.Return(value=expr() if rng.random() < 0.7 else None)
    if kind == "break":
        return ast.Break()
    if kind == "continue":
        return ast.Continue()
    if kind == "if":
        orelse = _block(rng, inner, size) if rng.random() < 0.5 else []
        if orelse and rng.random() < 0.5:
            orelse = [ast.If(test=expr(), body=_block(rng, inner, size), orelse=orelse)]  # elif
        return ast.If(test=expr(), body=_block(rng, inner, size), orelse=orelse)
    if kind in ("for", "while"):
        looped = replace(inner, loop=True)
        orelse = _block(rng, inner, 1) if rng.random() < 0.2 else []
        if kind == "while":
            return ast.While(test=expr(), body=_block(rng, looped, size), orelse=orelse)
        node = ast.AsyncFor if where.asynchronous and rng.random() < 0.3 else ast.For
        return node(target=_target(rng, where), iter=expr(), body=_block(rng, looped, size), orelse=orelse)
    if kind == "with":
        items = [ast.withitem(context_expr=_call(rng, where),
                              optional_vars=_simple_target(rng, where) if rng.random() < 0.5 else None)
                 for _ in range(rng.randint(1, 2))]
        node = ast.AsyncWith if where.asynchronous and rng.random() < 0.3 else ast.With
        return node(items=items, body=_block(rng, inner, size))
    if kind in ("try", "trystar"):
        handled = inner if kind == "try" else replace(inner, function=False, loop=False)  # except*: no jumps out
        handlers = [ast.ExceptHandler(type=ast.Name(rng.choice(["RuntimeError", "ValueError", "Exception"])),
                                      name=rng.choice([None, "error"]), body=_block(rng, handled, size))
                    for _ in range(rng.randint(0 if kind == "try" else 1, 2))]
        if kind == "try" and handlers and rng.random() < 0.3:
            handlers.append(ast.ExceptHandler(type=None, name=None, body=_block(rng, inner, 1)))
        finalbody = _block(rng, inner, size) if not handlers or rng.random() < 0.3 else []
        orelse = _block(rng, inner, size) if handlers and rng.random() < 0.3 else []
        node = ast.TryStar if kind == "trystar" else ast.Try
        return node(body=_block(rng, inner, size), handlers=handlers, orelse=orelse, finalbody=finalbody)
    if kind == "def":
        asynchronous = rng.random() < 0.25
        body_where = Where(depth=where.depth + 1, function=True, asynchronous=asynchronous, generator=not asynchronous)
        node = ast.AsyncFunctionDef if asynchronous else ast.FunctionDef
        return node(name=rng.choice(["train", "step", "__init__", "training_step", "helper", "forward"]),
                    args=_parameters(rng, where), body=_block(rng, body_where, rng.randint(1, 6)),
                    decorator_list=[_expression(rng, where) for _ in range(rng.randint(0, 2))],
                    returns=expr() if rng.random() < 0.2 else None)
    if kind == "class":
        class_where = Where(depth=where.depth + 1)
        return ast.ClassDef(name=rng.choice(["Trainer", "Model", "LitModel"]),
                            bases=[ast.Name(rng.choice(["object", "LightningModule", "nn.Module"]))][:rng.randint(0, 1)],
                            keywords=[], body=_block(rng, class_where, rng.randint(1, 4)),
                            decorator_list=[_expression(rng, where) for _ in range(rng.randint(0, 1))])
    cases = [ast.match_case(pattern=_pattern(rng), guard=expr() if rng.random() < 0.3 else None,
                            body=_block(rng, inner, size)) for _ in range(rng.randint(1, 3))]
    cases.append(ast.match_case(pattern=ast.MatchAs(), body=_block(rng, inner, 1)))  # `case _:`, last
    return ast.Match(subject=expr(), cases=cases)


def _parameters(rng: random.Random, where: Where) -> ast.arguments:
    names = rng.sample(["self", "model", "optimizer", "batch", "accum", "loss", "scaler", "n"], rng.randint(0, 5))
    kinds = sorted(rng.choice([0, 1, 1, 2]) for _ in names)  # positional-only, positional, keyword-only
    arguments = {k: [ast.arg(arg=name) for name, kind in zip(names, kinds) if kind == k] for k in (0, 1, 2)}
    positional = arguments[0] + arguments[1]
    defaults = [_atom(rng) for _ in range(rng.randint(0, len(positional)))]
    star = ast.arg(arg="args") if rng.random() < 0.3 else None
    return ast.arguments(posonlyargs=arguments[0], args=arguments[1], vararg=star, kwonlyargs=arguments[2],
                         kw_defaults=[_atom(rng) if rng.random() < 0.5 else None for _ in arguments[2]],
                         kwarg=ast.arg(arg="kwargs") if rng.random() < 0.3 else None, defaults=defaults)


def _pattern(rng: random.Random) -> ast.pattern:
    choice = rng.randint(0, 4)
    if choice == 0:
        return ast.MatchValue(ast.Constant(rng.choice([0, 1, "train", 2.5])))
    if choice == 1:
        return ast.MatchSingleton(rng.choice([None, True, False]))
    if choice == 2:
        return ast.MatchSequence([ast.MatchAs(name=f"p{i}") for i in range(rng.randint(0, 3))])
    if choice == 3:
        return ast.MatchClass(cls=ast.Name(rng.choice(["Batch", "dict"])), patterns=[],
                              kwd_attrs=["x"], kwd_patterns=[ast.MatchAs(name="value")])
    return ast.MatchOr([ast.MatchValue(ast.Constant(1)), ast.MatchValue(ast.Constant(2))])


# -- expressions -------------------------------------------------------------------------------------
def _target(rng: random.Random, where: Where) -> ast.expr:
    if rng.random() < 0.2:
        names = rng.sample(NAMES, 3)
        elements: list[ast.expr] = [ast.Name(name) for name in names[:rng.randint(2, 3)]]
        if rng.random() < 0.3:
            elements[0] = ast.Starred(elements[0])
        return ast.Tuple(elements)
    return _simple_target(rng, where)


def _simple_target(rng: random.Random, where: Where) -> ast.expr:
    choice = rng.randint(0, 5)
    if choice == 0:
        return ast.Attribute(_name(rng), rng.choice(ATTRIBUTES + ["x", "model"]))
    if choice == 1:
        return ast.Subscript(_name(rng), _expression(rng, where, 2))
    return _name(rng)


def _name(rng: random.Random) -> ast.Name:
    return ast.Name(rng.choice(NAMES))


def _atom(rng: random.Random) -> ast.expr:
    choice = rng.randint(0, 6)
    if choice == 0:
        return ast.Constant(rng.choice([0, 1, 8, 10**30, -1]))
    if choice == 1:
        return ast.Constant(rng.choice([0.1, 1e-5, 1.0, float("inf")]))
    if choice == 2:
        return ast.Constant(rng.choice(STRINGS))
    if choice == 3:
        return ast.Constant(rng.choice([None, True, False, ..., 2j, b"\x00b"]))
    return _name(rng)


def _call(rng: random.Random, where: Where, depth: int = 0) -> ast.Call:
    func = _name(rng)
    for _ in range(rng.randint(0, 3)):
        func = ast.Attribute(func, rng.choice(ATTRIBUTES))
    args: list[ast.expr] = [_expression(rng, where, depth + 1) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.1:
        args.append(ast.Starred(_name(rng)))
    keywords = [ast.keyword(arg=name, value=_expression(rng, where, depth + 1))
                for name in rng.sample(["labels", "set_to_none", "lr", "dim", "T_max", "gradient_accumulation_steps"],
                                       rng.randint(0, 2))]
    if rng.random() < 0.1:
        keywords.append(ast.keyword(arg=None, value=_name(rng)))
    return ast.Call(func=func, args=args, keywords=keywords)


def _expression(rng: random.Random, where: Where, depth: int = 0) -> ast.expr:
    if depth > 3:
        return _atom(rng)
    deeper = lambda: _expression(rng, where, depth + 1)  # noqa: E731
    choice = rng.randint(0, 19)
    if choice <= 4:
        return _atom(rng)
    if choice == 5:
        return _call(rng, where, depth)
    if choice == 6:
        return ast.BinOp(deeper(), rng.choice(BINARY)(), deeper())
    if choice == 7:
        return ast.UnaryOp(rng.choice([ast.Not, ast.USub, ast.Invert])(), deeper())
    if choice == 8:
        return ast.BoolOp(rng.choice([ast.And, ast.Or])(), [deeper(), deeper()])
    if choice == 9:
        return ast.Compare(deeper(), [rng.choice(COMPARE)()], [deeper()])
    if choice == 10:
        return ast.IfExp(deeper(), deeper(), deeper())
    if choice == 11:
        parameters = ast.arguments(posonlyargs=[], args=[ast.arg(arg="x")], kwonlyargs=[], kw_defaults=[], defaults=[])
        return ast.Lambda(parameters, _expression(rng, Where(), depth + 1))
    if choice == 12:
        kind = rng.choice([ast.List, ast.Tuple, ast.Set])
        elements = [deeper() for _ in range(rng.randint(1 if kind is ast.Set else 0, 3))]
        if elements and rng.random() < 0.2:
            elements.append(ast.Starred(_name(rng)))
        return kind(elements)
    if choice == 13:
        keys: list[ast.expr | None] = [deeper() for _ in range(rng.randint(0, 3))]
        values = [deeper() for _ in keys]
        if rng.random() < 0.2:
            keys.append(None)
            values.append(_name(rng))
        return ast.Dict(keys, values)
    if choice == 14:
        generator = ast.comprehension(target=_name(rng), iter=deeper(),
                                      ifs=[deeper()] if rng.random() < 0.3 else [],
                                      is_async=int(where.asynchronous and rng.random() < 0.3))
        kind = rng.choice([ast.ListComp, ast.SetComp, ast.GeneratorExp])
        return kind(deeper(), [generator])
    if choice == 15:
        parts: list[ast.expr] = [ast.Constant(rng.choice(["loss ", "é", "{"]))]
        parts.append(ast.FormattedValue(ast.Attribute(_name(rng), rng.choice(ATTRIBUTES)), conversion=rng.choice([-1, ord("r")]),
                                        format_spec=ast.JoinedStr([ast.Constant(".3f")]) if rng.random() < 0.3 else None))
        return ast.JoinedStr(parts)
    if choice == 16:
        return ast.Subscript(deeper(), ast.Slice(deeper(), None, deeper() if rng.random() < 0.3 else None))
    if choice == 17 and where.asynchronous:
        return ast.Await(_call(rng, where, depth))
    # `yield` and `:=` only as a statement's own expression: inside comprehensions, lambdas and
    # class bodies CPython refuses them
    if choice == 17 and where.generator and depth == 0:
        return ast.Yield(deeper() if rng.random() < 0.7 else None)
    if choice == 18 and depth == 0:
        return ast.NamedExpr(ast.Name(rng.choice(["loss", "n", "out"])), deeper())
    return ast.Attribute(deeper(), rng.choice(ATTRIBUTES))


# -- layout ------------------------------------------------------------------------------------------
def _decorated(rng: random.Random, text: str) -> str:
    """Comment lines, blank lines and form feeds before logical lines, trailing comments at their
    ends, and now and then tabs for indentation: all where the tokenizer takes them as layout."""
    lines = split_lines(text, keepends=True)
    starts, ends = set(), {}
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    for before, token in zip([None, *tokens], tokens):
        if token.type == tokenize.NEWLINE and token.string:
            ends[token.start[0]] = token.start[1]
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
                              tokenize.ENDMARKER) and (before is None or before.type in
                                                       (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.NL)):
            starts.add(token.start[0])
    out = []
    for number, line in enumerate(lines, 1):
        if number in starts and rng.random() < 0.15:
            out.append(rng.choice(["\n", "\x0c\n", "    " * rng.randint(0, 3) + rng.choice(COMMENTS) + "\n"]))
        if number in ends and rng.random() < 0.15:
            column = ends[number]
            line = line[:column] + "  " + rng.choice(COMMENTS) + line[column:]
        out.append(line)
    result = "".join(out)
    if rng.random() < 0.1:
        result = "".join(_tabs(line) for line in split_lines(result, keepends=True))
    if rng.random() < 0.1:
        result = result.replace("\n", "\r\n")
    return result


def _tabs(line: str) -> str:
    stripped = line.lstrip(" ")
    return "\t" * ((len(line) - len(stripped)) // 4) + " " * ((len(line) - len(stripped)) % 4) + stripped
