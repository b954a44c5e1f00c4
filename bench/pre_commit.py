"""pre-commit on one changed file, whole process: accumcheck's hook against a hook that does nothing.

    .venv/bin/python bench/pre_commit.py [--runs 7] [--hook repo|system] [--json out.json]

A scratch git repository holds a ~300-line training script (the fixtures concatenated, as in
bench/lint.py) and a .pre-commit-config.yaml with two hooks: accumcheck's and a local one whose
entry is `true` (pre-commit's own cost: reading its config, finding the staged files, starting a
hook). `--hook repo` (the default) is the `accumcheck-lint` hook of this checkout's HEAD, installed
by pre-commit into its own environment, without torch, before anything is timed, as a user gets it;
`--hook system` runs the `accumcheck` of this environment instead (nothing to install).

Each timed run changes the script (a line appended, so no cache can answer), stages it and runs
`pre-commit run HOOK` as its own process, as a commit would; the two hooks alternate, so machine
noise hits both alike. Prints medians and what accumcheck adds to a commit, measured in this run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from lint import training_script  # noqa: E402 - bench/ is not a package

PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
HOOKS = ("accumcheck", "noop")


def config(hook: str) -> str:
    if hook == "repo":
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        accumcheck = (f"  - repo: {ROOT}\n    rev: {head}\n    hooks:\n"
                      f"      - id: accumcheck-lint\n        alias: accumcheck\n")
    else:
        accumcheck = (f"  - repo: local\n    hooks:\n      - id: accumcheck\n        name: accumcheck\n"
                      f"        entry: {Path(sys.executable).with_name('accumcheck')} lint\n"
                      f"        language: system\n        types_or: [python, pyi, jupyter]\n")
    noop = ("  - repo: local\n    hooks:\n      - id: noop\n        name: noop\n        entry: 'true'\n"
            "        language: system\n        types_or: [python, pyi, jupyter]\n")
    return "repos:\n" + accumcheck + noop


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def scratch(directory: Path, hook: str) -> Path:
    repo = directory / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "bench@example.invalid")
    git(repo, "config", "user.name", "bench")
    (repo / ".pre-commit-config.yaml").write_text(config(hook))
    training_script(repo / "train.py")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start", "--no-verify")
    return repo


def timed_run(repo: Path, hook: str, env: dict, serial: int) -> tuple[float, int]:
    """Change the script, stage it, and time `pre-commit run HOOK` (the whole process)."""
    with open(repo / "train.py", "a", encoding="utf-8") as handle:
        handle.write(f"# edit {serial}\n")
    git(repo, "add", "train.py")
    start = time.perf_counter()
    done = subprocess.run([str(PRE_COMMIT), "run", hook], cwd=repo, env=env, capture_output=True)
    return time.perf_counter() - start, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each hook")
    parser.add_argument("--hook", choices=("repo", "system"), default="repo")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args(argv)
    if not PRE_COMMIT.exists():
        raise SystemExit("pre-commit is not installed here; run from the README's test set-up")
    import os

    with tempfile.TemporaryDirectory() as directory:
        work = Path(directory)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as in bench/lint.py
        env["PRE_COMMIT_HOME"] = str(work / "pre-commit-home")
        repo = scratch(work, args.hook)
        installed = subprocess.run([str(PRE_COMMIT), "install-hooks"], cwd=repo, env=env, capture_output=True,
                                   text=True)
        if installed.returncode != 0:
            raise SystemExit(f"pre-commit could not install the hooks:\n{installed.stdout}{installed.stderr}")
        serial = 0
        for hook in HOOKS:  # one untimed run each: bytecode caches written, as on any second commit
            serial += 1
            timed_run(repo, hook, env, serial)
        walls: dict[str, list[float]] = {hook: [] for hook in HOOKS}
        statuses: dict[str, set[int]] = {hook: set() for hook in HOOKS}
        for _ in range(args.runs):
            for hook in HOOKS:
                serial += 1
                wall, status = timed_run(repo, hook, env, serial)
                walls[hook].append(wall)
                statuses[hook].add(status)
        lines = (repo / "train.py").read_text().count("\n")
    medians = {hook: statistics.median(values) for hook, values in walls.items()}
    print(f"pre-commit run on one changed {lines}-line training script, {args.runs} runs each, hook={args.hook}")
    print(f"{'hook':<12} {'median s':>9} {'min s':>7} {'max s':>7}  exit codes")
    for hook in HOOKS:
        print(f"{hook:<12} {medians[hook]:>9.3f} {min(walls[hook]):>7.3f} {max(walls[hook]):>7.3f}  "
              f"{sorted(statuses[hook])}")
    added = medians["accumcheck"] - medians["noop"]
    print(f"accumcheck adds {added:.3f} s to the commit ({medians['accumcheck'] / medians['noop']:.1f}x the "
          f"no-op hook's whole run)")
    if args.json:
        args.json.write_text(json.dumps({"hook": args.hook, "runs": args.runs, "lines": lines, "walls": walls,
                                         "medians": medians, "added_s": added}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
