"""Lint speed: accumcheck against torch-preflight 0.5.0 and TorchFix 0.7.0, measured in one run.

    .venv/bin/python bench/lint.py [--runs 3] [--full] [--sample 150] [--json out.json] [--skip-peers]
                                   [--project-lines 1000000]

The peers are installed into their own virtual environments under bench/.venvs/ (pinned versions;
neither needs torch). Every measurement is a separate process; tools are interleaved within each
repetition (A B C A B C ...) so machine noise hits them alike; the table shows medians, peak
resident memory, and ratios between numbers taken in this same run.

Corpus: the installed torch package. Peers are slow (about 17 minutes for the whole package on
2 cores), so by default they lint a fixed sample of files (every k-th file in sorted order);
`--full` makes them lint the whole package too. accumcheck always also lints the whole package,
cold (no cache) and warm (cache primed), plus one ~300-line training script the way pre-commit
runs it. The baseline for the cold run is the bare libcst parse time of the files that some rule
could fire on (the ones the prefilter lets through).

Projects (issue 13): one file of a generated 100-file project linted the way pre-commit runs it
(the project model reads the other files: cold with no cache, warm from a cache the whole project
primed), against starting Python and importing libcst; and a generated project of about
`--project-lines` lines (1M by default; 0 skips it) linted whole, cold and warm.
"""

from __future__ import annotations

import argparse
import atexit
import compileall
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "bench" / ".venvs"
PEERS = {
    "torch-preflight": ("torch-preflight==0.5.0", ["torch-preflight", "check", "-q"]),
    "torchfix": ("torchfix==0.7.0", ["torchfix"]),
}
ACCUMCHECK = [str(Path(sys.executable).with_name("accumcheck")), "lint", "--exit-zero", "-q"]
IMPORT_FLOOR = "python -c 'import libcst'"


def torch_package() -> Path:
    """The installed torch package, found without importing it (an import would also inflate the
    peak memory reported for every child process forked from this one)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise SystemExit("torch is not installed here; run from the README's test set-up")
    return Path(spec.origin).parent


def torch_files() -> list[Path]:
    return sorted(torch_package().rglob("*.py"))


def sample(files: list[Path], size: int) -> list[Path]:
    """A fixed, deterministic sample: every k-th file of the sorted list."""
    if size >= len(files):
        return list(files)
    step = len(files) / size
    return [files[int(i * step)] for i in range(size)]


def install_peer(name: str) -> Path | None:
    requirement, command = PEERS[name]
    venv = VENVS / name
    exe = venv / "bin" / command[0]
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", requirement], capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{name}: install failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return None
    return exe


def measure(command: list[str], cwd: Path | None = None) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS in MB, exit code, CPU seconds) of one process. The CPU time (user and
    system, from wait4) is what a shared machine's load disturbs least."""
    # Installed tools run from bytecode caches; this machine's PYTHONDONTWRITEBYTECODE would make every
    # run recompile every module, which no user pays.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def training_script(target: Path, lines: int = 300) -> Path:
    """Whole fixture scripts concatenated to about `lines` lines: valid Python, realistic content."""
    text = ""
    for path in sorted((ROOT / "fixtures").glob("*.py")):
        if path.name.startswith("verify") or text.count("\n") >= lines:
            continue
        text += path.read_text() + "\n"
    target.write_text(text)
    return target


PARSE_BASELINE = """
import sys, time, libcst
from gradcheck_accum.lint.registry import rules
texts = [open(p, encoding="utf-8", errors="replace").read() for p in sys.argv[1:]]
chosen = [t for t in texts if any(rule.could_fire(t) for rule in rules())]
start, cpu = time.perf_counter(), time.process_time()
for text in chosen:
    libcst.parse_module(text)
print(len(chosen), time.perf_counter() - start, time.process_time() - cpu)
"""


def generated_project(root: Path, files: int) -> Path:
    """A project of about `files` Python files: the multi-file fixture projects (training loops whose
    helpers, losses and base classes sit in other files), then fixture scripts as further modules.
    Returns the file pre-commit would lint: a training loop that calls into two other files."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'generated'\n")
    count = 0
    for project in sorted((ROOT / "fixtures" / "projects").iterdir()):
        for path in sorted(project.rglob("*.py")):
            target = root / project.name / path.relative_to(project)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path.read_text())
            count += 1
    scripts = sorted((ROOT / "fixtures").glob("*.py"))
    filler = root / "scripts"
    filler.mkdir()
    index = 0
    while count < files:
        (filler / f"module_{index:06d}.py").write_text(scripts[index % len(scripts)].read_text())
        index += 1
        count += 1
    return root / "loss_scaler_buggy" / "engine_pretrain.py"


def project_lines(root: Path) -> int:
    return sum(path.read_text().count("\n") for path in root.rglob("*.py"))


def parse_baseline(files: list[Path]) -> tuple[int, float, float]:
    """How many of the files a rule could fire on, and the wall and CPU seconds of parsing them."""
    out = subprocess.run([sys.executable, "-c", PARSE_BASELINE, *map(str, files)], capture_output=True,
                         text=True, check=True).stdout.split()
    return int(out[0]), float(out[1]), float(out[2])


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:,.1f}x" if a and b else "n/a"


def render(rows: dict[str, dict], ratios: list[tuple[str, str, str]]) -> str:
    out = [f"{'measurement':<44} {'median s':>10} {'cpu s':>9} {'peak MB':>9} {'runs':>5}  note", "-" * 94]
    for name, row in rows.items():
        wall = f"{row['median']:.3f}" if row.get("median") is not None else "n/a"
        cpu = f"{row['cpu']:.3f}" if row.get("cpu") is not None else ""
        memory = f"{row['memory']:.0f}" if row.get("memory") is not None else ""
        out.append(f"{name:<44} {wall:>10} {cpu:>9} {memory:>9} {len(row.get('walls', [])):>5}  {row.get('note', '')}")
    out += ["", f"{'ratio (wall; cpu)':<70} {'value':>14}  target", "-" * 94]
    out += [f"{label:<70} {value:>14}  {target}" for label, value, target in ratios]
    return "\n".join(out)


def ratios_of(rows: dict[str, dict], a: str, b: str) -> str:
    """a / b on the wall clock and on CPU time, both medians of this run."""
    wall = ratio(rows[a].get("median"), rows[b].get("median"))
    return f"{wall}; {ratio(rows[a].get('cpu'), rows[b].get('cpu'))}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sample", type=int, default=150)
    parser.add_argument("--full", action="store_true", help="also run the peers on the whole package")
    parser.add_argument("--skip-peers", action="store_true")
    parser.add_argument("--json", type=Path, help="write the raw numbers here")
    parser.add_argument("--project-lines", type=int, default=1_000_000,
                        help="size of the generated large project (0: skip it)")
    parser.add_argument("--project-runs", type=int, default=1,
                        help="repetitions of the large project's cold and warm runs (each cold run lints it all)")
    args = parser.parse_args(argv)

    # As `pip install` leaves a package: every module's bytecode compiled. A source checkout run with
    # PYTHONDONTWRITEBYTECODE set (as in CI images) recompiles each edited module in every process,
    # which is the checkout's cost, not the tool's.
    compileall.compile_dir(str(ROOT / "gradcheck_accum"), quiet=1)
    files = torch_files()
    chosen = sample(files, args.sample)
    package = torch_package()
    peers = {} if args.skip_peers else {name: install_peer(name) for name in PEERS}
    work = Path(tempfile.mkdtemp(prefix="accumcheck-bench-"))
    atexit.register(shutil.rmtree, work, True)  # generated projects and caches: hundreds of MB at 1M lines
    # A project of its own, as a lone script is: beside the generated projects below, the project
    # model would take them for its neighbours.
    (work / "script").mkdir()
    script = training_script(work / "script" / "train_script.py")
    cache = work / "cache"
    measure(ACCUMCHECK + ["--cache-dir", str(cache), str(package)], cwd=work)  # prime the warm cache

    jobs: dict[str, list[str] | None] = {"accumcheck, sample": ACCUMCHECK + ["--no-cache", *map(str, chosen)]}
    for name, exe in peers.items():
        jobs[f"{name}, sample"] = [str(exe), *PEERS[name][1][1:], *map(str, chosen)] if exe else None
        if args.full:
            jobs[f"{name}, whole package"] = [str(exe), *PEERS[name][1][1:], str(package)] if exe else None
    jobs["accumcheck, whole package, cold"] = ACCUMCHECK + ["--no-cache", str(package)]
    jobs["accumcheck, whole package, warm"] = ACCUMCHECK + ["--cache-dir", str(cache), str(package)]
    jobs[f"accumcheck, one {script.read_text().count(chr(10))}-line script"] = ACCUMCHECK + ["--no-cache", script.name]
    # The floor of any libcst-based tool on one file: starting Python and importing libcst (this
    # machine's speed drifts by tens of percent within minutes, so the script is also shown against it).
    jobs[IMPORT_FLOOR] = [sys.executable, "-c", "import libcst"]
    # One file of a 100-file project, as pre-commit runs it: the other files are read for the
    # project model, from the cache when it is warm.
    small = work / "project100"
    changed = generated_project(small, 100)
    small_cache = work / "project100-cache"
    measure(ACCUMCHECK + ["--cache-dir", str(small_cache), "."], cwd=small)
    one_file = str(changed.relative_to(small))
    jobs["one file of a 100-file project, cold"] = ACCUMCHECK + ["--no-cache", one_file]
    jobs["one file of a 100-file project, warm"] = ACCUMCHECK + ["--cache-dir", str(small_cache), one_file]
    cwd = {name: small for name in jobs if "100-file project" in name}
    cwd.update({name: script.parent for name in jobs if name.startswith("accumcheck, one")})
    large = None
    if args.project_lines:
        large = work / "project-large"
        # the filler modules (fixture scripts, in turn) are nearly all of a large project
        scripts = sorted((ROOT / "fixtures").glob("*.py"))
        lines_per_file = max(1, sum(path.read_text().count("\n") for path in scripts) // len(scripts))
        generated_project(large, max(100, args.project_lines // lines_per_file))
        large_cache = work / "project-large-cache"
        measure(ACCUMCHECK + ["--cache-dir", str(large_cache), "."], cwd=large)
        label = f"{project_lines(large) / 1e6:.2f}M-line project"
        jobs[f"{label}, cold"] = ACCUMCHECK + ["--no-cache", "."]
        jobs[f"{label}, warm"] = ACCUMCHECK + ["--cache-dir", str(large_cache), "."]
        cwd.update({name: large for name in jobs if name.startswith(label)})

    rows: dict[str, dict] = {name: {"walls": [], "memories": [], "cpus": []} for name in jobs}
    baseline: list[tuple[float, float]] = []
    for repetition in range(args.runs):
        for name, command in jobs.items():  # interleaved: every tool once per repetition
            if command is None:
                rows[name]["note"] = "not installed"
                continue
            if "M-line project" in name and repetition >= args.project_runs:
                continue
            wall, memory, code, cpu = measure(command, cwd=cwd.get(name, work))
            rows[name]["walls"].append(wall)
            rows[name]["memories"].append(memory)
            rows[name]["cpus"].append(cpu)
            if code not in (0, 1):
                rows[name]["note"] = f"exit code {code}"
        count, seconds, cpu = parse_baseline(files)
        baseline.append((seconds, cpu))
    for row in rows.values():
        row["median"], row["memory"] = median(row["walls"]), max(row["memories"], default=None)
        row["cpu"] = median(row["cpus"])
    parse_row = f"bare libcst parse of {count} candidate files"
    rows[parse_row] = {"median": median([w for w, _ in baseline]), "cpu": median([c for _, c in baseline]),
                       "walls": [w for w, _ in baseline], "note": "in one process, import excluded"}
    for name, row in rows.items():
        if name.endswith(", sample"):
            row["note"] = row.get("note", "") or f"{len(chosen)} files"

    sample_time = rows["accumcheck, sample"]["median"]
    single = next(name for name in rows if name.startswith("accumcheck, one"))
    ratios = [(f"{name.split(',')[0]} / accumcheck, same {len(chosen)} files",
               ratio(rows[name]["median"], sample_time), ">= 100x vs torch-preflight")
              for name in rows if name.endswith(", sample") and not name.startswith("accumcheck")]
    ratios += [
        ("accumcheck whole package cold / bare parse of candidates",
         ratios_of(rows, "accumcheck, whole package, cold", parse_row), "<= 1.5x"),
        ("accumcheck whole package warm (seconds)",
         f"{rows['accumcheck, whole package, warm']['median']:.2f}", "<= 1 s"),
        (f"{single} (seconds)", f"{rows[single]['median']:.2f}", "<= 0.4 s"),
        (f"{single} / {IMPORT_FLOOR}", ratios_of(rows, single, IMPORT_FLOOR), "<= 1.6x"),
        (f"one file of a 100-file project, cold / {IMPORT_FLOOR}",
         ratios_of(rows, "one file of a 100-file project, cold", IMPORT_FLOOR), "<= 3x"),
        (f"one file of a 100-file project, warm / {IMPORT_FLOOR}",
         ratios_of(rows, "one file of a 100-file project, warm", IMPORT_FLOOR), "<= 1.5x"),
    ]
    if large is not None:
        ratios += [(f"{name} (seconds; cpu)", f"{row['median']:.1f}; {row['cpu']:.1f}", "") for name, row in rows.items()
                   if "M-line project" in name]
    print(f"torch package: {len(files)} files at {package}; {os.cpu_count()} CPUs; {args.runs} runs\n")
    print(render(rows, ratios))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
