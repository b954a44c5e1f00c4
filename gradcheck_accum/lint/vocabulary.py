"""The words of the file model: what a call does, what a name is, which framework owns it, and the
records that one ordered walk over a scope produces (walker.py). Windows (windows.py) and boundary
predicates (predicates.py) are built from these records; rules read them through model.py.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, MutableMapping, NamedTuple

from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import ImportMap, contains, dotted

if TYPE_CHECKING:  # annotations only: libcst is loaded lazily (see lazy.py)
    from gradcheck_accum.lint.catalogue import Api
    from gradcheck_accum.lint.paths import Decision

    Loop = cst.For | cst.While


class Tag(enum.Enum):
    """An enum whose members hash by identity: sets of them are built and tested on every call the
    walker meets, and Enum's own hash (of the member's name) is a Python-level call."""

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


class EventKind(Tag):
    """What a call (or assignment) does to the training state."""

    BACKWARD = "backward"
    ZERO_GRAD = "zero_grad"  # gradients cleared: zero_grad(), `p.grad = None`, `p.grad.zero_()`
    STEP = "step"  # an optimizer update: optimizer.step(), scaler.step(opt), engine.step()
    SCALER_UPDATE = "scaler_update"
    UNSCALE = "unscale"
    SCHEDULER_STEP = "scheduler_step"
    CLIP = "clip"
    COMPILE = "compile"
    SYNC_CONTROL = "sync_control"  # no_sync(), require_backward_grad_sync =, accumulate(), no_backward_sync()
    MODEL_CALL = "model_call"  # `m(...)` / `m.forward(...)` on a local object
    LOAD_STATE = "load_state"
    STATE_DICT = "state_dict"
    SAVE = "save"
    LOSS_TOTAL = "loss_total"  # `total += x` / `xs.append(x)`: what may keep a loss graph alive
    HELPER_CALL = "helper_call"  # a call to a function defined in this file
    SCHEDULER_BUILT = "scheduler_built"  # `name = <scheduler constructor>(...)`
    RETURN = "return"
    GRAD_SCALE = "grad_scale"  # `p.grad.div_(n)`, `p.grad /= n`: the accumulated gradient is rescaled


# What a call to a same-file helper brings into its caller's window.
HELPER_EFFECTS = frozenset({EventKind.BACKWARD, EventKind.ZERO_GRAD, EventKind.STEP, EventKind.SCALER_UPDATE,
                            EventKind.UNSCALE, EventKind.SCHEDULER_STEP, EventKind.CLIP, EventKind.SYNC_CONTROL,
                            EventKind.GRAD_SCALE})


class Role(Tag):
    """What a name holds, from what bound it (bindings.py) or, for a few roles, from the name itself."""

    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    SCALER = "scaler"  # torch.amp.GradScaler and its sharded variant
    COMPILED = "compiled"  # a torch.compile wrapper
    DDP = "ddp"  # DistributedDataParallel / FSDP wrapper
    SHARDED = "sharded"  # ... an FSDP one (FullyShardedDataParallel, fully_shard): syncs in the post-backward hook
    # ... a replicating one (DistributedDataParallel): a name that holds an FSDP model on one path and a
    # DDP model on another (`if fsdp: m = FSDP(m) elif ddp: m = DDP(m)`) has both SHARDED and this
    REPLICATED = "replicated"
    # ... apex's DistributedDataParallel: no `no_sync()`; `disable_allreduce()`/`enable_allreduce()` switch it
    APEX_REPLICATED = "apex-replicated"
    WRAPS_COMPILED = "wraps-compiled"  # a DDP/FSDP wrapper around a compiled module: `.module` is compiled
    ACCELERATOR = "accelerator"
    ACCELERATOR_ACCUMULATES = "accelerator-accumulates"  # Accelerator(gradient_accumulation_steps=N > 1)
    ACCUMULATING_PLUGIN = "accumulating-plugin"  # DeepSpeedPlugin(gradient_accumulation_steps=N > 1), for an Accelerator
    ACCELERATOR_FSDP = "accelerator-fsdp"  # Accelerator(fsdp_plugin=...): prepare() wraps models in FSDP
    # Accelerator(mixed_precision="fp16"): accelerator.backward scales the loss with its own GradScaler
    ACCELERATOR_FP16 = "accelerator-fp16"
    # Accelerator(step_scheduler_with_optimizer=False): a scheduler it prepares steps on every call
    ACCELERATOR_UNTIED_SCHEDULERS = "accelerator-untied-schedulers"
    # Accelerator(deepspeed_plugin=...): the DeepSpeed engine counts the micro-batches, accumulate() or not
    ACCELERATOR_DEEPSPEED = "accelerator-deepspeed"
    FABRIC = "fabric"
    FABRIC_WITHOUT_DDP = "fabric-without-ddp"  # a Fabric whose strategy or devices rule DDP out (or are not known)
    BOOSTER = "booster"  # a ColossalAI Booster
    HF_TRAINER = "hf-trainer"  # `self` in a subclass of transformers' Trainer (its training_step backpropagates)
    DEEPSPEED = "deepspeed"  # an engine (or its optimizer/scheduler) from deepspeed.initialize
    # the function deepspeed.initialize itself, held by a name that is passed on and called later
    # (`ds_init = deepspeed.initialize if args.deepspeed else None`, returned, handed to `main(args, ds_init)`)
    DEEPSPEED_INITIALIZE = "deepspeed-initialize"
    # ... an engine whose config, a dict written in the code, sets no accumulation (one micro-batch a step)
    DEEPSPEED_WITHOUT_ACCUMULATION = "deepspeed-without-accumulation"
    PREPARED = "prepared"  # returned by accelerator.prepare: steps and zero_grads skip non-sync steps
    # a model returned by fabric.setup: its DDP is Fabric's, switched off by fabric.no_backward_sync only
    # (the wrapper has no no_sync of its own)
    FABRIC_MODULE = "fabric-module"
    SUM_LOSS = "sum-loss"  # a criterion with reduction="sum"
    TOKEN_LOSS = "token-loss"  # a criterion with an explicit ignore_index
    CRITERION = "criterion"  # a loss function or its result
    ITEM_LOSS = "item-loss"  # a criterion with reduction="none": one loss per item, reduced by the code around
    # N, handed by every caller to a parameter whose name does not say so (`train_one_epoch(engine,
    # loader, engine.gradient_accumulation_steps())` binds `update_freq`)
    ACCUMULATION_COUNT = "accumulation-count"
    # the index of a caller's loop over passes that starts at 0 (`for epoch in range(args.start_epoch,
    # ...)`, default 0: `train_one_epoch(..., epoch)`): 0 in a fresh run's first pass
    PASS_FROM_ZERO = "pass-from-zero"
    PASS_INDEX = "pass-index"  # a parameter every caller binds to the index of a loop around the call
    # an Accelerator's bound `accumulate` method (`self.accum_scope = self.accelerator.accumulate`),
    # entered later by calling it: `with self.accum_scope(model):`
    ACCUMULATE_CONTEXT = "accumulate-context"
    # a DDP model's bound `no_sync` method (`context = self.model.no_sync if ... else nullcontext`),
    # entered later by calling it: `with context():`
    NO_SYNC_CONTEXT = "no-sync-context"


Roles = frozenset  # frozenset[Role]
NO_ROLES: frozenset[Role] = frozenset()


class Framework(Tag):
    """Who owns an API: what it does is the framework's semantics (catalogue.py)."""

    TORCH = "torch"
    DDP = "ddp"  # torch.nn.parallel.DistributedDataParallel and FSDP
    ACCELERATE = "accelerate"
    FABRIC = "fabric"
    DEEPSPEED = "deepspeed"
    COLOSSALAI = "colossalai"
    LIGHTNING = "lightning"
    TRANSFORMERS = "transformers"  # Hugging Face's Trainer
    APEX = "apex"  # and other FP16 optimizers whose `optimizer.backward(loss)` applies the loss scale
    HOROVOD = "horovod"
    SAFETENSORS = "safetensors"
    OTHER = "other"  # a sync switch some distributed engines expose; what owns it does not matter here

    @property
    def display(self) -> str:
        return _DISPLAY.get(self, self.value)


_DISPLAY = {Framework.DEEPSPEED: "DeepSpeed", Framework.LIGHTNING: "Lightning", Framework.DDP: "DDP",
            Framework.TRANSFORMERS: "transformers' Trainer"}


class Fact(Tag):
    """What a rule may need from a file besides events and roles; evidence.py says what text each
    needs, from the catalogue."""

    TRAINING_LOOP = "training loop"  # a for/while loop that reaches a backward call: where windows are
    LOSS_DIVIDED = "loss divided"  # `/`, `.div(...)` on a loss
    DATA_LENGTH = "data length"  # `len(loader)`
    CALLERS = "callers"  # the calls of the functions that hold a window (is an epoch repeated?)
    FRAMEWORK_DIVIDES_LOSS = "framework divides the loss"  # a backward or hook that already divides by N
    HOOKS = "hooks"  # methods a framework's own loop calls (Lightning's training_step)
    AMP_SCALED_LOSS = "AMP-scaled loss"  # `scaler.scale(loss)`


class DefOp(Tag):
    """How a Def binds its name."""

    ASSIGN = "="
    ADD = "+="
    SUBTRACT = "-="
    MULTIPLY = "*="
    DIVIDE = "/="
    FLOOR_DIVIDE = "//="
    OTHER_AUGMENTED = "op="
    LOOP_TARGET = "for"
    UNPACK = "unpack"  # one target of `a, b = value`; Def.index says which
    ITEM = "item"  # `name[...] = value` fills the container `name`

    @property
    def rebinds(self) -> bool:
        """A plain assignment or unpacking: the name's old value is gone."""
        return self in (DefOp.ASSIGN, DefOp.UNPACK)

    @property
    def scales(self) -> bool:
        return self in (DefOp.DIVIDE, DefOp.MULTIPLY, DefOp.FLOOR_DIVIDE)


class Exit(Tag):
    """How an `if` body without `else` leaves its block (the code after it runs only when it does not)."""

    CONTINUE = "continue"  # skips the rest of this iteration
    BREAK = "break"  # ends the loop
    RETURN = "return"
    RAISE = "raise"

    @property
    def ends_loop(self) -> bool:
        """The loop (or the whole run) ends there: the code after the `if` is the only way on."""
        return self is not Exit.CONTINUE


@dataclass(frozen=True)
class Guard:
    test: cst.BaseExpression
    positive: bool  # True in the `if` body, False in `else`/`elif`
    owner: cst.CSTNode  # the If statement
    depth: int  # how many loops enclose the If: the guard sits inside loops[:depth]
    exit: Exit | None = None  # set on the code after `if test: <...> continue/break/return/raise`
    scope: "Scope | None" = field(default=None, compare=False)  # whose names the test reads
    # paths.decision of this guard, kept once made: path splitting asks for it for every event and test
    decided: "Decision | None" = field(default=None, compare=False, repr=False)


class Context(NamedTuple):
    guards: tuple[Guard, ...] = ()
    loops: tuple[Loop, ...] = ()
    withs: tuple[cst.Call, ...] = ()  # calls in enclosing `with` items
    in_handler: bool = False  # inside except/finally/match: conditions we cannot read

    @property
    def branches(self) -> frozenset[tuple[int, bool]]:
        """The branches the code runs on: each `if` around it (by identity) with the side taken. Code whose
        branches are a subset of another's runs wherever that code does."""
        return frozenset((id(g.owner), g.positive) for g in self.guards)

    def push_guard(self, guard: Guard) -> "Context":
        return Context(self.guards + (guard,), self.loops, self.withs, self.in_handler)

    def push_loop(self, loop: Loop) -> "Context":
        return Context(self.guards, self.loops + (loop,), self.withs, self.in_handler)

    def push_withs(self, calls: tuple[cst.Call, ...]) -> "Context":
        return Context(self.guards, self.loops, self.withs + calls, self.in_handler)

    def handler(self) -> "Context":
        return Context(self.guards, self.loops, self.withs, True)

    @property
    def conditional(self) -> bool:
        return bool(self.guards or self.loops or self.in_handler)


@dataclass
class Event:
    kind: EventKind
    node: cst.CSTNode
    ctx: Context
    order: int  # place in program order, file-wide
    api: Api | None = None  # the catalogue entry the call matched (None for assignments, returns, local calls)
    target: str | None = None  # dotted name of the object acted on (optimizer, scaler, model...)
    roles: frozenset[Role] = NO_ROLES  # what that object is at this point
    expr: cst.BaseExpression | None = None  # backward: the loss; loss_total: the added value; return: the value
    scaler: str | None = None  # the GradScaler involved: `scaler.scale(loss).backward()`, `scaler.step(opt)`
    model_wide: bool = False  # zero_grad: clears a model's or parameters' gradients, not one optimizer's
    passed_names: frozenset[str] = frozenset()  # save: the names passed whole as arguments
    argument_names: frozenset[str] = frozenset()  # model_call: every name read in the arguments
    # model_call: roles of the objects passed whole (`loss_fn(model, batch)`, `wrapper(unet=self.unet)`)
    argument_roles: frozenset[Role] = NO_ROLES
    element_roles: tuple[frozenset[Role], ...] = ()  # return: the roles of each element of a returned tuple
    item_roles: frozenset[Role] = NO_ROLES  # return: the roles every item of a returned container holds
    via_helper: str | None = None  # the helper function's name when this event stands for a call to it
    backpropagates: bool = False  # helper_call: the function called (not walked here) runs a backward
    stmt: cst.CSTNode | None = None  # the statement the event belongs to (what a fix moves)
    scope: "Scope | None" = None  # whose names the event's expressions read: a called function's (inlined)

    @property
    def frame(self) -> "Frame | None":
        """The call this event was reached through, when it sits in a called function."""
        return self.scope.frame if self.scope is not None else None

    @property
    def framework(self) -> Framework | None:
        return self.api.framework if self.api is not None else None

    @property
    def expr_name(self) -> str | None:
        """The dotted name of `expr` when it is a plain name (`loss`, `out.loss`)."""
        return dotted(self.expr) if self.expr is not None else None


@dataclass
class Def:
    """An assignment `name = value` (or `name op= value`, a loop target, ...) seen in a scope."""

    name: str
    value: cst.BaseExpression | None
    order: int
    ctx: Context
    op: DefOp = DefOp.ASSIGN
    index: int | None = None  # element index for tuple unpacking and loop targets
    node: cst.CSTNode | None = None
    scope: "Scope | None" = None  # where `value` is read, when not the def's own scope (an argument
    # bound to a parameter is read in the caller)

    @property
    def unpacked_element(self) -> cst.BaseExpression | None:
        """The element a tuple unpacking binds from a literal tuple (`labels` of `seq, labels = seq[:, :-1],
        seq[:, 1:]`); None when the value has another length or a starred part moves the elements (a
        mismatch fails at run time)."""
        if not isinstance(self.value, (cst.Tuple, cst.List)) or self.index is None:
            return None
        elements = self.value.elements
        if self.index >= len(elements) or any(isinstance(el, cst.StarredElement) for el in elements[:self.index + 1]):
            return None
        return elements[self.index].value

    @property
    def bound(self) -> cst.BaseExpression | None:
        """The value the definition binds its name to: the element, for an unpacking of a literal tuple."""
        if self.op is DefOp.UNPACK and isinstance(self.value, (cst.Tuple, cst.List)):
            return self.unpacked_element
        return self.value


END_OF_SCOPE = 1 << 62  # a program point after every other: names read as they stand at the end


@dataclass(eq=False)
class Frame:
    """A function walked in place of a call to it (an inlined call): its events join the caller's
    window, its names live in its own scope, its parameters are bound to the call's arguments."""

    call: cst.Call  # the call, in the caller
    caller: "Scope"  # the scope the call was walked in
    where: str  # the function, for messages: `trainer.py:Trainer._run_batch`
    path: str | None = None  # the function's file, when it is not the file being linted
    line: int | None = None  # where the function is defined
    in_loop: bool = True  # the call sits in a loop of the caller (else the callee's own loop is the window's)
    # walked only to read what it returns (the loss tracer): its statements carry no context of the
    # call (no loops, no guards), and its locals are computed anew on every call
    for_returns: bool = False

    @property
    def depth(self) -> int:
        return 1 + (self.caller.frame.depth if self.caller.frame is not None else 0)


@dataclass(eq=False)
class Scope:
    node: cst.Module | cst.FunctionDef
    name: str
    class_bases: tuple[str, ...] = ()  # bases of the enclosing class, for methods
    owner: cst.ClassDef | None = None  # the class a method belongs to
    frame: Frame | None = None  # set when this scope is a called function walked inside a caller
    imports: ImportMap | None = None  # its module's imports, when the module is not the linted file
    foreign: bool = False  # a function of another file, walked because it calls into this one
    module: cst.Module | None = None  # the module of the file the scope is in (its declared command line)
    events: list[Event] = field(default_factory=list)
    defs: dict[str, list[Def]] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    loop_end: dict[int, int] = field(default_factory=dict)  # id(loop) -> last order inside it
    loop_start: dict[int, int] = field(default_factory=dict)
    # name -> roles, while walking (a function's reads through to its module's globals: model._build)
    env: MutableMapping[str, frozenset[Role]] = field(default_factory=dict)
    given_counts: frozenset[str] = frozenset()  # parameters every caller binds to N (Role.ACCUMULATION_COUNT)
    given_passes: frozenset[str] = frozenset()  # parameters every caller binds to a pass index from 0
    given_indices: frozenset[str] = frozenset()  # parameters every caller binds to a loop index (any start)
    defaulted: frozenset[str] = frozenset()  # parameters no caller in the project passes: each holds its default
    # parameter -> the guards each call in the project that hands it a torch.compile wrapper runs under
    compiled_given_under: dict[str, list[Context]] = field(default_factory=dict)
    passed: frozenset[str] | None = None  # parameters some caller in the project passes (None: not known)
    # id(loop) -> the names bound inside it, indexed on first use once the walk is done (windows.assigned_in)
    assigned_by_loop: dict[int, frozenset[str]] | None = None
    event_orders: list[int] | None = None  # the order of each event, indexed once the walk is done (windows)
    called_frames: list[Scope] | None = None  # the scopes its events were walked in, listed once (windows.assigned_in)
    # name -> (how many bindings it had, whether one of them aliases an accumulation count), for
    # predicates.is_accumulation_count, asked of every name read in a loss or a boundary
    accumulation_aliases: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # a root scope: the calls of a bound `accumulate` (Role.ACCUMULATE_CONTEXT) its `with` items enter
    accumulate_entries: set[int] = field(default_factory=set)
    # a root scope: id(call) in a loop's iterable -> what that call iterates, when it runs a project
    # generator that yields each item of an argument (`metric_logger.log_every(data_loader, 10)`)
    iterated: dict[int, cst.BaseExpression] = field(default_factory=dict)

    def holding(self, node: cst.CSTNode) -> "Scope | None":
        """This scope, or the nearest of the callers it was walked in place for, whose code holds `node`
        (the function a closure's free names are bound in, the one a loop is written in)."""
        scope: Scope | None = self
        while scope is not None and not contains(scope.node, node):
            scope = scope.frame.caller if scope.frame is not None else None
        return scope

    def defs_of(self, name: str, before: int | None = None) -> list[Def]:
        """The bindings of `name` here (those before program point `before`). The walk appends them in
        program order, so the ones before a point are a prefix: found by bisection, not by a scan
        that would cost a name rebound in every loop of a file the square of its loops."""
        found = self.defs.get(name, [])
        if before is None:
            return list(found)
        return found[:bisect.bisect_left(found, before, key=lambda d: d.order)]
