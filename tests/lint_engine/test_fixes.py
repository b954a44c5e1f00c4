"""Autofixes: exact output, the result parses, a second pass changes nothing, the rule is gone."""

import textwrap

import libcst as cst
import pytest

from gradcheck_accum.lint.engine import fix_source, lint_source
from gradcheck_accum.lint import registry

HEADER = "import torch\noptimizer = torch.optim.AdamW(model.parameters())\n"

CASES = {
    "ACC101": (
        """
        for i, batch in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(batch.x), batch.y) / accum
            loss.backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
        """,
        """
        for i, batch in enumerate(loader):
            loss = criterion(model(batch.x), batch.y) / accum
            loss.backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()
        """,
    ),
    "ACC201": (
        """
        for micro_step in range(grad_accum):
            logits, loss = model(x, y)
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        """,
        """
        for micro_step in range(grad_accum):
            logits, loss = model(x, y)
            scaler.scale(loss / grad_accum).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        """,
    ),
    "ACC302": (
        """
        model = torch.compile(model)
        torch.save({"model": model.state_dict()}, "ckpt.pt")
        """,
        """
        model = torch.compile(model)
        torch.save({"model": getattr(model, "_orig_mod", model).state_dict()}, "ckpt.pt")
        """,
    ),
    "ACC303": (
        """
        for epoch in range(epochs):
            fast = torch.compile(model)
            for batch in loader:
                fast(batch).backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        fast = torch.compile(model)
        for epoch in range(epochs):
            for batch in loader:
                fast(batch).backward()
                optimizer.step()
                optimizer.zero_grad()
        """,
    ),
    "ACC401": (
        """
        for micro_step in range(accum):
            (model(x) / accum).backward()
            scheduler.step()
        optimizer.step()
        optimizer.zero_grad()
        """,
        """
        for micro_step in range(accum):
            (model(x) / accum).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        """,
    ),
    "ACC403": (
        """
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()
        """,
        """
        for i, batch in enumerate(loader):
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
        """,
    ),
    "ACC404": (
        """
        scaler = torch.amp.GradScaler()
        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum).backward()
            scaler.unscale_(optimizer)
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                optimizer.zero_grad()
            scaler.update()
        """,
        """
        scaler = torch.amp.GradScaler()
        for i, batch in enumerate(loader):
            scaler.scale(model(batch) / accum).backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        """,
    ),
}


def program(body: str) -> str:
    return HEADER + textwrap.dedent(body).lstrip("\n")


def codes(source: str) -> set[str]:
    return {finding.code for finding in lint_source(source, "t.py")}


@pytest.mark.parametrize("code", sorted(CASES))
def test_fix_output_and_idempotence(code):
    before, after = (program(body) for body in CASES[code])
    assert code in codes(before)
    result = fix_source(before, "t.py", unsafe=True)
    assert result.source == after
    cst.parse_module(result.source)
    assert code not in codes(result.source)
    assert fix_source(result.source, "t.py", unsafe=True).source == result.source


def test_unsafe_fixes_need_opt_in():
    before = program(CASES["ACC101"][0])
    result = fix_source(before, "t.py", unsafe=False)
    assert result.source == before
    assert [f.code for f in result.remaining] == ["ACC101"]
    assert result.remaining[0].fix_safety == "unsafe"


def test_safe_fix_applies_by_default():
    before = program(CASES["ACC302"][0]) + "lr = 0.1  # noqa: ACC101\n"
    assert fix_source(before, "t.py").source == program(CASES["ACC302"][0]) + "lr = 0.1\n"


def test_moving_the_only_statement_of_a_block_leaves_pass():
    source = program(
        """
        for i, batch in enumerate(loader):
            if use_amp:
                optimizer.zero_grad()
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
        """
    )
    result = fix_source(source, "t.py", unsafe=True)
    assert result.source == program(
        """
        for i, batch in enumerate(loader):
            if use_amp:
                pass
            (model(batch) / accum).backward()
            if (i + 1) % accum == 0 or i + 1 == len(loader):
                optimizer.step()
                optimizer.zero_grad()
        """
    )
    assert result.remaining == []
