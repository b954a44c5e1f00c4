"""The verifier's shape: no import circle among its modules (function-level imports included),
and reports that cannot be edited once built."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import gradcheck_accum.verifier as verifier_package
from gradcheck_accum.verifier.report import ModeResult, Report

PACKAGE = Path(verifier_package.__file__).parent
PREFIX = "gradcheck_accum.verifier."


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = PREFIX + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX):
                targets.add(node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith(PREFIX)}
        graph[name.removesuffix(".__init__")] = targets
    return graph


def test_no_module_of_the_verifier_imports_one_that_imports_it_back():
    graph = import_graph()
    assert PREFIX + "loop" in graph and PREFIX + "distributed" in graph
    visiting, done, cycles = set(), set(), []

    def visit(module, path):
        if module in visiting:
            cycles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        visiting.add(module)
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        visiting.discard(module)
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert cycles == []


def test_reports_are_built_once():
    report = Report("match", "fine", rows=[], modes=[ModeResult("eager", True)], notes=["a note"])
    assert isinstance(report.modes, tuple) and isinstance(report.notes, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.diagnosis = "edited"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        report.notes.append("another")  # type: ignore[attr-defined]
