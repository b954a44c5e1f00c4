"""The prefilter's loop stage answers True whenever an exact walk of every call would.

The exact walk below visits every expression node (what the prefilter avoids for speed); the
prefilter may say True more often, never less often.
"""

import ast
import sys
from pathlib import Path

import pytest

from gradcheck_accum.lint.prefilter import loop_reaches_backward

TORCH = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / "torch"


def exact(text: str) -> bool:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return "backward(" in text  # libcst reports the error of a file with a backward call
    calls_of: dict[str, set[str]] = {}
    in_loops: set[str] = set()
    stack = [(tree, "", False)]
    while stack:
        node, function, in_loop = stack.pop()
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name:
                calls_of.setdefault(function, set()).add(name)
                if in_loop:
                    in_loops.add(name)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function, in_loop = node.name, False
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            in_loop = True
        stack.extend((child, function, in_loop) for child in ast.iter_child_nodes(node))
    reaching = {"backward", "manual_backward"}
    while True:
        more = {f for f, callees in calls_of.items() if f and f not in reaching and callees & reaching}
        if not more:
            return bool(in_loops & reaching)
        reaching |= more


CASES = {
    "direct": "for b in data:\n    loss.backward()\n",
    "no loop": "loss.backward()\n",
    "loop elsewhere": "for b in data:\n    pass\nloss.backward()\n",
    "through helpers": "def a():\n    b()\ndef b():\n    loss.backward()\nwhile True:\n    a()\n",
    "method helper": "class T:\n    def step(self):\n        self.loss.backward()\n\nfor _ in r:\n    t.step()\n",
    "comment before the parenthesis": "for b in d:\n    loss.backward  # why\\\n    ()\n",
    "backslash": "for b in d:\n    loss.backward \\\n        ()\n",
    "carriage returns": "x = 1\r\nfor b in d:\r\n    loss.backward()\r\n",
    "old mac newlines": "x = 1\rfor b in d:\r    loss.backward()\r",
    "form feed": "\x0cx = 1\n\x0c\nfor b in d:\n    loss.backward()\n",
    "decorated": "@register(backward())\ndef f():\n    pass\nfor b in d:\n    f()\n",
    "loop else": "for b in d:\n    pass\nelse:\n    loss.backward()\n",
    "try in loop": "for b in d:\n    try:\n        x = 1\n    except E:\n        loss.backward()\n",
    "match": "for b in d:\n    match b:\n        case 1:\n            loss.backward()\n",
    "only a definition": "def backward(ctx, g):\n    return g\nfor x in y:\n    print(x)\n",
    "syntax error": "for b in d\n    loss.backward()\n",
    "call in an f-string": 'for b in d:\n    print(f"{loss.backward()}")\n',
    "quote in a comment": "for b in d:  # it's\n    loss.backward()\n",
    "hash in a string": "for b in d:\n    s = '#'; loss.backward()\n",
    "escaped quote": "for b in d:\n    s = 'it\\'s'; loss.backward()\n",
    "raw string ending in backslashes": "for b in d:\n    s = r'\\\\'; loss.backward()\n",
    "string continued by a backslash": "for b in d:\n    s = 'a\\\nb'; loss.backward()\n",
    "triple quotes": "for b in d:\n    s = \"\"\"x'''y\"\"\"; loss.backward()\n",
    "in a message only": "def f():\n    raise E('no backward() here')\nfor b in d:\n    f()\n",
    "a name ending in backward": "for b in d:\n    stage.has_backward()\n    perform_backward(x)\n",
    "lightning": "for b in d:\n    self.manual_backward(loss)\n",
    "defined and called": "class F:\n    def backward(self):\n        pass\nfor b in d:\n    f.backward ()\n",
}


@pytest.mark.parametrize("name", CASES)
def test_never_less_than_the_exact_walk(name):
    text = CASES[name]
    assert loop_reaches_backward(text) >= exact(text)


def test_answers_no_where_it_can():
    assert not loop_reaches_backward(CASES["no loop"])
    assert not loop_reaches_backward(CASES["loop elsewhere"])
    assert not loop_reaches_backward(CASES["only a definition"])
    assert not loop_reaches_backward(CASES["in a message only"])
    assert not loop_reaches_backward(CASES["a name ending in backward"])
    assert loop_reaches_backward(CASES["lightning"]) and loop_reaches_backward(CASES["defined and called"])


@pytest.mark.slow
@pytest.mark.skipif(not TORCH.is_dir(), reason="needs the installed torch package as a corpus")
def test_torch_corpus():
    files = [p for p in sorted(TORCH.rglob("*.py")) if "backward" in p.read_text(errors="replace")]
    assert len(files) > 200
    checked = said_yes = 0
    for path in files[::3]:
        text = path.read_text(errors="replace")
        fast, slow = loop_reaches_backward(text), exact(text)
        assert fast >= slow, path
        checked, said_yes = checked + 1, said_yes + slow
    assert said_yes >= 3 and checked - said_yes > 100  # the corpus exercises both answers
