"""`pytest --nightly` turns the environment-driven test sizes up (tests/conftest.py)."""

import importlib.util
import os
from pathlib import Path

# By path: every test folder's conftest.py is a module named `conftest` to pytest.
_SPEC = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).with_name("conftest.py"))
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)


class _Options:
    """What pytest_configure reads of pytest's config: the options given on the command line."""

    def __init__(self, *given: str) -> None:
        self.given = given

    def getoption(self, name: str) -> bool:
        return name in self.given


def unset_sizes(monkeypatch):
    for name in conftest.NIGHTLY_SIZES:
        monkeypatch.delenv(name, raising=False)  # and restored after the test, whatever it sets


def test_nightly_sets_the_nightly_sizes(monkeypatch):
    unset_sizes(monkeypatch)
    conftest.pytest_configure(_Options())
    assert not any(name in os.environ for name in conftest.NIGHTLY_SIZES)
    conftest.pytest_configure(_Options("--nightly"))
    assert {name: os.environ[name] for name in conftest.NIGHTLY_SIZES} == conftest.NIGHTLY_SIZES


def test_a_size_set_in_the_environment_wins(monkeypatch):
    unset_sizes(monkeypatch)
    monkeypatch.setenv("ACCUMCHECK_FUZZ_EXAMPLES", "7")
    conftest.pytest_configure(_Options("--nightly"))
    assert os.environ["ACCUMCHECK_FUZZ_EXAMPLES"] == "7"
