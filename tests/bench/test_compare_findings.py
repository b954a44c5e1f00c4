"""bench/compare_findings.py: one tree against itself reports no difference; the comparison names what
only one side reports, what was reworded, and which differences a fixture's `# expect:` marker asks for."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("bench_compare_findings", ROOT / "bench" / "compare_findings.py")
compare_findings = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compare_findings)

BUGGY = '''\
import torch


def train(model, loader, optimizer, accum_steps=4):
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()  # expect: ACC101
        loss = torch.nn.functional.mse_loss(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
            optimizer.step()
'''


def test_a_tree_against_itself_finds_the_same_findings(tmp_path, capsys):
    (tmp_path / "train.py").write_text(BUGGY)
    assert compare_findings.main([str(ROOT), str(ROOT), str(tmp_path / "train.py")]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("ACC", "total"))}
    assert rows["ACC101"] == ["1", "1", "0", "0", "0"]
    assert rows["total"][2:] == ["0", "0", "0"]


def test_differences_are_listed_by_kind_and_marked_when_a_fixture_expects_them(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    kept, gone, new = ("train.py", 8, 9, "ACC201"), ("train.py", 10, 13, "ACC104"), ("train.py", 6, 9, "ACC101")
    before = {kept: "old words", gone: "a false alarm"}
    after = {kept: "new words", new: "the bug"}
    out = compare_findings.compare(before, after, show=5, base=tmp_path)
    assert "  ACC104 only before: train.py:10:13: a false alarm" in out
    assert "  ACC101 only after [expected]: train.py:6:9: the bug" in out
    assert any(line.startswith("  ACC201 message changed: train.py:8:9: 'old words'") for line in out)
    assert next(line for line in out if line.startswith("total")).split() == ["total", "2", "2", "1", "1", "1"]
