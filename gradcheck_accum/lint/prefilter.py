"""Skip what cannot match, before libcst ever sees a file.

Stage 1 is textual: each rule declares substrings it `needs` (all) and `tokens` (any); a rule whose
condition fails on the file's text cannot report anything there. Stage 2 is for the rules that
only report inside a training loop (their needs include "backward("): CPython's own parser (several
times faster than libcst) checks that some loop reaches a backward call, directly or through a
function of the same file. Both stages are necessary conditions of the analysis, never heuristics:
tests lint a large corpus with and without them and compare.
"""

from __future__ import annotations

import ast

from gradcheck_accum.lint.rule import Rule

LOOP_MARK = "backward("


def rules_that_could_fire(text: str, rules: list[type[Rule]]) -> list[type[Rule]]:
    candidates = [rule for rule in rules if rule.could_fire(text)]
    if any(LOOP_MARK in rule.needs for rule in candidates) and not loop_reaches_backward(text):
        candidates = [rule for rule in candidates if LOOP_MARK not in rule.needs]
    return candidates


def loop_reaches_backward(text: str) -> bool:
    """Does a `for`/`while` loop call `.backward(...)`/`manual_backward(...)`, or a function defined in
    this file that (transitively) does? Unparseable text answers True: libcst will say why."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    # One pass: what each function calls, and what loops call.
    calls_of: dict[str, set[str]] = {}
    in_loops: set[str] = set()
    stack: list[tuple[ast.AST, str, bool]] = [(tree, "", False)]
    while stack:
        node, function, in_loop = stack.pop()
        if isinstance(node, ast.Call):
            callee = _callee(node)
            if callee:
                calls_of.setdefault(function, set()).add(callee)
                if in_loop:
                    in_loops.add(callee)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function, in_loop = node.name, False
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            in_loop = True
        stack.extend((child, function, in_loop) for child in ast.iter_child_nodes(node))
    reaching = {"backward", "manual_backward"}
    changed = True
    while changed:
        changed = False
        for function, callees in calls_of.items():
            if function and function not in reaching and callees & reaching:
                reaching.add(function)
                changed = True
    return bool(in_loops & reaching)


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None
