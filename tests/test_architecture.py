"""The layering the linter promises: what loads what, and the one list of checks."""

import subprocess
import sys

from gradcheck_accum.lint import registry


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
