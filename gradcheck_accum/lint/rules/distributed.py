"""Distributed training (ACC5xx)."""

from __future__ import annotations

from typing import Iterator

from gradcheck_accum.lint.model import (DDP_NO_SYNC, DDP_SYNC_FLAG, SYNCS_AT_BACKWARD, Event, EventKind, Fact, FileModel,
                                        Framework, Role, WindowShape, accumulate_calls, grouped_models)
from gradcheck_accum.lint.rule import Report, Rule


class DdpSyncEveryMicroBatch(Rule):
    code = "ACC501"
    name = "ddp-sync-every-micro-batch"
    summary = "A DistributedDataParallel model all-reduces gradients on every micro-batch of a window."
    severity = "warning"  # redundant all-reduces cost time; the gradients are right
    requires = (Fact.TRAINING_LOOP, EventKind.STEP, (Role.DDP, Role.ACCELERATOR, Role.FABRIC))
    reads_outside_windows = ()

    def check(self, model: FileModel) -> Iterator[Report]:
        grouped: set[int] = set()
        for window in model.windows:
            for backward in window.backwards if window.framework is Framework.ACCELERATE and window.accumulates else ():
                for models in (models for call in accumulate_calls(backward) for models in grouped_models(call)):
                    if id(models) not in grouped:
                        grouped.add(id(models))
                        yield Report(models, "accelerator.accumulate() enters the no_sync() of each argument it is "
                                             "given, and this tuple has none, so the models in it all-reduce "
                                             "gradients on every micro-batch of a multi-process run; pass them as "
                                             "separate arguments: `accelerator.accumulate(model_a, model_b)`",
                                     scope=backward.scope)
                for call in accumulate_calls(backward):
                    prepared = [e for e in window.nest_events if e.kind in _CALLS and window.inside(e)
                                and Role.PREPARED in e.roles and _is_ddp_model(e.roles)]
                    if not call.args and prepared and id(call) not in grouped:
                        grouped.add(id(call))
                        yield Report(call, "accelerator.accumulate() enters the no_sync() of the models it is given, "
                                           f"and it is given none, so `{prepared[0].target}` all-reduces gradients on "
                                           "every micro-batch of a multi-process run; pass the model: "
                                           f"`accelerator.accumulate({prepared[0].target})`", scope=backward.scope)
            if window.shape not in (WindowShape.GUARDED, WindowShape.NESTED):
                continue
            # a micro-step loop followed by a step is a window whatever guards that step (`if step !=
            # last_step:`, `if it % k == 0:` makes it longer still); a guarded one needs its boundary step
            if not window.boundary_steps and not (window.shape is WindowShape.NESTED and window.is_micro_batch_loop()):
                continue
            if window.shape is WindowShape.GUARDED and not window.accumulates:
                continue  # each boundary step makes its own gradients (a delayed update): nothing to sync less
            in_nest = window.nest_events
            # a DDP wrapper: built here, or handed back by accelerator.prepare (DDP under a multi-process
            # launch), called or handed whole to what calls it (`self.imagen(x, unet=self.unet)`)
            forwards = [e for e in in_nest if e.kind in _CALLS and window.inside(e) and window.path.allows(e)
                        and not model.without_grad(e) and not model.output_detached(e)
                        and (_is_ddp_model(e.roles) or not e.roles and _is_ddp_model(e.argument_roles))]
            if not forwards or any(e.kind is EventKind.SYNC_CONTROL and window.path.allows(e) for e in in_nest):
                continue
            backwards = [e for e in window.backwards if not e.via_helper]
            ddp_names = {f.target for f in forwards if f.target}
            if not backwards or any(model.in_unread_context_given(e, ddp_names) for e in backwards):
                continue  # a context manager the project cannot read, handed the model, may skip the sync
            if all(Role.ACCELERATOR_DEEPSPEED in e.roles for e in backwards):
                continue  # accelerator.backward runs the DeepSpeed engine's, which reduces at its own boundary
            roles = frozenset().union(*(e.roles | e.argument_roles for e in forwards))
            if Role.SHARDED in roles and Role.REPLICATED not in roles:
                # FSDP reduce-scatters shards every micro-batch by design: skipping it would keep whole
                # unsharded gradients on every rank until the boundary, the memory FSDP exists to save.
                # A model that is FSDP on one path and DDP on another all-reduces needlessly on the DDP one
                continue
            name = forwards[0].target if forwards[0].roles else "model"
            if Role.FABRIC_MODULE in roles:
                advice = ("the model Fabric set up is wrapped in DDP under a multi-process strategy and all-reduces "
                          "gradients on every micro-batch; wrap the forward and backward of non-boundary "
                          f"micro-batches in `with fabric.no_backward_sync({name}, enabled=is_accumulating):`")
            elif Role.APEX_REPLICATED in roles:
                advice = ("apex's DistributedDataParallel all-reduces gradients on every micro-batch and has no "
                          f"no_sync(); call `{name}.disable_allreduce()` before the backward of non-boundary "
                          f"micro-batches and `{name}.enable_allreduce()` before the boundary's")
            elif Role.PREPARED not in roles or Role.REPLICATED in roles:
                advice = ("the DDP model all-reduces gradients on every micro-batch; wrap the forward and backward "
                          f"of non-boundary micro-batches in `with {name}.no_sync():`")
                if Role.PREPARED in roles:  # wrapped in DDP on one path, prepared by an Accelerator on another
                    advice += " (where accelerator.prepare() wrapped it: `with accelerator.no_sync(model):`, or " \
                              "accelerator.accumulate)"
            else:
                advice = ("the model accelerator.prepare() wrapped all-reduces gradients on every micro-batch of a "
                          "multi-process run; wrap the forward and backward of non-boundary micro-batches in "
                          "`with accelerator.no_sync(model):`, or use accelerator.accumulate")
            # a backward inside a helper called from several places: name the call of this window
            yield Report.on(backwards[0], advice)


_NOT_MODELS = frozenset({Role.OPTIMIZER, Role.SCHEDULER, Role.CRITERION, Role.DEEPSPEED})


def _is_ddp_model(roles: frozenset[Role]) -> bool:
    return Role.DDP in roles or (Role.PREPARED in roles and not roles & _NOT_MODELS)


class NoSyncMissesForward(Rule):
    code = "ACC502"
    name = "no-sync-misses-forward"
    summary = "model.no_sync() wraps the backward but not the forward call, so it has no effect."
    severity = "warning"  # DDP still all-reduces every micro-batch: slow, not wrong
    # `with model.no_sync():`, or entering it through a name bound to the method (`with context():`)
    requires = (Fact.TRAINING_LOOP, (DDP_NO_SYNC, DDP_SYNC_FLAG, Role.NO_SYNC_CONTEXT, Role.ACCELERATOR))
    # every sync switch of the file (accelerator.accumulate(model) enters the model's no_sync())
    reads_outside_windows = (DDP_NO_SYNC, DDP_SYNC_FLAG, Role.NO_SYNC_CONTEXT, Role.ACCELERATOR)

    def check(self, model: FileModel) -> Iterator[Report]:
        # DDP reads its switch in the forward (catalogue.SYNCS_AT_BACKWARD says which models do not)
        for scope, sync, inside in model.ddp_no_sync_contexts():
            if SYNCS_AT_BACKWARD in sync.roles or not any(e.kind is EventKind.BACKWARD for e in inside):
                continue
            if any(_calls_model(e, sync.target) for e in inside):
                continue
            # the forward ran earlier in the same iteration (also in a loop over heads or chunks before it),
            # or in the caller of the function that enters the context, handed the loss it backpropagates
            if any(e.order < sync.order and _calls_model(e, sync.target) and not model.without_grad(e)
                   for e in model.same_iteration(scope, sync)) \
                    or any(e.kind is EventKind.BACKWARD and e.scope is sync.scope and model.loss_handed_in(e)
                           for e in inside):
                entered = "accelerator.accumulate() enters no_sync() around" if sync.api is not DDP_NO_SYNC \
                    else "no_sync() wraps"
                yield Report.on(sync, f"{entered} the backward but not the forward, and DDP decides to "
                                      "sync during forward, so gradients are still all-reduced; move the "
                                      "forward inside the `with` block")
        for scope, flag in model.ddp_sync_flags():
            if SYNCS_AT_BACKWARD not in flag.roles and _set_between_forward_and_backward(model, scope, flag):
                yield Report.on(flag, "require_backward_grad_sync is set after the forward, but DDP reads it in "
                                      "the forward: the backward that follows syncs as the flag stood before, "
                                      "one micro-batch behind, so the window's last gradients may be stepped "
                                      "without being all-reduced; set it before the forward")


_CALLS = (EventKind.MODEL_CALL, EventKind.HELPER_CALL)


def _calls_model(event: Event, model_name: str) -> bool:
    return event.kind in _CALLS and (event.target == model_name or model_name in event.argument_names)


def _set_between_forward_and_backward(model: FileModel, scope, flag: Event) -> bool:
    """In one iteration: a forward of the model, then the flag, then a backward with no forward between."""
    iteration = model.same_iteration(scope, flag)
    if not any(e.order < flag.order and _calls_model(e, flag.target) for e in iteration):
        return False
    for event in iteration:
        if event.order <= flag.order:
            continue
        if _calls_model(event, flag.target):
            return False
        if event.kind is EventKind.BACKWARD:
            return True
    return False
