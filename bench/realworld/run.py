"""Lint the real-world corpus (bench/realworld/*.toml) and measure the linter against its labels.

Each manifest entry names a public repository, a commit and the paths to lint; its labels say, for a
(path, line, rule), whether a finding there is a real gradient-accumulation bug or a false alarm.
This script materialises every repository at its commit from the bare git directory that the `fetch`
tool leaves under /work/.mirror/, lints the listed paths with the linter of this tree (every rule,
the fetched repository's own settings never read), and prints per rule: precision of the findings
and recall of the labelled bugs. The manifest format is described in README.md next to this file.

    python bench/realworld/run.py                  # both halves
    python bench/realworld/run.py --half dev --unjudged --missed
    python bench/realworld/run.py --half validation --findings   # every finding, its verdict and why
    python bench/realworld/run.py --json figures.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
TREE = HERE.parents[1]  # the accumcheck checkout whose linter is measured
HALVES = ("dev", "validation")
DEFAULT_MIRRORS = Path(os.environ.get("ACCUMCHECK_MIRRORS", "/work/.mirror"))
LINT_TIMEOUT_S = 900
CODE = re.compile(r"ACC\d{3}")
PYTHON_SUFFIXES = (".py", ".pyi", ".ipynb")  # what the linter reads
NEEDS = ("cross-file", "cross-function", "framework")
EXTRACTED = ".extracted"  # in a checkout: what was already taken out of git ("." for the whole tree)
WHOLE_TREE = "."
RUN_LINE = "the line this call runs"  # the linter's related location for a callee's event (diagnostics.RUN_LINE)
ROOT_MARKERS = ("pyproject.toml", "setup.cfg")  # besides setup.py: what makes a directory a project root


class ManifestError(Exception):
    """str(self) is a one-line reason."""


@dataclass(frozen=True)
class Label:
    repo: str
    path: str
    lines: tuple[int, ...]
    code: str
    verdict: str  # "bug" or "ok"
    why: str
    needs: str | None = None

    @property
    def where(self) -> str:
        return f"{self.repo}:{self.path}:{self.lines[0]}"


@dataclass
class Repo:
    name: str
    commit: str
    paths: list[str]  # empty: the whole repository
    half: str
    labels: list[Label] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    repo: str
    path: str
    line: int
    code: str
    message: str
    # for a finding at a call whose callee, in another file, holds the event (a clip in a helper's body):
    # the (path, line) of that event, which the linter names as the line the call runs
    runs: tuple[tuple[str, int], ...] = ()


# ---------------------------------------------------------------------------------------------- manifest


def load_manifest(path: Path, half: str, warn) -> list[Repo]:
    """The repositories of one manifest file; a malformed entry is reported through `warn` and skipped."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        warn(f"{path}: no such manifest (half {half!r} is empty)")
        return []
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        warn(f"{path}: cannot read manifest: {exc}")
        return []
    repos = []
    for index, entry in enumerate(data.get("repo", [])):
        try:
            repos.append(_repo(entry, half, warn))
        except ManifestError as exc:
            warn(f"{path}: repo #{index + 1}: {exc}; skipped")
    return repos


def _repo(entry: dict, half: str, warn) -> Repo:
    name, commit = entry.get("name"), entry.get("commit")
    if not isinstance(name, str) or name.count("/") != 1:
        raise ManifestError(f"name must be 'owner/name', got {name!r}")
    if not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{40}", commit):
        raise ManifestError(f"{name}: commit must be 40 lowercase hex digits, got {commit!r}")
    paths = entry.get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise ManifestError(f"{name}: paths must be a list of non-empty strings")
    repo = Repo(name, commit, [p.strip("/") for p in paths], half)
    for number, raw in enumerate(entry.get("label", []), 1):
        try:
            label = _label(name, raw)
        except ManifestError as exc:
            warn(f"{name}: label #{number}: {exc}; skipped")
            continue
        if repo.paths and not any(_under(label.path, p) for p in repo.paths):
            warn(f"{name}: label {label.path}:{label.lines[0]} {label.code} is outside the linted paths")
        repo.labels.append(label)
    return repo


def _label(repo: str, raw: dict) -> Label:
    path, line, code, verdict, why = (raw.get(k) for k in ("path", "line", "code", "verdict", "why"))
    if not isinstance(path, str) or not path:
        raise ManifestError("path must be a non-empty string")
    lines = tuple(line) if isinstance(line, list) else (line,)
    if not lines or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lines):
        raise ManifestError(f"{path}: line must be a positive integer or a list of them, got {line!r}")
    if not isinstance(code, str) or not CODE.fullmatch(code):
        raise ManifestError(f"{path}:{lines[0]}: code must look like ACC101, got {code!r}")
    if verdict not in ("bug", "ok"):
        raise ManifestError(f"{path}:{lines[0]}: verdict must be 'bug' or 'ok', got {verdict!r}")
    if not isinstance(why, str) or not why.strip():
        raise ManifestError(f"{path}:{lines[0]}: why must say what happens at run time")
    needs = raw.get("needs")
    if needs is not None and needs not in NEEDS:
        raise ManifestError(f"{path}:{lines[0]}: needs must be one of {', '.join(NEEDS)}, got {needs!r}")
    return Label(repo, path.strip("/"), lines, code, verdict, why.strip(), needs)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + "/")


# ---------------------------------------------------------------------------------------------- checkouts


def mirror_of(name: str, mirrors: Path) -> Path:
    return mirrors / name.replace("/", "+") / "repo"


def materialise(repo: Repo, mirror: Path, checkouts: Path) -> Path:
    """The repository's Python sources at its commit, and the files that mark a project root
    (`pyproject.toml`, `setup.cfg`), written once under `checkouts`. The whole tree, not only the
    listed paths: the linter lints those paths and resolves their calls into the files around them,
    as it would in a checkout of the repository.

    Blobs are read from the mirror with `git cat-file --batch` rather than `git archive`: a fetched
    snapshot lacks its largest files, and `git archive` stops at the first missing blob, which would lose
    the whole tree for one absent data file. Raises ManifestError when the commit is not in the mirror."""
    root = checkouts / repo.name.replace("/", "+") / repo.commit
    marker = root / EXTRACTED
    if marker.is_file() and WHOLE_TREE in marker.read_text().split("\n"):
        return root
    git = ["git", f"--git-dir={mirror}"]
    if subprocess.run([*git, "cat-file", "-e", f"{repo.commit}^{{commit}}"], capture_output=True).returncode:
        raise ManifestError(f"commit {repo.commit[:12]} is not in {mirror} (fetch again for a newer snapshot?)")
    for path in repo.paths:
        if subprocess.run([*git, "cat-file", "-e", f"{repo.commit}:{path}"], capture_output=True).returncode:
            print(f"{repo.name}: {path} does not exist at {repo.commit[:12]}; skipped", file=sys.stderr)
    root.mkdir(parents=True, exist_ok=True)
    absent = _write_blobs(git, root, _python_blobs(git, repo.commit, [WHOLE_TREE]))
    linted = [p for p in absent if not repo.paths or any(_under(p, top) for top in repo.paths)]
    if linted:
        print(f"{repo.name}: {len(linted)} Python file(s) absent from the snapshot, not linted: "
              f"{', '.join(linted[:3])}{' ...' if len(linted) > 3 else ''}", file=sys.stderr)
    if not any((root / name).exists() for name in (*ROOT_MARKERS, "setup.py")):
        # A checkout is a project of its own (a clone has its .git here): without a marker the linter
        # would take the accumcheck tree around `checkouts/` for the project
        (root / "pyproject.toml").write_text("")
    marker.write_text(WHOLE_TREE)
    return root


def _python_blobs(git: list[str], commit: str, paths: list[str]) -> list[tuple[str, str]]:
    """(path, object id) of every Python source file and root marker under `paths` at `commit` (symbolic
    links left out)."""
    listing = subprocess.run([*git, "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths],
                             capture_output=True, check=True).stdout
    blobs = []
    for entry in listing.decode("utf-8", errors="surrogateescape").split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob" and mode != "120000" and (path.endswith(PYTHON_SUFFIXES) or
                                                     path.rsplit("/", 1)[-1] in ROOT_MARKERS):
            blobs.append((path, oid))
    return blobs


def _write_blobs(git: list[str], root: Path, blobs: list[tuple[str, str]]) -> list[str]:
    """Write each blob under `root`; returns the paths whose blob the mirror does not have."""
    if not blobs:
        return []
    answer = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"{oid}\n" for _, oid in blobs).encode(),
                            capture_output=True, check=True).stdout
    absent, at = [], 0
    for path, _ in blobs:
        header_end = answer.index(b"\n", at)
        header = answer[at:header_end].split()
        at = header_end + 1
        if header[-1] == b"missing":
            absent.append(path)
            continue
        size = int(header[2])
        content, at = answer[at:at + size], at + size + 1
        target = (root / path).resolve()
        if root.resolve() not in target.parents:  # a hostile path; git itself never writes one
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return absent


# ---------------------------------------------------------------------------------------------- linting


def lint(repo: Repo, root: Path, settings: Path) -> tuple[list[Finding], list[str]]:
    """Findings of this tree's linter on the repository's paths (every rule, no settings of theirs),
    and the one-line reasons of files it could not lint."""
    targets = [p for p in (repo.paths or ["."]) if (root / p).exists()]
    if not targets:
        return [], []
    command = [sys.executable, "-c", "from gradcheck_accum.cli import main; main()", "lint",
               "--format", "json", "--select", "ALL", "--config", str(settings),
               "--no-cache", "--exit-zero", "--quiet", *targets]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TREE), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env, timeout=LINT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [], [f"the linter ran past {LINT_TIMEOUT_S} s"]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    try:
        records = json.loads(done.stdout) if done.stdout.strip() else []
    except json.JSONDecodeError:
        return [], errors or [f"the linter exited {done.returncode} without JSON output"]
    if done.returncode not in (0, 1, 2):
        errors.append(f"the linter exited {done.returncode}")
    findings = {Finding(repo.name, _relative(r["path"]), r["line"], r["code"], r["message"],
                        tuple((_relative(x["path"]), x["line"]) for x in r.get("related") or ()
                              if x.get("message") == RUN_LINE)) for r in records}
    return sorted(findings, key=lambda f: (f.path, f.line, f.code)), errors


def _lint_or_reason(repo: Repo, root: Path, settings: Path) -> tuple[list[Finding], list[str]]:
    """lint(), with anything unexpected turned into one line, so one repository never stops the run."""
    try:
        return lint(repo, root, settings)
    except (OSError, KeyError, TypeError, ValueError) as exc:
        return [], [f"not linted: {type(exc).__name__}: {exc}"]


def _relative(path: str) -> str:
    path = path.replace(os.sep, "/")
    while path.startswith("./"):
        path = path[2:]
    return path


# ---------------------------------------------------------------------------------------------- scoring


@dataclass
class Score:
    """Findings judged against labels, for one half."""

    true: list[tuple[Finding, Label]] = field(default_factory=list)
    false: list[tuple[Finding, Label]] = field(default_factory=list)
    unjudged: list[Finding] = field(default_factory=list)
    found: list[Label] = field(default_factory=list)
    missed: list[Label] = field(default_factory=list)

    def add(self, other: "Score") -> None:
        for name in ("true", "false", "unjudged", "found", "missed"):
            getattr(self, name).extend(getattr(other, name))

    def figures(self) -> dict:
        rows: dict[str, Counter] = defaultdict(Counter)
        for finding, _ in self.true:
            rows[finding.code].update(findings=1, bug=1)
        for finding, _ in self.false:
            rows[finding.code].update(findings=1, ok=1)
        for finding in self.unjudged:
            rows[finding.code].update(findings=1, unjudged=1)
        for label in self.found:
            rows[label.code].update(labelled=1, found=1)
        for label in self.missed:
            rows[label.code].update(labelled=1)
        total = sum(rows.values(), Counter())
        return {"rules": {code: _row(rows[code]) for code in sorted(rows)}, "total": _row(total)}


def _row(counts: Counter) -> dict:
    row = {key: counts[key] for key in ("findings", "bug", "ok", "unjudged", "labelled", "found")}
    judged = row["bug"] + row["ok"]
    row["precision"] = round(row["bug"] / judged, 3) if judged else None
    row["recall"] = round(row["found"] / row["labelled"], 3) if row["labelled"] else None
    return row


def score(labels: list[Label], findings: list[Finding]) -> Score:
    """Judge findings by the labels at their (path, code, line), or else at the line in another file
    that the call they sit on runs (a label on the clip in a helper, the finding on the loop's call of
    it); a bug label is found when some finding sits at, or runs, one of its lines."""
    by_place: dict[tuple[str, str, int], Label] = {}
    for label in labels:
        for line in label.lines:
            by_place.setdefault((label.path, label.code, line), label)
    result = Score()
    hit: set[Label] = set()
    for finding in findings:
        label = by_place.get((finding.path, finding.code, finding.line))
        for path, line in finding.runs if label is None else ():
            label = label or by_place.get((path, finding.code, line))
        if label is None:
            result.unjudged.append(finding)
        elif label.verdict == "bug":
            result.true.append((finding, label))
            hit.add(label)
        else:
            result.false.append((finding, label))
    for label in labels:
        if label.verdict == "bug":
            (result.found if label in hit else result.missed).append(label)
    return result


# ---------------------------------------------------------------------------------------------- report


COLUMNS = ("findings", "bug", "ok", "unjudged", "precision", "labelled", "found", "recall")


def table(figures: dict) -> str:
    def cell(value) -> str:
        if value is None:
            return "-"
        return f"{value:.0%}" if isinstance(value, float) else str(value)

    rows = [["rule", *COLUMNS]]
    rows += [[code, *(cell(row[c]) for c in COLUMNS)] for code, row in figures["rules"].items()]
    rows.append(["total", *(cell(figures["total"][c]) for c in COLUMNS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def source_line(checkouts: Path, repos: dict[str, Repo], finding: Finding) -> str:
    repo = repos[finding.repo]
    path = checkouts / repo.name.replace("/", "+") / repo.commit / finding.path
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()[finding.line - 1].strip()
    except (OSError, IndexError):
        return "(source line unavailable)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--half", choices=[*HALVES, "all"], default="all")
    parser.add_argument("--unjudged", action="store_true", help="list unjudged findings with their source line")
    parser.add_argument("--missed", action="store_true", help="list labelled bugs no finding matched")
    parser.add_argument("--findings", action="store_true",
                        help="list every finding with its label's verdict and why (unjudged ones too)")
    parser.add_argument("--json", metavar="FILE", help="write the figures as JSON ('-': standard output)")
    parser.add_argument("--repo", action="append", help="only this repository (owner/name; repeatable)")
    parser.add_argument("--manifests", type=Path, default=HERE, help="directory of dev.toml and validation.toml")
    parser.add_argument("--mirrors", type=Path, default=DEFAULT_MIRRORS,
                        help="where `fetch` leaves bare git dirs [default: %(default)s or $ACCUMCHECK_MIRRORS]")
    parser.add_argument("--checkouts", type=Path, default=HERE / "checkouts")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="repositories linted at once [default: 2]")
    args = parser.parse_args(argv)

    def warn(text: str) -> None:
        print(text, file=sys.stderr)

    halves = HALVES if args.half == "all" else (args.half,)
    scores = {half: Score() for half in halves}
    repos: dict[str, Repo] = {}
    per_repo = []
    ready: list[tuple[Repo, Path]] = []
    with tempfile.TemporaryDirectory() as scratch:
        settings = Path(scratch) / "pyproject.toml"  # no [tool.accumcheck]: defaults, every rule selected
        settings.write_text("")
        for half in halves:
            for repo in load_manifest(args.manifests / f"{half}.toml", half, warn):
                if args.repo and repo.name not in args.repo:
                    continue
                if repo.name in repos:
                    warn(f"{repo.name}: listed twice (in {repos[repo.name].half} and {half}); the second is skipped")
                    continue
                repos[repo.name] = repo
                mirror = mirror_of(repo.name, args.mirrors)
                if not mirror.is_dir():
                    print(f"{repo.name}: no mirror at {mirror}; run `fetch github:{repo.name}`; skipped")
                    continue
                try:
                    root = materialise(repo, mirror, args.checkouts)
                except (ManifestError, subprocess.CalledProcessError, OSError) as exc:
                    print(f"{repo.name}: cannot materialise {repo.commit[:12]}: {exc}; skipped")
                    continue
                ready.append((repo, root))
        # each lint is its own process: run a few at once (one slow repository does not hold up the rest)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            linted = list(pool.map(lambda item: _lint_or_reason(item[0], item[1], settings), ready))
    for (repo, _), (findings, errors) in zip(ready, linted):
        for error in errors:
            warn(f"{repo.name}: {error}")
        result = score(repo.labels, findings)
        scores[repo.half].add(result)
        per_repo.append((repo, len(findings), result, len(errors)))

    for repo, count, result, errors in per_repo:
        print(f"{repo.half:10} {repo.name} @ {repo.commit[:12]}: {count} findings "
              f"({len(result.true)} bug, {len(result.false)} ok, {len(result.unjudged)} unjudged), "
              f"labelled bugs found {len(result.found)}/{len(result.found) + len(result.missed)}"
              + (f", {errors} files not linted" if errors else ""))
    report = {}
    everything = Score()
    for half in halves:
        everything.add(scores[half])
        report[half] = scores[half].figures()
    if len(halves) > 1:
        report["all"] = everything.figures()
    for half, figures in report.items():
        print(f"\n## {half}\n{table(figures)}")
        missed = [label for label in (everything if half == "all" else scores[half]).missed]
        by_needs = Counter(label.needs or "one function" for label in missed)
        if by_needs:
            print("missed, by what finding them needs: "
                  + ", ".join(f"{need} {count}" for need, count in sorted(by_needs.items())))

    shown = everything
    if args.unjudged and shown.unjudged:
        print("\n## unjudged findings")
        for finding in shown.unjudged:
            print(f"{finding.repo}:{finding.path}:{finding.line}: {finding.code} {finding.message}")
            print(f"    {source_line(args.checkouts, repos, finding)}")
    if args.findings:
        print("\n## findings and their labels")
        judged = [(f, label.verdict, label.why) for f, label in shown.true + shown.false]
        for finding, verdict, why in sorted(judged + [(f, "unjudged", "") for f in shown.unjudged],
                                            key=lambda item: (item[0].repo, item[0].path, item[0].line)):
            print(f"{verdict:8} {finding.repo}:{finding.path}:{finding.line}: {finding.code} {finding.message}")
            if why:
                print(f"         why: {why}")
    if args.missed and shown.missed:
        print("\n## labelled bugs not found")
        for label in shown.missed:
            needs = f" [needs {label.needs}]" if label.needs else ""
            print(f"{label.where}: {label.code}{needs} {label.why}")
    if args.json:
        text = json.dumps(report, indent=2) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
