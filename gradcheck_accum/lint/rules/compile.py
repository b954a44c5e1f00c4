"""torch.compile and checkpoints (ACC3xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.rule import Report, Rule


class LoadAfterCompile(Rule):
    code = "ACC301"
    name = "load-after-compile"
    summary = "Weights are loaded into a module after it was wrapped by torch.compile."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class CompiledStateDictSaved(Rule):
    code = "ACC302"
    name = "compiled-state-dict-saved"
    summary = "The state_dict of a torch.compile wrapper is saved, so its keys carry the _orig_mod. prefix."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())


class CompileInsideLoop(Rule):
    code = "ACC303"
    name = "compile-inside-loop"
    summary = "torch.compile is called inside a training loop body."

    def check(self, model: FileModel) -> Iterator[Report]:
        return iter(())

