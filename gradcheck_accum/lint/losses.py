"""The loss-fact tracer: what the dataflow says about a loss expression before it is backpropagated.

Starting from the expression handed to backward (or summed into a total, or returned by a hook), it
follows the definitions that reach it in the same scope: divisions and multiplications (scaling),
detaching calls, the criterion or model call that produced it (its reduction, whether it averages
over a varying number of valid items). What it cannot follow makes the facts unknown, and rules
that need them stay silent.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Iterator, NamedTuple
from dataclasses import dataclass, field

from gradcheck_accum.lint import catalogue as cat
from gradcheck_accum.lint.bindings import constructor_roles, is_micro_batch_size_name, no_roles
from gradcheck_accum.lint.catalogue import LossOp
from gradcheck_accum.lint.lazy import cst
from gradcheck_accum.lint.names import (SELF_NAMES, ImportMap, call_receiver, children, code, dotted,
                                        full_names, is_one, item_name, iter_names, keyword, last_part, parameter_names,
                                        positional, walk)
from gradcheck_accum.lint.paths import excluded_by, rebound_since
from gradcheck_accum.lint.predicates import is_accumulation_count, measures_a_tensor, parameter_value
from gradcheck_accum.lint.vocabulary import END_OF_SCOPE, NO_ROLES, Context, Def, DefOp, Guard, Role, Scope

if TYPE_CHECKING:
    from gradcheck_accum.lint.vocabulary import Loop


class Scaling(NamedTuple):
    """A division or multiplication of the loss after it was computed (`loss / n`, `loss *= w`)."""

    node: cst.CSTNode  # the operation (or the augmented assignment)
    factor: cst.BaseExpression  # the divisor or multiplier
    divides: bool
    scope: Scope  # whose names the factor reads
    guards: tuple[Guard, ...] = ()  # the conditions of the statement that scales (only then does it happen)


@dataclass
class LossFacts:
    """What the dataflow says about a backpropagated loss expression."""

    known: bool = True  # every definition was traced to something we understand
    scalings: list[Scaling] = field(default_factory=list)
    token_level: bool = False  # a mean over a variable number of valid items
    sum_reduced: bool = False
    detached: bool = False
    names: set[str] = field(default_factory=set)  # every name the expression was traced through
    # literal ignore_index values other than -100 of the criteria read (`-1`): a mean over the valid
    # tokens only when the program writes that value into its labels
    ignoring: set[str] = field(default_factory=set)

    def absorb(self, other: "LossFacts") -> None:
        """Take in the facts of an operand that is the loss (`loss` of `loss * w`)."""
        self.known &= other.known
        self.scalings.extend(other.scalings)
        self.token_level |= other.token_level
        self.sum_reduced |= other.sum_reduced
        self.detached |= other.detached
        self.names |= other.names
        self.ignoring |= other.ignoring

    @property
    def scaled(self) -> bool:
        return bool(self.scalings)

    @property
    def divisions(self) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
        """(node, divisor) of each division."""
        return [(s.node, s.factor) for s in self.scalings if s.divides]


# What a call to a function of the project returns: (expression, the scope it is read in, the point
# it is read at) for each `return`, or None when the call is not one the project model can read.
Returns = Callable[["cst.Call", Scope, int], "list[tuple[cst.BaseExpression, Scope, int]] | None"]
# The syntax of the training program's files (this one and the project modules it imports) whose
# text holds a token: where labels get their ignored value written.
Program = Callable[[str], "list[cst.Module]"]
# What calling a value runs, when that is a project function (or a project class's `__call__`): its syntax.
Called = Callable[["Scope", "cst.BaseExpression"], "cst.FunctionDef | None"]
# For a parameter of a function of this file, the arguments the file's calls of it bind to it, with their
# scopes and the calls.
PassedTo = Callable[[str, "Scope"], "list[tuple[cst.BaseExpression, Scope, cst.Call]]"]
# The constructions a name is bound to, each with the scope and point it is read at (LossTracer._constructors).
Constructions = Callable[[str | None, "Scope"], "Iterator[tuple[cst.Call, Scope, int]]"]
# For a method of another file's class walked in place, the calls its class binds `self.<attribute>` to.
AttributeConstructions = Callable[["Scope", str], "list[cst.Call]"]
# The roles the constructions of a method's class hand the `__init__` parameter kept as `self.<attribute>`.
AttributeRoles = Callable[["Scope", str], frozenset[Role]]


class LossTracer:
    def __init__(self, module: cst.Module, imports: ImportMap, scopes: list[Scope],
                 returns: Returns | None = None, program: Program | None = None,
                 called: Called | None = None, passed_to: PassedTo | None = None,
                 attribute_constructions: AttributeConstructions | None = None,
                 attribute_roles: AttributeRoles | None = None) -> None:
        self.module, self.imports, self.scopes = module, imports, scopes
        self.attribute_constructions = attribute_constructions
        self.attribute_roles = attribute_roles
        self.module_scopes = [s for s in scopes if s.node is module]
        self.returns = returns
        self.called = called
        self.passed_to = passed_to
        self.program = program or (lambda token: [module] if token in module.code else [])
        self._returning = 0  # how many project functions' returns are being read
        self._writes: dict[tuple[str, bool], bool] = {}  # (value, is an expression) -> the program writes it
        # (id(scope), name) -> whether a batch of that name comes from a label-masking collator, over
        # all its bindings: `batch` is bound by every loop of a file, and each loss read it again
        self._masked_batches: dict[tuple[int, str], bool] = {}
        self._guards: tuple[Guard, ...] = ()  # the conditions of the definition being read
        self._reading_at: tuple[Guard, ...] = ()  # the conditions of the point whose names are being read
        # the variable of each comprehension being read -> what it iterates (`v` of `for k, v in d.items()`)
        self._iterated: dict[str, cst.BaseExpression] = {}

    def facts(self, expr: cst.BaseExpression | None, scope: Scope, before: int,
              guards: tuple[Guard, ...] = ()) -> LossFacts:
        """The facts of `expr` as evaluated just before program point `before` in `scope`, under `guards`."""
        facts = LossFacts()
        if expr is None:
            facts.known = False
            return facts
        self._reading_at = guards
        self._trace(expr, scope, before, facts, 0)
        self._settle_ignored(facts)
        return facts

    def _trace(self, node: cst.BaseExpression, scope: Scope, before: int, facts: LossFacts, depth: int) -> None:
        # `depth` counts the definitions followed (`loss` -> `loss = a + b` -> ...), not the nesting of
        # one expression, which is finite
        if depth > 8:
            facts.known = False
            return
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Multiply) and (_is_number(node.left) or _is_number(node.right)):
                # `0.5 * kl`: a fixed weight between terms, not a normalisation of the window
                self._trace(node.right if _is_number(node.left) else node.left, scope, before, facts, depth)
                return
            if isinstance(node.operator, cst.Multiply):
                # `loss * w`, or `w * loss` when only the left operand is a plain weight (`alpha * kd`)
                swap = _weight_like(node.left, scope, 0) and not _weight_like(node.right, scope, 0)
                loss, factor = (node.right, node.left) if swap else (node.left, node.right)
                divisor = _reciprocal_of(factor, scope, before)  # `loss * (1 / n)`: a division by n
                facts.scalings.append(Scaling(node, divisor or factor, divisor is not None, scope, self._guards))
                self._trace(loss, scope, before, facts, depth)
                return
            if isinstance(node.operator, (cst.Divide, cst.FloorDivide)):
                facts.scalings.append(Scaling(node, node.right, True, scope, self._guards))
                if isinstance(node.operator, cst.Divide) and self._counts_items(node.right, scope, before):
                    facts.token_level = True  # `/ mask.sum()`, or `/ num_pos` after `num_pos = pos.sum()`
                self._trace(node.left, scope, before, facts, depth)
                return
            if isinstance(node.operator, (cst.Add, cst.Subtract)):
                self._trace_terms((node.left, node.right), scope, before, facts, depth)
                return
            self._trace(node.left, scope, before, facts, depth)
            self._trace(node.right, scope, before, facts, depth)
            return
        if isinstance(node, cst.Call):
            self._trace_call(node, scope, before, facts, depth)
            return
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
            # `loss = -loss` (a reward maximised): the sign is no scaling, the operand keeps its facts
            self._trace(node.expression, scope, before, facts, depth)
            return
        if isinstance(node, cst.IfExp):
            # `(loss, outputs) if return_outputs else loss`: a tensor that is backpropagated is not the
            # tuple, so the branches that are tuples are not the ones that reach here
            branches = [b for b in (node.body, node.orelse) if not isinstance(b, (cst.Tuple, cst.List))]
            if not branches:
                facts.known = False
            for branch in branches:
                self._trace(branch, scope, before, facts, depth)
            return
        if isinstance(node, (cst.GeneratorExp, cst.ListComp, cst.SetComp, cst.DictComp)):
            self._trace_each(node, scope, before, facts, depth)
            return
        if isinstance(node, cst.Dict) and returned_loss(node) is not None:
            self._trace(returned_loss(node), scope, before, facts, depth + 1)  # `{"loss": loss, ...}`
            return
        if isinstance(node, (cst.Tuple, cst.List, cst.Dict, cst.Set)):
            facts.known = False  # several values (a function returning the loss with its parts)
            return
        item = item_name(node)
        if item is not None and scope.defs_of(item, before):
            # `out["loss"]` after `out["loss"] /= n` (or `= loss / n`): what is stored under that key
            facts.names.add(item)
            if self._trace_defs(item, scope, before, facts, depth):
                return
        entries = self._entries(node, scope, before) if item is not None else None
        if entries and self._trace_returned(entries, facts, depth):
            return  # `terms["mse"]` of `terms = {"mse": ...}`, or `losses["loss"]` of a function returning one
        if isinstance(node, cst.Attribute) and node.attr.value == "loss" and isinstance(node.value, cst.Call) \
                and self._masked_labels(node.value, scope, before):
            facts.token_level = True  # `model(**batch).loss`, read as `outputs.loss` is below
        if _loss_entry(node) and self._masked_labels(node.value, scope, before):
            facts.token_level = True  # `model(**batch)["loss"]`, `outputs["loss"]`: a model output's loss by key
        if _first_item(node) and self._masked_labels(node.value, scope, before):
            # `model(x, labels=y)[0]`, `outputs[0]`: a model given labels returns its loss first
            facts.token_level = True
        element = self._returned_element(node, scope, before)
        if element is not None:  # `losses[0]` after `losses = loss_module(batch, out)`: what its forward returns first
            self._trace_element(*element, before, facts, depth + 1)
            return
        if isinstance(node, (cst.Subscript, cst.Attribute)) and dotted(node) is None or (
                isinstance(node, cst.Attribute) and node.attr.value == "data"):
            if isinstance(node, cst.Attribute) and node.attr.value == "data":
                facts.detached = True
            self._trace(node.value, scope, before, facts, depth)
            return
        name = dotted(node)
        if name is None:
            return
        if name in self._iterated:  # a comprehension's variable: an item of what it iterates
            inner = self._iterated
            self._iterated = {other: source for other, source in inner.items() if other != name}
            try:
                self._trace(inner[name], scope, before, facts, depth + 1)
            finally:
                self._iterated = inner
            return
        facts.names.add(name)
        if isinstance(node, cst.Attribute) and not scope.defs_of(name, before) \
                and self._trace_field(node, scope, before, facts, depth):
            return  # `res.loss` where the project's forward returns `Output(loss=loss, ...)`
        if isinstance(node, cst.Attribute) and node.attr.value == "loss" and not scope.defs_of(name, before):
            # `outputs.loss`: a model's mean loss, over valid tokens only when labels carry -100
            if self._masked_labels(node.value, scope, before):
                facts.token_level = True
            return
        if not scope.defs_of(name, before):
            if isinstance(node, cst.Attribute):
                self._trace(node.value, scope, before, facts, depth + 1)
            else:
                facts.known = False  # a parameter or global we cannot follow
            return
        self._trace_defs(name, scope, before, facts, depth)

    def _trace_defs(self, name: str, scope: Scope, before: int, facts: LossFacts, depth: int) -> bool:
        """Read the definitions of `name` that can reach `before` into `facts`: the last unconditional
        one and any later ones. False when none of them binds the name anew (only `name /= n` and
        the like): its value from before them is still to be read."""
        # a binding under a test the point read is on the other side of never reaches it (`if pp:
        # loss = torch.stack(losses).mean()` else `loss = out.loss; loss.backward()`)
        at = Context(self._reading_at)
        defs = [d for d in scope.defs_of(name, before)
                if not excluded_by(d.ctx, at, lambda read, d=d: rebound_since(scope, read, d, d.order, before))]
        reaching = []
        for d in reversed(defs):
            reaching.append(d)
            if not d.ctx.guards and not d.ctx.in_handler and d.op.rebinds and d.ctx.loops == defs[-1].ctx.loops:
                break
        for d in reaching:
            if d.op.rebinds and _is_none(d.value) and len(reaching) > 1:
                continue  # `result = None` before `if labels is not None: result = ...`: no loss to differentiate
            if d.op.scales:
                if d.value is not None:
                    facts.scalings.append(Scaling(d.node, d.value, d.op is not DefOp.MULTIPLY, scope, d.ctx.guards))
                if d.op is DefOp.DIVIDE and d.value is not None and self._counts_items(d.value, scope, d.order):
                    facts.token_level = True  # `loss /= mask.sum()`, as `loss = loss / mask.sum()`
            elif d.op is DefOp.LOOP_TARGET:
                facts.known = False
            elif d.value is not None:
                where = d.scope or scope  # a parameter's argument is read in the caller
                outer = self._guards, self._reading_at
                self._guards = self._reading_at = d.ctx.guards
                try:
                    self._trace_def(d, where, facts, depth)
                finally:
                    self._guards, self._reading_at = outer
        return any(d.op.rebinds for d in reaching)

    def _trace_def(self, d: Def, where: Scope, facts: LossFacts, depth: int) -> None:
        if d.op is DefOp.UNPACK and isinstance(d.value, cst.Call) and d.index is not None:
            self._trace_element(d.value, d.index, where, d.order, facts, depth + 1)
        elif d.op is DefOp.UNPACK and isinstance(d.value, (cst.Tuple, cst.List)) and d.index is not None:
            element = d.unpacked_element
            if element is not None:
                self._trace(element, where, d.order, facts, depth + 1)
        elif d.op in (DefOp.ADD, DefOp.SUBTRACT):
            # `loss += w * aux`: one more term of a sum, whose weight scales that term only
            term = LossFacts()
            self._trace(d.value, where, d.order, term, depth + 1)
            term.scalings = [s for s in term.scalings if s.divides]
            if not term.known and not term.divisions:
                # a term of unknown make (`loss += self.regularizer()`) leaves the loss what it was, as
                # in `loss = loss + reg` (_trace_terms: a plain, undivided term decides the sum)
                facts.names |= term.names
                return
            facts.absorb(term)
        else:
            self._trace(d.value, where, d.order, facts, depth + 1)

    def _trace_terms(self, nodes: tuple[cst.BaseExpression, ...], scope: Scope, before: int, facts: LossFacts,
                     depth: int) -> None:
        """`a + w * b`: a sum of loss terms. A factor that multiplies some terms and not all of them
        (`cfg.w * proj`, `alpha * kd + (1 - alpha) * ce`) weighs the terms against each other: it
        normalises nothing. When one term is a plain loss (known, neither scaled nor summed nor
        detached) and no term is divided by anything, the sum is not normalised whatever the other
        terms are: `a`'s gradient alone is summed over the window undivided."""
        terms = []
        for node in nodes:
            term = LossFacts()
            self._trace(node, scope, before, term, depth)
            terms.append((node, term))
        plain = [t for node, t in terms if t.known and not (t.scaled or t.sum_reduced or t.detached)
                 and (t.names or isinstance(node, cst.Call))]
        divided = any(term.divisions for _, term in terms)
        factors = [{code(s.factor) for s in term.scalings if not s.divides} for _, term in terms]
        common = set.intersection(*factors) if factors else set()
        for _, term in terms:
            facts.names |= term.names
            facts.scalings.extend(s for s in term.scalings if s.divides or code(s.factor) in common)
            facts.token_level |= term.token_level
            facts.ignoring |= term.ignoring
        if plain and not divided:
            return
        for _, term in terms:
            facts.known &= term.known
            facts.sum_reduced |= term.sum_reduced
            facts.detached |= term.detached

    def _trace_each(self, comprehension: cst.BaseComp, scope: Scope, before: int, facts: LossFacts,
                    depth: int) -> None:
        """`sum(losses[k] * weights[k] for k in losses)`, `{k: v / n for k, v in losses.items()}`: the loss
        terms a comprehension makes, each read as its element. A factor that changes with the term (it
        reads the comprehension's variable) weighs the terms against each other; it normalises nothing."""
        iterated = {}
        clause = comprehension.for_in
        while clause is not None:
            iterated.update(dict.fromkeys(full_names(clause.target), clause.iter))
            clause = clause.inner_for_in
        variables = set(iterated)
        terms = LossFacts()
        element = comprehension.value if isinstance(comprehension, cst.DictComp) else comprehension.elt
        outer, self._iterated = self._iterated, {**self._iterated, **iterated}
        try:
            self._trace(element, scope, before, terms, depth)
        finally:
            self._iterated = outer
        terms.scalings = [s for s in terms.scalings if s.divides or not variables & set(iter_names(s.factor))]
        facts.absorb(terms)

    def _trace_field(self, node: cst.Attribute, scope: Scope, before: int, facts: LossFacts, depth: int) -> bool:
        """`res.loss` where `res = model(...)` and the project function that call runs returns an
        output object built in place with that field as a keyword (`return Output(loss=loss, ...)`):
        the keyword's value, read in the function. False when that is not what every return does."""
        owner = dotted(node.value)
        if owner is None or self.returns is None:
            return False
        defs = scope.defs_of(owner, before)
        if len(defs) != 1 or defs[0].op is not DefOp.ASSIGN or not isinstance(defs[0].value, cst.Call):
            return False
        returned = self.returns(defs[0].value, defs[0].scope or scope, defs[0].order)
        if not returned:
            return False
        fields = [(keyword(value, node.attr.value), where, at) for value, where, at in returned
                  if isinstance(value, cst.Call)]
        if len(fields) != len(returned) or any(value is None for value, _, _ in fields):
            return False
        return self._trace_returned(fields, facts, depth)

    def _entries(self, node: cst.Subscript, scope: Scope,
                 before: int) -> list[tuple[cst.BaseExpression, Scope, int]]:
        """What `x["key"]` holds where nothing stores under that key: the key's value in the dict literal
        `x` is bound to (`terms = {"mse": err}`), or, for `x` bound to a call of a project function (or for
        that call itself), the entry under that key of what each of its returns holds, read where it
        returns (`return terms` after `terms["loss"] = ...`). Empty when any of them cannot be read."""
        key = node.slice[0].slice.value
        value, where, at = node.value, scope, before
        if isinstance(value, cst.Name):
            defs = [d for d in scope.defs_of(value.value, before) if d.op is not DefOp.ITEM]
            if len(defs) != 1 or defs[0].op is not DefOp.ASSIGN or defs[0].value is None:
                return []
            value, where, at = defs[0].value, defs[0].scope or scope, defs[0].order
        if isinstance(value, cst.Dict):
            entry = _dict_entry(value, key)
            return [(entry, where, at)] if entry is not None else []
        if not isinstance(value, cst.Call) or self.returns is None:
            return []
        entries = []
        for returned, inner, point in self.returns(value, where, at) or ():
            if isinstance(returned, cst.Dict):
                entry = _dict_entry(returned, key)
                if entry is None:
                    return []
                entries.append((entry, inner, point))
            elif isinstance(returned, cst.Name):
                entries.append((node.with_changes(value=returned), inner, point))
            else:
                return []
        return entries

    def _returned_element(self, node: cst.BaseExpression, scope: Scope, before: int) \
            -> tuple[cst.Call, int, Scope] | None:
        """For `x[k]` (k a number) with x a call of a project function that returns tuples, or a name bound
        once to such a call: the call, k, and the scope the call is read in."""
        if not (isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)
                and isinstance(node.slice[0].slice.value, cst.Integer)) or self.returns is None:
            return None
        index, value, where = int(node.slice[0].slice.value.value), node.value, scope
        if isinstance(value, cst.Name):
            defs = scope.defs_of(value.value, before)
            if len(defs) != 1 or defs[0].op is not DefOp.ASSIGN:
                return None
            value, where = defs[0].value, defs[0].scope or scope
        if not isinstance(value, cst.Call):
            return None
        returned = self.returns(value, where, before)
        if not returned or not all(isinstance(v, (cst.Tuple, cst.List)) and index < len(v.elements)
                                   for v, _, _ in returned):
            return None
        return value, index, where

    def _trace_element(self, call: cst.Call, index: int, scope: Scope, before: int, facts: LossFacts,
                       depth: int) -> None:
        """`loss, extra = f(...)`: element `index` of what a project function returns."""
        returned = self.returns(call, scope, before) if self.returns is not None else None
        # the returns a caller unpacking values can have received: the tuples, where the others are
        # calls (a forward's `return self.generate(x)` when no targets are given, a mode this call,
        # unpacking a loss, is not in)
        tuples = [(value, where, at) for value, where, at in returned or ()
                  if isinstance(value, (cst.Tuple, cst.List)) and index < len(value.elements)]
        if tuples and all(isinstance(value, (cst.Tuple, cst.List, cst.Call)) for value, _, _ in returned):
            elements = [(value.elements[index].value, where, at) for value, where, at in tuples]
            if self._trace_returned(elements, facts, depth, index):
                return
        self._trace(call, scope, before, facts, depth)

    def _trace_returned(self, returned: list[tuple[cst.BaseExpression, Scope, int]], facts: LossFacts,
                        depth: int, unpacked: int | None = None) -> bool:
        """Read what a project function returns into `facts`; False (and `facts` untouched) when that
        cannot be followed, so the call is read as its caller sees it (a model's forward returning
        its output through layers the tracer does not know is still a forward)."""
        inner = LossFacts()
        self._returning += 1
        try:
            self._trace_returned_values(returned, inner, depth, unpacked)
        finally:
            self._returning -= 1
        if not self._returning:
            self._settle_ignored(inner)
        if not returned or not inner.known:
            # a value divided by a count of valid items on its way out (`masked_mean(...)`) is a
            # per-item mean whatever else it reads, and one divided by a factor on its way out
            # (`loss = loss / cfg.accum_steps; return loss, correct`) is divided by it, whatever
            # produced it
            facts.token_level |= inner.token_level
            facts.scalings.extend(s for s in inner.scalings if s.divides and s not in facts.scalings)
            return False
        facts.absorb(inner)
        return True

    def _trace_returned_values(self, returned: list[tuple[cst.BaseExpression, Scope, int]], inner: LossFacts,
                               depth: int, unpacked: int | None) -> None:
        if unpacked is None:
            # a value that is backpropagated is a tensor: a `return loss, logits` path is not the one
            # that reaches here (`_get_loss(x, y, return_logits=True)` elsewhere)
            single = [item for item in returned if not isinstance(item[0], (cst.Tuple, cst.List))]
            returned = single or returned
        for value, where, at in returned:
            self._trace(value, where, at, inner, depth + 1)

    def _settle_ignored(self, facts: LossFacts) -> None:
        """A criterion with a sentinel ignore_index (here or in the project's forward or loss function)
        averages over a varying number of items only when this program writes the ignored value into
        its labels: a pretraining batch sliced from a token stream has none, a mean over a fixed count."""
        if facts.ignoring:
            facts.token_level |= any(self._writes_label(value) for value in facts.ignoring)
            facts.ignoring = set()

    def _writes_label(self, value: str, expression: bool = False) -> bool:
        """Does the training program write the label `value` (`-100`) into its data? `expression`: the
        text of an expression it pads its rows with (`tokenizer.pad_token_id`), not a number."""
        key = (value, expression)
        if key not in self._writes:
            token = value.rsplit(".", 1)[-1] if expression else value  # what a file that writes it contains
            self._writes[key] = any(_writes_label(module, value, expression=expression)
                                    for module in self.program(token))
        return self._writes[key]

    def _trace_call(self, node: cst.Call, scope: Scope, before: int, facts: LossFacts, depth: int) -> None:
        receiver, method = call_receiver(node)
        if receiver is None and method in cat.SEQUENCE_FUNCTIONS | {cat.SUM_FUNCTION} and node.args \
                and not scope.defs_of(method) and (scope.imports or self.imports).qualify(node.func) is None:
            # `sum(terms)` adds the terms, `list(loss_dict.values())` holds them
            self._trace(node.args[0].value, scope, before, facts, depth)
            return
        if receiver is not None and self.imports.qualify(node.func):
            # `torch.sum(x)`, `torch.mean(x, dim=1)`: a module's function; its first argument is the operand
            receiver = positional(node, 0)
        # A function of the project is read in its body, even when its name is one the catalogue knows:
        # a wrapper's own `self.scale_loss(loss)` may divide by the accumulation count, where apex's
        # `amp.scale_loss(loss, opt)` only multiplies by the loss scale
        returned = self.returns(node, scope, before) if self.returns is not None else None
        operation = cat.LOSS_OPERATIONS.get(method or "") if returned is None else None
        if operation in (LossOp.DIVIDES, LossOp.MULTIPLIES) and receiver is not None:
            if node.args:
                facts.scalings.append(Scaling(node, node.args[0].value, operation is LossOp.DIVIDES, scope,
                                              self._guards))
            else:
                facts.known = False  # `loss.div(**kw)`: by what is unknown
            self._trace(receiver, scope, before, facts, depth)
            return
        if operation is LossOp.AMP_SCALES and node.args:
            # scaler.scale(loss) / amp.scale_loss(loss, opt): the loss scale, not accumulation
            self._trace(node.args[0].value, scope, before, facts, depth)
            return
        if operation is LossOp.DETACHES or (receiver is None and method in cat.DETACHING_FUNCTIONS):
            facts.detached = True
            return
        if operation is LossOp.KEEPS and receiver is not None:
            mask = _masked_items(receiver, scope, before, self._constructors) \
                if method == cat.MEAN_METHOD and not node.args else None
            if mask is not None and not self._fixed_count(mask, scope, before, 0):
                # `per_item[mask].mean()`: a mean over the items the mask keeps, a count each micro-batch sets
                facts.token_level = True
            self._trace(receiver, scope, before, facts, depth)
            return
        if (scope.imports or self.imports).qualify(node.func) == "typing.cast" and len(node.args) == 2:
            self._trace(node.args[1].value, scope, before, facts, depth)  # `cast(Tensor, loss)` is `loss`
            return
        if any(is_accumulation_count(a.value, None, scope) for a in node.args) or any(
                a.keyword is not None and "num_items" in a.keyword.value for a in node.args):
            facts.known = False  # N, or the window's item count, is handed to the producer
            return
        if returned and self._trace_returned(returned, facts, depth):
            return  # a function of the project: what it returns, read in its body
        along = cat.LIBRARY_MASKED_MEANS.get((scope.imports or self.imports).qualify(node.func) or "")
        if along is not None and node.args:
            if keyword(node, along) is None and positional(node, 2) is None:
                facts.token_level = True  # a mean over the micro-batch's masked-in tokens
            self._trace(node.args[0].value, scope, before, facts, depth)
            return
        callee = dotted(node.func)
        imports = scope.imports or self.imports
        roles = constructor_roles(node, imports, no_roles) | self._roles_of(callee, scope) \
            | self._handed_to_init(callee, scope)
        if isinstance(node.func, cst.Call):  # `nn.CrossEntropyLoss(ignore_index=-100)(logits, labels)`
            roles |= constructor_roles(node.func, imports, no_roles)
        reduction = keyword(node, cat.REDUCTION_KEYWORD)
        if Role.CRITERION in roles and reduction is not None and not isinstance(reduction, cst.SimpleString):
            # `reduction=reduction`: the literal the name holds here, or a parameter's default
            named = _string_value(reduction, scope, before)
            if named is None:
                facts.known = False  # a sum or a mean, as the caller decides
                return
            roles = roles - {Role.SUM_LOSS, Role.TOKEN_LOSS} | (
                {Role.SUM_LOSS} if named == "sum" else {Role.TOKEN_LOSS} & roles if named == "mean" else set())
        if Role.SUM_LOSS in roles:
            facts.sum_reduced = True
        elif Role.CRITERION in roles and Role.ITEM_LOSS not in roles \
                and (reduction is None or _string_value(reduction, scope, before) == "mean"):
            # `l1(pred.masked_select(mask), target.masked_select(mask))`: a mean over the items the
            # mask selects, as many as this micro-batch's data keeps (unless the count is fixed)
            # inline, or bound to a name first (`masked_pred = pred[coord_mask]`); the targets alone, by a
            # boolean mask, where the model's output is already packed (`F.cross_entropy(packed, labels[keep])`)
            given = positional(node, 0) or keyword(node, "input")
            selected = _selecting_mask(_bound_value(given, scope, before)[0]) if given is not None else None
            target = positional(node, 1) or keyword(node, "target")
            if selected is None and target is not None:
                kept = _selecting_mask(_bound_value(target, scope, before)[0])
                selected = kept if kept is not None and _is_boolean_mask(kept, scope, before) else None
            if selected is not None and not self._fixed_count(selected, scope, before, 0):
                facts.token_level = True
            # torch's cross-entropy skips targets of -100 unasked (`ignore_index=-100` by default): a mean
            # over the valid targets when a collator pads or masks the batches' targets with -100
            target = positional(node, 1) or keyword(node, "target")
            if Role.TOKEN_LOSS not in roles and target is not None \
                    and self._criterion_name(node, scope, before) in cat.DEFAULT_IGNORING_CRITERIA \
                    and (self._collated_with_masking(_container(_values_kept(target)), scope, 0)
                         or _made_with_ignored_label(target, scope, before, 0)):
                facts.token_level = True
        if Role.TOKEN_LOSS in roles and Role.SUM_LOSS not in roles:
            # a mean over the valid items (a sum over them is no mean), unless no label can be invalid
            # (next-token labels cut from the inputs' own rows). A sentinel of the project's own
            # (`ignore_index=-1`) counts only if the program writes it (_settle_ignored); a pad id
            # (`ignore_index=self.pad_id`) is in every padded batch, and -100 is what label collators
            # outside the project write.
            # An index one past the logits' last class (`ignore_index=start_logits.size(1)`, positions
            # clamped to it) marks positions outside the sequence, which well-formed data has none of.
            # Next tokens padded with the pad id the criterion ignores (`seq + [pad_id] * (n - len(seq))`)
            # hold it, though: the program that pads its rows with it makes the count vary.
            target = positional(node, 1) or keyword(node, "target")
            next_tokens = target is not None and _next_tokens(target, scope, before, 0)
            for ignored, where, at in self._ignore_indices(node, callee, scope, before):
                if next_tokens:
                    if ignored is not None and not _is_number(ignored) \
                            and self._writes_label(code(ignored), expression=True):
                        facts.token_level = True
                    continue
                if _is_number(ignored) and not _is_ignored_label(ignored):
                    facts.ignoring.add(code(ignored))
                elif ignored is None or not _is_size(ignored, where, at):
                    facts.token_level = True
        # Only producers whose reduction we know count: torch losses and criteria, and model
        # forwards (HF-style `.loss`). Anything else (`compute_loss(...)`) may sum or scale inside.
        if not (Role.CRITERION in roles or (imports.qualify(node.func) or "").startswith("torch")
                or _is_model_like(callee) or self._is_torch_module(callee, scope)):
            facts.known = False

    def _criterion_name(self, call: cst.Call, scope: Scope, before: int) -> str | None:
        """The torch function or module class a criterion call runs: `cross_entropy` of
        `F.cross_entropy(...)`, `CrossEntropyLoss` of `criterion(...)` after `criterion = nn.CrossEntropyLoss()`,
        or of `self.criterion(...)` after `__init__` set it so (one class wherever it is built)."""
        name = last_part(dotted(call.func) or "")
        made, _ = _bound_value(call.func, scope, before)
        if isinstance(made, cst.Call):
            return last_part(dotted(made.func) or "")
        if name and not scope.defs_of(dotted(call.func) or ""):
            built = {last_part(dotted(constructor.func) or "")
                     for constructor, _, _ in self._constructors(dotted(call.func), scope)}
            if len(built) == 1:
                return built.pop()
        return name

    def _counts_items(self, divisor: cst.BaseExpression, scope: Scope, before: int) -> bool:
        """A divisor that is a count of valid items, written in place or bound to a name first
        (`/ mask.sum()`, `/ num_pos` after `num_pos = pos.sum()`). Not a count of the labels that differ
        from a sentinel (`(target != ignore_index).sum()`) when the labels are the next tokens of the
        stream the inputs are cut from: none is the sentinel, so the count is the same in every
        micro-batch. Nor a count of a mask whose number of set items is fixed (_fixed_count)."""
        count, at = _bound_value(_count_kept(divisor), scope, before)
        count = _count_kept(count)  # `denom = keep.sum().clamp_min(1.0)` then `/ denom`
        if self._counts_selection(count, scope, at):
            return True
        if isinstance(count, cst.BinaryOperation) and isinstance(count.operator, cst.Subtract) \
                and self._counts_items(count.right, scope, at):
            return True  # `positions - prompt_lengths.sum()`: the rest of the positions, as many as the data leaves
        if not _is_count_of_items(count, scope):
            added = _added_up(count, scope, before)
            return bool(added) and all(self._counts_items(value, scope, order) for value, order in added)
        counted = _counted(count, scope.imports or self.imports)
        labels = _compared_with_sentinel(counted)
        if labels is not None:
            return not _next_tokens(labels, scope, at, 0)
        return counted is None or not self._fixed_count(counted, scope, at, 0)

    def _counts_selection(self, count: cst.BaseExpression, scope: Scope, before: int) -> bool:
        """`target.numel()`, `len(target)`, `target.size(0)` after `target = target[keep]`: the number of
        items a mask selected, as many as the micro-batch's data sets (unless the mask's count is fixed).
        The selection is the last binding of the name (`if mask is not None: target = target[mask]`)."""
        if _along_other_dimension(count):
            return False
        counted = _counted(count, scope.imports or self.imports)
        name = dotted(counted) if isinstance(counted, cst.Name) else None
        defs = [d for d in scope.defs_of(name, before) if d.op.rebinds and d.value is not None] if name else []
        mask = _selecting_mask(defs[-1].value) if defs else None
        return mask is not None and not self._fixed_count(mask, scope, defs[-1].order, 0)

    def _fixed_count(self, mask: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
        """Does `mask` have the same number of items set in every micro-batch? Random masking at a fixed
        ratio (masked image modelling) makes such masks: a constant-filled tensor whose items are set
        at positions the data does not choose (`m = torch.ones(n, l); m[:, :keep] = 0`,
        `torch.zeros(b, l).scatter_(1, order[:, :k], 1.0)`), reordered by a permutation
        (`torch.gather(m, 1, ids_restore)`), cast or reshaped; here, in a function of the project that
        returns it (`x, mask, ids = self.random_masking(x, ratio)`), or in what the caller passes."""
        if depth > 10:
            return False
        mask = _values_kept(mask, cat.MASK_KEEPING_METHODS)
        if isinstance(mask, cst.UnaryOperation) and isinstance(mask.operator, (cst.BitInvert, cst.Not)):
            mask = mask.expression  # `~torch.isnan(x)`: the complement of a fixed count is fixed
        if isinstance(mask, cst.Call):
            return self._fixed_count_made(mask, scope, before, depth)
        name = dotted(mask)
        if name is None:
            return False
        writes = []
        for d in reversed(scope.defs_of(name, before)):
            if d.op is DefOp.ITEM:
                writes.append(d)
                continue
            if not d.op.rebinds or d.ctx.guards or d.ctx.in_handler or d.value is None:
                return False
            if not all(_fixed_positions(write, scope) for write in writes):
                return False
            where = d.scope or scope  # a parameter's argument is read in the caller
            if d.op is DefOp.UNPACK and isinstance(d.value, (cst.Tuple, cst.List)):
                return d.bound is not None and self._fixed_count(d.bound, where, d.order, depth + 1)
            if d.op is DefOp.UNPACK and isinstance(d.value, cst.Call) and d.index is not None:
                returned = self.returns(d.value, where, d.order) if self.returns is not None else None
                # the returns an unpacking can receive: a tuple as long as the targets (`return loss, pred,
                # mask` beside a teacher's `return pred`, which the unpacking never gets)
                unpacked = [(value, inner, at) for value, inner, at in returned or ()
                            if isinstance(value, (cst.Tuple, cst.List)) and d.index < len(value.elements)]
                return bool(unpacked) and all(self._fixed_count(value.elements[d.index].value, inner, at, depth + 1)
                                              for value, inner, at in unpacked)
            return d.op is DefOp.ASSIGN and self._fixed_count(d.value, where, d.order, depth + 1)
        return False

    def _fixed_count_made(self, call: cst.Call, scope: Scope, before: int, depth: int) -> bool:
        """_fixed_count of the tensor a call makes."""
        receiver, method = call_receiver(call)
        qualified = (scope.imports or self.imports).qualify(call.func)
        if method in cat.CONSTANT_FILLS and qualified is not None:
            return True  # a module's constructor: `torch.ones(n, l)`, `np.zeros(l)`
        if method in cat.FINITE_TESTS:
            return True  # `torch.isnan(losses)`, `losses.isfinite()`
        if method in cat.MASK_RESIZING_FUNCTIONS and qualified is not None and call.args:
            return self._fixed_count(call.args[0].value, scope, before, depth + 1)
        if qualified is not None and method in cat.PERMUTING_READS | cat.SCATTERS:
            receiver = positional(call, 0)  # `torch.gather(mask, 1, index)`: the operand comes first
            arguments = call.args[1:]
        else:
            arguments = call.args
        index = keyword(call, "index") or (arguments[1].value if len(arguments) > 1 and arguments[1].keyword is None
                                           else None)
        if method in cat.PERMUTING_READS and receiver is not None and index is not None:
            return _permutation(index, scope, before) and self._fixed_count(receiver, scope, before, depth + 1)
        if method in cat.SCATTERS and receiver is not None and index is not None:
            return _distinct_positions(index, scope, before) and self._fixed_count(receiver, scope, before, depth + 1)
        returned = self.returns(call, scope, before) if self.returns is not None else None
        return bool(returned) and all(self._fixed_count(value, where, at, depth + 1) for value, where, at in returned)

    def _masked_labels(self, outputs: cst.BaseExpression, scope: Scope, before: int, depth: int = 0) -> bool:
        """`outputs = model(..., labels=y)` where `y[...] = -100` masks items out in this scope, or
        `model(**batch)` / `labels=batch["labels"]` with batches from a loader whose collator masks
        labels (catalogue.LABEL_MASKING_COLLATORS), or a project module's forward that returns such a
        call (`return self.lm(input_ids=tokens, labels=targets)` after masking `targets` there)."""
        calls = [call for d in scope.defs_of(dotted(outputs) or "", before) for call in _calls_made(d.value)]
        if isinstance(outputs, cst.Call):
            calls.append(outputs)
        for call in calls:
            if self._per_sequence_head(dotted(call.func), scope):
                continue
            returned = self.returns(call, scope, before) if self.returns is not None and depth < 2 else None
            if returned and all(isinstance(value, cst.Call) for value, _, _ in returned) \
                    and any(self._masked_labels(value, where, at, depth + 1) for value, where, at in returned):
                return True
            labels = next((keyword(call, k) for k in cat.LABELS_KEYWORDS if keyword(call, k) is not None), None)
            name = dotted(labels)
            if name and self._labels_masked(name, scope, 0):
                return True
            given = [a.value for a in call.args if a.star == "**"]
            if labels is not None:
                given.append(_container(labels))  # `batch["labels"].to(device)`: what `batch` is
            if any(self._collated_with_masking(batch, scope, 0) for batch in given):
                return True
        return False

    def _per_sequence_head(self, model: str | None, scope: Scope) -> bool:
        """Is the model built (here, at module level, or in any method for `self.x`) by a Hugging Face
        head whose loss is not a mean over labelled tokens (catalogue.PER_SEQUENCE_LOSS_HEADS)?"""
        return any(part.endswith(cat.PER_SEQUENCE_LOSS_HEADS) for constructor, _, _ in self._constructors(model, scope)
                   for part in (dotted(constructor.func) or "").split("."))

    def _labels_masked(self, name: str, scope: Scope, depth: int) -> bool:
        """Does the name hold labels with items set to the ignored label: `y[...] = -100` or `y =
        ids.masked_fill(pad, -100)` here, or in the project function that returns them (`inputs, labels
        = mask_tokens(batch, tokenizer)`)?"""
        for d in scope.defs_of(name):
            if d.op is DefOp.ITEM and _is_ignored_label(d.value):
                return True
            if d.op is DefOp.ASSIGN and d.value is not None \
                    and _made_with_ignored_label(d.value, d.scope or scope, d.order, 0):
                return True
            if d.op not in (DefOp.ASSIGN, DefOp.UNPACK) or depth > 2 or self.returns is None:
                continue
            for value, where, _ in (returned for call in _calls_made(d.value)
                                    for returned in self.returns(call, d.scope or scope, d.order) or ()):
                if d.op is DefOp.UNPACK:
                    value = value.elements[d.index].value if isinstance(value, cst.Tuple) and d.index is not None \
                        and d.index < len(value.elements) else None
                returned = dotted(value) if value is not None else None
                if returned and self._labels_masked(returned, where, depth + 1):
                    return True
        return False

    def _collated_with_masking(self, node: cst.BaseExpression, scope: Scope, depth: int) -> bool:
        """Does this batch (or loader) come from a DataLoader whose collate_fn masks labels: a loop
        over it (`for step, batch in enumerate(loader)`), `accelerator.prepare` of it, a name for it?"""
        if depth > 8:
            return False
        if isinstance(node, cst.NamedExpr):
            node = node.value  # `enumerate(bar := tqdm(loader))`: the loader, kept under a name too
        if isinstance(node, cst.Call):
            receiver, method = call_receiver(node)
            if method in cat.DATA_LOADERS:
                collator = keyword(node, cat.COLLATE_KEYWORD)
                dataset = positional(node, 0) or keyword(node, cat.DATASET_KEYWORD)
                if collator is not None and self._masking_collator(collator, scope, 0):
                    return True
                if dataset is None:
                    return False
                # a collator that hides only padding (causal LM), over examples tokenized with padding
                return self._masking_dataset(dataset, scope, 0) or collator is not None \
                    and self._masking_collator(collator, scope, 0, padding=True) and self._padded(dataset, scope, 0)
            returned = self.returns(node, scope, END_OF_SCOPE) if self.returns is not None else None
            if returned:  # `loader = build_dataloader(...)`: what the project function returns
                return any(self._collated_with_masking(value, where, depth + 1) for value, where, _ in returned)
            first = positional(node, 0) or keyword(node, "iterable")  # enumerate(loader), tqdm(loader), iter(loader)
            # a function, not a method of an object: `tqdm(loader)`, or `tqdm.tqdm(loader)` of an imported module
            function = receiver is None or isinstance(receiver, cst.Name) and receiver.value not in SELF_NAMES \
                and not scope.defs_of(receiver.value)
            return function and first is not None and self._collated_with_masking(first, scope, depth + 1)
        name = dotted(node)
        if name is None:
            return False
        if depth == 0:  # the answer for a name, whatever reads it (deeper reads may be cut off by depth)
            key = (id(scope), name)
            if key not in self._masked_batches:
                self._masked_batches[key] = self._collated_names_masking(name, scope, depth)
            return self._masked_batches[key]
        return self._collated_names_masking(name, scope, depth)

    def _collated_names_masking(self, name: str, scope: Scope, depth: int) -> bool:
        """Does any binding of the name hold such a batch or loader? For a parameter nothing binds here,
        what the file's calls of the function pass it (`main_loop(model, train_loader, ...)`)."""
        defs = scope.defs_of(name)
        passed = self.passed_to(name, scope) if self.passed_to is not None and not defs and depth <= 6 else ()
        if any(self._collated_with_masking(argument, caller, depth + 1) for argument, caller, _ in passed):
            return True
        bound = [(d, d.scope or scope) for d in defs]
        if not defs and name.split(".")[0] in SELF_NAMES:  # `self.loader`, bound in another method (`__init__`)
            bound = [(d, d.scope or other) for other in self.scopes if other.owner is scope.owner is not None
                     and other is not scope for d in other.defs_of(name)]
        elif not defs and self.module_scopes:
            bound = [(d, d.scope or scope) for d in self.module_scopes[0].defs_of(name)]
        for d, where in bound:
            value = d.value
            if d.op is DefOp.UNPACK and isinstance(value, cst.Call) and call_receiver(value)[1] in cat.PREPARE_METHODS:
                if d.index is None:
                    continue
                value = positional(value, d.index)  # `model, loader = accelerator.prepare(model, loader)`
            # else `x, y = batch` or `= next(it)`: a part of the batch, read as the batch itself (as a loop's
            # `for x, y in loader` is); so are the batch's items cut or reshaped
            # (`shift_labels = batch["labels"][..., 1:].contiguous().view(-1)`)
            if d.op is DefOp.ASSIGN and isinstance(_values_kept(value), cst.Subscript):
                value = _container(_values_kept(value))
            if value is not None and d.op in (DefOp.ASSIGN, DefOp.UNPACK, DefOp.LOOP_TARGET) \
                    and self._collated_with_masking(value, where, depth + 1):
                return True
        return False

    def _masking_collator(self, node: cst.BaseExpression, scope: Scope, depth: int, padding: bool = False) -> bool:
        """A collator of the catalogue that masks labels, or a function of this file that writes the
        ignored label (`pad_sequence(labels, padding_value=-100)`, `labels[...] = -100`). With `padding`:
        a collator of the catalogue switched to hide only the padding it finds (`mlm=False`)."""
        if not isinstance(node, cst.Call):
            name = dotted(node)
            if not name or depth > 4:
                return False
            defs = scope.defs_of(name) or (self.module_scopes[0].defs_of(name) if self.module_scopes else [])
            values = [d for d in defs if d.op is DefOp.ASSIGN and d.value is not None]
            if not values:  # a function of this file (`def collate_fn(batch): ...`), or of another module
                return not padding and (self._function_writes_ignored(name) or self._runs_ignored_writer(node, scope))
            return any(self._masking_collator(d.value, d.scope or scope, depth + 1, padding) for d in values)
        if (scope.imports or self.imports).qualify(node.func) == cat.PARTIAL and node.args and depth <= 4:
            # `partial(collate, pad_token_id=0)`: the function it calls
            return self._masking_collator(node.args[0].value, scope, depth + 1, padding)
        _, method = call_receiver(node)
        if method not in cat.LABEL_MASKING_COLLATORS:
            # an instance of a class of this file (or of another module) whose __call__ writes the ignored label
            return not padding and (self._function_writes_ignored(_CALL_METHOD, of_class=method)
                                    or self._runs_ignored_writer(node, scope))
        switch = cat.LABEL_MASKING_COLLATORS[method]
        value = keyword(node, switch) if switch else None
        if padding:
            return isinstance(value, cst.Name) and value.value == "False"
        return value is None or isinstance(value, cst.Name) and value.value == "True"

    def _padded(self, dataset: cst.BaseExpression, scope: Scope, depth: int) -> bool:
        """Are the dataset's examples tokenized with padding: mapped (`ds.map(tokenize)`, also down a
        chain of `.map`/`.filter`/... calls, or bound to a name) by a lambda or a function of this file
        that passes `padding=` a value that pads?"""
        if depth > 6:
            return False
        if isinstance(dataset, cst.Subscript):  # `ds.map(tokenize)["train"]`: a split of it
            return self._padded(dataset.value, scope, depth + 1)
        if not isinstance(dataset, cst.Call):
            name = dotted(dataset)
            defs = [d for d in scope.defs_of(name) if d.op is DefOp.ASSIGN and d.value is not None] if name else []
            return any(self._padded(d.value, d.scope or scope, depth + 1) for d in defs)
        receiver, method = call_receiver(dataset)
        if receiver is None and method in cat.DATASET_SHARDS and dataset.args:
            return self._padded(dataset.args[0].value, scope, depth + 1)
        if receiver is None or method not in cat.DATASET_TRANSFORMS:
            return False
        function = positional(dataset, 0) or keyword(dataset, cat.MAP_FUNCTION_KEYWORD)
        if method == cat.DATASET_MAP and function is not None and any(map(_pads, self._mapped_code(function))):
            return True
        return self._padded(receiver, scope, depth + 1)

    def _masking_dataset(self, node: cst.BaseExpression, scope: Scope, depth: int, index: int | None = None) -> bool:
        """A dataset whose examples carry the ignored label: mapped by a function of this file that
        writes it (`raw.map(preprocess)`, also further down a chain of `.map`/`.filter`/`.shuffle`
        calls), or an instance of a class of this file whose `__getitem__` writes it, also built by a
        project function and returned (element `index` of what it returns, for `train, val = f(...)`),
        with the class it is handed (`dataset_cls(...)` for a `dataset_cls` parameter)."""
        if depth > 6:
            return False
        if not isinstance(node, cst.Call):
            name = dotted(node)
            defs = scope.defs_of(name) or (self.module_scopes[0].defs_of(name) if self.module_scopes else []) \
                if name else []
            return any(d.op in (DefOp.ASSIGN, DefOp.UNPACK) and d.value is not None
                       and self._masking_dataset(d.value, d.scope or scope, depth + 1,
                                                 d.index if d.op is DefOp.UNPACK else None) for d in defs)
        receiver, method = call_receiver(node)
        if receiver is not None and method in cat.DATASET_TRANSFORMS and index is None:
            function = positional(node, 0) or keyword(node, cat.MAP_FUNCTION_KEYWORD)
            if method == cat.DATASET_MAP and function is not None and self._writes_ignored(function, scope):
                return True
            return self._masking_dataset(receiver, scope, depth + 1)
        returned = self.returns(node, scope, END_OF_SCOPE) if self.returns is not None else None
        if returned:
            for value, where, _ in returned:
                if index is not None:
                    value = value.elements[index].value if isinstance(value, (cst.Tuple, cst.List)) \
                        and index < len(value.elements) and not isinstance(value.elements[index], cst.StarredElement) \
                        else None
                if value is not None and self._masking_dataset(value, where, depth + 1):
                    return True
            return False
        if index is not None:
            return False
        handed = [d for d in scope.defs_of(method or "") if d.op is DefOp.ASSIGN] if receiver is None else []
        if len(handed) == 1 and isinstance(handed[0].value, cst.Name):
            method = handed[0].value.value  # `dataset_cls(...)`, the parameter bound to a class of the project
        return self._function_writes_ignored(cat.GET_ITEM_METHOD, of_class=method)

    def _writes_ignored(self, function: cst.BaseExpression, scope: Scope) -> bool:
        """A lambda, or a function of this file by name, whose body writes the ignored label."""
        return any(_writes_ignored_label(code) for code in self._mapped_code(function))

    def _mapped_code(self, function: cst.BaseExpression) -> list[cst.CSTNode]:
        """What a dataset's `map` runs on each example: a lambda's body, or the functions of this file
        with that name."""
        if isinstance(function, cst.Lambda):
            return [function.body]
        name = dotted(function)
        return [s.node for s in self.scopes if name and s.name == name and s.frame is None]

    def _function_writes_ignored(self, name: str, of_class: str | None = None) -> bool:
        """Does the function of this file with this name (a method of the class `of_class`, when given)
        write the ignored label into what it builds?"""
        return any(s.name == name and s.frame is None
                   and (of_class is None or s.owner is not None and s.owner.name.value == of_class)
                   and _writes_ignored_label(s.node) for s in self.scopes)

    def _runs_ignored_writer(self, node: cst.BaseExpression, scope: Scope) -> bool:
        """Does calling this value run a project function (or `__call__` of a project class's instance)
        that writes the ignored label: the collate_fn a loader built in another module is given?"""
        function = self.called(scope, node) if self.called is not None else None
        return function is not None and _writes_ignored_label(function)

    def _is_torch_module(self, name: str | None, scope: Scope) -> bool:
        """A name bound in this scope to one of torch's modules (`cos = torch.nn.CosineSimilarity()`):
        calling it computes per-item values, which what surrounds the call reduces."""
        imports = scope.imports or self.imports
        return bool(name) and any(isinstance(d.value, cst.Call) and (imports.qualify(d.value.func) or "").startswith(
            "torch.nn.") for d in scope.defs_of(name) if d.op is DefOp.ASSIGN)

    def _roles_of(self, name: str | None, scope: Scope) -> frozenset[Role]:
        """Roles of the constructors a name is bound to here, at module level, or (for `self.x`) in any method."""
        roles: frozenset[Role] = NO_ROLES
        for constructor, _, _ in self._constructors(name, scope):
            roles |= constructor_roles(constructor, self.imports, no_roles)
        return roles

    def _handed_to_init(self, name: str | None, scope: Scope) -> frozenset[Role]:
        """The loss roles of what the constructions of the class hand the `__init__` parameter kept as
        `self.<attribute>` (`self.loss_f = loss_f`, constructed as `Fitter(net, F.cross_entropy)`)."""
        head, _, attribute = (name or "").partition(".")
        if head not in SELF_NAMES or not attribute or "." in attribute or self.attribute_roles is None:
            return NO_ROLES
        return self.attribute_roles(scope, attribute) & _LOSS_ROLES

    def _constructors(self, name: str | None, scope: Scope, depth: int = 0) -> Iterator[tuple[cst.Call, Scope, int]]:
        """The calls a name is bound to here, at module level, or (for `self.x`) in any method, each with
        the scope and the point it is read at; for a parameter, those its callers hand it (_handed)."""
        if not name:
            return
        if depth < 3:
            handed = self._handed(name, scope, depth)
            if handed:
                yield from handed
                return
        for where in (scope, *(self.scopes if name.startswith("self.") else self.module_scopes)):
            for d in where.defs_of(name):
                if isinstance(d.value, cst.Call):
                    yield d.value, d.scope or where, d.order
                elif d.op is DefOp.ASSIGN and isinstance(d.value, (cst.Name, cst.Attribute)) and depth < 3 \
                        and (dotted(d.value) != name or (d.scope or where) is not where):
                    # an alias of another binding (`loss_fn = LOSS_FN`, the criterion a module built), or
                    # the argument a call walked in place binds to its parameter, read in the caller
                    yield from self._constructors(dotted(d.value), d.scope or where, depth + 1)
        head, _, attribute = name.partition(".")
        if head in SELF_NAMES and attribute and self.attribute_constructions is not None:
            # a model's forward in another file calling `self.criterion`, bound in its `__init__`
            for constructor in self.attribute_constructions(scope, attribute):
                yield constructor, scope, END_OF_SCOPE

    def _handed(self, name: str, scope: Scope, depth: int) -> list[tuple[cst.Call, Scope, int]]:
        """For a parameter the function never binds again (`def run_epoch(net, loss_fn, opt, loader)`), the
        constructions every call of it in the file hands it (`loss_fn = nn.CrossEntropyLoss(...)` then
        `run_epoch(net, loss_fn, opt, loader)`). Empty unless every argument is one: a call site passing
        what cannot be read leaves the criterion unknown."""
        if self.passed_to is None or scope.defs_of(name) or "." in name:
            return []
        made: list[tuple[cst.Call, Scope, int]] = []
        for argument, caller, _ in self.passed_to(name, scope):
            built = [(argument, caller, END_OF_SCOPE)] if isinstance(argument, cst.Call) else list(
                self._constructors(dotted(argument), caller, depth + 1))
            if not built:
                return []
            made += built
        return made

    def _ignore_indices(self, call: cst.Call, callee: str | None, scope: Scope,
                        before: int) -> list[tuple[cst.BaseExpression | None, Scope, int]]:
        """The ignore_index of a criterion call (`F.cross_entropy(..., ignore_index=i)`), or of the
        constructions of the criterion it calls (`loss_fct = CrossEntropyLoss(ignore_index=i)`, or one made
        and called at once), each with where it is read; None for one whose ignore_index is not written here."""
        own = keyword(call, cat.IGNORE_INDEX_KEYWORD)
        if own is not None:
            return [(own, scope, before)]
        constructors = [(call.func, scope, before)] if isinstance(call.func, cst.Call) else self._constructors(callee, scope)
        built = [(keyword(c, cat.IGNORE_INDEX_KEYWORD), where, at) for c, where, at in constructors]
        return [item for item in built if item[0] is not None] or [(None, scope, before)]


_CALL_METHOD = "__call__"  # what a collator instance runs on each batch
_LOSS_ROLES = frozenset({Role.CRITERION, Role.SUM_LOSS, Role.TOKEN_LOSS, Role.ITEM_LOSS})


def _dict_entry(literal: cst.Dict, key: cst.BaseExpression) -> cst.BaseExpression | None:
    """The value a dict literal gives `key` (written alike), when it gives it once."""
    found = [e.value for e in literal.elements if isinstance(e, cst.DictElement) and code(e.key) == code(key)]
    return found[0] if len(found) == 1 else None


def returned_loss(expr: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`return loss` or `return {"loss": loss, ...}` (what a Lightning training_step hands back)."""
    if isinstance(expr, cst.Dict):
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString) \
                    and element.key.evaluated_value == cat.RETURNED_LOSS_KEY:
                return element.value
        return None
    return expr


_MODEL_WORDS = re.compile(r"model|net|module|engine|encoder|decoder|transformer|gpt|bert|unet|policy", re.I)
_CRITERION_NAMES = re.compile(r"^(criterion\w*|loss_fn|loss_func|loss_fct|lossfn|loss_function)$")


def _is_model_like(callee: str | None) -> bool:
    """A forward pass or a criterion called by its conventional name: both return a mean loss. A module
    training itself calls its own forward as `self(x)`."""
    if not callee:
        return False
    last = callee.split(".")[-1]
    return last in {"forward", "__call__"} or callee == "self" \
        or bool(_MODEL_WORDS.search(last) or _CRITERION_NAMES.match(last))


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))




def _container(node: cst.BaseExpression) -> cst.BaseExpression:
    """The object an expression reads from: `batch` of `batch["labels"].to(device)`."""
    for _ in range(8):
        if isinstance(node, cst.Subscript) or isinstance(node, cst.Attribute) and not isinstance(node.value, cst.Name):
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            node = node.func.value
        else:
            break
    return node


def _writes_ignored_label(function: cst.CSTNode) -> bool:
    """Does a function's body write the ignored label into tensors: pass it to a call
    (`pad_sequence(labels, padding_value=-100)`, `labels.masked_fill(mask, -100)`) or assign it?"""
    return _writes_label(function, str(cat.IGNORED_LABEL), loosely=True)


def _writes_label(node: cst.CSTNode, value: str, loosely: bool = False, expression: bool = False) -> bool:
    """Does the code write the literal `value` into tensors or label lists: as a fill value
    (`padding_value=-1`, `masked_fill(mask, -1)`, `torch.full_like(y, -1)`), into items
    (`y[mask == 0] = -1`), repeated in a list (`[-100] * len(prompt)`), or chosen item by item in
    a comprehension (`[t if t != pad else -100 for t in row]`)? `loosely`: any argument
    or assignment of it counts (-100 has no other use; -1 is also a dimension and an index).
    `expression`: `value` is the text of an expression (`tokenizer.pad_token_id`), not a number."""
    def matches(written: cst.BaseExpression) -> bool:
        return code(written) == value if expression else _is_literal(written, value)

    zero = not expression and value == "0"
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and any(matches(a.value) and (loosely or _fills(node, a)) for a in node.args):
            return True
        if zero and (isinstance(node, cst.Call) and _pads_with_zero(node)
                     or isinstance(node, cst.FunctionDef) and _zero_rows_filled_in_part(node)):
            return True
        if isinstance(node, cst.Assign) and matches(node.value) and (
                loosely or any(isinstance(t.target, cst.Subscript) for t in node.targets)):
            return True
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) and any(
                isinstance(side, cst.List) and any(matches(e.value) for e in side.elements)
                for side in (node.left, node.right)):
            return True
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) and any(
                matches(value) and _fills_ones(other)
                for value, other in ((node.left, node.right), (node.right, node.left))):
            return True  # `torch.ones(n, length, dtype=torch.long) * -1`: a tensor of the value
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)) and isinstance(node.elt, cst.IfExp) \
                and (matches(node.elt.body) or matches(node.elt.orelse)):
            return True  # `[t if t != pad_id else -100 for t in row]`: the value in place of some items
        stack.extend(children(node))
    return False


def _fills_ones(node: cst.BaseExpression) -> bool:
    """`torch.ones(...)`, `x.new_ones(...)`, `torch.ones_like(x)`: a tensor of ones."""
    return isinstance(node, cst.Call) and call_receiver(node)[1] in cat.ONES_FILLS


def _pads_with_zero(call: cst.Call) -> bool:
    """`pad_sequence(rows, batch_first=True)`: padding with its default value, 0."""
    return last_part(dotted(call.func) or "") in cat.ZERO_PADDING_FUNCTIONS and len(call.args) < 3 \
        and all(a.keyword is None or a.keyword.value not in cat.FILL_KEYWORDS for a in call.args)


def _zero_rows_filled_in_part(function: cst.FunctionDef) -> bool:
    """Does the function make a zero tensor (`ys = torch.zeros(len(items), longest)`) and write its rows
    up to a length (`ys[row, :len(y)] = y`), leaving 0 after each shorter row?"""
    zeroed = {code(t.target) for statement in walk(function) if isinstance(statement, cst.Assign)
              and isinstance(statement.value, cst.Call)
              and last_part(dotted(statement.value.func) or "") in cat.ZERO_ALLOCATORS for t in statement.targets}
    return bool(zeroed) and any(
        isinstance(target, cst.Subscript) and code(target.value) in zeroed
        and any(isinstance(element.slice, cst.Slice) and element.slice.upper is not None for element in target.slice)
        for statement in walk(function) if isinstance(statement, cst.Assign)
        for target in (t.target for t in statement.targets))


def _fills(call: cst.Call, arg: cst.Arg) -> bool:
    """Is `arg` the value a call fills tensor items with (`padding_value=`, `value=`, `fill_value=`,
    the value of `masked_fill`/`fill_`/`full`/`full_like`/`where`)?"""
    if arg.keyword is not None:
        return arg.keyword.value in cat.FILL_KEYWORDS
    return call_receiver(call)[1] in cat.FILL_METHODS


def _is_literal(node: cst.BaseExpression, value: str) -> bool:
    return _is_number(node) and code(node).replace(" ", "") == value


def _weight_like(node: cst.BaseExpression, scope: Scope, depth: int) -> bool:
    """A plain weight: numbers and names of settings (`self.alpha`, `cfg.w`, a parameter given one),
    and arithmetic of those (`1 - alpha`, `self.temperature ** 2`); no call, nothing computed."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _weight_like(node.expression, scope, depth)
    if isinstance(node, cst.BinaryOperation):
        return _weight_like(node.left, scope, depth) and _weight_like(node.right, scope, depth)
    name = dotted(node)
    if name is None or depth > 3:
        return False
    defs = scope.defs_of(name) or scope.defs_of(_root_name(name))  # `outputs.loss`: what `outputs` is
    return all(d.op is DefOp.ASSIGN and d.value is not None and _weight_like(d.value, d.scope or scope, depth + 1)
               for d in defs)


def _is_ignored_label(value: cst.BaseExpression | None) -> bool:
    """The literal -100, the ignore_index of torch's and Hugging Face's cross-entropy."""
    return isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus) and \
        isinstance(value.expression, cst.Integer) and value.expression.value == str(-cat.IGNORED_LABEL)


def _made_with_ignored_label(labels: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    """Are the targets made here with -100 written into them: rows padded with it (`label + [-100] *
    (n - len(label))`, `pad_sequence(..., padding_value=-100)`), items set to it (`y.masked_fill(m, -100)`,
    `torch.where(keep, y, -100)`, `y[pad] = -100`), followed back through the names the targets are
    reshaped, sliced or copied from in this function? Then the criterion's default ignore_index skips
    a number of them that varies from batch to batch."""
    if depth > 4:
        return False
    if any(_is_ignored_label(node) for node in walk(labels)):
        return True
    for name in {dotted(node) for node in walk(labels) if isinstance(node, (cst.Name, cst.Attribute))} - {None}:
        for d in scope.defs_of(name, before):
            if d.value is not None and d.op in (DefOp.ASSIGN, DefOp.ITEM) \
                    and _made_with_ignored_label(d.value, d.scope or scope, d.order, depth + 1):
                return True
    return False


def _next_tokens(labels: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    """Are the labels the next tokens of the stream the inputs are cut from: a slice of a tensor that
    another slice of which is bound here too (`x = data[:, :-1]`, `y = data[:, 1:]`), cast or reshaped
    at most, never written into, followed through parameters to the caller? Token ids index an
    embedding, so none is the ignored label: the criterion's mean is over a fixed number of items."""
    if depth > 6:
        return False
    labels = _values_kept(labels)
    if isinstance(labels, cst.Subscript):
        stream = dotted(labels.value)
        return stream is not None and _is_slice(labels) and any(
            isinstance(other, cst.Subscript) and _is_slice(other) and dotted(other.value) == stream
            and _cut(other) != _cut(labels)
            for defs in scope.defs.values() for other in (_values_kept(d.bound) for d in defs if d.bound is not None))
    name = dotted(labels)
    defs = scope.defs_of(name, before) if name else []
    return bool(defs) and all(d.op.rebinds and d.bound is not None and _next_tokens(
        d.bound, d.scope or scope, END_OF_SCOPE if d.scope is not None else d.order, depth + 1) for d in defs)


def _masked_items(node: cst.BaseExpression, scope: Scope, before: int,
                  constructions: Constructions | None = None) -> cst.BaseExpression | None:
    """The mask of `losses[mask]` or `losses.masked_select(mask)` (or of what a name is bound to)
    where `losses` holds per-item losses (a criterion's `reduction="none"` output, or element-wise
    arithmetic such as `(pred - target).pow(2).mean(-1)`) and the mask is a tensor, not a slice or a
    literal: the items it selects, as many as this micro-batch's data keeps; else None."""
    node, before = _bound_value(node, scope, before)
    mask = _selecting_mask(node)
    if mask is None and isinstance(node, cst.Call) and _per_item(node, scope, before, constructions):
        # `crit(logits[keep], labels[keep])` with `reduction="none"`: one loss per item the mask keeps
        given = positional(node, 0) or keyword(node, "input")
        return _selecting_mask(_bound_value(given, scope, before)[0]) if given is not None else None
    if mask is None:
        return None
    selected = node.value if isinstance(node, cst.Subscript) else call_receiver(node)[0] or positional(node, 0)
    values = _branch_values(selected, scope, before) or [_bound_value(selected, scope, before)]
    return mask if all(_per_item(produced, scope, at, constructions) for produced, at in values) else None


def _branch_values(node: cst.BaseExpression, scope: Scope, before: int) -> list[tuple[cst.BaseExpression, int]]:
    """For a name bound on each side of an `if`/`else` and nowhere else before `before` (`if custom:
    per_tok = crit(...)` `else: per_tok = F.cross_entropy(..., reduction="none")`), the value of each
    binding with the point it is read at; else empty."""
    name = node.value if isinstance(node, cst.Name) else None
    defs = scope.defs_of(name, before) if name else []
    if len(defs) < 2 or any(d.op is not DefOp.ASSIGN or d.value is None or not d.ctx.guards for d in defs):
        return []
    owners = {id(g.owner) for g in defs[0].ctx.guards[-1:]}
    sides = {g.positive for d in defs for g in d.ctx.guards[-1:] if id(g.owner) in owners}
    if len(defs) != 2 or sides != {True, False} or {id(g.owner) for g in defs[1].ctx.guards[-1:]} != owners:
        return []
    return [(d.value, d.order) for d in defs]


def _per_item(produced: cst.BaseExpression, scope: Scope, before: int,
              constructions: Constructions | None = None) -> bool:
    """A value per item: a criterion's `reduction="none"` output (or one made so, here or, through
    `constructions`, where its callers made what they hand it), or element-wise arithmetic such as
    `(pred - target).pow(2).mean(-1)`."""
    while isinstance(produced, cst.Call) and call_receiver(produced)[0] is not None and (
            cat.LOSS_OPERATIONS.get(call_receiver(produced)[1] or "") is LossOp.KEEPS
            or call_receiver(produced)[1] in cat.ELEMENTWISE_METHODS):
        produced = call_receiver(produced)[0]  # `F.mse_loss(..., reduction="none").mean(-1)`: per frame still
    if isinstance(produced, cst.BinaryOperation):
        return True  # `(pred - target) ** 2`: a value per element
    if not isinstance(produced, cst.Call):
        return False
    reduction = keyword(produced, cat.REDUCTION_KEYWORD)
    if reduction is None and isinstance(produced.func, (cst.Name, cst.Call)):
        # `ce = CrossEntropyLoss(reduction="none")` ... `ce(logits, targets)`: set where it was made
        made = produced.func if isinstance(produced.func, cst.Call) else _made_as(produced.func, scope, before)
        if not isinstance(made, cst.Call) and constructions is not None:  # a criterion a caller handed over
            handed = [c for c, _, _ in constructions(dotted(produced.func), scope)]
            return bool(handed) and all(_reduces_nothing(keyword(c, cat.REDUCTION_KEYWORD)) for c in handed)
        reduction = keyword(made, cat.REDUCTION_KEYWORD) if isinstance(made, cst.Call) else None
    return _reduces_nothing(reduction)


def _reduces_nothing(reduction: cst.BaseExpression | None) -> bool:
    return isinstance(reduction, cst.SimpleString) and reduction.evaluated_value == "none"


def _selecting_mask(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """The mask of `x.masked_select(mask)`, `torch.masked_select(x, mask)`, `x[mask]` or
    `x.index_select(dim, rows)` (a tensor index, not a slice or a number): a selection of as many items
    as the mask sets."""
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if method == cat.MASKED_SELECT:
            mask = positional(node, len(node.args) - 1)  # the last argument, as a method and as a function
            return mask if mask is not None and _names_tensor(_values_kept(mask, cat.MASK_KEEPING_METHODS)) else None
        if method == cat.INDEX_SELECT and receiver is not None:  # `x.index_select(0, rows)`: as `x[rows]`
            index = positional(node, 1) or keyword(node, "index")
            return index if index is not None and _names_tensor(_values_kept(index, cat.MASK_KEEPING_METHODS)) else None
        return None
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and not _is_slice(node):
        index = node.slice[0].slice
        if isinstance(index, cst.Index) and _names_tensor(_values_kept(index.value, cat.MASK_KEEPING_METHODS)):
            return index.value
    return None


def _names_tensor(node: cst.BaseExpression) -> bool:
    """A name (`mask`, `self.mask`) or a batch's entry by key (`batch["loss_mask"]`): what a mask is
    read from, also shifted by slices (`loss_mask[:, 1:]`); not a number, a slice or an expression."""
    if isinstance(node, cst.Subscript) and all(isinstance(element.slice, cst.Slice) for element in node.slice):
        return _names_tensor(node.value)
    if isinstance(node, cst.Subscript) and len(node.slice) == 1:
        key = node.slice[0].slice
        return isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString) and dotted(node.value) is not None
    return dotted(node) is not None


def _string_value(node: cst.BaseExpression, scope: Scope, before: int, depth: int = 0) -> str | None:
    """The string a name holds where it is read: its one binding to a literal, or what a parameter holds
    (predicates.parameter_value: the argument of the call it is walked for, or its default)."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    if not isinstance(node, cst.Name) or depth > 4:
        return None
    defs = scope.defs_of(node.value, before)
    if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and defs[0].value is not None and defs[0].scope is None:
        return _string_value(defs[0].value, scope, defs[0].order, depth + 1)
    passed = parameter_value(node.value, scope)
    return _string_value(passed[0], passed[1], END_OF_SCOPE, depth + 1) if passed is not None else None


def _reciprocal_of(factor: cst.BaseExpression, scope: Scope, before: int) -> cst.BaseExpression | None:
    """`n` of a factor that is one over it: `1 / n`, or a name bound to that (`scale = 1.0 / n`)."""
    value, _ = _bound_value(factor, scope, before)
    if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide) and is_one(value.left):
        return value.right
    return None


def _bound_value(node: cst.BaseExpression, scope: Scope, before: int) -> tuple[cst.BaseExpression, int]:
    """What a plain name was last bound to, unconditionally or by its only binding (a read of it holds
    that value wherever the name is bound at all: `denom = keep.sum()` after an early return; not so
    for a parameter, which `if n is None: n = ...` binds only when no caller gives it), before
    `before`, and the point that value is read at (else the node itself and `before`)."""
    name = dotted(node) if isinstance(node, cst.Name) else None
    defs = scope.defs_of(name, before) if name else []
    if defs and defs[-1].op is DefOp.ASSIGN and defs[-1].value is not None and (
            not defs[-1].ctx.guards or len(defs) == 1 and name not in _parameters(scope)):
        return defs[-1].value, defs[-1].order
    return node, before


def _added_up(node: cst.BaseExpression, scope: Scope, before: int) -> list[tuple[cst.BaseExpression, int]]:
    """The terms a name is summed from when it starts at a number and only grows by `+=` before
    `before` (`count = 0`, then `count += keep.sum()` per chunk or time step), each with the point
    it is read at; empty for any other history."""
    name = dotted(node) if isinstance(node, cst.Name) else None
    defs = scope.defs_of(name, before) if name else []
    starts = [i for i, d in enumerate(defs) if d.op.rebinds]
    if not starts or defs[starts[-1]].ctx.guards or not _is_number(defs[starts[-1]].bound or cst.Name("_")):
        return []
    added = defs[starts[-1] + 1:]
    if not added or any(d.op is not DefOp.ADD or d.value is None for d in added):
        return []
    return [(d.value, d.order) for d in added]


def _made_as(func: cst.BaseExpression, scope: Scope, before: int) -> cst.BaseExpression:
    """What a called name was made as: its binding here, or for a closure's free name (`ce_loss` made
    in the function that defines `compute_loss`) its one binding in the enclosing function, which the
    walk reached as a caller of the closure. Read for its shape only (a constructor's keywords)."""
    made, _ = _bound_value(func, scope, before)
    name = dotted(func) if isinstance(func, cst.Name) else None
    if made is not func or name is None or scope.defs_of(name, before):
        return made
    outer = scope.frame.caller.holding(scope.node) if scope.frame is not None else None
    # its bindings there, but a `None` placeholder (`crit = None`, then made in a `match` case)
    defs = [d for d in (outer.defs_of(name) if outer is not None else []) if not _is_none(d.value)]
    return defs[0].value if len(defs) == 1 and defs[0].op is DefOp.ASSIGN and defs[0].value is not None else func


def _is_none(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "None"


def _values_kept(node: cst.BaseExpression, keeping: frozenset[str] = cat.LABEL_KEEPING_METHODS) -> cst.BaseExpression:
    """`y` of `y.view(-1).long().to(device)`."""
    while isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if receiver is None or method not in keeping:
            break
        node = receiver
    return node


def _is_slice(node: cst.Subscript) -> bool:
    return any(isinstance(element.slice, cst.Slice) for element in node.slice)


def _calls_made(value: cst.BaseExpression | None) -> list[cst.Call]:
    """The call a binding makes, or each branch's of a conditional one (`mask_tokens(batch) if args.mlm
    else (batch, batch)`: the branch a configuration takes)."""
    if isinstance(value, cst.IfExp):
        return [branch for branch in (value.body, value.orelse) if isinstance(branch, cst.Call)]
    return [value] if isinstance(value, cst.Call) else []


def _cut(node: cst.Subscript) -> tuple[str, ...]:
    return tuple(code(element.slice) for element in node.slice)


def _is_count_of_items(node: cst.BaseExpression, scope: Scope) -> bool:
    """`mask.sum()`, `(labels != -100).sum().clamp(min=1)`, `mask.sum() + eps`: a count of valid items.
    Not a count per row (`mask.sum(dim=1)`): dividing by it makes one mean per example, and a mean
    of those is over the micro-batch's rows, a count the same in every micro-batch."""
    node = _count_kept(node)
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        return method in cat.ITEM_COUNTS and receiver is not None and not _per_row(node, scope)
    return False


def _per_row(count: cst.Call, scope: Scope) -> bool:
    """`mask.sum(1)`, `mask.sum(dim=-1)`, `torch.sum(mask, dim=(1, 2))`: a reduction along dimensions
    given as integers, none of them the first (the batch's rows); also through a parameter the call
    binds to them (`masked_mean(x, mask, dim=-1)` reducing along `dim`)."""
    receiver, _ = call_receiver(count)
    module_function = isinstance(receiver, cst.Name) and positional(count, 0) is not None \
        and not _is_number(positional(count, 0))  # `torch.sum(mask, 1)`: the operand comes first
    dims = keyword(count, cat.DIM_KEYWORD) or positional(count, 1 if module_function else 0)
    bound = parameter_value(dims.value, scope) if isinstance(dims, cst.Name) else None
    if bound is not None:
        dims = bound[0]
    if isinstance(dims, (cst.Tuple, cst.List)):
        values = [element.value for element in dims.elements]
    else:
        values = [dims] if dims is not None else []
    return bool(values) and all(_is_number(v) and code(v).replace(" ", "") not in ("0", "-0") for v in values)


def _permutation(index: cst.BaseExpression, scope: Scope, before: int) -> bool:
    """`ids_restore` after `ids_restore = torch.argsort(ids_shuffle, dim=1)` (moved or repeated along a
    new dimension, `ids.unsqueeze(-1).repeat(1, 1, d)`): a random order of positions."""
    index, _ = _bound_value(_values_kept(index, cat.MASK_KEEPING_METHODS), scope, before)
    return isinstance(index, cst.Call) and call_receiver(index)[1] in cat.PERMUTATIONS


def _distinct_positions(index: cst.BaseExpression, scope: Scope, before: int) -> bool:
    """The first k of a random order (`ids_shuffle[:, :keep]`, `np.random.permutation(n)[:count]`,
    `torch.rand(b, l).argsort(dim=1)[:, :count]`): k distinct positions per row, k fixed."""
    index, at = _bound_value(_values_kept(index, cat.MASK_KEEPING_METHODS), scope, before)
    return isinstance(index, cst.Subscript) and _is_slice(index) and _set_by_shape(index, scope, at) \
        and _permutation(index.value, scope, at)


def _set_by_shape(cut: cst.Subscript, scope: Scope, before: int) -> bool:
    """Are the bounds of a cut (`[:, :keep]`) set by numbers, shapes and settings, not by the data's
    values: `keep = int(L * (1 - ratio))` after `N, L, D = x.shape` keeps as many positions in every
    micro-batch of one shape, `[:, :batch["prompt_len"]]` a number each batch chooses."""
    return all(_slice_set_by_shape(element.slice, scope, before) if isinstance(element.slice, cst.Slice)
               else _shaped(element.slice.value, scope, before, 0) for element in cut.slice)


def _slice_set_by_shape(cut: cst.Slice, scope: Scope, before: int) -> bool:
    """_set_by_shape of one `lower:upper:step`."""
    return all(bound is None or _shaped(bound, scope, before, 0) for bound in (cut.lower, cut.upper, cut.step))


def _shaped(node: cst.BaseExpression, scope: Scope, before: int, depth: int) -> bool:
    """_set_by_shape of one expression: numbers, names and attributes the data does not write
    (parameters, settings), a tensor's shape or size, and arithmetic of those. `depth` counts the
    bindings followed, a parameter through each call that passes it on included."""
    if depth > 8:
        return False
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _shaped(node.expression, scope, before, depth)
    if isinstance(node, cst.BinaryOperation):
        return _shaped(node.left, scope, before, depth) and _shaped(node.right, scope, before, depth)
    if isinstance(node, cst.Subscript):
        return isinstance(node.value, cst.Attribute) and node.value.attr.value == cat.SHAPE_ATTRIBUTE
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if method in cat.SIZE_METHODS or method in cat.SIZE_FUNCTIONS:
            return True
        module_function = receiver is None or isinstance(receiver, cst.Name) and not scope.defs_of(receiver.value)
        return module_function and method in cat.COUNT_KEEPING_FUNCTIONS | cat.ROUNDING_FUNCTIONS \
            and all(_shaped(a.value, scope, before, depth + 1) for a in node.args)
    name = dotted(node)
    if name is None:
        return False
    defs = scope.defs_of(name, before)
    return all(d.bound is not None and not d.ctx.guards and (
        d.op is DefOp.UNPACK and _is_size(d.value, scope, d.order) or isinstance(d.value, cst.Attribute)
        and d.value.attr.value == cat.SHAPE_ATTRIBUTE
        or d.op in (DefOp.ASSIGN, DefOp.UNPACK) and _shaped(d.bound, d.scope or scope, d.order, depth + 1))
        for d in defs)


def _fixed_positions(write: Def, scope: Scope) -> bool:
    """An item assignment that sets a constant at positions the data does not choose: a slice of
    every row (`mask[:, :keep] = 0`) or the first k of a random order (`mask[perm[:k]] = 1`)."""
    statement = write.node
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1 or write.value is None \
            or not (_is_number(write.value) or dotted(write.value) in ("True", "False")):
        return False
    target = statement.targets[0].target
    if not isinstance(target, cst.Subscript):
        return False
    for element in target.slice:
        position = element.slice
        if isinstance(position, cst.Slice):
            if _slice_set_by_shape(position, scope, write.order):
                continue
        elif isinstance(position, cst.Index) and (_is_number(position.value) or dotted(position.value) == "Ellipsis"
                                                  or _distinct_positions(position.value, scope, write.order)):
            continue
        return False
    return True


def _compared_with_sentinel(node: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """`labels` of `labels != ignore_index` (or `labels.ne(ignore_index)`), parenthesised or not."""
    if isinstance(node, cst.Comparison) and len(node.comparisons) == 1 \
            and isinstance(node.comparisons[0].operator, cst.NotEqual):
        return node.left
    if isinstance(node, cst.Call):
        receiver, method = call_receiver(node)
        if method == cat.NOT_EQUAL_METHOD and receiver is not None and len(node.args) == 1:
            return receiver
    return None


# -- what a scaling normalises ---------------------------------------------------------------------
# `loop` below is the micro-batch loop; None when the scope itself runs once per micro-batch (a hook a
# framework's loop calls, like transformers' `compute_loss`): its parameters are the micro-batch.

def per_micro_batch_count(factor: cst.BaseExpression, scope: Scope, loop: Loop | None, depth: int = 0) -> bool:
    """Is `factor` a count of the current micro-batch's items (`mask.sum()`, `(labels != -100).sum()`,
    `x.size(0)`, `len(batch)`, a name bound to one) or the size of one micro-batch (`micro_batch_size`)?
    Dividing by one makes a mean over that micro-batch, which normalises nothing across the window."""
    node = _count_kept(factor)
    if is_micro_batch_size_name(node):
        return True
    counted = _counted(node)
    if counted is not None:
        return varies_per_micro_batch(counted, scope, loop) or _made_per_micro_batch(counted, scope, loop)
    name = dotted(node)
    if name is None or depth > 3:
        return False
    defs = scope.defs_of(name)
    if name in _parameters(scope) and not any(d.scope is not None for d in defs):
        return False  # what the caller passes may be anything (`num_items_in_batch`, unless None)
    return bool(defs) and all(
        d.op is DefOp.ASSIGN and d.value is not None and per_micro_batch_count(d.value, d.scope or scope, loop, depth + 1)
        and (d.scope is not None or _fresh(d, loop) or _read_for_returns(scope)) for d in defs)


def _made_per_micro_batch(expr: cst.BaseExpression, scope: Scope, loop: Loop | None) -> bool:
    """Is every binding of the value `expr` reads made anew for each micro-batch (`x, y, mask =
    data.next_batch()` in the loop)? A count of such a value is this micro-batch's count, whatever
    the value is: it cannot be N or a count over the window."""
    names = [_root_name(name) for name in full_names(expr)]
    defs = [d for name in names for d in scope.defs_of(name)]
    return bool(names) and bool(defs) and all(d.value is not None and d.scope is None and _fresh(d, loop) for d in defs)


def scaled_by_own_micro_batch(scaling: Scaling, loop: Loop | None) -> bool:
    """Is the loss scaled by a count or the size of its own micro-batch: a factor that is one
    (per_micro_batch_count), a ratio of such sizes (`micro_bs / input_ids.shape[0]`, which rescales a
    short batch), or another value of the same forward output (_divided_by_own_count)?"""
    return _of_own_sizes(scaling.factor, scaling.scope, loop) or _divided_by_own_count(scaling, loop)


def share_of_window(factor: cst.BaseExpression, scope: Scope, loop: Loop | None) -> bool:
    """`(end - start) / n`: a value of the micro-batch over a value the whole window shares (the n
    items the micro-batches are cut from). Each micro-batch's mean weighted by its share of the items
    sums to the window's mean."""
    return isinstance(factor, cst.BinaryOperation) and isinstance(factor.operator, cst.Divide) \
        and not _is_number(factor.right) and varies_per_micro_batch(factor.left, scope, loop) \
        and not varies_per_micro_batch(factor.right, scope, loop)


def row_width(factor: cst.BaseExpression) -> bool:
    """`targets.size(1)`, `x.shape[-1]`: a size along a dimension given as a number other than the first
    (the rows of the batch). A mean times it is a sum along each row, and still a mean over the rows."""
    if isinstance(factor, cst.Subscript) and isinstance(factor.value, cst.Attribute) \
            and factor.value.attr.value == cat.SHAPE_ATTRIBUTE and len(factor.slice) == 1 \
            and isinstance(factor.slice[0].slice, cst.Index):
        dim = factor.slice[0].slice.value
    elif isinstance(factor, cst.Call) and call_receiver(factor)[1] == "size" and call_receiver(factor)[0] is not None \
            and len(factor.args) == 1:
        dim = factor.args[0].value
    else:
        return False
    return _is_number(dim) and code(dim).replace(" ", "") not in ("0", "-0")


def _of_own_sizes(factor: cst.BaseExpression, scope: Scope, loop: Loop | None) -> bool:
    """A count or size of the micro-batch, or a product or ratio of those and numbers."""
    if isinstance(factor, cst.BinaryOperation) and isinstance(factor.operator, (cst.Multiply, cst.Divide)):
        operands = (factor.left, factor.right)
        return all(_is_number(side) or _of_own_sizes(side, scope, loop) for side in operands) \
            and not all(_is_number(side) for side in operands)
    return per_micro_batch_count(factor, scope, loop)


def _divided_by_own_count(scaling: Scaling, loop: Loop | None) -> bool:
    """`out["loss"] / out["effective_ntoken"]`: a loss divided by another value of the same output of
    this micro-batch's forward (made anew for each micro-batch), a count the forward took from that
    micro-batch: dividing by it makes a per-micro-batch mean, whatever the count is called."""
    node = scaling.node
    if not scaling.divides or not isinstance(node, cst.BinaryOperation) or node.right is not scaling.factor:
        return False
    dividend, divisor = node.left, _count_kept(node.right)
    if not all(isinstance(side, (cst.Subscript, cst.Attribute)) for side in (dividend, divisor)):
        return False
    output = _container(dividend)
    return isinstance(output, cst.Name) and code(_container(divisor)) == output.value \
        and varies_per_micro_batch(output, scaling.scope, loop)


def varies_per_micro_batch(expr: cst.BaseExpression, scope: Scope, loop: Loop | None, depth: int = 0) -> bool:
    """Does `expr` read the current micro-batch's data: a target of `loop` (or of a loop inside it),
    a batch fetched in it (`next(it)`), or what is computed from those, there or in a function
    called for each micro-batch (its parameters followed to the arguments)? A value merely bound
    in the loop from constants (`scale = 1 / accum`) does not."""
    if depth > 5:
        return False
    for name in full_names(expr):
        root = _root_name(name)
        defs = scope.defs_of(root)
        if not defs and loop is None and root in _data_parameters(scope):
            return True
        for d in defs:
            if _fresh(d, loop):
                if d.op is DefOp.LOOP_TARGET or _fetches_a_batch(d.value) or (
                        d.value is not None and varies_per_micro_batch(d.value, d.scope or scope, loop, depth + 1)):
                    return True
            elif d.value is None:
                continue
            elif d.scope is not None:  # a parameter: what the caller passes
                if varies_per_micro_batch(d.value, d.scope, loop, depth + 1):
                    return True
            elif _read_for_returns(scope) and varies_per_micro_batch(d.value, scope, loop, depth + 1):
                return True
    return False


def _fresh(d: Def, loop: Loop | None) -> bool:
    """Is the definition made anew for each micro-batch: inside the loop (or, with no loop, anywhere
    in a scope that runs once per micro-batch)?"""
    return loop in d.ctx.loops if loop is not None else True


def _parameters(scope: Scope) -> set[str]:
    node = scope.node
    if not isinstance(node, cst.FunctionDef):
        return set()
    return parameter_names(node)


def _data_parameters(scope: Scope) -> set[str]:
    """The parameters of a function that runs once per micro-batch, but the object it is a method of."""
    return _parameters(scope) - {"self", "cls"}


def _fetches_a_batch(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Call) and call_receiver(value) == (None, cat.NEXT_BATCH_FUNCTION)


def _root_name(name: str) -> str:
    """The name whose bindings say where a value comes from: `batch` of `batch.x`, `self.mask` of `self.mask.t`."""
    return ".".join(name.split(".")[:2 if name.startswith("self.") else 1])


def _read_for_returns(scope: Scope) -> bool:
    return scope.frame is not None and scope.frame.for_returns


def _count_kept(node: cst.BaseExpression) -> cst.BaseExpression:
    """The count inside `n.clamp(min=1)`, `n.float()`, `int(n)`, `max(n, 1)`, `n + eps`, `n * 80` (the
    valid frames times a fixed number of features each: still a count that varies with the frames)."""
    for _ in range(6):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)) \
                and _is_number(node.right):
            node = node.left
            continue
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) \
                and (_is_number(node.right) or _is_number(node.left)):
            node = node.left if _is_number(node.right) else node.right
            continue
        if isinstance(node, cst.Call):
            receiver, method = call_receiver(node)
            if receiver is not None and method in cat.COUNT_KEEPING_METHODS:
                node = receiver
                continue
            if receiver is None and method in cat.COUNT_KEEPING_FUNCTIONS:
                counts = [a.value for a in node.args if a.keyword is None and not _is_number(a.value)]
                if len(counts) == 1:
                    node = counts[0]
                    continue
        break
    return node


def _along_other_dimension(count: cst.BaseExpression) -> bool:
    """`x.size(1)`, `x.shape[-1]`: a size along a dimension other than the first (the selected items')."""
    if isinstance(count, cst.Subscript) and len(count.slice) == 1 and isinstance(count.slice[0].slice, cst.Index):
        index = count.slice[0].slice.value
    elif isinstance(count, cst.Call) and call_receiver(count)[1] in cat.SIZE_METHODS:
        index = positional(count, 0) or keyword(count, cat.DIM_KEYWORD)
    else:
        return False
    return index is not None and code(index).replace(" ", "") not in ("0", "-0")


def _is_boolean_mask(node: cst.BaseExpression, scope: Scope, before: int) -> bool:
    """A comparison (`positions < lengths`, `labels != pad`), or `&`/`|`/`~` of them, written here or
    bound to a name: a mask of True and False, not an index."""
    node = _bound_value(node, scope, before)[0]
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert):
        return _is_boolean_mask(node.expression, scope, before)
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.BitAnd, cst.BitOr)):
        return _is_boolean_mask(node.left, scope, before) or _is_boolean_mask(node.right, scope, before)
    return isinstance(node, cst.Comparison)


def _loss_entry(node: cst.BaseExpression) -> bool:
    """`x["loss"]`."""
    if not (isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index)):
        return False
    key = node.slice[0].slice.value
    return isinstance(key, cst.SimpleString) and key.evaluated_value == "loss"


def _first_item(node: cst.BaseExpression) -> bool:
    """`x[0]`."""
    return isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
        and isinstance(node.slice[0].slice.value, cst.Integer) and node.slice[0].slice.value.value == "0"


def _is_size(node: cst.BaseExpression, scope: Scope, before: int) -> bool:
    """`x.size(1)`, `x.shape[1]`, `len(x)`, or a name every reaching binding of which is one: how
    many rows or classes a tensor has."""
    if isinstance(node, cst.Name):
        defs = scope.defs_of(node.value, before)
        return bool(defs) and all(d.op is DefOp.ASSIGN and d.value is not None and not isinstance(d.value, cst.Name)
                                  and _is_size(d.value, scope, d.order) for d in defs)
    return measures_a_tensor(node) or isinstance(node, cst.Call) and call_receiver(node)[0] is None \
        and call_receiver(node)[1] in cat.SIZE_FUNCTIONS


def _counted(node: cst.BaseExpression, imports: ImportMap | None = None) -> cst.BaseExpression | None:
    """What a count counts: `mask` in `mask.sum()`, `torch.sum(mask)`, `x` in `x.size(0)`, `len(x)`, `x.shape[0]`.
    With the imports, `mask.sum(dim)` is told from `torch.sum(mask)` by whether the receiver is a module."""
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) \
            and node.value.attr.value == cat.SHAPE_ATTRIBUTE:
        return node.value.value
    if not isinstance(node, cst.Call):
        return None
    receiver, method = call_receiver(node)
    first = positional(node, 0)
    if isinstance(receiver, cst.Name) and first is not None and not _is_number(first) \
            and (imports is None or imports.qualify(node.func) is not None):
        receiver = first  # a module's function, `torch.sum(mask)`: the operand is its argument
    if receiver is None:
        return positional(node, 0) if method in cat.SIZE_FUNCTIONS else None
    if method in cat.ITEM_COUNTS or method in cat.SIZE_METHODS:
        return receiver
    return None


def _pads(code: cst.CSTNode) -> bool:
    """Does the code call something (a tokenizer) with a `padding=` that pads (catalogue.NO_PADDING)?"""
    for call in walk(code):
        padding = keyword(call, cat.TOKENIZER_PADDING_KEYWORD) if isinstance(call, cst.Call) else None
        if padding is None:
            continue
        value = padding.evaluated_value if isinstance(padding, cst.SimpleString) else dotted(padding)
        if value not in cat.NO_PADDING:
            return True
    return False
