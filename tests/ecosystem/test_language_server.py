"""`accumcheck server` end to end: a real LSP client (pytest-lsp) drives the server over stdio."""

import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from lint_cli.cli_samples import BUGGY, CHECKPOINT, CHECKPOINT_FIXED, CLEAN, STALE_NOQA, STALE_NOQA_FIXED

SERVER = [sys.executable, "-c", "from gradcheck_accum.cli import main; main(['server', '--stdio'])"]


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER))
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(types.InitializeParams(
        capabilities=pytest_lsp.client_capabilities("visual-studio-code")))
    yield
    await lsp_client.shutdown_session()


async def open_document(client: LanguageClient, path: Path, text: str) -> list[types.Diagnostic]:
    uri = path.as_uri()
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    return list(client.diagnostics[uri])


@pytest.mark.asyncio
async def test_diagnostics_on_open_change_and_save_with_the_rule_page(client: LanguageClient, tmp_path):
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    [found] = await open_document(client, path, BUGGY)
    assert (found.code, found.source, found.severity) == ("ACC101", "accumcheck", types.DiagnosticSeverity.Error)
    assert (found.range.start.line, found.range.start.character, found.range.end.character) == (3, 4, 25)
    assert found.code_description.href.endswith("/rules/ACC101-zero-grad-every-micro-batch.md")
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()), position=types.Position(line=3, character=10)))
    assert hover.contents.value.startswith("# ACC101 zero-grad-every-micro-batch")
    # an edit that fixes the loop clears the diagnostic
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=CLEAN)]))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[path.as_uri()]) == []
    # a noqa that hides nothing is a warning, shown faded
    unused_noqa = CLEAN.replace("loss.backward()", "loss.backward()  # noqa: ACC101")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=3),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=unused_noqa)]))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    [unused] = client.diagnostics[path.as_uri()]
    assert (unused.code, unused.severity, list(unused.tags)) == ("ACC900", types.DiagnosticSeverity.Warning,
                                                                 [types.DiagnosticTag.Unnecessary])
    # the file's own pyproject.toml applies; saving re-reads it
    (tmp_path / "pyproject.toml").write_text('[tool.accumcheck]\nignore = ["ACC101"]\n')
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=4),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=BUGGY)]))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[path.as_uri()]) == []
    (tmp_path / "pyproject.toml").unlink()
    client.text_document_did_save(types.DidSaveTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri())))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert [d.code for d in client.diagnostics[path.as_uri()]] == ["ACC101"]


def apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        start = sum(len(line) for line in lines[:edit.range.start.line]) + edit.range.start.character
        end = sum(len(line) for line in lines[:edit.range.end.line]) + edit.range.end.character
        text = "".join(lines)
        lines = (text[:start] + edit.new_text + text[end:]).splitlines(keepends=True)
    return "".join(lines)


async def actions_at(client: LanguageClient, path: Path, line: int, only=None) -> list[types.CodeAction]:
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri()),
        range=types.Range(start=types.Position(line=line, character=0), end=types.Position(line=line, character=0)),
        context=types.CodeActionContext(diagnostics=[], only=only)))


@pytest.mark.asyncio
async def test_code_actions_fix_label_unsafe_fixes_and_add_noqa(client: LanguageClient, tmp_path):
    path = tmp_path / "train.py"
    await open_document(client, path, BUGGY)
    actions = await actions_at(client, path, 3)
    titles = [a.title for a in actions]
    [unsafe] = [a for a in actions if "unsafe" in a.title]
    assert unsafe.title.startswith("Clear gradients after the step (ACC101, unsafe fix")
    assert not unsafe.is_preferred
    assert apply(BUGGY, unsafe.edit.changes[path.as_uri()]) == CLEAN
    [noqa] = [a for a in actions if "noqa" in a.title]
    assert "optimizer.zero_grad()  # noqa: ACC101\n" in apply(BUGGY, noqa.edit.changes[path.as_uri()])
    assert not any(a.kind == "source.fixAll.accumcheck" for a in actions), titles  # ACC101's fix is unsafe

    ckpt = tmp_path / "ckpt.py"
    [found] = await open_document(client, ckpt, CHECKPOINT)
    assert found.code == "ACC302"
    [unwrap] = [a for a in await actions_at(client, ckpt, 2) if a.kind == types.CodeActionKind.QuickFix
                and "noqa" not in a.title]
    assert not unwrap.is_preferred and "unsafe" in unwrap.title  # the saved keys change
    assert apply(CHECKPOINT, unwrap.edit.changes[ckpt.as_uri()]) == CHECKPOINT_FIXED

    stale = tmp_path / "stale.py"
    [found] = await open_document(client, stale, STALE_NOQA)
    assert found.code == "ACC900"
    [safe] = [a for a in await actions_at(client, stale, 0) if a.kind == types.CodeActionKind.QuickFix
              and "noqa" not in a.title]
    assert safe.is_preferred and "unsafe" not in safe.title
    assert apply(STALE_NOQA, safe.edit.changes[stale.as_uri()]) == STALE_NOQA_FIXED
    [fix_all] = await actions_at(client, stale, 0, only=[types.CodeActionKind.SourceFixAll])
    assert apply(STALE_NOQA, fix_all.edit.changes[stale.as_uri()]) == STALE_NOQA_FIXED


@pytest.mark.asyncio
async def test_a_syntax_error_is_one_diagnostic_on_its_line(client: LanguageClient, tmp_path):
    [found] = await open_document(client, tmp_path / "broken.py", "x = 1\ndef f(:\n    pass\n")
    assert found.range.start.line == 1 and "syntax error" in found.message and found.code is None


def test_without_pygls_the_server_says_what_to_install(tmp_path):
    """pygls and lsprotocol are the `server` extra, not dependencies of `accumcheck lint`."""
    import subprocess

    code = "import sys; sys.modules['pygls'] = None; from gradcheck_accum.cli import main; main(['server'])"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "pip install pygls lsprotocol" in result.stderr


@pytest.mark.asyncio
async def test_a_broken_configuration_is_one_diagnostic_and_closing_clears_them(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.accumcheck]\nselect = ["ACC999"]\n')
    path = tmp_path / "train.py"
    [found] = await open_document(client, path, BUGGY)
    assert "ACC999" in found.message and found.range.start.line == 0 and found.code is None, found.message
    client.text_document_did_close(types.DidCloseTextDocumentParams(
        text_document=types.TextDocumentIdentifier(uri=path.as_uri())))
    await client.wait_for_notification(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    assert list(client.diagnostics[path.as_uri()]) == []
