"""Notebooks: code cells linted as one program, positions per cell, fixes written back per cell."""

import json

from gradcheck_accum.lint import notebooks
from gradcheck_accum.lint.engine import fix_source, lint_source
from gradcheck_accum.lint import registry


def make_notebook(*cells):
    def cell(kind, text):
        out = {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
        if kind == "code":
            out.update(execution_count=1, outputs=[{"output_type": "stream", "name": "stdout", "text": ["hi\n"]}])
        return out

    return json.dumps({"cells": [cell(k, t) for k, t in cells], "metadata": {"kernelspec": {"name": "python3"}},
                       "nbformat": 4, "nbformat_minor": 5})


NOTEBOOK = make_notebook(
    ("markdown", "# Training\n"),
    ("code", "%matplotlib inline\nimport torch\n!nvidia-smi\n"),
    ("code", "%%time\nprint('not python? fine')\n"),
    ("code", "model = torch.compile(model)\noptimizer = torch.optim.AdamW(model.parameters())\n"),
    ("code", "for i, batch in enumerate(loader):\n"
             "    optimizer.zero_grad()\n"
             "    (model(batch) / accum).backward()\n"
             "    if (i + 1) % accum == 0 or i + 1 == len(loader):\n"
             "        optimizer.step()\n"
             "torch.save(model.state_dict(), 'm.pt')\n"),
)


def test_cells_form_one_program_and_positions_map_to_cells():
    nb = notebooks.load(NOTEBOOK)
    findings = [nb.locate(f) for f in lint_source(nb.program, "train.ipynb")]
    assert [(f.cell, f.line, f.column, f.code) for f in findings] == [
        (5, 2, 5, "ACC101"),
        (5, 6, 12, "ACC302"),
    ]


def test_fix_rewrites_only_changed_cells_and_keeps_outputs_and_magics():
    nb = notebooks.load(NOTEBOOK)
    result = fix_source(nb.program, "train.ipynb", unsafe=True)
    written = json.loads(notebooks.write_back(nb, result.source))
    original = json.loads(NOTEBOOK)
    assert written["cells"][:4] == original["cells"][:4]  # magics and untouched cells kept byte for byte
    assert written["cells"][4]["outputs"] == original["cells"][4]["outputs"]
    assert "".join(written["cells"][4]["source"]) == (
        "for i, batch in enumerate(loader):\n"
        "    (model(batch) / accum).backward()\n"
        "    if (i + 1) % accum == 0 or i + 1 == len(loader):\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
        "torch.save(getattr(model, \"_orig_mod\", model).state_dict(), 'm.pt')\n"
    )
    again = notebooks.load(json.dumps(written))
    assert lint_source(again.program, "train.ipynb") == []


def test_not_a_notebook_is_a_clear_error():
    for text, reason in [("{", "not a Jupyter notebook"), ('{"cells": []', "not a Jupyter notebook")]:
        try:
            notebooks.load(text)
        except notebooks.NotebookError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError("no error")


LOOP = ("for i, batch in enumerate(loader):\n"
        "    optimizer.zero_grad()\n"
        "    (model(batch) / accum).backward()\n"
        "    if (i + 1) % accum == 0 or i + 1 == len(loader):\n"
        "        optimizer.step()\n")


def fixed_notebook(text):
    nb = notebooks.load(text)
    return notebooks.write_back(nb, fix_source(nb.program, "t.ipynb", unsafe=True).source)


def findings(text):
    nb = notebooks.load(text)
    return [(f.cell, f.line, f.code) for f in map(nb.locate, lint_source(nb.program, "t.ipynb"))]


def test_a_comment_like_the_cell_marker_is_only_a_comment():
    marker_like = "# accumcheck-cell 1\nimport torch\noptimizer = torch.optim.AdamW(model.parameters())\n"
    text = make_notebook(("code", marker_like), ("code", LOOP + "print('done')\n"))
    written = json.loads(fixed_notebook(text))
    assert "".join(written["cells"][0]["source"]) == marker_like
    assert "".join(written["cells"][1]["source"]).endswith("        optimizer.zero_grad()\nprint('done')\n")


def test_ipython_help_is_only_a_name_and_question_marks():
    body = LOOP.replace("    optimizer.zero_grad()\n", "").replace(
        "optimizer.step()\n", "optimizer.step()\n        optimizer.zero_grad()  # needed here?\n")
    text = make_notebook(("code", "import torch\noptimizer = torch.optim.AdamW(model.parameters())\nnp.*load*?\n"),
                         ("code", body), ("code", "optimizer.step??\n"))
    assert findings(text) == []


def test_shell_and_magic_continuation_lines_and_line_separators_in_strings():
    text = make_notebook(
        ("code", "!pip install \\\n    diffusers \\\n    accelerate\n%env CUDA_VISIBLE_DEVICES=0 \\\n  extra\n"),
        ("code", "files = !ls\nlabel = 'a\u2028b'\nimport torch\noptimizer = torch.optim.AdamW(model.parameters())\n"),
        ("code", LOOP),
    )
    assert findings(text) == [(3, 2, "ACC101")]


def test_automagic_commands_without_their_percent_sign_are_ipython_and_python_using_those_names_is_not():
    text = make_notebook(
        ("code", "!git clone https://github.com/example/project\ncd project\npip install -e .\n"),
        ("code", "import time\ntime.sleep(1)\nls = ['a', 'b']\nimport torch\n"
                 "optimizer = torch.optim.AdamW(model.parameters())\n"),
        ("code", LOOP),
    )
    assert findings(text) == [(3, 2, "ACC101")]
    assert "cd project" not in notebooks.load(text).program  # the command is out of the program
    assert "time.sleep(1)" in notebooks.load(text).program  # the module of that name is Python


def test_modulo_continuing_an_open_bracket_is_python_and_an_indented_command_keeps_its_block():
    cell = ("import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"
            "for i, batch in enumerate(loader):\n"
            "    optimizer.zero_grad()\n"
            "    (model(batch) / accum).backward()\n"
            "    if ((i + 1)\n"
            "        % accum == 0 or i + 1 == len(loader)):\n"
            "        optimizer.step()\n"
            "    if verbose:\n"
            "        !nvidia-smi\n")
    text = make_notebook(("code", cell))
    assert findings(text) == [(1, 4, "ACC101")]
    written = "".join(json.loads(fixed_notebook(text))["cells"][0]["source"])
    assert written.endswith("        % accum == 0 or i + 1 == len(loader)):\n        optimizer.step()\n        optimizer.zero_grad()\n"
                            "    if verbose:\n        !nvidia-smi\n")


def test_a_fix_rewrites_only_the_changed_cells_source_in_its_own_layout():
    """Indentation, escapes, number spellings, CRLF and key order of the file stay byte for byte."""
    loop_lines = ",\r\n".join("    " + json.dumps(line) for line in LOOP.splitlines(keepends=True))
    text = ('{\r\n  "metadata": {"lr": 1e-5, "name": "caf\\u00e9 \\/ x"},\r\n  "cells": [\r\n'
            '   {"cell_type": "code", "source": "import torch\\noptimizer = torch.optim.AdamW(model.parameters())\\n",'
            ' "outputs": [], "execution_count": null, "metadata": {}},\r\n'
            '   {"cell_type": "code", "metadata": {"tags": []}, "source": [\r\n' + loop_lines + "\r\n   ],\r\n"
            '    "outputs": [], "execution_count": 3}\r\n  ],\r\n  "nbformat": 4, "nbformat_minor": 5\r\n}\r\n')
    written = fixed_notebook(text)
    fixed_loop = LOOP.replace("    optimizer.zero_grad()\n", "") + "        optimizer.zero_grad()\n"
    expected_lines = ",\r\n".join("    " + json.dumps(line) for line in fixed_loop.splitlines(keepends=True))
    assert written == text.replace(loop_lines, expected_lines)


def test_malformed_notebooks_are_one_clear_line_each():
    cases = {
        '{"cells": "print(1)"}': "'cells' is a string, not a list",
        '{"cells": {"a": 1}}': "'cells' is an object, not a list",
        '{"cells": ["print(1)"]}': "cell 1 is a string, not an object",
        '{"cells": null}': "'cells' is null, not a list",
        '{"cells": [], "metadata": [1]}': "'metadata' is a list, not an object",
        '{"cells": [{"cell_type": "code", "source": {"a": 1}}]}': "the source of cell 1 is an object",
        '[1, 2]': "the top level is a list",
        '{"worksheets": []}': "nbformat 3",
    }
    for text, reason in cases.items():
        try:
            notebooks.load(text)
        except notebooks.NotebookError as exc:
            assert reason in str(exc) and "\n" not in str(exc), (text, str(exc))
        else:
            raise AssertionError(f"no error for {text}")


def test_notebooks_of_other_languages_are_not_python():
    text = json.dumps({"cells": [], "metadata": {"kernelspec": {"language": "R", "name": "ir"}}})
    try:
        notebooks.load(text)
    except notebooks.NotPython:
        pass
    else:
        raise AssertionError("an R notebook was read as Python")
