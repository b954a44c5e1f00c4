"""Notebooks: code cells linted as one program, positions per cell, fixes written back per cell."""

import json

from gradcheck_accum.lint import notebooks
from gradcheck_accum.lint.engine import fix_source, lint_source
from gradcheck_accum.lint.rules import ALL_RULES


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
    findings = [nb.locate(f) for f in lint_source(nb.program, "train.ipynb", ALL_RULES)]
    assert [(f.cell, f.line, f.column, f.code) for f in findings] == [
        (5, 2, 5, "ACC101"),
        (5, 6, 12, "ACC302"),
    ]


def test_fix_rewrites_only_changed_cells_and_keeps_outputs_and_magics():
    nb = notebooks.load(NOTEBOOK)
    result = fix_source(nb.program, "train.ipynb", ALL_RULES, unsafe=True)
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
    assert lint_source(again.program, "train.ipynb", ALL_RULES) == []


def test_not_a_notebook_is_a_clear_error():
    for text, reason in [("{", "not a Jupyter notebook"), ('{"cells": []', "not a Jupyter notebook")]:
        try:
            notebooks.load(text)
        except notebooks.NotebookError as exc:
            assert reason in str(exc)
        else:
            raise AssertionError("no error")
