"""Same findings? Lint one target with two trees of accumcheck and print what differs.

    .venv/bin/python bench/compare_findings.py BEFORE AFTER TARGET [TARGET ...] [--runs 3]

BEFORE and AFTER are git revisions of this repository (exported with `git archive` into a temporary
directory) or directories holding a tree. Both run on this interpreter's packages (libcst, click),
each with its own tree first on sys.path, with every rule selected (`--select ALL`), no cache and
`--format json`. A TARGET is a path, `torch` (the installed torch package) or `pages` (the Example and
Use instead blocks of the rule pages of both trees, one file per block). Targets are copied into a
scratch directory first, so no project's pyproject.toml settings apply to either tree.

Findings are matched on (file, line, column, code); the report lists, per code, the findings only one
tree reports and those whose message changed, marking `[expected]` a difference on a line whose
`# expect:` marker names the code (the fixtures' convention). `--runs N` also times the two trees on
the same target, interleaved (before, after, before, ...), and prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE_BLOCKS = ("Example", "Use instead")
# The tree under test comes first on sys.path, ahead of the editable install of this checkout.
LAUNCH = ("import sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'accumcheck'; "
          "from gradcheck_accum.cli import main; main()")

Key = tuple[str, int, int, str]


def materialise(tree: str, scratch: Path) -> Path:
    """A directory holding the tree: itself if it is one, else `git archive` of the revision."""
    if Path(tree).is_dir():
        return Path(tree).resolve()
    target = scratch / re.sub(r"[^\w.-]", "_", tree)
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", tree, "gradcheck_accum", "rules"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def page_blocks(trees: list[Path], out: Path) -> Path:
    """Every rule page's Example and Use instead block, from both trees (a page either tree has)."""
    out.mkdir()
    for tree in trees:
        for page in sorted((tree / "rules").glob("ACC*.md")):
            parts = re.split(r"^## (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
            for title, body in zip(parts[1::2], parts[2::2]):
                block = re.search(r"```python\n(.*?)```", body, re.S)
                if title.strip() in PAGE_BLOCKS and block:
                    name = f"{page.stem.split('-')[0]}_{title.strip().lower().replace(' ', '_')}.py"
                    (out / name).write_text(block.group(1), encoding="utf-8")
    return out


def stage_target(target: str, trees: list[Path], scratch: Path) -> Path:
    if target == "pages":
        return page_blocks(trees, scratch / "pages")
    if target == "torch":
        spec = importlib.util.find_spec("torch")
        source = Path(spec.origin).parent
    else:
        source = Path(target).resolve()
    copy = scratch / "targets" / source.name
    if source.is_dir():
        shutil.copytree(source, copy, ignore=_not_source)
    else:
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy)
    return copy


def _not_source(directory: str, names: list[str]) -> list[str]:
    """Only Python files and notebooks are copied (the torch package also holds a gigabyte of libraries)."""
    return [n for n in names if not (n.endswith((".py", ".ipynb")) or (Path(directory) / n).is_dir())
            or n == "__pycache__"]


def lint_command(tree: Path, target: Path) -> list[str]:
    return [sys.executable, "-c", LAUNCH, str(tree), "lint", "--select", "ALL", "--no-cache", "--exit-zero",
            "-q", "--format", "json", str(target)]


def environment() -> dict[str, str]:
    # Bytecode is written (as for any installed tool) so that timed runs do not recompile the tree.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}


def findings(tree: Path, target: Path) -> dict[Key, str]:
    done = subprocess.run(lint_command(tree, target), capture_output=True, text=True, env=environment(),
                          cwd=target.parent)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: lint exited {done.returncode}: {done.stderr.strip()[-500:]}")
    base = target if target.is_dir() else target.parent
    found = {}
    for record in json.loads(done.stdout):
        path = os.path.relpath(target.parent / record["path"], base)  # the record's path may be relative
        found[(path, record["line"], record["column"], record["code"])] = record["message"]
    return found


def seconds(tree: Path, target: Path) -> float:
    start = time.perf_counter()
    subprocess.run(lint_command(tree, target), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=environment(), cwd=target.parent, check=True)
    return time.perf_counter() - start


def marked(base: Path, key: Key) -> str:
    """` [expected]` when the reported line carries a fixture's `# expect:` marker naming the code."""
    path, line, _, code = key
    try:
        text = (base / path).read_text(encoding="utf-8").splitlines()[line - 1]
    except (OSError, IndexError, UnicodeDecodeError):
        return ""
    marker = re.search(r"#\s*expect:\s*([A-Z0-9,\s]+)$", text)
    return " [expected]" if marker and code in marker.group(1).replace(",", " ").split() else ""


def compare(before: dict[Key, str], after: dict[Key, str], show: int, base: Path) -> list[str]:
    codes = sorted({key[3] for key in before} | {key[3] for key in after})
    out = [f"{'code':<8} {'before':>7} {'after':>7} {'only before':>12} {'only after':>11} {'message':>8}"]
    details = []
    for code in codes:
        mine = {k for k in before if k[3] == code}, {k for k in after if k[3] == code}
        gone, new = sorted(mine[0] - mine[1]), sorted(mine[1] - mine[0])
        reworded = sorted(k for k in mine[0] & mine[1] if before[k] != after[k])
        out.append(f"{code:<8} {len(mine[0]):>7} {len(mine[1]):>7} {len(gone):>12} {len(new):>11} {len(reworded):>8}")
        for label, keys in (("only before", gone), ("only after", new), ("message changed", reworded)):
            for path, line, column, _ in keys[:show]:
                key = (path, line, column, code)
                text = before[key] if label == "only before" else after[key]
                if label == "message changed":
                    text = f"{before[key]!r}\n        now {after[key]!r}"
                details.append(f"  {code} {label}{marked(base, key)}: {path}:{line}:{column}: {text}")
            if len(keys) > show:
                details.append(f"  {code} {label}: ... {len(keys) - show} more")
    out.append(f"{'total':<8} {len(before):>7} {len(after):>7} {len(set(before) - set(after)):>12} "
               f"{len(set(after) - set(before)):>11} {sum(1 for k in set(before) & set(after) if before[k] != after[k]):>8}")
    return out + details


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("targets", nargs="+", help="paths, `torch` or `pages`")
    parser.add_argument("--runs", type=int, default=0, help="also time both trees, interleaved, N runs each")
    parser.add_argument("--show", type=int, default=20, help="differences listed per code and kind")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="accumcheck-compare-"))
    try:
        trees = [materialise(args.before, scratch), materialise(args.after, scratch)]
        differ = False
        for name in args.targets:
            target = stage_target(name, trees, scratch)
            files = [target] if target.is_file() else sorted(target.rglob("*.py"))
            before, after = (findings(tree, target) for tree in trees)
            print(f"\n{name}: {len(files)} files; {args.before} -> {args.after}")
            base = target if target.is_dir() else target.parent
            print("\n".join(compare(before, after, args.show, base)))
            differ |= before != after
            if args.runs:
                walls: dict[int, list[float]] = collections.defaultdict(list)
                for _ in range(args.runs):
                    for index, tree in enumerate(trees):
                        walls[index].append(seconds(tree, target))
                medians = [statistics.median(walls[i]) for i in (0, 1)]
                print(f"time, median of {args.runs}: before {medians[0]:.2f} s, after {medians[1]:.2f} s, "
                      f"after / before {medians[1] / medians[0]:.2f}x "
                      f"(before {', '.join(f'{w:.2f}' for w in walls[0])}; after {', '.join(f'{w:.2f}' for w in walls[1])})")
        return 1 if differ else 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
