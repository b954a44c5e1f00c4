"""What each name is: optimizer, scheduler, GradScaler, compiled module, DDP model, framework engine.

A name's *kinds* is a set of tags. Tags come from what the name was bound to (constructor calls
resolved through imports, `accelerator.prepare(...)`, `deepspeed.initialize(...)`) and, for the
roles the catalogue allows it (optimizer, scheduler, scaler), from the name itself when nothing
bound it in this file (a parameter called `optimizer`, an attribute `self.opt_g`).
"""

from __future__ import annotations

import re

from gradcheck_accum.lint.lazy import cst

from gradcheck_accum.lint.names import ImportMap, call_receiver, dotted, keyword, last_part, positional

OPTIMIZER = "optimizer"
SCHEDULER = "scheduler"
SCALER = "scaler"
COMPILED = "compiled"
DDP = "ddp"
WRAPS_COMPILED = "wraps-compiled"  # a DDP/FSDP wrapper around a compiled module: `.module` is compiled
ACCELERATOR = "accelerator"
ACCELERATOR_ACCUMULATES = "accelerator-accumulates"  # Accelerator(gradient_accumulation_steps=N > 1)
FABRIC = "fabric"
DEEPSPEED = "deepspeed"
PREPARED = "prepared"  # returned by accelerator.prepare: steps and zero_grads are skipped off-boundary
SUM_LOSS = "sum-loss"  # a criterion with reduction="sum"
TOKEN_LOSS = "token-loss"  # a criterion with an explicit ignore_index
CRITERION = "criterion"  # a loss function or its result

Kinds = frozenset
NONE: frozenset[str] = frozenset()

_LR_SCHEDULERS = {
    "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
    "SequentialLR", "CosineAnnealingLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
    "CosineAnnealingWarmRestarts", "OneCycleLR", "PolynomialLR", "get_scheduler", "create_scheduler",
    "create_scheduler_v2", "CosineLRScheduler", "StepLRScheduler", "PlateauLRScheduler",
}
_OPTIMIZERS = {
    "SGD", "Adam", "AdamW", "Adagrad", "Adadelta", "Adamax", "ASGD", "LBFGS", "NAdam", "RAdam", "RMSprop",
    "Rprop", "SparseAdam", "Adafactor", "Lion", "LAMB", "Lamb", "FusedAdam", "FusedLAMB", "FusedSGD",
    "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "DeepSpeedCPUAdam", "Muon", "Shampoo",
    "create_optimizer", "create_optimizer_v2", "ZeroRedundancyOptimizer",
}
_FUNCTIONAL_LOSSES = {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                      "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "ctc_loss"}
_SCALERS = {"GradScaler", "ShardedGradScaler"}
_WRAPPERS = {"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP"}

_OPTIMIZER_NAME = re.compile(r"^(opt|optim|optimizer|optimiser)(_?\w+)?$|_(opt|optim|optimizer|optimiser)\d*$")
_SCHEDULER_NAME = re.compile(r"(^|_)(lr_)?sched(uler)?(_\w+)?$|^scheduler")
_SCALER_NAME = re.compile(r"(^|_)scaler$")
ACCUM_NAME = re.compile(r"accum|grad_acc|gradient_acc|micro_?steps|accumulate", re.IGNORECASE)


def kinds_from_name(name: str | None) -> frozenset[str]:
    """Roles guessed from a name, used only when no binding in the file says otherwise."""
    part = last_part(name)
    if not part:
        return NONE
    if _SCALER_NAME.search(part):
        return frozenset({SCALER})
    if "noise" in part:
        return NONE
    if _SCHEDULER_NAME.search(part):
        return frozenset({SCHEDULER})
    if _OPTIMIZER_NAME.search(part):
        return frozenset({OPTIMIZER})
    if part == "accelerator":
        return frozenset({ACCELERATOR})
    if part == "fabric":
        return frozenset({FABRIC})
    return NONE


def is_accumulation_name(node: cst.CSTNode | None) -> bool:
    name = dotted(node)
    return bool(name and ACCUM_NAME.search(last_part(name)))


def constructor_kinds(call: cst.Call, imports: ImportMap, lookup) -> frozenset[str]:
    """Kinds of the value a call returns. `lookup(expr)` gives the kinds of an argument expression."""
    receiver, method = call_receiver(call)
    qual = imports.qualify(call.func) or dotted(call.func) or ""
    last = method if receiver is not None else last_part(qual)
    if qual == "torch.compile" or (last == "compile" and receiver is not None and dotted(receiver) == "torch"):
        return frozenset({COMPILED})
    if last in _WRAPPERS:
        inner = lookup(positional(call, 0) or keyword(call, "module"))
        return frozenset({DDP} | ({WRAPS_COMPILED} if COMPILED in inner else set()))
    if last in _SCALERS:
        return frozenset({SCALER})
    if "lr_scheduler" in qual or last in _LR_SCHEDULERS or re.match(r"get_\w*schedule", last):
        return frozenset({SCHEDULER})
    if ".optim." in f".{qual}." and "lr_scheduler" not in qual or last in _OPTIMIZERS:
        if last[:1].isupper() or last.startswith("create_optimizer"):
            return frozenset({OPTIMIZER})
    if last == "Accelerator":
        steps = keyword(call, "gradient_accumulation_steps")
        accumulates = steps is not None and not (isinstance(steps, cst.Integer) and steps.value == "1")
        return frozenset({ACCELERATOR} | ({ACCELERATOR_ACCUMULATES} if accumulates else set()))
    if last == "Fabric":
        return frozenset({FABRIC})
    if last in _FUNCTIONAL_LOSSES or last.endswith("Loss"):
        reduction = keyword(call, "reduction")
        tags = {CRITERION}
        if isinstance(reduction, cst.SimpleString) and reduction.evaluated_value == "sum":
            tags.add(SUM_LOSS)
        if keyword(call, "ignore_index") is not None:
            tags.add(TOKEN_LOSS)
        return frozenset(tags)
    return NONE


def unpacked_kinds(call: cst.Call, imports: ImportMap, lookup, count: int) -> list[frozenset[str]] | None:
    """Kinds of each element when a call's result is unpacked into `count` targets."""
    receiver, method = call_receiver(call)
    qual = imports.qualify(call.func) or dotted(call.func) or ""
    if qual == "deepspeed.initialize" or (method == "initialize" and dotted(receiver) == "deepspeed"):
        kinds = [NONE] * count
        kinds[0] = frozenset({DEEPSPEED})
        if count > 1:
            kinds[1] = frozenset({OPTIMIZER, DEEPSPEED})
        if count > 3:
            kinds[3] = frozenset({SCHEDULER, DEEPSPEED})
        return kinds
    if method in {"prepare", "setup"} and receiver is not None:
        owner = lookup(receiver)
        if ACCELERATOR in owner or FABRIC in owner:
            args = [a.value for a in call.args if a.keyword is None and not a.star]
            if len(args) != count:
                return None
            extra = {PREPARED} if ACCELERATOR in owner else set()
            return [frozenset(lookup(arg) | extra) for arg in args]
    return None
