"""What names are: resolved from imports, assignments, prepare/initialize results and self attributes."""

import libcst as cst
import pytest

from gradcheck_accum.lint.model import EventKind, FileModel, Role


def roles_at(source: str, kind: EventKind) -> list[frozenset[Role]]:
    """The roles of the object each event of this kind acts on."""
    model = FileModel(cst.parse_module(source))
    return [event.roles for _, event in model.events(kind)]


@pytest.mark.parametrize("source", [
    "import torch as t\nopt = t.optim.AdamW(ps)\nopt.step()\n",
    "from torch.optim import AdamW as A\nthing = A(ps)\nthing.step()\n",
    "from torch import optim\nthing = optim.SGD(ps, lr=1)\nthing.step()\n",
    "import bitsandbytes as bnb\nthing = bnb.optim.AdamW8bit(ps)\nthing.step()\n",
    "def f(optimizer):\n    optimizer.step()\n",
    "class T:\n    def __init__(self):\n        self.thing = torch.optim.Adam(ps)\n"
    "    def fit(self):\n        self.thing.step()\n",
])
def test_optimizer_bindings(source):
    assert any(Role.OPTIMIZER in k for k in roles_at(source, EventKind.STEP))


@pytest.mark.parametrize("source", [
    "obs = env.step(action)\n",
    "sampler.step()\n",
    "noise_scheduler.step(pred, t, x)\n",
    "import torch\nsched = torch.optim.lr_scheduler.StepLR(opt, 1)\nsched.step()\n",
])
def test_non_optimizer_steps_are_not_steps(source):
    assert roles_at(source, EventKind.STEP) == []


def test_scheduler_known_by_constructor_and_name():
    source = "from transformers import get_linear_schedule_with_warmup as g\ns = g(o, 1, 2)\ns.step()\nlr_scheduler.step()\n"
    assert [Role.SCHEDULER in k for k in roles_at(source, EventKind.SCHEDULER_STEP)] == [True, True]


def test_compiled_binding_is_flow_sensitive():
    source = (
        "import torch\n"
        "model.load_state_dict(sd)\n"
        "model = torch.compile(model)\n"
        "model.load_state_dict(sd)\n"
        "model = model._orig_mod\n"
        "model.load_state_dict(sd)\n"
    )
    assert [Role.COMPILED in k for k in roles_at(source, EventKind.LOAD_STATE)] == [False, True, False]


def test_compiled_binding_on_some_path_and_through_ddp_module():
    source = (
        "import torch\n"
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "if args.compile:\n"
        "    model = torch.compile(model)\n"
        "if ddp:\n"
        "    model = DDP(model)\n"
        "raw = model.module if ddp else model\n"
        "raw.state_dict()\n"
        "getattr(model, '_orig_mod', model).state_dict()\n"
    )
    flags = [Role.COMPILED in k for k in roles_at(source, EventKind.STATE_DICT)]
    assert flags == [True, False]


def test_prepare_and_initialize_results():
    source = (
        "from accelerate import Accelerator\nimport deepspeed\nimport torch\n"
        "accelerator = Accelerator(gradient_accumulation_steps=4)\n"
        "opt = torch.optim.AdamW(ps)\n"
        "m, o, s = accelerator.prepare(model, opt, sched)\n"
        "o.step()\n"
        "engine, dopt, _, _ = deepspeed.initialize(model=model)\n"
        "engine.step()\n"
    )
    steps = roles_at(source, EventKind.STEP)
    assert Role.PREPARED in steps[0] and Role.OPTIMIZER in steps[0]
    assert Role.DEEPSPEED in steps[1]


UNPACKING_LOOP = """import torch.nn.functional as F

def train(model, loader, optimizer, accum, parts):
    for i, (x, y) in enumerate(loader):
        {unpack}
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.parametrize("unpack, found", [
    ("loss, extra = F.mse_loss(model(x), y), 0", ["ACC201"]),
    ("loss, extra = F.mse_loss(model(x), y) / accum, 0", []),
    ("loss, *logs = F.mse_loss(model(x), y) / accum, 0, 1", []),  # before the star: still positional
    # values CPython compiles but that fail or move elements at run time (found by the nightly fuzz)
    ("extra, loss = (F.mse_loss(model(x), y) / accum,)", None),
    ("extra, loss = (*parts, F.mse_loss(model(x), y) / accum)", None),
    ("first, *rest, loss = F.mse_loss(model(x), y) / accum, 0, 1", None),
    ("loss, i, extra = a, b, loss = [F.mse_loss(model(x), y) / accum]", None),
])
def test_unpacking_reads_only_the_element_a_name_gets(unpack, found):
    from gradcheck_accum.lint import registry
    from gradcheck_accum.lint.engine import analyze
    from gradcheck_accum.lint.prefilter import screen

    source = UNPACKING_LOOP.format(unpack=unpack)
    rules, _ = screen(source, list(registry.rules()))
    codes = [f.code for f in analyze(source, "t.py", rules).findings]
    if found is not None:
        assert codes == found



_WRAPPED_ON_ONE_BRANCH = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def train(model, loader, env, rank):
    if {wrap_test}:
        model = DDP(model, device_ids=[rank])
    for step, batch in enumerate(loader):
        {rebind}
        if {call_test}:
            model(batch).backward()
"""

_WRAPPED_IN_THE_LOOP = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def train(model, loader, rank):
    for step, batch in enumerate(loader):
        if step == 0:
            model = DDP(model, device_ids=[rank])
        else:
            model(batch).backward()
"""


@pytest.mark.parametrize(("source", "ddp"), [
    # the other side of the same configuration test, or the same name equal to another literal: never DDP there
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="not env == 'ddp'", rebind="pass"), False),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="env == 'cpu'", rebind="pass"), False),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="use_ddp", call_test="not use_ddp", rebind="pass"), False),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="'ddp' in env", call_test="env == 'cpu'", rebind="pass"), False),
    # the same side, or a test of something else: it may be DDP there
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="env == 'ddp'", rebind="pass"), True),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="env != 'cpu'", rebind="pass"), True),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="rank == 0", rebind="pass"), True),
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="'ddp' in env", call_test="env == 'torch_ddp'", rebind="pass"), True),
    # what the test reads changes after the wrap, or on the loop's next pass: the wrap stays when it flips
    (_WRAPPED_ON_ONE_BRANCH.format(wrap_test="env == 'ddp'", call_test="env == 'cpu'", rebind="env = next_env(step)"),
     True),
    (_WRAPPED_IN_THE_LOOP, True),
])
def test_roles_bound_under_a_test_are_not_held_on_its_other_side(source, ddp):
    model = FileModel(cst.parse_module(source))
    (forward,) = [event for _, event in model.events(EventKind.MODEL_CALL) if event.target == "model"]
    assert (Role.DDP in forward.roles) is ddp
