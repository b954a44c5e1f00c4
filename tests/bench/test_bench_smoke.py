"""bench/lint.py's own logic (no timing, no peer installs): sampling, the script, the table."""

import importlib.util
from pathlib import Path

import libcst

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("bench_lint", ROOT / "bench" / "lint.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_sample_is_deterministic_and_spread():
    files = [Path(f"f{i:04d}.py") for i in range(2285)]
    first, again = bench.sample(files, 150), bench.sample(list(files), 150)
    assert first == again and len(first) == 150 and len(set(first)) == 150
    assert first[0] == files[0] and first[-1].name > "f2200.py"
    assert bench.sample(files[:10], 150) == files[:10]


def test_training_script_is_valid_python_of_about_300_lines(tmp_path):
    script = bench.training_script(tmp_path / "s.py")
    text = script.read_text()
    assert text.count("\n") >= 300
    libcst.parse_module(text)


def test_table_and_ratios():
    rows = {"accumcheck, sample": {"median": 0.5, "memory": 40.0, "walls": [0.5, 0.6, 0.4]},
            "peer, sample": {"note": "not installed", "walls": []}}
    table = bench.render(rows, [("peer / accumcheck", bench.ratio(None, 0.5), ">= 100x")])
    assert "accumcheck, sample" in table and "0.500" in table and "not installed" in table
    assert bench.ratio(50.0, 0.5) == "100.0x" and bench.ratio(None, 1.0) == "n/a"
    assert bench.median([3.0, 1.0, 2.0]) == 2.0 and bench.median([]) is None


def test_generated_project_has_the_size_asked_and_a_file_that_reaches_others(tmp_path, monkeypatch):
    from gradcheck_accum.lint.config import Settings
    from gradcheck_accum.lint.files import Target
    from gradcheck_accum.lint.runner import Options, lint_targets

    changed = bench.generated_project(tmp_path / "p", 100)
    files = list((tmp_path / "p").rglob("*.py"))
    assert len(files) >= 100  # every fixture project, then filler modules up to the size asked
    assert bench.project_lines(tmp_path / "p") >= 10 * len(files)
    monkeypatch.chdir(tmp_path / "p")
    [result] = lint_targets([Target(changed.relative_to(tmp_path / "p").as_posix(), changed)], Settings(), Options(), jobs=1)
    # the finding needs the loss scaler and the DDP model of two other files of the project
    assert [f.code for f in result.findings] == ["ACC501"]
