"""`accumcheck server`: a Language Server (pygls, lsprotocol types) for editors.

Each open Python document is linted as `accumcheck lint - --stdin-filename PATH` would lint it: with
the settings of the pyproject.toml nearest to the file (looked up afresh on every lint, so an edited
configuration applies at the next keystroke), its per-file ignores and excludes. Diagnostics are
published on open, change and save; they link to the rule's page (`codeDescription`), and hovering
one shows the page. Code actions: each finding's fix (unsafe ones say so in their title), a `noqa`
comment for its line, and `source.fixAll` for the file's safe fixes.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from gradcheck_accum.version import __version__
from gradcheck_accum.lint.diagnostics import Edit, Finding
from gradcheck_accum.lint.pages import page_text
from gradcheck_accum.lint.registry import page_url, severity
from gradcheck_accum.lint.suppressions import UNUSED_SUPPRESSION

SOURCE = "accumcheck"
FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.{SOURCE}"
_SYNTAX = re.compile(r"syntax error at line (\d+), column (\d+)")


@dataclass
class Linted:
    """The last lint of a document version: its findings, and why it could not be linted (if so)."""

    version: int | None
    findings: list[Finding]
    error: str | None


class AccumcheckServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(SOURCE, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.linted: dict[str, Linted] = {}

    def lint(self, document: TextDocument) -> Linted:
        cached = self.linted.get(document.uri)
        if cached is not None and cached.version == document.version and document.version is not None:
            return cached
        findings, error = lint_text(_path(document), document.source)
        self.linted[document.uri] = Linted(document.version, findings, error)
        return self.linted[document.uri]

    def publish(self, document: TextDocument) -> None:
        linted = self.lint(document)
        diagnostics = [diagnostic(document, f) for f in linted.findings]
        if linted.error is not None:
            diagnostics.append(error_diagnostic(document, linted.error))
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(
            uri=document.uri, version=document.version, diagnostics=diagnostics))


def lint_text(path: Path | None, text: str, fix: bool = False):
    """Lint an editor's text of the file at `path` (None: an unsaved buffer) with that file's settings,
    as `accumcheck lint [--fix] - --stdin-filename PATH` does: (findings, each with its fix as an edit;
    error), or with `fix` the runner's result (its `new_text` is the fixed text). ([], None) when the
    settings exclude the file."""
    from gradcheck_accum.lint import registry
    from gradcheck_accum.lint.config import ConfigError, Resolver
    from gradcheck_accum.lint.files import Target, excluded
    from gradcheck_accum.lint.runner import Options, lint_file

    named = path or Path.cwd() / "untitled.py"
    try:
        settings = Resolver().for_path(named)
    except ConfigError as exc:
        return None if fix else ([], str(exc))
    if path is not None and excluded(path, settings):
        return None if fix else ([], None)
    target = Target(str(named), None, settings)
    rules = registry.selected(set(settings.selected()))
    options = Options(fix=True) if fix else Options(fix_edits=True)
    result = lint_file(target, settings, rules, options, stdin=io.BytesIO(text.encode("utf-8")))
    return result if fix else (result.findings, result.error)


def _path(document: TextDocument) -> Path | None:
    return Path(document.path) if document.uri.startswith("file:") and document.path else None


def _range(document: TextDocument, line: int, column: int, end_line: int, end_column: int) -> types.Range:
    """1-based code-point positions (end exclusive) -> an LSP range in the client's position encoding."""
    from pygls.workspace.position_codec import ServerTextPosition, ServerTextRange

    return document.range_to_client_units(ServerTextRange(ServerTextPosition(line - 1, column - 1),
                                                          ServerTextPosition(end_line - 1, end_column - 1)))


def diagnostic(document: TextDocument, finding: Finding) -> types.Diagnostic:
    url = page_url(finding.code)
    return types.Diagnostic(
        range=_range(document, finding.line, finding.column, finding.end_line, finding.end_column),
        message=finding.message,
        severity=types.DiagnosticSeverity.Warning if severity(finding.code) == "warning"
        else types.DiagnosticSeverity.Error,
        code=finding.code,
        code_description=types.CodeDescription(href=url) if url else None,
        source=SOURCE,
        # an unused noqa is shown faded, as editors show ruff's RUF100 and unused imports
        tags=[types.DiagnosticTag.Unnecessary] if finding.code == UNUSED_SUPPRESSION.code else None,
        data={"name": finding.name, "fix": finding.fix_safety},
    )


def error_diagnostic(document: TextDocument, error: str) -> types.Diagnostic:
    """The file cannot be linted: said on the line the parser names, else on the first line."""
    match = _SYNTAX.search(error)
    line, column = (int(match.group(1)), int(match.group(2))) if match else (1, 1)
    lines = document.lines
    column = min(column, len(lines[line - 1].rstrip("\r\n")) + 1) if 0 < line <= len(lines) else 1
    line = min(max(line, 1), max(len(lines), 1))
    return types.Diagnostic(range=_range(document, line, column, line, column), message=f"accumcheck: {error}",
                            severity=types.DiagnosticSeverity.Error, source=SOURCE)


def _overlaps(finding: Finding, start: int, end: int) -> bool:
    """Does the finding's line span meet the 1-based lines start..end?"""
    return finding.line <= end and finding.end_line >= start


def _text_edit(document: TextDocument, edit: Edit) -> types.TextEdit:
    """An Edit (offsets into the document's text) as an LSP TextEdit in the client's position encoding."""
    return types.TextEdit(range=types.Range(start=document.client_position_at_offset(edit.offset),
                                            end=document.client_position_at_offset(edit.offset + edit.length)),
                          new_text=edit.text)


def fix_actions(document: TextDocument, findings: list[Finding]) -> list[types.CodeAction]:
    actions = []
    for finding in findings:
        if finding.fix_edit is None:
            continue
        change = _text_edit(document, finding.fix_edit)
        safe = finding.fix_safety == "safe"
        actions.append(types.CodeAction(
            title=f"{finding.fix_description} ({finding.code})" if safe else
            f"{finding.fix_description} ({finding.code}, unsafe fix: review it, it may change behaviour)",
            kind=types.CodeActionKind.QuickFix, diagnostics=[diagnostic(document, finding)], is_preferred=safe,
            edit=types.WorkspaceEdit(changes={document.uri: [change]})))
    return actions


def noqa_action(document: TextDocument, finding: Finding) -> types.CodeAction | None:
    from gradcheck_accum.lint.baseline import add_to_lines

    lines = list(document.lines)
    if not 0 < finding.line <= len(lines):
        return None
    old = lines[finding.line - 1].rstrip("\r\n")
    if not add_to_lines(lines, [finding]):
        return None
    new = lines[finding.line - 1].rstrip("\r\n")
    change = types.TextEdit(range=_range(document, finding.line, 1, finding.line, len(old) + 1), new_text=new)
    return types.CodeAction(
        title=f"Suppress {finding.code} on this line (# noqa: {finding.code})", kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic(document, finding)], edit=types.WorkspaceEdit(changes={document.uri: [change]}))


def fix_all_action(document: TextDocument) -> types.CodeAction | None:
    """The file's safe fixes, applied as `accumcheck lint --fix` would (one whole-text edit)."""
    from gradcheck_accum.lint.engine import text_edit

    result = lint_text(_path(document), document.source, fix=True)
    if result is None or result.new_text is None or not result.fixed:
        return None
    change = _text_edit(document, text_edit(document.source, result.new_text))
    count = len(result.fixed)
    return types.CodeAction(title=f"accumcheck: apply {count} safe fix{'es' * (count != 1)}", kind=FIX_ALL,
                            edit=types.WorkspaceEdit(changes={document.uri: [change]}))


def make_server() -> AccumcheckServer:
    server = AccumcheckServer()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: AccumcheckServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.publish(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: AccumcheckServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.publish(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: AccumcheckServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.linted.pop(params.text_document.uri, None)  # the configuration may have changed with it
        ls.publish(ls.workspace.get_text_document(params.text_document.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: AccumcheckServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.linted.pop(params.text_document.uri, None)
        ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=params.text_document.uri,
                                                                            diagnostics=[]))

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: AccumcheckServer, params: types.HoverParams) -> types.Hover | None:
        document = ls.workspace.get_text_document(params.text_document.uri)
        line = params.position.line + 1
        here = [f for f in ls.lint(document).findings if _overlaps(f, line, line)]
        if not here:
            return None
        names = {f.code: f.name for f in here}
        pages = [page_text(code) or f"{code} {name}" for code, name in names.items()]
        return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(pages)),
                           range=diagnostic(document, here[0]).range)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL], resolve_provider=False))
    def code_action(ls: AccumcheckServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        document = ls.workspace.get_text_document(params.text_document.uri)
        wanted = params.context.only
        actions: list[types.CodeAction] = []
        if not wanted or any(kind in (types.CodeActionKind.QuickFix, "quickfix") for kind in wanted):
            start, end = params.range.start.line + 1, params.range.end.line + 1
            here = [f for f in ls.lint(document).findings if _overlaps(f, start, end)]
            actions += fix_actions(document, here)
            actions += [action for action in map(lambda f: noqa_action(document, f), here) if action]
        if not wanted or any(str(kind).startswith(("source.fixAll", "source")) for kind in wanted):
            fix_all = fix_all_action(document)
            if fix_all is not None:
                actions.append(fix_all)
        return actions

    return server


def main() -> None:
    make_server().start_io()
