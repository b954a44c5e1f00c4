"""The README's two commands, CI running the test command, and rule pages inside the wheel."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

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


def test_wheel_ships_the_rule_pages(tmp_path):
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-q", "-w", str(tmp_path)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    pages = sorted(Path(n).name for n in names if n.startswith("gradcheck_accum/rule_pages/"))
    assert pages and pages == sorted(p.name for p in (ROOT / "rules").glob("ACC*.md"))
    assert "gradcheck_accum/lint/engine.py" in names
