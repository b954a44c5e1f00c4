"""The README's two commands, CI running the test command, and rule pages inside the wheel."""

import email
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)


def test_readme_shows_the_demo_and_test_commands_first():
    demo, test = readme_commands()[:2]
    for command in (demo, test):
        assert command.startswith("python3 -m venv .venv && ")
    assert "accumcheck lint" in demo and "fixtures" in demo
    assert "pytest" in test and "torch==2.13.0" in test
    assert test.index("torch==2.13.0") < test.index('".[dev,verify]"')  # never an unpinned torch


def test_ci_runs_the_readme_test_command():
    extracted = subprocess.run(
        ["awk", '/<!-- test-command -->/{f=1; next} f && /^```bash/{g=1; next} g && /^```/{exit} g{print}',
         str(ROOT / "README.md")], capture_output=True, text=True, check=True).stdout.strip()
    assert extracted == readme_commands()[1]
    assert "awk '/<!-- test-command -->/" in (ROOT / ".ci" / "run").read_text()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(out)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [path] = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_wheel_ships_the_rule_pages(wheel):
    names = wheel.namelist()
    pages = sorted(Path(n).name for n in names if n.startswith("gradcheck_accum/rule_pages/"))
    assert pages and pages == sorted(p.name for p in (ROOT / "rules").glob("ACC*.md"))
    assert "gradcheck_accum/lint/engine.py" in names


def test_wheel_metadata_has_a_license_classifiers_and_project_urls(wheel):
    """Issue 15, item 18."""
    from gradcheck_accum.lint.pages import REPOSITORY

    [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    fields = email.message_from_string(wheel.read(metadata).decode())
    assert fields["License-Expression"] == "MIT" and fields.get_all("License-File") == ["LICENSE"]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist())
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    classifiers = fields.get_all("Classifier")
    assert "Programming Language :: Python :: 3.10" in classifiers and "Framework :: Pytest" in classifiers
    urls = dict(url.split(", ", 1) for url in fields.get_all("Project-URL"))
    assert urls["Homepage"] == urls["Source"] == REPOSITORY  # the rule-page URLs start there too
