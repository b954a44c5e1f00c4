"""bench/realworld/run.py end to end on a tiny fetched-style repository: a bare git dir with two commits
(a buggy training script, then its fix), manifests pinning each, and the figures the harness prints."""

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gradcheck_accum.lint.diagnostics import RUN_LINE

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("bench_realworld", ROOT / "bench" / "realworld" / "run.py")
realworld = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = realworld  # its dataclasses look their module up while the class is built
spec.loader.exec_module(realworld)

BUGGY = '''\
import torch
from torch import nn


def train(model, loader, accum_steps=4, epochs=2):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            scheduler.step()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
'''
# the fix commit: clear after the step, divide by N, schedule per step, flush the last window
FIXED = '''\
import torch
from torch import nn


def train(model, loader, accum_steps=4, epochs=2):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0 or i + 1 == len(loader):
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
'''
HELPER = "def batches(data, size):\n    return [data[i:i + size] for i in range(0, len(data), size)]\n"


def git(*args, cwd):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A mirror of 'acme/trainer' (buggy commit, then its fix) and dev/validation manifests."""
    tmp = tmp_path_factory.mktemp("realworld")
    work = tmp / "work"
    (work / "utils").mkdir(parents=True)
    (work / "train.py").write_text(BUGGY)
    (work / "utils" / "data.py").write_text(HELPER)
    (work / "utils" / "table.py").write_text("TABLE = [0] * 100\n")  # its blob goes missing below
    (work / "weights.bin").write_bytes(b"\0" * 64)  # likewise: snapshots lack their largest files
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "train", cwd=work)
    buggy = git("rev-parse", "HEAD", cwd=work)
    (work / "train.py").write_text(FIXED)
    git("commit", "-q", "-am", "fix accumulation", cwd=work)
    fixed = git("rev-parse", "HEAD", cwd=work)
    mirrors = tmp / "mirrors"
    git("clone", "-q", "--bare", str(work), str(mirrors / "acme+trainer" / "repo"), cwd=tmp)
    for path in ("utils/table.py", "weights.bin"):  # as in a fetched snapshot: big blobs absent
        oid = git("rev-parse", f"{buggy}:{path}", cwd=work)
        (mirrors / "acme+trainer" / "repo" / "objects" / oid[:2] / oid[2:]).unlink()  # a loose object

    manifests = tmp / "manifests"
    manifests.mkdir()
    (manifests / "dev.toml").write_text(f'''
[[repo]]
name = "acme/trainer"
commit = "{buggy}"
paths = ["train.py", "utils/", "gone.py"]
found = "test"

  [[repo.label]]
  path = "train.py"
  line = 11
  code = "ACC101"
  verdict = "bug"
  why = "zero_grad every micro-batch; fixed in {fixed[:12]}"

  [[repo.label]]
  path = "train.py"
  line = 13
  code = "ACC201"
  verdict = "ok"
  why = "(for the test) judged a false alarm"

  [[repo.label]]
  path = "train.py"
  line = [15, 16]
  code = "ACC406"
  verdict = "bug"
  why = "the last len(loader) % N micro-batches are never stepped"

  [[repo.label]]
  path = "utils/data.py"
  line = 2
  code = "ACC302"
  verdict = "bug"
  needs = "cross-file"
  why = "(for the test) a bug no finding matches"

  [[repo.label]]
  path = "train.py"
  line = 0
  code = "ACC101"
  verdict = "bug"
  why = "malformed: line 0"

[[repo]]
name = "acme/absent"
commit = "{"0" * 40}"
''')
    (manifests / "validation.toml").write_text(f'''
[[repo]]
name = "acme/trainer-fixed"
commit = "{fixed}"
paths = ["train.py"]
found = "test: the same repository after the fix"
''')
    # the validation entry names another repository with the same mirror
    git("clone", "-q", "--bare", str(work), str(mirrors / "acme+trainer-fixed" / "repo"), cwd=tmp)
    return {"tmp": tmp, "mirrors": mirrors, "manifests": manifests, "buggy": buggy, "fixed": fixed}


def run(corpus, capsys, *extra):
    args = ["--manifests", str(corpus["manifests"]), "--mirrors", str(corpus["mirrors"]),
            "--checkouts", str(corpus["tmp"] / "checkouts"), *extra]
    assert realworld.main(args) == 0
    return capsys.readouterr()


@pytest.fixture(scope="module")
def report(corpus):
    """One run over both halves (two lints), shared by the tests below."""
    out_json = corpus["tmp"] / "figures.json"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert realworld.main(["--manifests", str(corpus["manifests"]), "--mirrors", str(corpus["mirrors"]),
                               "--checkouts", str(corpus["tmp"] / "checkouts"),
                               "--unjudged", "--missed", "--json", str(out_json)]) == 0
    return {"out": out.getvalue(), "err": err.getvalue(), "figures": json.loads(out_json.read_text())}


def test_per_rule_precision_and_recall(report):
    rules = report["figures"]["dev"]["rules"]
    assert rules["ACC101"] == {"findings": 1, "bug": 1, "ok": 0, "unjudged": 0, "labelled": 1, "found": 1,
                               "precision": 1.0, "recall": 1.0}
    assert rules["ACC201"]["ok"] == 1 and rules["ACC201"]["precision"] == 0.0
    assert rules["ACC401"]["unjudged"] == 1 and rules["ACC401"]["precision"] is None
    assert rules["ACC406"]["found"] == 1  # a label with a list of lines matches a finding at any of them
    assert rules["ACC302"] == {"findings": 0, "bug": 0, "ok": 0, "unjudged": 0, "labelled": 1, "found": 0,
                               "precision": None, "recall": 0.0}
    total = report["figures"]["dev"]["total"]
    assert (total["findings"], total["bug"], total["ok"], total["unjudged"]) == (4, 2, 1, 1)
    assert (total["labelled"], total["found"], total["precision"], total["recall"]) == (3, 2, 0.667, 0.667)


def test_each_half_lints_its_own_commit(report, corpus):
    figures = report["figures"]
    assert set(figures) == {"dev", "validation", "all"}
    assert "ACC101" not in figures["validation"]["rules"]  # the fixed commit clears gradients on the boundary
    assert figures["all"]["total"]["findings"] == \
        figures["dev"]["total"]["findings"] + figures["validation"]["total"]["findings"]
    checkouts = corpus["tmp"] / "checkouts"
    assert "optimizer.zero_grad()" in (checkouts / "acme+trainer" / corpus["buggy"] / "train.py").read_text()
    # the whole tree is written (calls resolve into it), only the listed paths are linted
    assert (checkouts / "acme+trainer-fixed" / corpus["fixed"] / "utils" / "data.py").is_file()


def test_listings_and_one_line_problems(report):
    out, err = report["out"], report["err"]
    assert "acme/absent: no mirror at" in out and "run `fetch github:acme/absent`" in out
    assert "acme/trainer:train.py:14: ACC401" in out and "    scheduler.step()" in out  # unjudged + source
    assert "acme/trainer:utils/data.py:2: ACC302 [needs cross-file]" in out  # missed
    assert "acme/trainer:train.py:11: ACC101" not in out  # judged and found: in neither listing
    assert "missed, by what finding them needs: cross-file 1" in out
    assert "acme/trainer: label #5: train.py: line must be a positive integer" in err  # malformed: skipped
    assert "gone.py does not exist at" in err
    assert "acme/trainer: 1 Python file(s) absent from the snapshot, not linted: utils/table.py" in err


def test_half_selects_its_manifest(corpus, capsys):
    out = run(corpus, capsys, "--half", "validation", "--repo", "acme/absent").out
    assert "acme/absent" not in out and "## validation" in out and "## dev" not in out


def test_findings_lists_every_finding_with_its_verdict(corpus, capsys):
    out = run(corpus, capsys, "--half", "dev", "--findings").out
    listing = out[out.index("## findings and their labels"):].splitlines()[1:]
    rows = [line.split()[:3] for line in listing if line and not line.startswith(" ")]
    assert [verdict for verdict, _, _ in rows].count("bug") == 2  # the run's figures: 2 bug, 1 ok, 1 unjudged
    assert sorted((verdict, code) for verdict, _, code in rows if verdict != "bug") == [("ok", "ACC201"), ("unjudged", "ACC401")]
    assert ["bug", "acme/trainer:train.py:11:", "ACC101"] in rows
    assert sum(line.startswith("         why: ") for line in listing) == 3  # the judged ones say why


def test_manifest_errors_are_one_line_each(tmp_path):
    bad = tmp_path / "dev.toml"
    bad.write_text('[[repo]]\nname = "no-slash"\ncommit = "abc"\n\n[[repo]]\nname = "a/b"\ncommit = "' + "f" * 40
                   + '"\n  [[repo.label]]\n  path = "x.py"\n  line = 3\n  code = "E501"\n  verdict = "bug"\n'
                   '  why = "x"\n')
    warnings = []
    repos = realworld.load_manifest(bad, "dev", warnings.append)
    assert [r.name for r in repos] == ["a/b"] and repos[0].labels == []
    assert len(warnings) == 2 and "name must be 'owner/name'" in warnings[0] and "code must look like" in warnings[1]
    assert realworld.load_manifest(tmp_path / "missing.toml", "validation", warnings.append) == []


def test_a_finding_at_a_call_is_judged_by_the_label_on_the_line_it_runs():
    """The linter reports a clip in a helper of another file at the loop's call of it, naming the clip's
    line as the line the call runs: that finding meets the label on the clip, and no other."""
    clip = realworld.Label("acme/t", "utils.py", (7,), "ACC405", "bug", "clips before unscale_", None)
    at_call = realworld.Finding("acme/t", "train.py", 30, "ACC405", "m", (("utils.py", 7),))
    elsewhere = realworld.Finding("acme/t", "train.py", 31, "ACC405", "m", (("utils.py", 9),))
    other_rule = realworld.Finding("acme/t", "train.py", 32, "ACC403", "m", (("utils.py", 7),))
    result = realworld.score([clip], [at_call, elsewhere, other_rule])
    assert result.true == [(at_call, clip)] and result.found == [clip]
    assert result.unjudged == [elsewhere, other_rule]
    assert realworld.RUN_LINE == RUN_LINE  # the words the linter's JSON gives that location
