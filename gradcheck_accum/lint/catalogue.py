"""The call catalogue: every API the analysis knows, as data.

Each entry says how the API is spelled (a method or function name, a name resolved through imports,
an attribute), the event it produces in the file model, the role its receiver must have, the
framework that owns it, and what that framework does (a backward that already divides the loss by
N, a step that also clears gradients, a clip that unscales first). The walker classifies calls
from it (walker.py), names get their roles from its constructors (bindings.py), the loss tracer
reads its loss operations (losses.py), and the prefilter and hollowing derive the words a file must
contain from it (evidence.py). Adding what an API does means adding an entry here.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from gradcheck_accum.lint.vocabulary import NO_ROLES, EventKind, Framework, Role, Tag


class Operand(Tag):
    """Where, in a call, the object an entry talks about sits."""

    RECEIVER = "receiver"  # `x` in `x.name(...)`
    FIRST_ARGUMENT = "first argument"  # `opt` in `scaler.step(opt)`
    GRAD_OWNER = "grad owner"  # `p` in `p.grad.zero_()`
    NOTHING = "nothing"


class Form(Tag):
    CALL = "call"  # `name(...)`, `x.name(...)`
    ATTRIBUTE_SET = "attribute set"  # `x.name = value`
    ATTRIBUTE_READ = "attribute read"  # `ctx = x.name` (the bound method, entered later)


class LossScaling(Tag):
    """Whether a backward divides the loss by the accumulation count N before differentiating it."""

    NEVER = "never"
    # accelerate: `accelerator.backward` divides by the Accelerator's gradient_accumulation_steps
    WITH_ACCUMULATION_STEPS = "with accumulation steps"
    # DeepSpeed: `engine.backward` divides by the engine's gradient_accumulation_steps, which is N when the
    # engine owns the window (engine.step() on every micro-batch) and 1 when the loop steps it by hand
    WHEN_ENGINE_OWNS_WINDOW = "when the engine owns the window"
    # Lightning automatic optimisation: the loss `training_step` returns is divided by accumulate_grad_batches
    AUTOMATIC_OPTIMIZATION = "automatic optimisation"
    # transformers' Trainer (4.46 and later): training_step divides what compute_loss returns by the
    # accumulation steps unless the window's items are counted and handed to compute_loss instead
    UNLESS_ITEMS_COUNTED = "unless the window's items are counted"


class Api(NamedTuple):
    name: str  # the method, function or attribute name as written
    event: EventKind | None  # None: known, and changes nothing the rules look at (`env.step()`)
    framework: Framework | None = Framework.TORCH  # None: plain Python (`list.append`)
    receiver: Role | None = None  # the role the receiver must have
    receiver_lacks: frozenset[Role] = NO_ROLES  # roles the receiver must not have
    has_receiver: bool | None = True  # `x.name(...)`: True; `name(...)`: False; either: None
    qualname: str | None = None  # the name resolved through imports must be this (`torch.autograd.backward`)
    qualname_prefix: str | None = None  # ... or start with this
    follows_aliases: bool = False  # also matched when imported under another name (`from torch import save as S`)
    on_grad: bool = False  # the receiver is a `.grad` chain (`p.grad.zero_()`)
    arguments: bool | None = None  # must have arguments (True), none (False), or either
    form: Form = Form.CALL
    target: Operand = Operand.RECEIVER  # what the event acts on
    loss: Operand | None = None  # backward: where the loss is; append: where the added value is
    roles_of: Operand = Operand.RECEIVER  # whose roles the event records
    first_keyword: str | None = None  # the first parameter's name, when passed by keyword (`loss=loss`)
    scaler: Operand | None = None  # where the GradScaler is (`scaler.step(opt)`, `scaler.unscale_(opt)`)
    # A scheduler known only by its name must look like one: no positional arguments
    # (`lr_scheduler.step()`, not diffusers' `noise_scheduler.step(pred, t, x)`).
    guessed_receiver_takes_no_arguments: bool = False
    grants: Role | None = None  # attribute set: the owner gains this role
    # framework semantics
    divides_loss: LossScaling = LossScaling.NEVER
    clears_gradients: bool = False  # the step also clears the gradients (DeepSpeed's engine.step())
    unscales_first: bool = False  # the clip unscales AMP gradients itself before clipping
    model_wide: bool = False  # zero_grad: clears a model's or parameters' gradients, not an optimizer's
    # sync switch: the value set (`m.require_backward_grad_sync = v`) or the first argument
    # (`m.set_requires_gradient_sync(v)`) says whether the next backward synchronises (True: it does)
    sync_flag: bool = False
    # a gradient rescaled by a factor computed from a gradient norm, or capped at 1, is clipped by hand
    # (`p.grad.mul_(max_norm / (total_norm + eps))` under `if coef < 1`): matched only for such a factor
    clips_by_factor: bool = False

    @property
    def token(self) -> str:
        """Text every use of this API contains. A call is `name(` (the prefilter reads that as a call,
        not a definition); an aliased import leaves only the name (`from torch import save as S`
        still says `save`); a call on a gradient says `.grad`; an attribute `.name`."""
        if self.form is not Form.CALL or self.on_grad:
            return "." + ("grad" if self.on_grad else self.name)
        return self.name if self.follows_aliases else self.name + "("


_CLIPS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_gradients")
# timm's clippers change `.grad` in place as torch's do (timm/utils/agc.py, timm/utils/clip_grad.py)
_TIMM_CLIPS = ("adaptive_clip_grad", "dispatch_clip_grad")
# The bound a clip is given by: torch's max_norm / clip_value, Fabric's clip_val (else its second positional
# argument); an infinite bound clips nothing (`clip_grad_norm_(params, float("inf"))` only reads the norm)
CLIP_BOUND_KEYWORDS = ("max_norm", "clip_value", "clip_val")
_SYNC_SWITCHES = ("no_sync", "accumulate", "no_backward_sync", "skip_synchronize", "disable_allreduce",
                  "enable_allreduce", "disable_need_reduction", "enable_need_reduction",
                  "set_gradient_accumulation_boundary")
_TORCH, _DDP, _ACCELERATE, _FABRIC, _DEEPSPEED = (Framework.TORCH, Framework.DDP, Framework.ACCELERATE,
                                                   Framework.FABRIC, Framework.DEEPSPEED)
_E = EventKind
_FIRST, _NOTHING = Operand.FIRST_ARGUMENT, Operand.NOTHING

# accelerate's prepared scheduler skips the steps where gradients do not sync (it steps once per window)
# from 0.16 on (huggingface/accelerate#999); before, it stepped on every micro-batch inside accumulate().
ACCELERATE_SCHEDULER_SKIPS_UNSYNCED_SINCE = ("accelerate", (0, 16))

# `with model.no_sync():` on a DistributedDataParallel model
# `with accelerator.accumulate(model):`, also entered through a bound method bound to a name first
ACCELERATE_ACCUMULATE = Api("accumulate", _E.SYNC_CONTROL, _ACCELERATE, receiver=Role.ACCELERATOR, has_receiver=None,
                            target=_FIRST)
DDP_NO_SYNC = Api("no_sync", _E.SYNC_CONTROL, _DDP, receiver_lacks=frozenset({Role.ACCELERATOR, Role.FABRIC}),
                  has_receiver=None)
# `model.require_backward_grad_sync = is_last`: what DDP.no_sync() sets, by hand
DDP_SYNC_FLAG = Api("require_backward_grad_sync", _E.SYNC_CONTROL, _DDP, form=Form.ATTRIBUTE_SET, sync_flag=True)
# When a sync switch takes effect. DistributedDataParallel reads `require_backward_grad_sync` (which
# no_sync() sets) in its forward: `_pre_forward`/`_post_forward` arm the reducer for the backward of that
# forward's graph, so a switch thrown after the forward changes nothing until the next one. FSDP reads its
# switch when the gradients are ready: FullyShardedDataParallel.no_sync() sets `_sync_gradients`, read in
# the post-backward hook (fsdp/_runtime_utils.py); fully_shard's set_requires_gradient_sync sets the param
# groups' reduce_grads, read in post_backward. Models with this role are the latter.
SYNCS_AT_BACKWARD = Role.SHARDED

# In order: for one call, the first entry whose conditions hold decides.
APIS: tuple[Api, ...] = (
    # backward variants
    # distributed autograd keeps its gradients in its own context, not in .grad
    Api("backward", None, qualname_prefix="torch.distributed", follows_aliases=True, has_receiver=None),
    # apex: applies the loss scale only
    Api("backward", _E.BACKWARD, Framework.APEX, receiver=Role.OPTIMIZER, loss=_FIRST, first_keyword="loss"),
    Api("backward", _E.BACKWARD, _ACCELERATE, receiver=Role.ACCELERATOR, loss=_FIRST, first_keyword="loss",
        divides_loss=LossScaling.WITH_ACCUMULATION_STEPS),
    # Fabric never scales the loss
    Api("backward", _E.BACKWARD, _FABRIC, receiver=Role.FABRIC, loss=_FIRST, first_keyword="tensor"),
    # ColossalAI: `booster.backward(loss, optimizer)` hands the loss to the plugin's optimizer, which applies
    # only its mixed-precision loss scale (colossalai/booster/booster.py, zero/low_level optimizers)
    Api("backward", _E.BACKWARD, Framework.COLOSSALAI, receiver=Role.BOOSTER, loss=_FIRST, first_keyword="loss"),
    Api("backward", _E.BACKWARD, _DEEPSPEED, receiver=Role.DEEPSPEED, loss=_FIRST, first_keyword="loss",
        divides_loss=LossScaling.WHEN_ENGINE_OWNS_WINDOW),
    Api("backward", _E.BACKWARD, qualname="torch.autograd.backward", has_receiver=None, loss=_FIRST, target=_NOTHING,
        first_keyword="tensors"),
    Api("backward", _E.BACKWARD, loss=Operand.RECEIVER),  # `loss.backward()`, `scaler.scale(loss).backward()`
    Api("backward", None, has_receiver=False),
    Api("manual_backward", _E.BACKWARD, Framework.LIGHTNING, has_receiver=None, loss=_FIRST, target=_NOTHING,
        first_keyword="loss"),
    # transformers' Trainer.training_step(model, inputs) computes the loss and backpropagates it
    # (accelerator.backward), dividing it as the Trainer decides (HF_COMPUTE_LOSS): a subclass's own loop
    # that calls the inherited method runs a backward per call
    Api("training_step", _E.BACKWARD, Framework.TRANSFORMERS, receiver=Role.HF_TRAINER, target=_NOTHING),
    # clearing gradients
    Api("zero_grad", _E.ZERO_GRAD, receiver=Role.OPTIMIZER),
    Api("zero_grad", _E.ZERO_GRAD, has_receiver=None, model_wide=True),  # model.zero_grad(), a module's own
    Api("grad", _E.ZERO_GRAD, form=Form.ATTRIBUTE_SET, target=Operand.GRAD_OWNER, model_wide=True),  # p.grad = None
    Api("mul_", _E.CLIP, on_grad=True, clips_by_factor=True),  # clipping written by hand
    Api("clamp_", _E.CLIP, on_grad=True),  # `p.grad.clamp_(-v, v)`: clipping by value
    Api("div_", _E.GRAD_SCALE, on_grad=True),
    Api("mul_", _E.GRAD_SCALE, on_grad=True),
    Api("zero_", _E.ZERO_GRAD, on_grad=True, target=Operand.GRAD_OWNER, model_wide=True),
    # updates
    Api("step", _E.STEP, receiver=Role.SCALER, target=_FIRST, roles_of=_FIRST, scaler=Operand.RECEIVER),  # scaler.step(opt)
    Api("step", _E.SCHEDULER_STEP, receiver=Role.SCHEDULER, receiver_lacks=frozenset({Role.OPTIMIZER}),
        guessed_receiver_takes_no_arguments=True),
    Api("step", _E.STEP, _DEEPSPEED, receiver=Role.DEEPSPEED, clears_gradients=True),
    Api("step", _E.STEP, receiver=Role.OPTIMIZER),
    Api("step", None),  # env.step(action), sampler.step(): not an update
    Api("update", _E.SCALER_UPDATE, receiver=Role.SCALER),
    Api("unscale_", _E.UNSCALE, has_receiver=None, target=_FIRST, scaler=Operand.RECEIVER),
    # the primitive GradScaler.unscale_ runs, called by hand-written fp16 optimizers on their gradients
    Api("_amp_foreach_non_finite_check_and_unscale_", _E.UNSCALE, has_receiver=None, target=_NOTHING),
    Api("unscale_gradients", _E.UNSCALE, _ACCELERATE, receiver=Role.ACCELERATOR, has_receiver=None,
        scaler=Operand.RECEIVER),
    # clipping
    *(Api(name, _E.CLIP, _ACCELERATE, receiver=Role.ACCELERATOR, has_receiver=None, unscales_first=True)
      for name in _CLIPS),
    *(Api(name, _E.CLIP, _FABRIC, receiver=Role.FABRIC, has_receiver=None, unscales_first=True) for name in _CLIPS),
    *(Api(name, _E.CLIP, has_receiver=None) for name in _CLIPS),
    *(Api(name, _E.CLIP, qualname_prefix="timm.utils.", follows_aliases=True, has_receiver=None) for name in _TIMM_CLIPS),
    # torch.compile
    Api("compile", _E.COMPILE, qualname="torch.compile", has_receiver=None, target=_NOTHING),
    # gradient synchronisation
    Api("no_sync", _E.SYNC_CONTROL, _ACCELERATE, receiver=Role.ACCELERATOR, has_receiver=None, target=_FIRST),
    ACCELERATE_ACCUMULATE,
    Api("no_backward_sync", _E.SYNC_CONTROL, _FABRIC, receiver=Role.FABRIC, has_receiver=None, target=_FIRST),
    DDP_NO_SYNC,
    Api("set_gradient_accumulation_boundary", _E.SYNC_CONTROL, _DEEPSPEED, has_receiver=None, target=_FIRST),
    Api("skip_synchronize", _E.SYNC_CONTROL, Framework.HOROVOD, has_receiver=None, target=_FIRST),
    # `accumulate` on anything but an Accelerator is numpy's or itertools' (`np.maximum.accumulate(x)`)
    *(Api(name, _E.SYNC_CONTROL, Framework.OTHER, has_receiver=None, target=_FIRST) for name in _SYNC_SWITCHES
      if name != "accumulate"),
    DDP_SYNC_FLAG,
    Api("set_requires_gradient_sync", _E.SYNC_CONTROL, _DDP, sync_flag=True),  # FSDP2 (fully_shard) modules
    Api("no_sync", _E.SYNC_CONTROL, _DDP, form=Form.ATTRIBUTE_READ),  # `ctx = model.no_sync if ... else nullcontext`
    Api("gradient_accumulation_steps", None, _ACCELERATE, form=Form.ATTRIBUTE_SET,
        grants=Role.ACCELERATOR_ACCUMULATES),  # `accelerator.gradient_accumulation_steps = n`
    # checkpoints
    Api("load_state_dict", _E.LOAD_STATE),
    Api("state_dict", _E.STATE_DICT, arguments=False),
    Api("save", _E.SAVE, qualname="torch.save", follows_aliases=True, has_receiver=None),
    *(Api(name, _E.SAVE, Framework.SAFETENSORS, qualname=f"safetensors.torch.{name}", follows_aliases=True,
          has_receiver=None) for name in ("save_file", "save_model", "save")),
    Api("save", _E.SAVE, _ACCELERATE, receiver=Role.ACCELERATOR),
    Api("save_file", _E.SAVE, _ACCELERATE, receiver=Role.ACCELERATOR),
    Api("save", _E.SAVE, _FABRIC, receiver=Role.FABRIC),
    Api("save_file", _E.SAVE, _FABRIC, receiver=Role.FABRIC),
    # running totals
    Api("append", _E.LOSS_TOTAL, None, arguments=True, loss=_FIRST),
)


class Constructor(NamedTuple):
    """Calls whose result has a role, matched on the called name: the last part of the name resolved
    through imports (or the method name), the whole resolved name, or a part of it."""

    role: Role
    framework: Framework
    names: frozenset[str] = frozenset()  # last names: `AdamW`, `get_scheduler`
    qualname: str | None = None  # the whole resolved name: `torch.compile`
    module_word: str | None = None  # any call whose resolved name contains this (`torch.optim.lr_scheduler.X`)
    capitalised: bool = False  # ... and only classes (or `factory_prefix` functions) from there
    factory_prefix: str | None = None
    pattern: re.Pattern[str] | None = None  # names matched by shape (`get_cosine_schedule_with_warmup`)
    pattern_word: str | None = None  # a word every name the pattern matches contains
    suffix: str | None = None  # `...Loss` classes

    @property
    def words(self) -> frozenset[str]:
        """Text a file that calls this constructor contains, whatever the import aliases."""
        words = set(self.names)
        if self.qualname:
            words.add(self.qualname.rsplit(".", 1)[-1])
        words.update(w.strip(".") for w in (self.module_word, self.pattern_word, self.suffix, self.factory_prefix) if w)
        return frozenset(words)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# In order: the first that matches decides.
COMPILE = Constructor(Role.COMPILED, _TORCH, qualname="torch.compile")
WRAPPERS = Constructor(Role.DDP, _DDP, _names("DistributedDataParallel DDP FullyShardedDataParallel FSDP fully_shard"))
# ... of which these shard the model (Role.SHARDED as well): FSDP, and FSDP2's fully_shard, which shards the
# module in place and returns it (`fully_shard(model)` alone wraps `model`)
SHARDED_WRAPPERS = _names("FullyShardedDataParallel FSDP fully_shard")
# apex's DistributedDataParallel (apex.parallel) has no `no_sync()`: `disable_allreduce()` and
# `enable_allreduce()` (_SYNC_SWITCHES) switch its all-reduce instead
APEX_WRAPPER_MODULE = "apex.parallel"
IN_PLACE_WRAPPERS = _names("fully_shard")
SCALERS = Constructor(Role.SCALER, _TORCH, _names("GradScaler ShardedGradScaler"))
SCHEDULERS = Constructor(
    Role.SCHEDULER, _TORCH,
    _names("LambdaLR MultiplicativeLR StepLR MultiStepLR ConstantLR LinearLR ExponentialLR SequentialLR "
           "CosineAnnealingLR ChainedScheduler ReduceLROnPlateau CyclicLR CosineAnnealingWarmRestarts OneCycleLR "
           "PolynomialLR get_scheduler create_scheduler create_scheduler_v2 CosineLRScheduler StepLRScheduler "
           "PlateauLRScheduler"),
    module_word="lr_scheduler",
    pattern=re.compile(r"get_\w*schedule"), pattern_word="schedule")  # transformers' get_*_schedule_with_warmup
OPTIMIZERS = Constructor(
    Role.OPTIMIZER, _TORCH,
    _names("SGD Adam AdamW Adagrad Adadelta Adamax ASGD LBFGS NAdam RAdam RMSprop Rprop SparseAdam Adafactor Lion "
           "LAMB Lamb FusedAdam FusedLAMB FusedSGD AdamW8bit Adam8bit PagedAdamW PagedAdamW8bit DeepSpeedCPUAdam Muon "
           "Shampoo create_optimizer create_optimizer_v2 ZeroRedundancyOptimizer"),
    module_word=".optim.", capitalised=True, factory_prefix="create_optimizer")  # bitsandbytes.optim.AdamW8bit
ACCELERATOR = Constructor(Role.ACCELERATOR, _ACCELERATE, _names("Accelerator"))
FABRIC = Constructor(Role.FABRIC, _FABRIC, _names("Fabric"))
BOOSTER = Constructor(Role.BOOSTER, Framework.COLOSSALAI, _names("Booster"))
LOSSES = Constructor(
    Role.CRITERION, _TORCH,
    _names("cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy "
           "binary_cross_entropy_with_logits kl_div ctc_loss"),
    suffix="Loss")
# What wraps the iterable a `for` loop walks and yields its items (with an index, or a progress bar)
ITERATION_WRAPPERS = frozenset({"enumerate", "tqdm"})
# A loss function handed over by name counts only when it is torch's (`torch.nn.functional.cross_entropy`)
TORCH_MODULE_PREFIX = "torch."
CONSTRUCTORS: tuple[Constructor, ...] = (COMPILE, WRAPPERS, SCALERS, SCHEDULERS, OPTIMIZERS, ACCELERATOR, FABRIC, BOOSTER,
                                         LOSSES)

# What torch.compile returns: an OptimizedModule (torch._dynamo.eval_frame) whose `_orig_mod` is the
# module it compiled; its state_dict keys carry the `_orig_mod.` prefix.
COMPILED_CLASS = "OptimizedModule"
COMPILED_INNER = "_orig_mod"
# A state-dict key prefix that is the compile wrapper's (`_orig_mod.`, `module._orig_mod.`), as a regex
COMPILED_KEY_PREFIX = rf"(?:[A-Za-z_]\w*\.)*{COMPILED_INNER}\."
# The attributes that reach the whole module a wrapper holds: DDP, DataParallel and FSDP's `module`,
# and a compiled module's `_orig_mod`.
WRAPPED_MODULE_ATTRIBUTES = frozenset({"module", COMPILED_INNER})
# What makes a factor a clipping factor (Api.clips_by_factor): it is computed from a gradient norm, or
# capped at 1 (`(max_norm / norm).clamp(max=1)`, `min(1.0, max_norm / norm)`).
NORM_FUNCTIONS = frozenset({"norm", "vector_norm", "clip_grad_norm_", "get_total_norm"})
CAPPING_FUNCTIONS = frozenset({"clamp", "clamp_", "clip"})  # with a `max=` bound
CAPPING_BUILTIN = "min"
# The decorator of a method read as an attribute: a predicate property (`if self.should_step:`) is a call.
PROPERTY = "property"
# What a gradient is reached through without leaving it (`p.grad.detach().mul_(c)` rescales p.grad).
SAME_TENSOR_METHODS = frozenset({"detach", "data"})

# Keywords of constructors that change what the result does.
GRAD_OFF_CONTEXTS = frozenset({"no_grad", "inference_mode"})  # `with torch.no_grad():` records no graph
DEEPSPEED_PLUGIN_KEYWORD = "deepspeed_plugin"  # Accelerator(deepspeed_plugin=...): the engine accumulates by itself
ACCUMULATION_STEPS_KEYWORD = "gradient_accumulation_steps"  # Accelerator(gradient_accumulation_steps=N)
# Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=N)): the same, as a plugin
# Fabric(strategy=..., devices=...): setup() wraps the model in DDP under "auto" (several devices) and the
# "ddp*" strategies or a DDPStrategy(...); not on one device, nor under fsdp/deepspeed/dp/xla/model_parallel
# (lightning/fabric/connector.py), nor where the strategy is not spelled out here.
FABRIC_STRATEGY_KEYWORD, FABRIC_DEVICES_KEYWORD = "strategy", "devices"
FABRIC_DDP_STRATEGIES = ("auto", "ddp")  # the string is one of these or starts with "ddp"
FABRIC_DDP_STRATEGY_CLASS = "DDPStrategy"
ACCUMULATION_PLUGIN_KEYWORD = "gradient_accumulation_plugin"
# deepspeed.initialize(config=...) (`config_params` before 0.4): a DeepSpeed config's accumulation count,
# and the global batch size it is derived from when only that is given (train_batch_size =
# micro-batch size x accumulation steps x world size); with neither, the engine steps every micro-batch
DEEPSPEED_CONFIG_KEYWORDS = ("config", "config_params")
DEEPSPEED_ACCUMULATION_KEY = "gradient_accumulation_steps"
# `engine.gradient_accumulation_steps()`: the count a DeepSpeed engine was configured with (from a JSON
# file too), which code asserts equal to its own N (`assert model.gradient_accumulation_steps() == update_freq`)
DEEPSPEED_ACCUMULATION_GETTER = "gradient_accumulation_steps"
DEEPSPEED_GLOBAL_BATCH_KEY = "train_batch_size"
# Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...)): on several processes prepare() wraps a
# model in FSDP, not DistributedDataParallel (accelerate's state: an FSDP plugin selects the FSDP type)
FSDP_PLUGIN_KEYWORD = "fsdp_plugin"
# Accelerator(mixed_precision="fp16") scales every loss accelerator.backward is given (its GradScaler);
# accelerator.clip_grad_norm_ and unscale_gradients() unscale first, the prepared optimizer at its step
MIXED_PRECISION_KEYWORD, SCALED_PRECISION = "mixed_precision", "fp16"
# Accelerator(step_scheduler_with_optimizer=False): a prepared scheduler's step() steps it on every call
# (accelerate/scheduler.py), not only when the optimizer steps
SCHEDULER_WITH_OPTIMIZER_KEYWORD = "step_scheduler_with_optimizer"
ACCUMULATION_PLUGIN_STEPS = "num_steps"
# accelerate's plugins that carry the accumulation count, by the keyword that sets it: an Accelerator
# given one accumulates (DeepSpeed's count is the engine's, which accelerate adopts)
ACCUMULATING_PLUGINS = {"DeepSpeedPlugin": ACCUMULATION_STEPS_KEYWORD,
                        "GradientAccumulationPlugin": ACCUMULATION_PLUGIN_STEPS}
REDUCTION_KEYWORD = "reduction"  # a criterion's reduction="sum"
# What keeps every item appended to it, graph and all: a list, a deque. An object of another class
# (a running-average meter) may detach what its `append` is given.
KEEPING_CONTAINERS = frozenset({"list", "deque", "collections.deque"})
IN_PLACE_DETACH = "detach_"  # `loss.detach_()`: the tensor itself leaves the graph
DETACH_METHOD, LEAF_AGAIN = "detach", "requires_grad_"  # `x.detach().requires_grad_()`: a fresh leaf
GRADIENT_ATTRIBUTE = "grad"  # `p.grad`, `reps.grad`
RETAIN_GRAPH_KEYWORD = "retain_graph"  # `loss.backward(retain_graph=True)` keeps the graph for another backward
IGNORE_INDEX_KEYWORD = "ignore_index"  # a criterion that averages over valid items only
# torch criteria whose ignore_index is -100 when not given: a mean over the targets that are not -100
DEFAULT_IGNORING_CRITERIA = frozenset({"cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"})

# Calls whose results are the prepared objects, element by element.
DEEPSPEED_INITIALIZE = "deepspeed.initialize"  # -> engine, optimizer, dataloader, scheduler
# accelerator.prepare(...) and its one-object forms prepare_model/prepare_optimizer/prepare_scheduler,
# fabric.setup(...) / setup_module(model) / setup_optimizers(optimizer) (the data-loader forms make no window
# object and are left out: a loader is no model)
# Class methods a library base class gives its subclasses that make an instance of the class they are
# called on (transformers' PreTrainedModel.from_pretrained / from_config, Lightning's
# LightningModule.load_from_checkpoint): `Tagger.from_pretrained(name)` is a `Tagger`, running its forward.
INSTANCE_CLASSMETHODS = frozenset({"from_pretrained", "from_config", "load_from_checkpoint"})
PREPARE_METHODS = frozenset({"prepare", "prepare_model", "prepare_optimizer", "prepare_scheduler", "setup",
                             "setup_module", "setup_optimizers"})
# What they make of an optimizer: accelerate's AcceleratedOptimizer steps and clears only when
# gradient_state.sync_gradients, which accumulate() sets on entering the window's last micro-batch
# (accelerate/optimizer.py, accelerator.py `_do_sync`): a prepared optimizer's zero_grad inside
# accumulate() runs on that micro-batch alone, before or after its backward as written.
SYNC_ONLY_OPTIMIZER = Role.PREPARED
# ... except under accelerate's DeepSpeed plugin, whose optimizer wrapper's zero_grad() does nothing (the
# engine clears after its own step). A call of a method only a DeepSpeed engine has, on the prepared
# model, says the plugin is in use (deepspeed/runtime/engine.py).
# The same calls name an engine that an unread call made (`model, *_ = ds_init(...)` with `ds_init` handed in
# by a caller, then `assert model.gradient_accumulation_steps() == args.update_freq`).
DEEPSPEED_ENGINE_METHODS = frozenset({"get_global_grad_norm", "is_gradient_accumulation_boundary",
                                      "train_micro_batch_size_per_gpu", "zero_optimization_stage",
                                      DEEPSPEED_ACCUMULATION_GETTER})
# What they make of a model: launched on several processes, both wrap it in DistributedDataParallel
# (accelerate's Accelerator.prepare_model, Fabric's DDP strategy), so it all-reduces on every backward
# unless `accelerator.no_sync`/`accumulate` or `fabric.no_backward_sync` says otherwise.
PREPARED_MODEL = frozenset({Role.DDP})
PREPARED_SHARDED_MODEL = frozenset({Role.DDP, Role.SHARDED})  # ... by an Accelerator given an FSDP plugin


class NameGuess(NamedTuple):
    """A role read from a name when nothing in the file binds it (a parameter called `optimizer`)."""

    role: Role
    pattern: re.Pattern[str]
    words: tuple[str, ...]  # text every matching name contains


# In order; a name containing "noise" is never guessed a scheduler (diffusers' noise_scheduler).
NAME_GUESSES: tuple[NameGuess, ...] = (
    NameGuess(Role.SCALER, re.compile(r"(^|_)scaler$"), ("scaler",)),
    NameGuess(Role.SCHEDULER, re.compile(r"(^|_)(lr_)?sched(uler)?(_\w+)?$|^scheduler"), ("sched",)),
    NameGuess(Role.OPTIMIZER, re.compile(r"^(opt|optim|optimizer|optimiser)(_?\w+)?$|_(opt|optim|optimizer|optimiser)\d*$"),
              ("opt",)),
    NameGuess(Role.ACCELERATOR, re.compile(r"^accelerator$"), ("accelerator",)),
    NameGuess(Role.FABRIC, re.compile(r"^fabric$"), ("fabric",)),
    NameGuess(Role.BOOSTER, re.compile(r"^booster$"), ("booster",)),
)
NOT_A_SCHEDULER_WORD = "noise"


class LossOp(Tag):
    """What a method called on a loss does to it (losses.py)."""

    DIVIDES = "divides"
    MULTIPLIES = "multiplies"
    AMP_SCALES = "amp-scales"  # scaler.scale(loss), amp.scale_loss(loss, opt): the loss scale, not accumulation
    DETACHES = "detaches"  # the result carries no graph
    KEEPS = "keeps"  # the same loss, reshaped or reduced


# Element-wise tensor methods: what they make has one value per element of their operand (per-item losses
# stay per item: `(pred - target).pow(2)[mask].mean()` averages the items the mask keeps).
ELEMENTWISE_METHODS = frozenset({"pow", "square", "sqrt", "abs", "exp", "log", "neg", "clamp", "sigmoid"})
LOSS_OPERATIONS: dict[str, LossOp] = {
    "div": LossOp.DIVIDES, "div_": LossOp.DIVIDES, "true_divide": LossOp.DIVIDES,
    "mul": LossOp.MULTIPLIES, "mul_": LossOp.MULTIPLIES,
    "scale": LossOp.AMP_SCALES, "scale_loss": LossOp.AMP_SCALES,
    "item": LossOp.DETACHES, "detach": LossOp.DETACHES, "tolist": LossOp.DETACHES, "cpu": LossOp.DETACHES,
    "mean": LossOp.KEEPS, "sum": LossOp.KEEPS, "squeeze": LossOp.KEEPS, "float": LossOp.KEEPS, "to": LossOp.KEEPS,
    "view": LossOp.KEEPS, "reshape": LossOp.KEEPS, "contiguous": LossOp.KEEPS,
    "values": LossOp.KEEPS, "items": LossOp.KEEPS,  # `sum(loss_dict.values())`: the dict's losses
    "stack": LossOp.KEEPS, "cat": LossOp.KEEPS,  # `torch.stack(losses).sum()`: the losses, side by side
    # element-wise and indexing operations on per-token values (`logprobs.gather(-1, ids).squeeze(-1)`):
    # what they make is still the operand, element by element
    **{name: LossOp.KEEPS for name in ELEMENTWISE_METHODS | {"gather", "unsqueeze", "flatten", "masked_fill",
                                                             "log_softmax", "softmax", "index_select", "transpose",
                                                             "permute"}},
}
PARTIAL = "functools.partial"  # a callable that calls its first argument with the others first
# What a model whose forward syncs its gradients holds, and what no model holds (a forward is a call of a
# distributed model: DDP, FSDP, one accelerate prepared)
DISTRIBUTED_MODEL_ROLES = frozenset({Role.DDP, Role.SHARDED, Role.REPLICATED, Role.PREPARED})
NOT_MODEL_ROLES = frozenset({Role.OPTIMIZER, Role.SCHEDULER, Role.SCALER, Role.CRITERION, Role.DEEPSPEED,
                             Role.ACCELERATOR, Role.FABRIC})
# `x.masked_select(mask)` / `torch.masked_select(x, mask)`: the items the mask sets, flattened.
MASKED_SELECT = "masked_select"
# `x.index_select(0, rows)`: the rows an index tensor names, as `x[rows]` (`rows = mask.nonzero().view(-1)`).
INDEX_SELECT = "index_select"
# Tensor methods that move, cast or reshape labels without changing which values they hold
# (`y.view(-1).long().to(device)`): token ids stay token ids, never the ignored label.
LABEL_KEEPING_METHODS = frozenset({"view", "reshape", "contiguous", "flatten", "squeeze", "unsqueeze", "long", "int",
                                   "to", "cuda", "clone", "detach", "pin_memory"})
# Tensor methods that keep which items of a mask are set, up to a fixed number of copies
# (`mask.unsqueeze(-1).repeat(1, 1, d).float()`): a mask with a fixed count keeps one.
MASK_KEEPING_METHODS = LABEL_KEEPING_METHODS | frozenset({"float", "bool", "half", "bfloat16", "type_as", "repeat",
                                                          "expand", "expand_as", "repeat_interleave", "tile"})
# Tests for values that are not numbers (`mask = ~torch.isnan(losses)`): a mask of the finite values counts
# every item but those of a step that failed anyway, not a number the data chooses.
FINITE_TESTS = frozenset({"isnan", "isfinite", "isinf"})
# Functions that resize a mask given first by fixed factors (`F.interpolate(mask, size)` from a patch grid
# to pixels, nearest by default): a mask with a fixed count keeps a fixed count (to within rounding when
# a factor is not whole).
MASK_RESIZING_FUNCTIONS = frozenset({"interpolate", "upsample", "upsample_nearest", "repeat_interleave", "tile"})
# Factors a loss is scaled by that never normalise a window: the number of processes
# (`loss * dist.get_world_size()` undoes DDP's mean over ranks) and a power of two (a hand-rolled fp16
# loss scale, `(loss * 2 ** lg_loss_scale).backward()`, undone before the step).
WORLD_SIZE_FUNCTIONS = frozenset({"torch.distributed.get_world_size"})
LOSS_SCALE_BASES = frozenset({"2", "2.0", "2."})
# Tensors made with one value everywhere: as many items set in every micro-batch of one shape.
CONSTANT_FILLS = frozenset({"zeros", "ones", "full", "zeros_like", "ones_like", "full_like"})
# Calls that return a random order of positions (`torch.rand(n, l).argsort(dim=1)`, `torch.randperm(l)`,
# `np.random.permutation(l)`): its first k are k distinct positions, and reading a mask through it
# (`torch.gather(mask, 1, ids_restore)`) moves the set items without changing how many there are.
PERMUTATIONS = frozenset({"argsort", "randperm", "permutation"})
PERMUTING_READS = frozenset({"gather", "take_along_dim"})  # `torch.gather(mask, 1, index)`
SCATTERS = frozenset({"scatter", "scatter_"})  # `mask.scatter_(1, index, 1.0)`: sets the items index names
SCALER_SWITCH = "enabled"  # GradScaler(enabled=use_amp): with it false, scale() and unscale_() do nothing
# What hands an optimizer a model's parameters: `Adam(model.parameters())`.
NAMED_PARAMETERS_METHOD = "named_parameters"  # yields (name, parameter) pairs
PARAMETER_METHODS = frozenset({"parameters", NAMED_PARAMETERS_METHOD})
# nn.Module methods that return the module itself (`DDP(model.to(device))` wraps `model`)
MODULE_RETURNING_METHODS = frozenset({"to", "cuda", "cpu", "half", "float", "double", "bfloat16", "train", "eval",
                                      "requires_grad_", "to_empty"})
DEEP_COPY_FUNCTION = "deepcopy"  # `copy.deepcopy(model)`: a module of its own, with parameters of its own
DETACHING_FUNCTIONS = frozenset({"float"})  # float(loss): a Python number
DETACHING_METHODS = frozenset({"detach", "detach_"})  # `teacher(x).detach()`: no gradient flows back
MEAN_METHOD = "mean"  # `x.mean()`: over every element of x, however many the micro-batch has
ITEM_COUNTS = frozenset({"sum", "count_nonzero"})  # `mask.sum()`: a per-micro-batch count of valid items
DIM_KEYWORD = "dim"  # `mask.sum(dim=1)`: a reduction along that dimension only
NOT_EQUAL_METHOD = "ne"  # `labels.ne(ignore_index)`, as `labels != ignore_index`
# How many rows or elements a tensor has: `x.size(0)`, `x.numel()`, `len(x)`, `x.shape[0]`.
SIZE_METHODS = frozenset({"size", "numel", "nelement"})
SIZE_FUNCTIONS = frozenset({"len"})
SHAPE_ATTRIBUTE = "shape"
# Calls that keep a count a count: `n.clamp(min=1)`, `n.float()`, `n.item()`, `int(n)`, `max(n, 1)`.
COUNT_KEEPING_METHODS = frozenset({"clamp", "clamp_min", "float", "item", "to", "type", "double"})
COUNT_KEEPING_FUNCTIONS = frozenset({"int", "float", "max"})
NUMBER_CASTS = frozenset({"int", "float"})  # `float(n)` is the number n
NUMBER_FLOOR = "max"  # `max(n, 1)` is n wherever n counts something
TRUTH_CAST = "bool"  # `bool(x)` holds where x does
SCALER_ENABLED_TEST = "is_enabled"  # GradScaler.is_enabled(): whether it scales at all
ROUNDING_FUNCTIONS = frozenset({"round", "ceil", "floor", "min"})  # `math.ceil(l * ratio)`: a number still
SUM_FUNCTION = "sum"  # the builtin: `sum(loss_dict.values())` adds loss terms
# Builtins that look at an object without running it: `hasattr(model, "no_sync")` is no forward of `model`
INTROSPECTING_BUILTINS = frozenset({"hasattr", "getattr", "isinstance", "type", "id", "callable", "print", "repr"})
SEQUENCE_FUNCTIONS = frozenset({"list", "tuple"})  # builtins that hold the items they are given, in order
NEXT_BATCH_FUNCTION = "next"  # `batch = next(it)`: a new micro-batch each time it runs
# The `outputs.loss` a Hugging Face model returns is a mean over the labels that are not this value ...
IGNORED_LABEL = -100
# ... except for the heads whose class name ends so: a CTC head (Wav2Vec2ForCTC, HubertForCTC,
# AutoModelForCTC) pads labels with IGNORED_LABEL too, but its loss is a sum over utterances, or with
# `ctc_loss_reduction="mean"` each utterance's loss over its own target length averaged over the batch:
# never a mean over a varying number of labelled tokens.
PER_SEQUENCE_LOSS_HEADS = ("ForCTC",)
# How code writes a value into tensor items: the keyword naming it, or a call whose arguments hold it.
# the keywords that give a fill value: torch's, and numpy.pad's `constant_values`
FILL_KEYWORDS = frozenset({"padding_value", "value", "fill_value", "pad_value", "constant_values"})
FILL_METHODS = frozenset({"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"})
# Library helpers that average per-token values over the items a mask keeps, with the keyword (third
# positional) that turns them into per-row means: without it, a mean over as many tokens as the
# micro-batch's mask keeps (`masked_mean(per_token_loss, response_mask)`).
LIBRARY_MASKED_MEANS: dict[str, str] = {
    "trl.core.masked_mean": "axis", "trl.trainer.utils.masked_mean": "axis",
    "openrlhf.models.utils.masked_mean": "dim"}
# Padding that writes 0 unasked: `pad_sequence(rows)` with no padding_value, and a zero tensor whose
# rows are then written only up to each example's length (`ys = torch.zeros(b, longest)`,
# `ys[i, :len(y)] = y`): a label 0 the criterion ignores (`ignore_index=0`) is in every padded batch.
ZERO_PADDING_FUNCTIONS = frozenset({"pad_sequence"})
ZERO_ALLOCATORS = frozenset({"zeros", "zeros_like", "new_zeros"})
# What makes tensors (or cuts one into pieces) without parameters among them: the `.grad` of such a
# tensor is an activation's (a pipeline stage's received input), not a parameter's.
CHUNKING_METHODS = frozenset({"chunk", "split", "tensor_split"})  # a tensor cut into pieces along a dimension
TENSOR_FACTORIES = frozenset({"zeros", "zeros_like", "empty", "empty_like", "ones", "ones_like", "randn", "rand",
                              "full"}) | CHUNKING_METHODS
ONES_FILLS = frozenset({"ones", "ones_like", "new_ones"})  # times a value: a tensor of that value
# Collators (transformers, trl) that write IGNORED_LABEL into the labels of what they pad or hide, so
# the number of labels a model's loss averages over changes from batch to batch; with a keyword that
# must not be switched off (DataCollatorForLanguageModeling masks tokens only for masked LM, mlm=True,
# its default: for causal LM it hides only padding, which packed batches do not have).
LABEL_MASKING_COLLATORS: dict[str, str | None] = {
    "DataCollatorForSeq2Seq": None, "DataCollatorForTokenClassification": None,
    "DataCollatorForCompletionOnlyLM": None, "DataCollatorForLanguageModeling": "mlm"}
# Padding is there to hide when the examples were tokenized with a `padding=` other than these
# (transformers' tokenizers: True, "longest", "max_length" pad; False and "do_not_pad" do not).
TOKENIZER_PADDING_KEYWORD = "padding"
NO_PADDING = frozenset({"False", "do_not_pad"})
DATA_LOADERS = frozenset({"DataLoader", "StatefulDataLoader"})  # torch's, and torchdata's resumable one
TENSOR_DATASET = "TensorDataset"  # a dataset of tensors already in hand, indexed along their first dimension
COLLATE_KEYWORD = "collate_fn"
LOADER_BATCH_SIZE_KEYWORD = "batch_size"
# accelerate: the module a prepared (wrapped) model wraps, with the same parameters and gradients
UNWRAP_METHOD = "unwrap_model"
DATASET_KEYWORD = "dataset"  # `DataLoader(dataset=ds)`, as its first argument
# Hugging Face `datasets` calls that hand back a dataset of the same examples (`map` rewritten by a
# function, the first argument or `function=`) and a map-style dataset's per-example method.
DATASET_MAP = "map"
DATASET_TRANSFORMS = frozenset({DATASET_MAP, "filter", "shuffle", "select", "with_format", "remove_columns",
                                "rename_column"})
MAP_FUNCTION_KEYWORD = "function"
# `datasets` functions that hand back a shard of the dataset they are given first
DATASET_SHARDS = frozenset({"split_dataset_by_node"})
GET_ITEM_METHOD = "__getitem__"


class Hook(NamedTuple):
    """A method a framework calls for the user: the framework's loop runs around it."""

    name: str
    framework: Framework
    base: str  # the class the method's class derives from
    divides_loss: LossScaling
    switch: str  # the attribute that turns the framework's optimisation off (manual optimisation)
    # For a scaling that depends on more than the class (UNLESS_ITEMS_COUNTED):
    qualified_bases: tuple[str, ...] = ()  # the framework classes (resolved through imports) it is a hook of
    count_parameter: str | None = None  # the window's item count the framework hands the hook
    settings: tuple[str, ...] = ()  # attributes a subclass sets to decide the framework's division itself
    takes_over: tuple[str, ...] = ()  # methods that, overridden, replace the framework's step around the hook
    output_attributes: tuple[str, ...] = ()  # what the framework's models return (`outputs.logits`)
    labels_key: str | None = None  # the batch entry the framework counts the items of
    # The settings object that says whether the framework's loop accumulates: its classes, the keyword
    # (whose default is 1), and the parser that may fill it from the command line instead
    arguments_classes: tuple[str, ...] = ()
    accumulation_keyword: str | None = None
    arguments_parser: str | None = None


LIGHTNING_TRAINING_STEP = Hook("training_step", Framework.LIGHTNING, "LightningModule",
                               LossScaling.AUTOMATIC_OPTIMIZATION, "automatic_optimization")
# transformers/trainer.py (4.46 to 5.x): training_step calls compute_loss(model, inputs,
# num_items_in_batch=...) and divides its loss by the window's micro-batch count only when the loss
# is not "scaled for gradient accumulation": the class attribute loss_is_scaled_for_ga (5.x) decides
# when set, else the loss counts as scaled when the model accepts loss kwargs (model_accepts_loss_kwargs:
# its forward takes **kwargs, as Hugging Face's language models do) and num_items_in_batch was counted
# (the batches have "labels"), or a compute_loss_func was given. An override that takes
# num_items_in_batch is written for these versions (4.46 passes it to every override); before 4.46
# the Trainer always divided. trl's SFTTrainer keeps Trainer's training_step.
HF_COMPUTE_LOSS = Hook(
    "compute_loss", Framework.TRANSFORMERS, "Trainer", LossScaling.UNLESS_ITEMS_COUNTED, "model_accepts_loss_kwargs",
    qualified_bases=("transformers.Trainer", "transformers.trainer.Trainer", "transformers.Seq2SeqTrainer",
                     "transformers.trainer_seq2seq.Seq2SeqTrainer", "trl.SFTTrainer", "trl.trainer.SFTTrainer",
                     "trl.trainer.sft_trainer.SFTTrainer"),
    count_parameter="num_items_in_batch",
    settings=("model_accepts_loss_kwargs", "loss_is_scaled_for_ga", "compute_loss_func"),
    takes_over=("training_step",), output_attributes=("logits", "loss"), labels_key="labels",
    arguments_classes=("TrainingArguments", "Seq2SeqTrainingArguments"),
    accumulation_keyword="gradient_accumulation_steps", arguments_parser="HfArgumentParser")
HOOKS: tuple[Hook, ...] = (LIGHTNING_TRAINING_STEP, HF_COMPUTE_LOSS)
# The keyword a Hugging Face model takes its labels by: `labels`, and before transformers 3 the
# masked-LM heads' `masked_lm_labels` and the LM heads' `lm_labels` (the legacy example scripts).
LABELS_KEYWORDS = ("labels", "masked_lm_labels", "lm_labels")
# Attributes a framework updates on some batches and not others: a test reading one is no setting fixed
# for the run (Lightning's `self.trainer.is_last_batch` and accelerate's
# `gradient_state.end_of_dataloader` hold on the epoch's last batch only). A count such as Lightning's
# `global_step` is not one: `if self.global_step < warmup:` holds for whole stretches of windows.
LIVE_ATTRIBUTES = frozenset({"is_last_batch", "end_of_dataloader"})
# The key of the loss in a dict a hook returns (`return {"loss": loss, "log": ...}`).
RETURNED_LOSS_KEY = "loss"


class Driver(NamedTuple):
    """A framework's own training loop around the methods it calls on a user's class, written as the
    code it amounts to (read from the framework's sources, see each entry). The file model walks it as
    a caller of those methods (inlining.py), so their events sit in the framework's window: its
    counter, its backward and scaling, its boundary and its step."""

    framework: Framework
    bases: tuple[str, ...]  # it drives subclasses of these (qualified names)
    hook: str  # the method it calls once per micro-batch
    manual: bool  # for classes whose `switch` attribute is False (manual optimisation), or the others
    switch: str
    configured_by: str | None  # a keyword some constructor in the project must set (not to 1) for the loop to accumulate
    source: str  # the loop, as Python: `self` is the user's object


_LIGHTNING_MODULES = ("lightning.pytorch.LightningModule", "pytorch_lightning.LightningModule",
                      "lightning.LightningModule", "pytorch_lightning.core.LightningModule")
# The loader both loops iterate is the module's own `train_dataloader()` (what `trainer.fit(module)`
# reads when it is given no loader; one given to fit is not known here either).
# pytorch_lightning/loops/training_epoch_loop.py (2.x): `batch_idx` restarts at 0 every epoch; the
# epoch loop repeats over a sized dataloader; with manual optimisation the loop only calls
# training_step (between on_train_batch_start and on_train_batch_end, every batch), and
# accumulate_grad_batches must stay 1 (the user steps).
LIGHTNING_MANUAL = Driver(Framework.LIGHTNING, _LIGHTNING_MODULES, "training_step", True, "automatic_optimization",
                          None, """\
def fit(self, max_epochs):
    train_dataloader = self.train_dataloader()
    for epoch in range(max_epochs):
        for batch_idx, batch in enumerate(train_dataloader):
            self.on_train_batch_start(batch, batch_idx)
            outputs = self.training_step(batch, batch_idx)
            self.on_train_batch_end(outputs, batch, batch_idx)
""")
# loops/optimization/automatic.py and closure.py: the returned loss (or its "loss" entry) is divided by
# accumulate_grad_batches, backpropagated (on_before_backward before, on_after_backward after every
# backward); on_train_batch_start and on_train_batch_end run on every batch, stepping or not; the optimizer
# steps when the window is full or on the last batch (training_epoch_loop._should_accumulate), after the
# precision plugin's _after_closure has run on_before_optimizer_step and then configure_gradient_clipping
# (plugins/precision/precision.py); gradients are cleared before the first backward of a window; a
# scheduler with interval "step" is stepped through lr_scheduler_step after each optimizer step
# (training_epoch_loop._update_learning_rates).
LIGHTNING_AUTOMATIC = Driver(Framework.LIGHTNING, _LIGHTNING_MODULES, "training_step", False,
                             "automatic_optimization", "accumulate_grad_batches", """\
def fit(self, max_epochs, optimizer, scheduler, accumulate_grad_batches):
    train_dataloader = self.train_dataloader()
    for epoch in range(max_epochs):
        for batch_idx, batch in enumerate(train_dataloader):
            self.on_train_batch_start(batch, batch_idx)
            loss = self.training_step(batch, batch_idx)
            self.on_before_backward(loss)
            (loss / accumulate_grad_batches).backward()
            self.on_after_backward()
            if (batch_idx + 1) % accumulate_grad_batches == 0 or batch_idx + 1 == len(train_dataloader):
                self.on_before_optimizer_step(optimizer)
                self.configure_gradient_clipping(optimizer)
                optimizer.step()
                optimizer.zero_grad()
                self.lr_scheduler_step(scheduler, None)
            self.on_train_batch_end(loss, batch, batch_idx)
""")
DRIVERS: tuple[Driver, ...] = (LIGHTNING_MANUAL, LIGHTNING_AUTOMATIC)

# Engines built around a function rather than a class: ignite's `Engine(process_function)` whose
# `run(data, max_epochs)` calls `process_function(engine, batch)` once per batch of every epoch
# (ignite/engine/engine.py, `_run_once_on_dataset`). `engine.state.iteration` counts the batches of the
# whole run from 1, so a `% N == 0` boundary on it neither restarts nor starts early. `self` is the
# engine: an instance of the project's subclass when the function was handed to one.
PROCESS_FUNCTION_ENGINES = frozenset({"ignite.engine.Engine", "ignite.engine.engine.Engine"})
PROCESS_FUNCTION = "process_function"  # the engine's own name for it, also its keyword
PROCESS_FUNCTION_LOOP = f"""\
def run(self, data, max_epochs):
    self.state.iteration = 0
    for epoch in range(max_epochs):
        for batch in data:
            self.state.iteration += 1
            {PROCESS_FUNCTION}(self, batch)
"""

# What the schedule length is given as (ACC402): keywords of scheduler constructors, or the third
# positional argument of transformers' get_*_schedule*(optimizer, warmup, total).
# A period or cycle length counts scheduler steps as well (`CosineAnnealingWarmRestarts(T_0=...)`,
# `StepLR(step_size=...)`, `CyclicLR(step_size_up=...)`).
SCHEDULE_LENGTH_KEYWORDS = ("T_max", "num_training_steps", "total_steps", "total_iters", "steps_per_epoch", "T_0",
                            "step_size", "step_size_up")
# Schedulers whose shape is a function of the step (`LambdaLR(opt, lr_lambda=lambda s: ...)`): the names
# a lambda given there reads are where its length may be
SCHEDULE_FUNCTION_ARGUMENT = ("lr_lambda", 1)
SCHEDULE_LENGTH_POSITION = 2
# torch schedulers whose length may be passed positionally: the argument's index
SCHEDULE_LENGTH_POSITIONS = {"OneCycleLR": 2, "CosineAnnealingLR": 1, "PolynomialLR": 1, "LinearLR": 4,
                             "CosineAnnealingWarmRestarts": 1, "StepLR": 1}
LENGTH_FUNCTION = "len"  # len(loader): a length counted in micro-batches
# Schedulers made of others, which step them when they are stepped: where the list of parts is given
# (SequentialLR(optimizer, schedulers, milestones), ChainedScheduler(schedulers)).
SCHEDULER_PARTS_KEYWORD = "schedulers"
SCHEDULER_PARTS_POSITIONS = {"SequentialLR": 1, "ChainedScheduler": 0}


def apis_named(name: str) -> tuple[Api, ...]:
    return _BY_NAME.get(name, ())


def apis_resolved(qualname: str) -> tuple[Api, ...]:
    """Entries matched through imports that `qualname` (an aliased call resolved) names."""
    last = qualname.rsplit(".", 1)[-1]
    return tuple(api for api in _FOLLOWING_ALIASES if api.name == last and matches_qualname(api, qualname))


def matches_qualname(api: Api, qualname: str) -> bool:
    return qualname == api.qualname or (api.qualname_prefix is not None and qualname.startswith(api.qualname_prefix))


def _by_name() -> dict[str, tuple[Api, ...]]:
    table: dict[str, list[Api]] = {}
    for api in APIS:
        if api.form is Form.CALL:
            table.setdefault(api.name, []).append(api)
    return {name: tuple(apis) for name, apis in table.items()}


_BY_NAME = _by_name()
_FOLLOWING_ALIASES = tuple(api for api in APIS if api.follows_aliases)
ATTRIBUTES_SET: dict[str, Api] = {api.name: api for api in APIS if api.form is Form.ATTRIBUTE_SET}
ATTRIBUTES_READ: dict[str, Api] = {api.name: api for api in APIS if api.form is Form.ATTRIBUTE_READ}
