"""--fix and --add-noqa write back exactly the bytes they read, except the fix, and never half a file."""

import os
import resource
import signal
import stat
import subprocess
import sys

import pytest

HEADER = "import torch\nmodel = torch.compile(model)\n"
SAVE = 'torch.save(model.state_dict(), "m.pt")\n'
SAVED = 'torch.save(getattr(model, "_orig_mod", model).state_dict(), "m.pt")\n'


def fix(run, *paths):
    return run("lint", "--fix", "--unsafe-fixes", "--no-cache", *paths)


def test_a_coding_cookie_is_written_back_in_its_encoding(run, tmp_path):
    before = "# -*- coding: latin-1 -*-\nname = 'h\xe9llo'\n" + HEADER + SAVE
    (tmp_path / "latin.py").write_bytes(before.encode("latin-1"))
    fix(run, "latin.py")
    assert (tmp_path / "latin.py").read_bytes() == before.replace(SAVE, SAVED).encode("latin-1")


def test_a_byte_order_mark_is_kept(run, tmp_path):
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + (HEADER + SAVE).encode())
    fix(run, "bom.py")
    assert (tmp_path / "bom.py").read_bytes() == b"\xef\xbb\xbf" + (HEADER + SAVED).encode()


def test_line_breaks_are_kept_where_a_comment_is_removed(run, tmp_path):
    before = (HEADER + "lr = 0.1  # noqa: ACC101\n" + "x = 1\n\x0c\ny = 2  # noqa: ACC302\n").replace("\n", "\r\n")
    (tmp_path / "crlf.py").write_bytes(before.encode())
    run("lint", "--fix", "--no-cache", "crlf.py")
    after = (tmp_path / "crlf.py").read_bytes().decode()
    assert after == before.replace("  # noqa: ACC101", "").replace("  # noqa: ACC302", "")


def test_an_unused_code_is_removed_from_the_comment_not_from_a_string(run, tmp_path):
    before = HEADER + 'MARKER = "# noqa: ACC101"  # noqa: ACC101\n'
    (tmp_path / "marker.py").write_text(before)
    run("lint", "--fix", "--no-cache", "marker.py")
    assert (tmp_path / "marker.py").read_text() == HEADER + 'MARKER = "# noqa: ACC101"\n'


def test_mode_and_symbolic_links_are_kept(run, tmp_path):
    (tmp_path / "real.py").write_text(HEADER + SAVE)
    os.chmod(tmp_path / "real.py", 0o751)
    os.symlink("real.py", tmp_path / "link.py")
    fix(run, "link.py")
    assert os.path.islink(tmp_path / "link.py")
    assert (tmp_path / "real.py").read_text() == HEADER + SAVED
    assert stat.S_IMODE(os.stat(tmp_path / "real.py").st_mode) == 0o751
    assert sorted(os.listdir(tmp_path)) == ["link.py", "real.py"]  # no temporary file left behind


def test_a_read_only_file_is_an_error_of_its_own(run, tmp_path):
    (tmp_path / "locked.py").write_text(HEADER + SAVE)
    os.chmod(tmp_path / "locked.py", 0o444)
    (tmp_path / "open.py").write_text(HEADER + SAVE)
    result = fix(run, "locked.py", "open.py")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "locked.py: error: the file is read-only; left unchanged" in result.stderr
    assert (tmp_path / "locked.py").read_text() == HEADER + SAVE
    assert (tmp_path / "open.py").read_text() == HEADER + SAVED


@pytest.mark.parametrize("killed", [True, False])
def test_a_write_cut_short_leaves_the_old_bytes(tmp_path, killed):
    """The write stops midway at a file size limit just below the fixed file's size: the process is
    killed there (SIGXFSZ), or the write fails (the signal ignored, as Python does by default).
    Either way the file keeps every byte it had; a failed write says so and leaves nothing behind."""
    before = '"""' + "A long docstring.\n" * 20_000 + '"""\n' + HEADER + SAVE
    path = tmp_path / "train.py"
    path.write_text(before)
    limit = len(before.encode()) - 10
    start = f"import signal; signal.signal(signal.SIGXFSZ, signal.{'SIG_DFL' if killed else 'SIG_IGN'}); " \
            "from gradcheck_accum.cli import main; main()"
    process = subprocess.run([sys.executable, "-c", start, "lint", "--fix", "--unsafe-fixes", "--no-cache", "train.py"],
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
                             capture_output=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, cwd=tmp_path)
    assert path.read_text() == before
    if killed:
        assert process.returncode == -signal.SIGXFSZ
    else:
        assert process.returncode == 2
        assert process.stderr.decode().startswith("train.py: error: cannot write: File too large; left unchanged")
        assert os.listdir(tmp_path) == ["train.py"]
