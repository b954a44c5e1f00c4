"""Bad input gets one clear line on stderr and exit 2, and never stops the other files."""

import json
import os
from pathlib import Path
import socket
import subprocess
import sys

from cli_samples import BUGGY


def check_one_bad_file(run, tmp_path, name, content, reason):
    (tmp_path / "good.py").write_text(BUGGY)
    bad = tmp_path / name
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    result = run("lint", ".")
    assert result.exit_code == 2
    assert "good.py:4:5: ACC101" in result.stdout  # the other file is still linted and reported
    assert f"{name}: error: " in result.stderr and reason in result.stderr
    assert "Traceback" not in result.stderr


# Files are parsed only when some rule could fire on them (the prefilter), so these look like training code.
LOOP = "for batch in loader:\n    loss.backward()\n    optimizer.step()\n"


def test_syntax_error(run, tmp_path):
    check_one_bad_file(run, tmp_path, "broken.py", "def f(:\n    pass\n" + LOOP,
                       "syntax error at line 1, column 7: invalid syntax")


def test_python2_code(run, tmp_path):
    check_one_bad_file(run, tmp_path, "old.py", LOOP + "print 'hello'\n", "syntax error")


def test_a_syntax_error_is_reported_where_no_rule_could_fire(run, tmp_path):
    """Issue 15, item 7: libcst never parses such a file, but every file given is checked to parse."""
    check_one_bad_file(run, tmp_path, "notes_pb2.py", "print 'python 2, and nothing a rule looks for'\n",
                       "syntax error at line 1")
    (tmp_path / "notes_pb2.py").unlink()
    # what only CPython's compiler rejects, libcst accepts, as it does in the files it analyses
    (tmp_path / "script.py").write_text("return 1\n")
    assert run("lint", "script.py").exit_code == 0


def test_bytecode_compiled_from_an_earlier_version_never_hides_a_syntax_error(run, tmp_path):
    """A file this Python compiled as it is now is not compiled again (engine.compiled_already); a
    cache compiled from another version of it (another size or time) is not trusted."""
    import py_compile

    from gradcheck_accum.lint.engine import compiled_already, syntax_error

    module = tmp_path / "notes.py"
    module.write_text("print('python 3')\n")
    py_compile.compile(str(module), doraise=True)
    assert compiled_already(module)
    module.write_text("print 'python 2, same cache'\n")  # another size: the cache is stale
    assert not compiled_already(module)
    assert syntax_error(module.read_text(), module).startswith("syntax error at line 1")
    check_one_bad_file(run, tmp_path, "notes.py", module.read_text(), "syntax error at line 1")


def test_undecodable_bytes(run, tmp_path):
    check_one_bad_file(run, tmp_path, "latin.py", b"x = '\xff\xfe'\n", "cannot decode as utf-8")


def test_binary_file(run, tmp_path):
    check_one_bad_file(run, tmp_path, "blob.py", b"\x00\x01\x02", "NUL bytes")


def test_bom_coding_cookie_and_empty_files_are_fine(run, tmp_path):
    (tmp_path / "bom.py").write_bytes(b"\xef\xbb\xbf" + BUGGY.encode())
    (tmp_path / "latin1.py").write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n")
    (tmp_path / "empty.py").write_text("")
    result = run("lint", ".")
    assert result.exit_code == 1 and result.stdout.startswith("bom.py:4:5: ACC101")


def test_missing_path_and_non_python_file(run, tmp_path):
    (tmp_path / "good.py").write_text(BUGGY)
    (tmp_path / "notes.txt").write_text("hello")
    result = run("lint", "good.py", "missing.py", "notes.txt")
    assert result.exit_code == 2
    assert "missing.py: error: no such file or directory" in result.stderr
    assert "notes.txt: error: not a Python file" in result.stderr
    assert "good.py:4:5: ACC101" in result.stdout


def test_directory_symlink_loop_and_dangling_link(run, tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "good.py").write_text(BUGGY)
    os.symlink(tmp_path / "pkg", tmp_path / "pkg" / "loop")
    os.symlink(tmp_path / "nowhere.py", tmp_path / "dangling.py")
    result = run("lint", "pkg", "dangling.py")
    assert result.stdout.count("ACC101") == 1
    assert "dangling.py: error: broken symbolic link" in result.stderr
    assert result.exit_code == 2


def test_unreadable_file(run, tmp_path):
    (tmp_path / "good.py").write_text(BUGGY)
    with socket.socket(socket.AF_UNIX) as sock:  # opening a socket fails even for root
        sock.bind(str(tmp_path / "sock.py"))
        result = run("lint", "good.py", "sock.py")
    assert result.exit_code == 2
    assert "sock.py: error: No such device or address" in result.stderr
    assert "good.py:4:5: ACC101" in result.stdout


def test_deep_nesting_and_a_10_mb_generated_file(run, tmp_path):
    nested = "".join("    " * i + f"if a{i}:\n" for i in range(100)) + "    " * 100 + "loss.backward()\n" + LOOP
    (tmp_path / "deep.py").write_text(nested)
    (tmp_path / "parens.py").write_text("loss.backward(" + "(" * 150 + "1" + ")" * 150 + ")\n")
    (tmp_path / "generated_pb2.py").write_text("DESCRIPTOR = 1\n" * 700_000)  # ~10 MB, no training code
    (tmp_path / "good.py").write_text(BUGGY)
    result = run("lint", ".")
    assert "Traceback" not in result.stderr
    assert "deep.py: error: syntax error at line 101" in result.stderr
    assert "too many levels of indentation" in result.stderr
    assert "generated_pb2.py" not in result.stderr
    assert result.exit_code == 2 and result.stdout.startswith("good.py:4:5: ACC101")


def test_fifos_and_devices_are_not_read(run, tmp_path):
    os.mkfifo(tmp_path / "pipe.py")  # reading it would wait for a writer forever
    os.symlink("/dev/zero", tmp_path / "zero.py")  # reading it would never end
    (tmp_path / "good.py").write_text(BUGGY)
    result = run("lint", "good.py", "pipe.py", "zero.py")
    assert result.exit_code == 2 and "good.py:4:5: ACC101" in result.stdout
    assert "pipe.py: error: not a regular file (a FIFO)" in result.stderr
    assert "zero.py: error: not a regular file (a character device)" in result.stderr
    walked = run("lint", ".")  # in a tree, they are no source files
    assert walked.exit_code == 1 and walked.stderr.count("error") == 0


def test_dangling_links_and_r_notebooks_in_a_tree_are_skipped(run, tmp_path):
    (tmp_path / "good.py").write_text(BUGGY)
    os.symlink(tmp_path / "moved_away.py", tmp_path / "stale_link.py")
    (tmp_path / "analysis.ipynb").write_text(json.dumps(
        {"cells": [{"cell_type": "code", "source": "library(ggplot2)\nx <- c(1, 2)\n"}],
         "metadata": {"kernelspec": {"language": "R", "name": "ir"}, "language_info": {"name": "R"}},
         "nbformat": 4, "nbformat_minor": 5}))
    result = run("lint", ".")
    assert result.exit_code == 1 and "error" not in result.stderr
    assert result.stdout.startswith("good.py:4:5: ACC101")


def test_malformed_notebooks_cost_one_line_each(run, tmp_path):
    (tmp_path / "good.py").write_text(BUGGY)
    for name, text in {"string.ipynb": '{"cells": "x"}', "null.ipynb": '{"cells": null}',
                       "metadata.ipynb": '{"cells": [], "metadata": [1]}', "strings.ipynb": '{"cells": ["x = 1"]}',
                       "object.ipynb": '{"cells": {"0": {}}}'}.items():
        (tmp_path / name).write_text(text)
    result = run("lint", ".")
    assert result.exit_code == 2 and "good.py:4:5: ACC101" in result.stdout and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert sorted(line.split(":")[0] for line in errors) == [
        "metadata.ipynb", "null.ipynb", "object.ipynb", "string.ipynb", "strings.ipynb"]
    assert all("malformed notebook" in line for line in errors)


def test_closed_standard_input_is_one_error(tmp_path):
    process = subprocess.run([sys.executable, "-c", "from gradcheck_accum.cli import main; main()", "lint", "-"],
                             preexec_fn=lambda: os.close(0), capture_output=True, text=True, cwd=tmp_path)
    assert process.returncode == 2
    assert process.stderr.splitlines()[0] == "-: error: standard input is closed"


def test_a_cache_written_by_another_version_is_ignored(run, tmp_path):
    (tmp_path / "good.py").write_text(BUGGY)
    first = run("lint", "good.py")
    # the findings table (the project model keeps its file summaries under project/)
    [table] = [p for p in (tmp_path / ".accumcheck_cache").rglob("*.json") if "project" not in p.parts]
    entries = json.loads(table.read_text())
    for entry in entries.values():
        entry["findings"][0]["severity"] = "error"  # a field this version's findings do not have
    table.write_text(json.dumps(entries))
    assert run("lint", "good.py").stdout == first.stdout
    table.write_text(json.dumps([1, 2]))
    assert run("lint", "good.py").stdout == first.stdout


def test_a_cache_written_by_an_edited_linter_is_not_restored(run, tmp_path):
    """A checkout whose rules changed since the last run (same release number) lints again."""
    import gradcheck_accum.lint.rules as rules
    from gradcheck_accum.lint import cache

    (tmp_path / "good.py").write_text(BUGGY)
    run("lint", "good.py")
    def results() -> list[Path]:  # the result tables (the project's summaries sit apart, under project/)
        return [p for p in (tmp_path / ".accumcheck_cache").rglob("*.json") if "project" not in p.parts]

    [before] = results()
    rule_file = next(Path(rules.__file__).parent.glob("*.py"))
    stat = rule_file.stat()
    try:
        os.utime(rule_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        cache.linter_key.cache_clear()
        run("lint", "good.py")
        assert len(results()) == 2
    finally:
        os.utime(rule_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        cache.linter_key.cache_clear()
    assert before.parent.name == cache.linter_key()


def test_project_summaries_written_by_an_edited_linter_are_not_restored(run, tmp_path):
    """The project model's summaries come from the linter's code too: they are kept with the result
    tables of the linter that computed them, not under the release number alone."""
    from gradcheck_accum.lint import cache

    (tmp_path / "good.py").write_text(BUGGY)
    run("lint", "good.py")
    summaries = list((tmp_path / ".accumcheck_cache").rglob("project/*.json"))
    assert summaries and all(p.parent.parent.name == cache.linter_key() for p in summaries)


def test_python_3_12_f_strings_in_a_file_with_a_long_line_are_linted(run, tmp_path):
    # A long logical line sends the file through CPython's parser to measure its depth; before 3.12
    # that parser rejects an f-string reusing its quote inside a field (PEP 701), which is valid 3.12.
    table = "SIZES = [" + ", ".join(str(i) for i in range(400)) + "]\n"
    newer = 'print(f"lr {config["lr"]}")\n'
    (tmp_path / "train.py").write_text(table + newer + BUGGY)
    result = run("lint", "train.py")
    assert "error" not in result.stderr, result.stderr
    assert result.exit_code == 1 and "train.py:6:5: ACC101" in result.stdout


def test_python_3_12_type_statements_and_type_parameters_are_linted(run, tmp_path):
    # PEP 695: CPython before 3.12 rejects `type X = ...` and `class Box[T]:`; libcst reads them. The long
    # line sends the file through CPython's parser for its depth; the class makes the project model look
    # up its methods in a summary that CPython could not make (it used to fail with an internal error).
    table = "SIZES = [" + ", ".join(str(i) for i in range(400)) + "]\n"
    newer = "type Batch = dict[str, list[int]]\n\n\nclass Box[T]:\n    def get(self) -> T:\n        return self.item\n"
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "train.py").write_text(table + newer + BUGGY)
    result = run("lint", "train.py")
    assert "error" not in result.stderr, result.stderr
    assert result.exit_code == 1 and "ACC101" in result.stdout


def test_an_f_string_that_no_python_accepts_is_still_an_error(run, tmp_path):
    table = "SIZES = [" + ", ".join(str(i) for i in range(400)) + "]\n"
    check_one_bad_file(run, tmp_path, "broken_fstring.py", table + 'print(f"lr {config[}")\n' + LOOP, "syntax error")


def test_what_python_warns_of_in_a_file_is_not_printed(run, tmp_path, recwarn):
    """`1if x else 2` makes CPython's parser warn ("invalid decimal literal"); the file is fine to
    lint, and the warning, about the file and not the run, is no line of ours."""
    (tmp_path / "loop.py").write_text("x = 1if True else 2\n" + LOOP)
    result = run("lint", ".")
    assert result.exit_code == 1  # its findings, no error
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
    assert "Warning" not in result.stderr
