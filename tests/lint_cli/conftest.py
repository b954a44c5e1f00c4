import pytest
from click.testing import CliRunner

from cli_samples import BUGGY, CLEAN
from gradcheck_accum.cli import main


@pytest.fixture
def run(monkeypatch, tmp_path):
    """Invoke the CLI in tmp_path (so no pyproject.toml of this repository applies)."""
    monkeypatch.chdir(tmp_path)

    def invoke(*args, input=None):
        return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def project(tmp_path):
    (tmp_path / "buggy.py").write_text(BUGGY)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path
