"""What each name is: optimizer, scheduler, GradScaler, compiled module, DDP model, framework engine.

A name's roles come from what it was bound to (the catalogue's constructors, resolved through
imports; `accelerator.prepare(...)`, `deepspeed.initialize(...)` results) and, for the roles the
catalogue allows it (optimizer, scheduler, scaler, accelerator, fabric), from the name itself when
nothing bound it in this file (a parameter called `optimizer`, an attribute `self.opt_g`).
"""

from __future__ import annotations

import re
from typing import Callable

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (ImportMap, call_receiver, callee_parts, children, dotted, iter_names, keyword,
                                        last_part, parameter, parameter_names, positional, walk)
from gradcheck_accum.lint.vocabulary import NO_ROLES, Context, DefOp, Role, Scope

Lookup = Callable[["cst.BaseExpression | None"], frozenset[Role]]  # the roles of an argument expression

ACCUM_NAME = re.compile(r"accum|grad_acc|gradient_acc|micro_?steps|accumulate|(?:num|n)_?micro_?batches",
                        re.IGNORECASE)
# A name that says it holds the size of one micro-batch (`micro_batch_size`, `per_device_train_batch_size`).
MICRO_BATCH_SIZE_NAME = re.compile(r"micro_?batch_?size|per_device\w*_batch_size", re.IGNORECASE)


def roles_from_name(name: str | None) -> frozenset[Role]:
    """Roles guessed from a name, used only when no binding in the file says otherwise."""
    part = last_part(name)
    if not part:
        return NO_ROLES
    for guess in cat.NAME_GUESSES:
        if guess.role is Role.SCHEDULER and cat.NOT_A_SCHEDULER_WORD in part:
            return NO_ROLES
        if guess.pattern.search(part):
            return _ONE[guess.role]
    return NO_ROLES


def is_accumulation_name(node: cst.CSTNode | None) -> bool:
    """A name that says it holds the accumulation count: `grad_accum`, `args.gradient_accumulation_steps`."""
    name = dotted(node)
    return bool(name and ACCUM_NAME.search(last_part(name)))


def is_micro_batch_size_name(node: cst.CSTNode | None) -> bool:
    name = dotted(node)
    return bool(name and MICRO_BATCH_SIZE_NAME.search(last_part(name)))


def function_reference_roles(node: cst.BaseExpression, imports: ImportMap) -> frozenset[Role]:
    """Roles of a function named without being called, to be called later: a torch loss function
    (`F.cross_entropy` handed to a trainer) holds those of calling it with its defaults, a mean;
    `deepspeed.initialize` (handed to a `main` that builds the engine) is itself."""
    qual = imports.qualify(node) or ""
    if qual.startswith(cat.TORCH_MODULE_PREFIX) and last_part(qual) in cat.LOSSES.names:
        return _ONE[Role.CRITERION]
    if qual == cat.DEEPSPEED_INITIALIZE:
        return _ONE[Role.DEEPSPEED_INITIALIZE]
    return NO_ROLES


def constructor_roles(call: cst.Call, imports: ImportMap, lookup: Lookup) -> frozenset[Role]:
    """Roles of the value a call returns."""
    receiver, method = call_receiver(call)
    if method in cat.PREPARE_METHODS and receiver is not None:
        owner = lookup(receiver)
        args = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(args) == 1 and (Role.ACCELERATOR in owner or Role.FABRIC in owner):
            return prepared_roles(lookup(args[0]), owner)  # `model = accelerator.prepare(model)`
    qual = imports.qualify(call.func) or dotted(call.func) or ""
    last = method if receiver is not None else last_part(qual)
    if qual == cat.COMPILE.qualname:
        # `torch.compile(ddp_model)` forwards to the DDP model: it syncs (and `no_sync()`s) as that does
        return frozenset({Role.COMPILED} | (lookup(positional(call, 0) or keyword(call, "model")) & _DISTRIBUTED))
    if last in cat.WRAPPERS.names:
        inner = lookup(positional(call, 0) or keyword(call, "module"))
        return frozenset({Role.DDP} | ({Role.WRAPS_COMPILED} if Role.COMPILED in inner else set())
                         | ({Role.SHARDED} if last in cat.SHARDED_WRAPPERS else {Role.REPLICATED})
                         | ({Role.APEX_REPLICATED} if qual.startswith(cat.APEX_WRAPPER_MODULE + ".") else set()))
    if last in cat.SCALERS.names:
        return _ONE[Role.SCALER]
    schedulers = cat.SCHEDULERS
    if schedulers.module_word in qual or last in schedulers.names or schedulers.pattern.match(last):
        return _ONE[Role.SCHEDULER]
    optimizers = cat.OPTIMIZERS
    if last in optimizers.names or optimizers.module_word in f".{qual}." and (
            last[:1].isupper() or last.startswith(optimizers.factory_prefix)):
        return _ONE[Role.OPTIMIZER]
    if last in cat.ACCUMULATING_PLUGINS:
        return _ONE[Role.ACCUMULATING_PLUGIN] if _more_than_one(keyword(call, cat.ACCUMULATING_PLUGINS[last])) \
            else NO_ROLES
    if last in cat.ACCELERATOR.names:
        accumulates = _more_than_one(accelerator_accumulation_steps(call)) or any(
            Role.ACCUMULATING_PLUGIN in lookup(plugin) for plugin in
            (keyword(call, cat.DEEPSPEED_PLUGIN_KEYWORD), keyword(call, cat.ACCUMULATION_PLUGIN_KEYWORD))
            if plugin is not None)
        return frozenset({Role.ACCELERATOR} | ({Role.ACCELERATOR_ACCUMULATES} if accumulates else set())
                         | ({Role.ACCELERATOR_FSDP} if _given(call, cat.FSDP_PLUGIN_KEYWORD) else set())
                         | ({Role.ACCELERATOR_FP16} if _is_string(keyword(call, cat.MIXED_PRECISION_KEYWORD),
                                                                  cat.SCALED_PRECISION) else set())
                         | ({Role.ACCELERATOR_DEEPSPEED} if _given(call, cat.DEEPSPEED_PLUGIN_KEYWORD) else set())
                         | ({Role.ACCELERATOR_UNTIED_SCHEDULERS}
                            if _is_false(keyword(call, cat.SCHEDULER_WITH_OPTIMIZER_KEYWORD)) else set()))
    if last in cat.FABRIC.names:
        return frozenset({Role.FABRIC} | (set() if _fabric_may_use_ddp(call) else {Role.FABRIC_WITHOUT_DDP}))
    if last in cat.BOOSTER.names:
        return _ONE[Role.BOOSTER]
    if last in cat.LOSSES.names or last.endswith(cat.LOSSES.suffix):
        reduction = keyword(call, cat.REDUCTION_KEYWORD)
        roles = {Role.CRITERION}
        reduced = reduction.evaluated_value if isinstance(reduction, cst.SimpleString) else "mean"
        if reduced == "sum":
            roles.add(Role.SUM_LOSS)
        if reduced == "none":
            roles.add(Role.ITEM_LOSS)
        if keyword(call, cat.IGNORE_INDEX_KEYWORD) is not None and reduced != "none":
            # reduction="none": per-item losses, whose mean is what the code around divides them by
            roles.add(Role.TOKEN_LOSS)
        return frozenset(roles)
    return NO_ROLES


def _is_string(value: cst.BaseExpression | None, text: str) -> bool:
    return isinstance(value, cst.SimpleString) and value.evaluated_value == text


def _is_false(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "False"


def _more_than_one(steps: cst.BaseExpression | None) -> bool:
    """An accumulation count given, other than a literal 1 or None."""
    return steps is not None and not (isinstance(steps, cst.Integer) and steps.value == "1") \
        and not (isinstance(steps, cst.Name) and steps.value == "None")


def _given(call: cst.Call, name: str) -> bool:
    """The call passes keyword `name` a value other than a literal None (`fsdp_plugin=plugin`)."""
    value = keyword(call, name)
    return value is not None and not (isinstance(value, cst.Name) and value.value == "None")


def accelerator_accumulation_steps(call: cst.Call) -> cst.BaseExpression | None:
    """The N an `Accelerator(...)` is built with: `gradient_accumulation_steps=N`, or the `num_steps` of
    its `gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=N)`."""
    steps = keyword(call, cat.ACCUMULATION_STEPS_KEYWORD)
    plugin = keyword(call, cat.ACCUMULATION_PLUGIN_KEYWORD)
    if steps is None and isinstance(plugin, cst.Call):
        steps = keyword(plugin, cat.ACCUMULATION_PLUGIN_STEPS)
    return steps


def _fabric_may_use_ddp(call: cst.Call) -> bool:
    devices = keyword(call, cat.FABRIC_DEVICES_KEYWORD)
    if isinstance(devices, cst.Integer) and devices.value == "1":
        return False
    strategy = keyword(call, cat.FABRIC_STRATEGY_KEYWORD)
    if strategy is None:
        return True  # "auto": DDP on several devices
    if isinstance(strategy, cst.SimpleString):
        name = str(strategy.evaluated_value)
        return name in cat.FABRIC_DDP_STRATEGIES or name.startswith("ddp")
    return isinstance(strategy, cst.Call) and call_receiver(strategy)[1] == cat.FABRIC_DDP_STRATEGY_CLASS


def deepspeed_config(call: cst.Call, scope: Scope) -> cst.Dict | None:
    """The config given to `deepspeed.initialize(...)` when it is a dict written there or a name the
    scope binds once to one (a JSON file or an argument: None, unknown)."""
    config = next((value for name in cat.DEEPSPEED_CONFIG_KEYWORDS if (value := keyword(call, name)) is not None),
                  None)
    if isinstance(config, cst.Name):
        defs = scope.defs_of(config.value)
        config = defs[0].value if len(defs) == 1 and defs[0].op is DefOp.ASSIGN else None
    return config if isinstance(config, cst.Dict) else None


def deepspeed_engine_count(engine: str, scope: Scope) -> cst.BaseExpression | None:
    """The accumulation count a DeepSpeed engine is configured with (`gradient_accumulation_steps`
    of the dict given to the `deepspeed.initialize(...)` whose first element the scope binds, once, to
    `engine`); None when the config is not written there."""
    defs = scope.defs_of(engine)
    if len(defs) != 1 or defs[0].op is not DefOp.UNPACK or defs[0].index != 0 \
            or not isinstance(defs[0].value, cst.Call):
        return None
    config = deepspeed_config(defs[0].value, defs[0].scope or scope)
    keys = {element.key.evaluated_value: element.value for element in config.elements
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString)} if config else {}
    return keys.get(cat.DEEPSPEED_ACCUMULATION_KEY)


def asserted_engine_count(scope: Scope) -> cst.BaseExpression | None:
    """The count a DeepSpeed engine's accumulation is asserted equal to in the scope's function, or in a
    function that walked it in place (`assert model.gradient_accumulation_steps() == args.update_freq` after
    `deepspeed.initialize`, the loop in a function given `args.update_freq`): the engine's N, whatever
    config file set it."""
    while scope is not None:
        for node in walk(scope.node):
            if not isinstance(node, cst.Assert) or not isinstance(node.test, cst.Comparison) \
                    or len(node.test.comparisons) != 1 or not isinstance(node.test.comparisons[0].operator, cst.Equal):
                continue
            sides = (node.test.left, node.test.comparisons[0].comparator)
            for side, other in (sides, sides[::-1]):
                if isinstance(side, cst.Call) and not side.args \
                        and call_receiver(side)[1] == cat.DEEPSPEED_ACCUMULATION_GETTER:
                    return other
        scope = scope.frame.caller if scope.frame is not None else None
    return None


def deepspeed_config_accumulates(config: cst.Dict) -> bool | None:
    """Does a DeepSpeed config written as a dict literal make the engine accumulate? False when it
    sets gradient_accumulation_steps to 1, or sets neither it nor train_batch_size (DeepSpeed's
    default is 1); None when the count is another value, computed, or derived from the batch sizes."""
    keys = {}
    for element in config.elements:
        if not isinstance(element, cst.DictElement):
            return None  # `**base_config`: keys we cannot see
        if isinstance(element.key, cst.SimpleString):
            keys[element.key.evaluated_value] = element.value
    steps = keys.get(cat.DEEPSPEED_ACCUMULATION_KEY)
    if steps is not None:
        return False if isinstance(steps, cst.Integer) and steps.value == "1" else None
    return None if cat.DEEPSPEED_GLOBAL_BATCH_KEY in keys else False


def unpacked_roles(call: cst.Call, imports: ImportMap, lookup: Lookup, count: int,
                   func: cst.BaseExpression | None = None) -> list[frozenset[Role]] | None:
    """Roles of each element when a call's result is unpacked into `count` targets. `func`: the
    function the call runs where its callee is a name bound to another (`ds_init = deepspeed.initialize`)."""
    func = func if func is not None else call.func
    receiver, method = callee_parts(func)
    qual = imports.qualify(func) or dotted(func) or ""
    if qual == cat.DEEPSPEED_INITIALIZE or (method == "initialize" and dotted(receiver) == "deepspeed") \
            or Role.DEEPSPEED_INITIALIZE in lookup(func):
        roles = [NO_ROLES] * count
        roles[0] = _ONE[Role.DEEPSPEED]
        if count > 1:
            roles[1] = frozenset({Role.OPTIMIZER, Role.DEEPSPEED})
        if count > 3:
            roles[3] = frozenset({Role.SCHEDULER, Role.DEEPSPEED})
        return roles
    if method in cat.PREPARE_METHODS and receiver is not None:
        owner = lookup(receiver)
        if Role.ACCELERATOR in owner or Role.FABRIC in owner:
            args = [a.value for a in call.args if a.keyword is None and not a.star]
            if len(args) != count:
                return None
            return [prepared_roles(lookup(arg), owner) for arg in args]
    return None


def prepared_roles(roles: frozenset[Role], owner: frozenset[Role]) -> frozenset[Role]:
    """What `accelerator.prepare(x)` / `fabric.setup(x)` returns for an `x` with these roles: an
    optimizer or scheduler that skips non-sync steps (accelerate), or a model that the framework wraps
    in DistributedDataParallel when launched on several processes (catalogue.PREPARED_MODEL; in FSDP
    for an Accelerator given an FSDP plugin; for Fabric, unless its strategy or devices rule DDP out)."""
    extra = {Role.PREPARED} if Role.ACCELERATOR in owner else set()
    if Role.SCHEDULER in roles and Role.ACCELERATOR_UNTIED_SCHEDULERS in owner:
        extra = set()  # it steps on every call, as if it were not prepared
    if not roles & {Role.OPTIMIZER, Role.SCHEDULER, Role.SCALER}:
        if Role.ACCELERATOR_FSDP in owner:
            extra |= cat.PREPARED_SHARDED_MODEL
        elif Role.FABRIC not in owner:
            extra |= cat.PREPARED_MODEL
        elif Role.FABRIC_WITHOUT_DDP not in owner:
            extra |= cat.PREPARED_MODEL | {Role.FABRIC_MODULE}
    return frozenset(roles | extra)


# Code that may rebind a module's names behind the analysis's back (nanoGPT's
# `exec(open("configurator.py").read())` overrides its flags from the command line).
# Code that may rebind a module's names behind its assignments: running text, writing into the module's
# namespace (`globals()[k] = v`, `globals().update(cfg)`; reading it, `globals().items()`, binds nothing)
_REBINDS_GLOBALS = re.compile(r"\bexec\s*\(|\b(?:globals|vars)\(\)\s*(?:\[[^\]]*\]\s*=[^=]|\.(?:update|setdefault|pop)\b)"
                              r"|\bsetattr\s*\(|__dict__|:=")
LITERAL_TRUTH = {"True": True, "False": False, "None": False}  # what a literal is worth as a test


def module_constants(module: cst.Module, code: str) -> dict[str, bool]:
    """Module-level flags bound once, to a literal, and never again anywhere in the file (no other
    assignment, loop target, import, definition, `global` or `del` of the name): `use_compile = False`.
    A branch they rule out never runs. Nothing, in a file that may rebind names dynamically."""
    return {name: value if isinstance(value, bool) else value != 0 for name, value in module_literals(module, code).items()}


def module_literals(module: cst.Module, code: str) -> dict[str, bool | int]:
    """module_constants with integers kept as written (`gradient_accumulation_steps = 1`), read from
    the module's top-level statements and its `if __name__ == "__main__":` block. `code`: the module's
    text with strings and comments blanked (a commented-out `exec(...)` rebinds nothing)."""
    if _REBINDS_GLOBALS.search(code):
        return {}
    values: dict[str, bool | int] = {}
    for statement in _top_level(module):
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                value = small.value
                if isinstance(value, cst.Name) and value.value in LITERAL_TRUTH:
                    values[small.targets[0].target.value] = LITERAL_TRUTH[value.value]
                elif isinstance(value, cst.Integer):
                    values[small.targets[0].target.value] = int(value.evaluated_value)
    count: dict[str, int] = {}
    unknown: set[str] = set()
    blocks = (cst.BaseSuite, cst.BaseCompoundStatement, cst.SimpleStatementLine, cst.Else, cst.ExceptHandler,
              cst.ExceptStarHandler, cst.Finally, cst.MatchCase)
    stack: list[cst.CSTNode] = list(module.body)
    while stack:
        node = stack.pop()
        names: list[str] = []
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                if isinstance(small, cst.Assign):
                    names += [name for target in small.targets for name in _bound_names(target.target)]
                elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                    names += _bound_names(small.target)
                elif isinstance(small, cst.Del):
                    unknown.update(_bound_names(small.target))
                elif isinstance(small, (cst.Global, cst.Nonlocal)):
                    unknown.update(item.name.value for item in small.names)
                elif isinstance(small, (cst.Import, cst.ImportFrom)):
                    if isinstance(small.names, cst.ImportStar):
                        return {}  # `from m import *` may bind anything
                    names += [(dotted(a.asname.name if a.asname else a.name) or "").split(".")[0] for a in small.names]
        elif isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            names.append(node.name.value)
        elif isinstance(node, cst.For):
            names += _bound_names(node.target)
        elif isinstance(node, cst.With):
            names += [name for item in node.items if item.asname is not None for name in _bound_names(item.asname.name)]
        for name in names:
            count[name] = count.get(name, 0) + 1
        if not isinstance(node, cst.SimpleStatementLine):
            stack.extend(child for child in children(node) if isinstance(child, blocks))
    return {name: value for name, value in values.items() if count.get(name) == 1 and name not in unknown}


def _top_level(module: cst.Module) -> list[cst.CSTNode]:
    """The module's statements, and those of its `if __name__ == "__main__":` block, which runs first
    whenever the file runs as a script."""
    statements = list(module.body)
    for statement in module.body:
        if isinstance(statement, cst.If) and statement.orelse is None and isinstance(statement.test, cst.Comparison) \
                and dotted(statement.test.left) == "__name__":
            statements += list(statement.body.body)
    return statements


def _bound_names(target: cst.CSTNode) -> list[str]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in _bound_names(element.value)]
    if isinstance(target, cst.StarredElement):
        return _bound_names(target.value)
    return [target.value] if isinstance(target, cst.Name) else []


def no_roles(_: cst.BaseExpression | None) -> frozenset[Role]:
    return NO_ROLES


_ONE = {role: frozenset({role}) for role in Role}
_DISTRIBUTED = frozenset({Role.DDP, Role.SHARDED, Role.REPLICATED, Role.PREPARED})  # what a wrapper around the model keeps


def command_line_default(node: cst.BaseExpression, scope: Scope) -> cst.BaseExpression | None:
    """The default an argparse option declares, for `args.start_epoch` where `args` holds the parsed
    command line (a parameter of the function, or bound once to a `parse_args()` call) and the file
    declares that option once: its value in a run that does not set it. None otherwise."""
    if scope.module is None or not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
        return None
    holder = node.value.value
    defs = scope.defs_of(holder)
    if defs:
        value = defs[0].value
        if len(defs) != 1 or not isinstance(value, cst.Call) or call_receiver(value)[1] != "parse_args":
            return None
    elif not isinstance(scope.node, cst.FunctionDef) or holder not in parameter_names(scope.node):
        return None
    if any(not d.ctx.guards for d in scope.defs_of(f"{holder}.{node.attr.value}")):
        return None  # set whatever the command line says (a resume that sets it only when asked is a guarded one)
    return _declared_defaults(scope.module).get(node.attr.value)


_declared: tuple[cst.Module | None, dict[str, cst.BaseExpression]] = (None, {})


def _declared_defaults(module: cst.Module) -> dict[str, cst.BaseExpression]:
    """Option name (as argparse stores it) -> its `default=`, for the options `add_argument` declares
    exactly once in the module (declared twice, by two parsers, it is not known which one ran).
    Kept for the last module asked: a file's windows ask one after another."""
    global _declared
    if _declared[0] is module:
        return _declared[1]
    defaults: dict[str, cst.BaseExpression | None] = {}
    for node in walk(module):
        if not isinstance(node, cst.Call) or call_receiver(node)[1] != "add_argument":
            continue
        dest = _option_dest(node)
        if dest is not None:
            defaults[dest] = keyword(node, "default") if dest not in defaults else None
    found = {dest: value for dest, value in defaults.items() if value is not None}
    _declared = (module, found)
    return found


def _option_dest(call: cst.Call) -> str | None:
    """Where argparse stores an option: `dest=`, else the first long option string (`--start-epoch`:
    `start_epoch`), else the first short one. None for a positional argument."""
    dest = keyword(call, "dest")
    if isinstance(dest, cst.SimpleString):
        return dest.evaluated_value if isinstance(dest.evaluated_value, str) else None
    flags = [a.value.evaluated_value for a in call.args
             if a.keyword is None and isinstance(a.value, cst.SimpleString) and isinstance(a.value.evaluated_value, str)]
    flags = [f for f in flags if f.startswith("-")]
    if not flags:
        return None
    long = [f for f in flags if f.startswith("--")]
    return (long or flags)[0].lstrip("-").replace("-", "_")


def first_index(source: cst.BaseExpression, scope: Scope) -> int | None:
    """0 or 1, the first value an `enumerate`/`range` loop index takes; a range starting at a
    command-line option (`range(args.start_epoch, epochs)`, or a name bound once to one or to a
    literal) starts at its declared default, as a fresh run does."""
    if not isinstance(source, cst.Call):
        return None
    _, name = call_receiver(source)
    if name == "enumerate":
        start = keyword(source, "start") or positional(source, 1)
        if start is None:
            return 0
        if isinstance(start, cst.Name):
            start = fresh_run_literal(start.value, scope) or start
        return int(start.value) if isinstance(start, cst.Integer) and start.value in ("0", "1") else None
    if name == "range":
        args = [a.value for a in source.args]
        if len(args) == 1:
            return 0
        start = args[0]
        if isinstance(start, cst.Name):  # `start_epoch = args.start_epoch`, bound once and unconditionally
            defs = scope.defs_of(start.value)
            if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and not defs[0].ctx.guards and defs[0].value is not None:
                start = defs[0].value
            else:  # a parameter `start_epoch=0`, as a fresh run leaves it
                start = fresh_run_literal(start.value, scope) or start
        start = command_line_default(start, scope) or start
        if isinstance(start, cst.Integer) and start.value in ("0", "1"):
            return int(start.value)
    return None


def fresh_run_literal(name: str, scope: Scope) -> cst.Integer | None:
    """The integer a name holds in a fresh run when every binding of it here agrees: a parameter's
    default and each assignment (`start_step=0` resumed into the first epoch, then `start_step = 0`
    at the end of every epoch). None when a binding may hold anything else."""
    defs = scope.defs_of(name)
    if any(d.scope is not None for d in defs):
        return None  # a parameter bound by the call walked: what the caller passes
    values = [d.value if d.op is DefOp.ASSIGN else None for d in defs]
    function = scope.node
    param = parameter(function, name) if isinstance(function, cst.FunctionDef) else None
    if param is not None:
        values.append(param.default)
    elif not any(not d.ctx.guards and not d.ctx.loops for d in defs):
        return None  # bound only under a test: what it holds where the test fails is not known
    if not values or not all(isinstance(v, cst.Integer) for v in values) or len({v.value for v in values}) != 1:
        return None
    return values[0]


def loop_index(argument: cst.BaseExpression | None, ctx: Context) -> bool:
    """Is the argument the index of a loop around the call (`for epoch in range(start, epochs):
    train_one_epoch(epoch, ...)`), whatever it starts from?"""
    return isinstance(argument, cst.Name) and any(
        isinstance(loop, cst.For) and argument.value in iter_names(loop.target) for loop in ctx.loops)


def pass_from_zero(argument: cst.BaseExpression, ctx: Context, scope: Scope) -> bool:
    """Is the argument the index of a loop around the call that starts at 0 in a fresh run
    (`for epoch in range(args.start_epoch, args.epochs): train_one_epoch(..., epoch)`)?"""
    if not isinstance(argument, cst.Name):
        return False
    for loop in reversed(ctx.loops):
        if isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and loop.target.value == argument.value:
            return first_index(loop.iter, scope) == 0
    return False
