"""torch.compile and checkpoints (ACC3xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.fixes import hoist_statement, unwrap_compiled
from gradcheck_accum.lint.model import EventKind, Fact, FileModel
from gradcheck_accum.lint.rule import Report, Rule


class LoadAfterCompile(Rule):
    code = "ACC301"
    name = "load-after-compile"
    summary = "Weights are loaded into a module after it was wrapped by torch.compile."
    requires = (EventKind.COMPILE, EventKind.LOAD_STATE)
    # every load in the file, the compile bindings and the calls that order the methods
    reads_outside_windows = (EventKind.LOAD_STATE, EventKind.COMPILE, Fact.CALLERS)

    def check(self, model: FileModel) -> Iterator[Report]:
        for scope, load in model.events(EventKind.LOAD_STATE):
            if model.loads_after_compile(scope, load):
                # "may": the compile on the way to the load can be one a setting turns on
                yield Report.on(load, f"`{load.target}` may already be a torch.compile wrapper here, whose keys "
                                      "carry the `_orig_mod.` prefix; load the weights first, then compile")


class CompiledStateDictSaved(Rule):
    code = "ACC302"
    name = "compiled-state-dict-saved"
    summary = "The state_dict of a torch.compile wrapper is saved, so its keys carry the _orig_mod. prefix."
    requires = (EventKind.COMPILE, EventKind.STATE_DICT)
    # every state_dict in the file, and its key rewrites; the calls that set an object up before using it
    reads_outside_windows = (EventKind.STATE_DICT, Fact.CALLERS)

    def check(self, model: FileModel) -> Iterator[Report]:
        for scope, state_dict in model.events(EventKind.STATE_DICT):
            if not model.taken_from_compiled(scope, state_dict) or not model.is_saved(scope, state_dict):
                continue
            if model.handles_compiled_prefix:  # its checkpoints are read (or written) without the prefix
                return
            owner = model.receiver_text(state_dict)
            yield Report.on(state_dict, f"`{owner}` may be a torch.compile wrapper, so the saved keys carry "
                                        "the `_orig_mod.` prefix and will not load into an eager model; save "
                                        f"`getattr({owner}, \"_orig_mod\", {owner}).state_dict()` instead",
                            unwrap_compiled(state_dict, "Save the state_dict of the unwrapped module"))


class CompileInsideLoop(Rule):
    code = "ACC303"
    name = "compile-inside-loop"
    summary = "torch.compile is called inside a training loop body."
    severity = "warning"  # recompiles cost time; the gradients are right
    requires = (Fact.TRAINING_LOOP, EventKind.COMPILE)
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        reported: set[int] = set()
        for window in model.windows:
            outermost = window.loop_nest[0]
            for compile_ in window.nest_events:
                if compile_.kind is not EventKind.COMPILE or id(compile_) in reported:
                    continue
                if model.compiles_fresh_model(window.scope, compile_, outermost):
                    continue
                if window.runs_every_iteration(compile_, outermost):
                    reported.add(id(compile_))
                    yield Report.on(compile_, "torch.compile inside the training loop builds a new compiled "
                                              "wrapper (and may recompile) on every iteration; compile once "
                                              "before the loop",
                                    hoist_statement(compile_, outermost, "Compile once, before the loop"))
