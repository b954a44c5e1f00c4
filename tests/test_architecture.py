"""The layering the linter promises: what loads what, and the one list of checks."""

import re
import subprocess
import sys
from pathlib import Path

from gradcheck_accum.lint import registry

ROOT = Path(__file__).resolve().parent.parent


def loaded_after(statement: str) -> set[str]:
    """The gradcheck_accum modules a fresh interpreter has loaded after running `statement`."""
    code = f"{statement}\nimport sys\nprint('\\n'.join(m for m in sys.modules if m.startswith('gradcheck_accum')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_settings_read_the_light_table_of_codes_not_the_rules():
    loaded = loaded_after("from gradcheck_accum.lint import config\nconfig.expand(['ALL', 'ACC4'])")
    assert not any(name.startswith("gradcheck_accum.lint.rules") for name in loaded), sorted(loaded)
    assert "gradcheck_accum.lint.rule" not in loaded and "gradcheck_accum.lint.model" not in loaded
    assert len(loaded) <= 6, sorted(loaded)


def test_the_light_table_and_the_rule_classes_agree():
    assert {code: name for code, name in registry.codes().items()} == \
        {check.code: check.name for check in registry.checks()}


def test_the_import_contracts_hold():
    """pyproject.toml's import-linter contracts: no circles, the layers, rules that only query the
    model, a linter that never imports torch."""
    done = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "kept" in done.stdout


def test_the_readme_lists_every_check():
    rows = re.findall(r"^\| (ACC\d{3}) \| ([a-z0-9-]+) \|", (ROOT / "README.md").read_text(), flags=re.M)
    assert dict(rows) == registry.codes()
    assert [code for code, _ in rows] == sorted(code for code, _ in rows)


def test_the_package_lints_clean_with_its_own_linter():
    """Dogfooding: the verifier's own accumulation loops (and the suppression comments of the linter's
    sources) give no finding; a false one here is a false one for users too."""
    done = subprocess.run([sys.executable, "-c", "from gradcheck_accum.cli import main; main()", "lint", "--no-cache",
                           "gradcheck_accum"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and "All checks passed" in done.stdout + done.stderr, \
        done.stdout[-3000:] + done.stderr[-2000:]
