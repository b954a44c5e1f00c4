"""Every command and snippet in the README runs, exactly as written.

Each fenced block follows a `<!-- snippet: NAME (note) -->` marker (the test command's marker is
`<!-- test-command -->`, which CI reads), and each name has its test here: adding a block without a
test fails `test_every_block_has_a_marker_and_a_test`. Blocks that need the network or GitHub say so
in their note; their tests check what can be checked offline. Shell blocks run from a scratch
project whose `.venv` is this environment, with the files they name; Python blocks run after a
preamble that defines only the names the prose leaves to the reader (`model`, `batch`, ...).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ecosystem.working_tree import copy_working_tree
from lint_cli.cli_samples import BUGGY, CLEAN

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
MARKER = re.compile(r"<!-- (?:snippet: (?P<name>[\w-]+)(?: \((?P<note>[^)]*)\))?|(?P<test>test-command)) -->\n"
                    r"```(?P<language>\w+)\n(?P<body>.*?)\n```", re.S)
BLOCKS = {(m.group("name") or m.group("test")): m.group("body") for m in MARKER.finditer(README)}
NOTES = {m.group("name"): m.group("note") for m in MARKER.finditer(README) if m.group("name")}
TESTED = {
    "demo", "test-command", "cpu-torch", "lint", "settings", "pre-commit-remote", "pre-commit-local",
    "ruff-external", "action", "bench", "verify", "verify-commands", "verify-fixture", "verify-loop",
    "verify-loop-commands", "verify-trainer", "guard", "guard-frameworks",
}
BIN = Path(sys.executable).parent


def test_every_block_has_a_marker_and_a_test():
    assert README.count("```") // 2 == len(BLOCKS), "a fenced block without a snippet marker"
    assert set(BLOCKS) == TESTED
    for name, note in NOTES.items():  # the exceptions say why they are exceptions
        if name in ("cpu-torch", "pre-commit-remote", "action"):
            assert note and ("network" in note or "GitHub" in note), name
    assert "sketch" in NOTES["guard-frameworks"] and "sketch" in NOTES["verify-trainer"]


def clean_env(**extra: str) -> dict:
    """The environment of a user's shell: this venv is reached through `.venv/bin`, not through PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(sys.prefix))
    return {**env, **extra}


def shell(command: str, cwd: Path, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=cwd, env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout)


def expected_status(line: str) -> int:
    """`# exit N` in a command's comment (every command in the README that can fail says which status it gives)."""
    match = re.search(r"#.*\bexit (\d)", line)
    return int(match.group(1)) if match else 0


@pytest.fixture
def project(tmp_path):
    """A user's project, whose `.venv` is this environment."""
    (tmp_path / ".venv").symlink_to(sys.prefix)
    return tmp_path


@pytest.fixture
def checkout(project):
    """The same, with fixtures/ as in a checkout of this repository."""
    shutil.copytree(ROOT / "fixtures", project / "fixtures")
    return project


@pytest.mark.slow  # a fresh virtual environment and an editable install
def test_demo(tmp_path):
    checkout = copy_working_tree(tmp_path / "accumcheck")
    result = shell(BLOCKS["demo"], checkout, timeout=900)
    assert result.returncode == 0, result.stderr
    assert "fixtures/manual_zero_grad_every_micro_batch.py:" in result.stdout and " ACC101 " in result.stdout
    assert "Found " in result.stderr


def test_test_command_is_what_ci_runs():
    """Not run here: it runs this suite. .ci/run extracts and runs it (tests/lint_cli/test_packaging.py)."""
    command = BLOCKS["test-command"]
    assert "pytest" in command and command.index("torch==2.13.0") < command.index('".[dev,verify]"')


def test_cpu_torch_pins_the_version_the_test_command_pins():
    """Issue 15, item 16: the README says where the CPU build comes from; needs the network to run."""
    pinned = re.findall(r"torch==([\d.]+)", BLOCKS["test-command"])
    assert re.findall(r"torch==([\d.]+)", BLOCKS["cpu-torch"]) == pinned
    assert "--index-url https://download.pytorch.org/whl/cpu" in BLOCKS["cpu-torch"]
    assert "CUDA build" in README and "nvidia-*" in README


def test_lint(project):
    (project / "src").mkdir()
    (project / "src" / "loop.py").write_text(BUGGY)
    (project / "train.py").write_text(BUGGY)
    lint, stdin, page = BLOCKS["lint"].splitlines()
    result = shell(lint, project)
    assert result.returncode == 1 and sorted(line.split(":")[0] for line in result.stdout.splitlines()) == \
        ["src/loop.py", "train.py"]
    result = shell(stdin, project)
    assert result.returncode == 1 and result.stdout.startswith("train.py:4:5: ACC101")
    result = shell(page, project)
    assert result.returncode == 0 and result.stdout.startswith("# ACC101 zero-grad-every-micro-batch")


def test_settings(project):
    (project / "pyproject.toml").write_text(BLOCKS["settings"] + "\n")
    for name in ("third_party/vendored.py", "proto_pb2.py", "tests/test_train.py", "train.py"):
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(BUGGY)
    shown = shell(".venv/bin/accumcheck lint --show-settings train.py", project)
    assert shown.returncode == 0, shown.stderr
    assert "fail-on: error" in shown.stdout and "ACC204" not in shown.stdout.split("enabled rules:")[1].split("\n")[0]
    files = shell(".venv/bin/accumcheck lint --show-files .", project)
    assert sorted(files.stdout.split()) == ["tests/test_train.py", "train.py"]


def test_pre_commit_remote_names_this_repository_and_its_hooks():
    """Needs the network (and a commit to pin); tests/ecosystem/test_pre_commit.py runs the hooks
    themselves with `pre-commit try-repo` on this checkout."""
    from gradcheck_accum.lint.pages import REPOSITORY

    [repo] = yaml.safe_load(BLOCKS["pre-commit-remote"])["repos"]
    assert repo["repo"] == REPOSITORY and re.fullmatch(r"[0-9a-f]{40}", repo["rev"])
    hooks = {hook["id"] for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert {hook["id"] for hook in repo["hooks"]} <= hooks and "accumcheck-fix" in hooks


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed")
def test_pre_commit_local(tmp_path):
    """Issue 15, item 15: the pre-commit snippet works as written (the old one named a tag that does not
    exist)."""
    git = lambda *args: subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / ".pre-commit-config.yaml").write_text(BLOCKS["pre-commit-local"] + "\n")
    (tmp_path / "train.py").write_text(BUGGY)
    git("add", ".")
    env = {"PRE_COMMIT_HOME": str(tmp_path / ".pre-commit-home"), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    failed = subprocess.run([str(BIN / "pre-commit"), "run"], cwd=tmp_path, capture_output=True, text=True,
                            env={**clean_env(), **env}, timeout=600)
    assert failed.returncode == 1 and "train.py:4:5: ACC101" in failed.stdout, failed.stdout + failed.stderr
    (tmp_path / "train.py").write_text(CLEAN)
    git("add", ".")
    passed = subprocess.run([str(BIN / "pre-commit"), "run"], cwd=tmp_path, capture_output=True, text=True,
                            env={**clean_env(), **env}, timeout=600)
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_ruff_external_keeps_accumcheck_codes(tmp_path):
    ruff = BIN / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is not installed (it is in the dev extra)")
    (tmp_path / "train.py").write_text("import os  # noqa: F401, ACC101\nstep = 1  # noqa: ACC101\n")
    command = [str(ruff), "check", "--no-cache", "--preview", "--select", "F401,RUF100,RUF102", "--output-format",
               "concise", "--isolated", "train.py"]
    alone = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert alone.returncode == 1 and alone.stdout.count("ACC101") == 2  # ruff alone would remove the codes
    (tmp_path / "pyproject.toml").write_text(BLOCKS["ruff-external"] + "\n")
    command.remove("--isolated")
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_action_workflow_uses_this_action_with_its_inputs():
    """Needs GitHub; tests/ecosystem/test_action.py runs the action's steps locally."""
    from gradcheck_accum.lint.pages import REPOSITORY

    workflow = yaml.safe_load(BLOCKS["action"])
    [job] = workflow["jobs"].values()
    assert job["permissions"]["security-events"] == "write"
    [step] = [s for s in job["steps"] if s["uses"].startswith(REPOSITORY.removeprefix("https://github.com/") + "@")]
    inputs = yaml.safe_load((ROOT / "action.yml").read_text())["inputs"]
    assert set(step["with"]) <= set(inputs)


@pytest.mark.skipif(not os.environ.get("ACCUMCHECK_README_BENCH"), reason="nightly: ACCUMCHECK_README_BENCH=1")
def test_bench():
    """The benchmarks, as written, except bench/lint.py's peers (they come from the package registry)."""
    for line in BLOCKS["bench"].splitlines():
        command = line.split("#")[0].strip()
        if "bench/lint.py" in command:
            command += " --skip-peers"
        result = shell(command, ROOT, timeout=3600)
        assert result.returncode == 0, (command, result.stderr[-2000:])


# --- verify: the Python blocks are whole programs; each runs as written, in its own process
def run_python(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "snippet.py"
    script.write_text(code + "\n")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)


def test_verify(tmp_path):
    """The block's own comment says what it prints."""
    printed = re.search(r"print\(report\.verdict, report\.diagnosis\)\s+# (.*?)\s*\.\.\.$", BLOCKS["verify"], re.M)
    result = run_python(tmp_path, BLOCKS["verify"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(printed.group(1)), result.stdout


@pytest.mark.slow  # each command is a process that imports torch; the first compiles
@pytest.mark.parametrize("line", [line for line in BLOCKS["verify-commands"].splitlines() if line.strip()])
def test_verify_commands(checkout, line):
    result = shell(line, checkout, timeout=900)
    assert result.returncode == expected_status(line), result.stdout[-2000:] + result.stderr[-2000:]


# The property's negative control: the same test with the README's mean-of-means bug (a per-micro-batch
# token mean, divided by N) must fail, naming it, and shrink to a two-micro-batch window.
MEAN_OF_MEANS_TWIN = '''
import re
import pytest
import test_readme_property as readme

token_loss_sum = readme.token_loss_sum


def token_loss_mean(model, batch):
    return token_loss_sum(model, batch) / int((batch["labels"] != -100).sum())


def test_the_property_fails_on_a_mean_of_means(accumcheck, monkeypatch):
    monkeypatch.setattr(readme, "token_loss_sum", token_loss_mean)
    monkeypatch.setattr(readme, "window_tokens", lambda micro_batch, window: len(window))
    with pytest.raises(pytest.fail.Exception, match="mean-of-means") as failed:
        readme.test_loss_accumulates(accumcheck=accumcheck)
    [plan] = re.findall(r"plan=\\((\\d+), \\[(.*?)\\]\\)", "\\n".join(getattr(failed.value, "__notes__", [])))
    assert len(plan[1].split(",")) == 2, plan
'''


@pytest.mark.slow  # hypothesis runs the model a few hundred times, and shrinks the control's failure
def test_verify_fixture(tmp_path):
    """The block as a test module, run by pytest with the installed plugin, beside its negative control."""
    (tmp_path / "test_readme_property.py").write_text(BLOCKS["verify-fixture"] + "\n")
    (tmp_path / "test_mean_of_means_control.py").write_text(MEAN_OF_MEANS_TWIN)
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                             "test_readme_property.py", "test_mean_of_means_control.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and "2 passed" in result.stdout, result.stdout[-3000:]


@pytest.mark.slow  # a process that imports torch
def test_verify_loop(tmp_path):
    result = run_python(tmp_path, BLOCKS["verify-loop"] + "\nprint(report.verdict)")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-1] == "match"


@pytest.mark.slow  # two processes under DDP
@pytest.mark.parametrize("line", [line for line in BLOCKS["verify-loop-commands"].splitlines() if line.strip()])
def test_verify_loop_commands(checkout, line):
    result = shell(line, checkout, timeout=900)
    assert result.returncode == expected_status(line), result.stdout[-2000:] + result.stderr[-2000:]


GUARD_PREAMBLE = """
import torch
import torch.nn.functional as F
torch.manual_seed(0)
N = 2
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""
# the loop the comment's error comes from: gradients cleared on every micro-batch
GUARD_LOOP = """
from gradcheck_accum.guards import GuardError
try:
    for i in range(8):
        optimizer.zero_grad()
        (F.mse_loss(model(torch.randn(2, 4)), torch.randn(2, 1)) / N).backward()
        if (i + 1) % N == 0:
            optimizer.step()
except GuardError as exc:
    print(exc)
"""


@pytest.mark.slow
def test_guard(tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text(GUARD_PREAMBLE + BLOCKS["guard"] + "\n" + GUARD_LOOP)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = re.search(r"GuardError: (ACC\d+: gradients were cleared)", BLOCKS["guard"]).group(1)
    assert result.stdout.startswith(expected), result.stdout


def callbacks(line: str) -> str:
    """The `[...]` a Trainer line passes as callbacks, as written."""
    return re.search(r"callbacks=(\[.*?\])\)", line).group(1)


@pytest.mark.slow
def test_guard_frameworks(tmp_path):
    """The accelerate line as written; for the Trainers, what stands beside `...`: the callbacks, made
    as written, are the frameworks' own callback types."""
    accelerate_line, hf_line, lightning_line = BLOCKS["guard-frameworks"].splitlines()
    script = tmp_path / "snippet.py"
    script.write_text(GUARD_PREAMBLE + textwrap.dedent("""
        import gradcheck_accum
        import gradcheck_accum.guards.hf
        import gradcheck_accum.guards.lightning
        from accelerate import Accelerator
        accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        """) + accelerate_line + "\n" + textwrap.dedent("""
        import transformers, lightning
        [hf] = HF
        [pl] = PL
        assert isinstance(hf, transformers.TrainerCallback) and isinstance(pl, lightning.Callback)
        print("ok")
        """).replace("HF", callbacks(hf_line)).replace("PL", callbacks(lightning_line)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 and result.stdout.split()[-1] == "ok", result.stderr[-3000:]


def test_verify_trainer_sketch_calls_what_the_package_exports():
    """A sketch cannot run (its objects are the reader's), but every call in it must bind to the
    exported function's signature, so a renamed or dropped argument fails here."""
    import ast
    import inspect

    import gradcheck_accum

    calls = [node for node in ast.walk(ast.parse(BLOCKS["verify-trainer"]))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("verify")]
    assert len(calls) == 3
    for call in calls:
        signature = inspect.signature(getattr(gradcheck_accum, call.func.id))
        signature.bind(*call.args, **{keyword.arg: keyword.value for keyword in call.keywords})
