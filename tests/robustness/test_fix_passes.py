"""--fix applies every fix it can, in a number of passes that does not grow with the number of fixes,
and says so when fixes do not settle."""

from __future__ import annotations

from gradcheck_accum.lint import engine

LOOP = """
for i, batch in enumerate(loader):
    loss = model(batch) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
torch.save(model.state_dict(), "m{}.pt")
lr = 0.1  # noqa: ACC101
"""
HEADER = "import torch\nmodel = torch.compile(model)\n"


def test_every_fix_is_applied_in_a_few_passes(monkeypatch):
    passes = []
    analyze = engine.analyze
    monkeypatch.setattr(engine, "analyze", lambda *args, **kwargs: passes.append(1) or analyze(*args, **kwargs))
    source = HEADER + "".join(LOOP.format(i) for i in range(40))
    result = engine.fix_source(source, "t.py", unsafe=True)
    assert len(result.fixed) == 80 and result.converged and result.remaining == []
    assert result.source.count('getattr(model, "_orig_mod", model).state_dict()') == 40
    assert "noqa" not in result.source
    assert len(passes) <= 3  # fix the calls, then the comments, then find nothing


def test_fixes_that_do_not_settle_are_said_to(tmp_path):
    source = HEADER + "".join(LOOP.format(i) for i in range(3))
    result = engine.fix_source(source, "t.py", unsafe=True, max_passes=1)
    assert not result.converged and len(result.fixed) == 3 and len(result.remaining) == 3
