"""torch.compile and checkpoints (ACC3xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint import bindings as b
from gradcheck_accum.lint import events as ev
from gradcheck_accum.lint.fixes import Fix, hoist_statement
from gradcheck_accum.lint.model import FileModel
from gradcheck_accum.lint.names import dotted, source
from gradcheck_accum.lint.rule import Report, Rule
from gradcheck_accum.lint.windows import invariant_guards


class LoadAfterCompile(Rule):
    code = "ACC301"
    name = "load-after-compile"
    summary = "Weights are loaded into a module after it was wrapped by torch.compile."
    tokens = ("compile(",)
    outside_windows = ("load_state_dict",)  # every load in the file
    needs = ("compile(", "load_state_dict(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for _, event in model.events(ev.LOAD_STATE):
            if b.COMPILED in event.kinds:
                yield Report(event.node, f"`{event.target}` is already a torch.compile wrapper, whose keys carry "
                                         "the `_orig_mod.` prefix; load the weights first, then compile")


class CompiledStateDictSaved(Rule):
    code = "ACC302"
    name = "compiled-state-dict-saved"
    summary = "The state_dict of a torch.compile wrapper is saved, so its keys carry the _orig_mod. prefix."
    tokens = ("compile(",)
    outside_windows = ("state_dict",)  # every state_dict in the file
    needs = ("compile(", "state_dict(")

    def check(self, model: FileModel) -> Iterator[Report]:
        for scope, event in model.events(ev.STATE_DICT):
            if b.COMPILED not in event.kinds or not model.is_saved(scope, event):
                continue
            fix = _unwrap_fix(event)
            yield Report(event.node, f"`{event.target}` may be a torch.compile wrapper, so the saved keys carry "
                                     "the `_orig_mod.` prefix and will not load into an eager model; save "
                                     f"`getattr({event.target}, \"_orig_mod\", {event.target}).state_dict()` instead",
                         fix)


def _unwrap_fix(event: ev.Event) -> Fix | None:
    call = event.node
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
        return None
    owner = source(call.func.value)
    unwrapped = cst.parse_expression(f'getattr({owner}, "_orig_mod", {owner})')
    # Safe: on an eager module getattr returns the module itself, so nothing changes there.
    return Fix(True, "Save the state_dict of the unwrapped module",
               ((call.func, call.func.with_changes(value=unwrapped)),))


def _compiles_fresh_model(event: ev.Event, scope: ev.Scope, loop: ev.Loop) -> bool:
    """`torch.compile(build_model())`, or of a model built in this iteration: a sweep over trials
    compiles each new model once, which is not recompiling the same one."""
    call = event.node
    target = call.args[0].value if isinstance(call, cst.Call) and call.args else None
    if isinstance(target, cst.Call):
        return True
    name = dotted(target)
    return bool(name) and any(loop in d.ctx.loops and d.order < event.order and d.value is not event.node
                              for d in scope.defs_of(name))


class CompileInsideLoop(Rule):
    code = "ACC303"
    name = "compile-inside-loop"
    summary = "torch.compile is called inside a training loop body."
    tokens = ("compile(",)
    outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        seen: set[int] = set()
        for window in model.windows:
            outermost = window.loop_nest[0]
            for event in window.scope.events:
                if event.kind != ev.COMPILE or id(event) in seen or outermost not in event.ctx.loops:
                    continue
                if _compiles_fresh_model(event, window.scope, outermost):
                    continue
                if invariant_guards(event.ctx.guards, window.scope, (outermost,)):
                    seen.add(id(event))
                    fix = hoist_statement(event, outermost, "Compile once, before the loop")
                    yield Report(event.node, "torch.compile inside the training loop builds a new compiled wrapper "
                                             "(and may recompile) on every iteration; compile once before the loop",
                                 fix)
