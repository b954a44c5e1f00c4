"""Whether a framework's trainer divides what a user's hook returns, when that depends on more than
the class: transformers' Trainer divides the loss of an overridden `compute_loss` by the
accumulation steps unless the window's items are counted and handed to the hook instead
(catalogue.HF_COMPUTE_LOSS, LossScaling.UNLESS_ITEMS_COUNTED).

The answer is "it does not divide" only on evidence: the class derives from one of the framework's
trainers through the project's classes; the override takes the item count (so it is written for
the versions that hand it over); nothing in the project's classes takes the trainer's step over or
sets the attributes that decide the division; and the hook runs one of the framework's models on a
batch with labels (its output is read as the framework's model output, `outputs.logits` or
`outputs.loss`, and the labels are read from the batch or a loss from the output). Otherwise the
answer is unknown and rules stay silent.
"""

from __future__ import annotations

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.inlining import ProjectContext
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import SELF_NAMES, call_receiver, children, dotted, iter_names, parameter_names
from gradcheck_accum.lint.project import ClassRef
from gradcheck_accum.lint.project.summary import UNSPELLED
from gradcheck_accum.lint.vocabulary import Scope



def trainer_divides(context: ProjectContext, scope: Scope, hook: cat.Hook) -> bool | None:
    """Does the framework's loop divide the loss this override of `hook` returns by N (True), or
    leave it undivided and count the window's items for it instead (False: the loss must be
    normalised by that count)? None when the code does not say."""
    function = scope.node
    if scope.owner is None or not isinstance(function, cst.FunctionDef) or scope.frame is not None:
        return None
    qualname = context.this.qualnames_of_classes.get(id(scope.owner))
    if qualname is None:
        return None
    project, cls = context.project, ClassRef(context.this.path, qualname)
    if not project.derives_from(cls, hook.qualified_bases, by_last_name=False):
        return None
    for method in hook.takes_over:
        if project.lookup_method(cls, method) is not None:
            return None  # the project's own step decides what happens to the loss
    if never_accumulates(context, hook):
        return None  # one micro-batch a step: nothing to divide, whatever the loop would do
    if not _accepts(function, hook.count_parameter):
        return True  # written for the versions before the count, which always divide
    settings = [value for base in project.mro(cls) if isinstance(base, ClassRef)
                for value in _settings(context, base, hook)]
    if settings:
        # a subclass saying the loss is already scaled (or that the model takes the count) is believed,
        # and so is one saying it is not; anything else it sets is left to it
        literals = {value.value for value in settings if isinstance(value, cst.Name)}
        if len(literals) == 1 and all(isinstance(value, cst.Name) for value in settings):
            return {"True": False, "False": True}.get(literals.pop())
        return None
    return False if _runs_framework_model_on_labels(function, hook) else None


def never_accumulates(context: ProjectContext, hook: cat.Hook) -> bool:
    """Is the framework's loop set up never to accumulate? The project builds its settings
    (`TrainingArguments(...)`), each with every keyword spelled out and the accumulation count left at
    its default of 1 or set to 1; no file reads them from a command line (`HfArgumentParser`); and
    the count is named nowhere but in a construction that sets it to 1."""
    if not hook.arguments_classes or hook.accumulation_keyword is None:
        return False
    project = context.project
    key = ("never accumulates", hook.name)
    memo = project.summaries.memo
    if key not in memo:
        built = named = set_to_one = False
        words = (*hook.arguments_classes, hook.arguments_parser, hook.accumulation_keyword)
        for path in project.files:
            if not any(word and project.summaries.may_mention(path, word) for word in words):
                continue
            summary = project.summary(path)
            if hook.arguments_parser in summary.names:
                memo[key] = False
                return False
            named = named or hook.accumulation_keyword in summary.names
            for callee, keywords in summary.constructions:
                if callee.rsplit(".", 1)[-1] not in hook.arguments_classes:
                    continue
                built = True
                if UNSPELLED in keywords or keywords.get(hook.accumulation_keyword, "1") != "1":
                    memo[key] = False
                    return False
                set_to_one = set_to_one or hook.accumulation_keyword in keywords
        memo[key] = built and (not named or set_to_one)
    return memo[key]


def _accepts(function: cst.FunctionDef, parameter: str | None) -> bool:
    return parameter in parameter_names(function) or isinstance(function.params.star_kwarg, cst.Param)


def _settings(context: ProjectContext, cls: ClassRef, hook: cat.Hook) -> list[cst.BaseExpression | None]:
    """The values a project class assigns to the hook's settings: `self.x = v` in a method, `x = v` in
    its body; None for one assigned only under a condition (`if ...: self.x = False`), which leaves
    the framework's behaviour to that condition."""
    loaded = context.load(cls.path)
    node = loaded.classes.get(cls.qualname) if loaded is not None else None
    if node is None:
        return []
    found: list[cst.BaseExpression | None] = []
    stack: list[tuple[cst.CSTNode, bool]] = [(node.body, False)]
    while stack:
        current, conditional = stack.pop()
        if isinstance(current, cst.ClassDef):
            continue  # a nested class has settings of its own
        if isinstance(current, (cst.Assign, cst.AnnAssign)) and current.value is not None:
            targets = [t.target for t in current.targets] if isinstance(current, cst.Assign) else [current.target]
            for target in targets:
                name = dotted(target) or ""
                if name.split(".")[-1] in hook.settings and (name.count(".") == 0 or name.startswith("self.")):
                    found.append(None if conditional else current.value)
        inner = conditional or isinstance(current, (cst.If, cst.For, cst.While, cst.Try, cst.With, cst.Match))
        stack.extend((child, inner) for child in children(current))
    return found


def _runs_framework_model_on_labels(function: cst.FunctionDef, hook: cat.Hook) -> bool:
    """Does the hook call the model it is given and read the output as the framework's model output
    (`outputs.logits`, `outputs.loss`), with labels in the batch (read from it, or a loss computed from them)?"""
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    params = params[1:] if params and params[0] in SELF_NAMES else params
    if len(params) < 2:
        return False
    model, inputs = params[0], params[1]
    models, outputs = {model}, set()
    read: set[str] = set()
    labels_read = False
    nodes = _nodes(function.body)
    assignments = [(dotted(n.targets[0].target), n.value) for n in nodes
                   if isinstance(n, cst.Assign) and len(n.targets) == 1 and dotted(n.targets[0].target)]
    for _ in range(3):  # names bound to the model (`m = model.module if ... else model`) and to its outputs
        for target, value in assignments:
            if _calls(value, models):
                outputs.add(target)
            elif not isinstance(value, cst.Call) and any(_root(name) in models for name in iter_names(value)):
                models.add(target)
    for node in nodes:
        if isinstance(node, cst.Attribute) and node.attr.value in hook.output_attributes \
                and (dotted(node.value) in outputs or _calls(node.value, models)):  # or `model(**inputs).logits`
            read.add(node.attr.value)
        elif _reads_key(node, inputs, hook.labels_key):
            labels_read = True
        else:  # `outputs["logits"]`, `outputs.get("logits")`: the model output is also a dict
            read.update(key for key in hook.output_attributes for output in outputs if _reads_key(node, output, key))
    return bool(read) and (labels_read or "loss" in read)


def _reads_key(node: cst.CSTNode, container: str, key: str | None) -> bool:
    """`inputs["labels"]`, `inputs.get("labels")`, `inputs.pop("labels")`."""
    if isinstance(node, cst.Subscript) and dotted(node.value) == container and len(node.slice) == 1:
        index = node.slice[0].slice
        return isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString) \
            and index.value.evaluated_value == key
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if method in ("get", "pop") and dotted(receiver) == container and node.args:
            first = node.args[0].value
            return isinstance(first, cst.SimpleString) and first.evaluated_value == key
    return False


def _calls(node: cst.BaseExpression, callables: set[str]) -> bool:
    return isinstance(node, cst.Call) and _root(dotted(node.func)) in callables


def _root(name: str | None) -> str | None:
    return name.split(".")[0] if name else None


def _nodes(root: cst.CSTNode) -> list[cst.CSTNode]:
    """Every node of a function body, not entering nested functions or classes."""
    out, stack = [], [root]
    while stack:
        current = stack.pop()
        out.append(current)
        for child in children(current):
            if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                stack.append(child)
    return out
