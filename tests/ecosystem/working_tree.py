"""This checkout as a user gets it: the files git tracks, as they are in the working tree (uncommitted
edits included, untracked files left out), copied into a folder of their own."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def copy_working_tree(destination: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet staged is listed too
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination
