"""The project model's resolution: roots, modules, calls through imports, classes and attributes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gradcheck_accum.lint.project import (ClassRef, FunctionRef, Project, SummaryStore, find_root, project_for,
                                          python_files)
from gradcheck_accum.lint.project.summary import ModuleSummary, summarize

EFFECTS = frozenset({"backward", "step", "zero_grad", "clip_grad_norm_", "grad"})


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def project(root: Path, cache: Path | None = None) -> Project:
    return Project(root, SummaryStore(root, EFFECTS, directory=cache))


TRAINERS = {
    "pyproject.toml": "",
    "pkg/__init__.py": "from .losses import masked_mean\n",
    "pkg/losses.py": """
        def masked_mean(x, mask):
            return (x * mask).sum() / mask.sum()
    """,
    "pkg/trainers/__init__.py": "",
    "pkg/trainers/base.py": """
        import torch
        from ..losses import masked_mean

        class Scaler:
            def __call__(self, loss, optimizer, update):
                loss.backward()
                if update:
                    optimizer.step()

        class BaseTrainer:
            def __init__(self, model, n):
                self.model, self.n = model, n
                self.optimizer = torch.optim.AdamW(model.parameters())
                self.scaler = Scaler()

            def fit(self, loader):
                for i, batch in enumerate(loader):
                    self.train_step(batch, i)

            def train_step(self, batch, i):
                raise NotImplementedError
    """,
    "pkg/trainers/sft.py": """
        from pkg import masked_mean
        from .base import BaseTrainer

        class SFTTrainer(BaseTrainer):
            def train_step(self, batch, i):
                loss = masked_mean(self.model(batch), batch["mask"]) / self.n
                self.scaler(loss, self.optimizer, (i + 1) % self.n == 0)
                super().train_step(batch, i)
    """,
    "scripts/train.py": """
        import pkg.trainers.base as B
        from pkg.trainers.sft import SFTTrainer

        trainer = SFTTrainer(model, 4)
        trainer.fit(loader)
        B.BaseTrainer(model, 2).fit(loader)
    """,
}


def test_root_is_the_nearest_marker(tmp_path):
    write(tmp_path, {"pyproject.toml": "", "a/b/c.py": "", "sub/setup.py": "", "sub/d/e.py": ""})
    assert find_root(tmp_path / "a/b/c.py") == tmp_path
    assert find_root(tmp_path / "sub/d/e.py") == tmp_path / "sub"


def test_root_without_marker_is_the_fallback_or_above_the_top_package(tmp_path):
    write(tmp_path, {"w/pkg/__init__.py": "", "w/pkg/m.py": ""})
    assert find_root(tmp_path / "w/pkg/m.py", fallback=tmp_path) == tmp_path
    assert find_root(tmp_path / "w/pkg/m.py", fallback=tmp_path / "elsewhere") == tmp_path / "w"


def test_a_loose_script_sees_what_it_can_import_not_every_file_below_it(tmp_path, monkeypatch):
    # a script in a folder that marks no project (a home directory), linted from elsewhere
    write(tmp_path, {"home/train.py": "", "home/helpers.py": "", "home/pkg/__init__.py": "", "home/pkg/m.py": "",
                     "home/old_projects/repo/train.py": "", "home/pkg/notes/x.py": ""})
    monkeypatch.chdir(tmp_path / "home" / "pkg")
    loose = project_for(tmp_path / "home" / "train.py")
    assert [p.relative_to(tmp_path).as_posix() for p in loose.files] == [
        "home/helpers.py", "home/train.py", "home/pkg/__init__.py", "home/pkg/m.py"]
    monkeypatch.chdir(tmp_path / "home")  # linted from its own folder: the user's choice of project
    assert len(project_for(tmp_path / "home" / "pkg" / "m.py").files) == 6


def test_files_skip_environments_caches_and_what_git_ignores(tmp_path):
    write(tmp_path, {"a.py": "", ".venv/lib/x.py": "", "build/y.py": "", "pkg/z.pyi": "", "notes.txt": "",
                     ".gitignore": "fetched/\n*_pb2.py\n", "fetched/repo/train.py": "", "pkg/m_pb2.py": "",
                     "pkg/.gitignore": "gen.py\n", "pkg/gen.py": "", "gen.py": ""})
    assert [p.relative_to(tmp_path).as_posix() for p in python_files(tmp_path)] == ["a.py", "gen.py", "pkg/z.pyi"]


def test_calls_resolve_through_imports_classes_and_attributes(tmp_path):
    write(tmp_path, TRAINERS)
    proj = project(tmp_path)
    sft = tmp_path / "pkg/trainers/sft.py"
    base = tmp_path / "pkg/trainers/base.py"
    step = FunctionRef(sft, "SFTTrainer.train_step")
    # a re-export in the package's __init__
    assert proj.resolve_call(step, "masked_mean") == FunctionRef(tmp_path / "pkg/losses.py", "masked_mean")
    # an attribute bound to a project class in the base's __init__: calling it runs __call__
    assert proj.resolve_call(step, "self.scaler") == FunctionRef(base, "Scaler.__call__")
    assert proj.resolve_call(step, "super().train_step") == FunctionRef(base, "BaseTrainer.train_step")
    assert proj.resolve_call(step, "self.model") is None  # bound to a parameter: unknown
    script = FunctionRef(tmp_path / "scripts/train.py", "<module>")
    assert proj.resolve_call(script, "trainer.fit") == FunctionRef(base, "BaseTrainer.fit")
    assert proj.resolve_call(script, "B.BaseTrainer") is None  # a constructor runs nothing followed here
    assert proj.mro(ClassRef(sft, "SFTTrainer")) == [ClassRef(sft, "SFTTrainer"), ClassRef(base, "BaseTrainer")]


def test_effects_are_transitive_and_callers_include_base_class_dispatch(tmp_path):
    write(tmp_path, TRAINERS)
    proj = project(tmp_path)
    sft = tmp_path / "pkg/trainers/sft.py"
    step = FunctionRef(sft, "SFTTrainer.train_step")
    assert proj.effects(step) == {"backward", "step"}
    (site,) = proj.callers(step)
    assert site.caller == FunctionRef(tmp_path / "pkg/trainers/base.py", "BaseTrainer.fit")
    assert site.in_loop and site.receiver == ClassRef(sft, "SFTTrainer")


def test_effects_reach_through_call_cycles_in_every_order_asked(tmp_path):
    # ping -> pong -> ping, pong -> update (steps), ping -> fwd (backward): each function of the cycle may
    # do what any of them reaches, whichever is asked first (answers are kept per function)
    write(tmp_path, {"pyproject.toml": "", "m.py": """
        def ping(n):
            fwd(n)
            return pong(n - 1) if n else None

        def pong(n):
            update(n)
            return ping(n - 1) if n else None

        def fwd(n):
            n.loss.backward()

        def update(n):
            n.opt.step()

        def idle(n):
            return n
    """})
    m = tmp_path / "m.py"
    for order in (["ping", "pong"], ["pong", "ping"], ["fwd", "ping", "pong"]):
        proj = project(tmp_path)
        for name in order:
            assert proj.effects(FunctionRef(m, name)) == (
                {"backward"} if name == "fwd" else {"backward", "step"}), (order, name)
        assert proj.effects(FunctionRef(m, "idle")) == frozenset()


def test_effects_of_a_dense_call_graph_are_read_once_per_function(tmp_path):
    # 30 functions, each calling every later one: walked path by path this is 2**30 walks
    names = [f"f{i}" for i in range(30)]
    body = "".join(f"def {name}(x):\n" + "".join(f"    {later}(x)\n" for later in names[i + 1:])
                   + ("    x.backward()\n" if name == names[-1] else "    pass\n") + "\n"
                   for i, name in enumerate(names))
    write(tmp_path, {"pyproject.toml": "", "dense.py": body})
    proj = project(tmp_path)
    looked_up, summary_of = [], proj.function

    def counted(ref):
        looked_up.append(ref)
        assert len(looked_up) < 5_000, "the call graph is walked path by path"
        return summary_of(ref)

    proj.function = counted
    assert proj.effects(FunctionRef(tmp_path / "dense.py", "f0")) == {"backward"}
    assert proj.effects(FunctionRef(tmp_path / "dense.py", "f15")) == {"backward"}


def test_outside_bases_are_qualified_and_stop_method_lookup(tmp_path):
    write(tmp_path, {"m.py": """
        import lightning.pytorch as pl
        from transformers import Trainer

        class Module(pl.LightningModule):
            def training_step(self, batch, batch_idx):
                return self.helper(batch)

            def helper(self, batch):
                return batch

        class Sub(Trainer):
            def compute_loss(self, model, inputs):
                return self.log(inputs)
    """})
    proj = project(tmp_path)
    module = ClassRef(tmp_path / "m.py", "Module")
    assert proj.mro(module)[1:] == ["lightning.pytorch.LightningModule"]
    assert proj.derives_from(module, ["lightning.pytorch.LightningModule"])
    assert not proj.derives_from(module, ["transformers.Trainer"])
    assert proj.derives_from(ClassRef(tmp_path / "m.py", "Sub"), ["transformers.trainer.Trainer", "transformers.Trainer"])
    assert proj.resolve_call(FunctionRef(tmp_path / "m.py", "Module.training_step"), "self.helper") == \
        FunctionRef(tmp_path / "m.py", "Module.helper")
    # `self.log` is Trainer's (outside the project): unknown, not some project function named log
    assert proj.resolve_call(FunctionRef(tmp_path / "m.py", "Sub.compute_loss"), "self.log") is None


def test_scripts_import_their_neighbours_and_src_layouts_resolve(tmp_path):
    write(tmp_path, {
        ".git/HEAD": "",
        "src/lib/__init__.py": "",
        "src/lib/steps.py": "def update(opt):\n    opt.step()\n",
        "tools/helpers.py": "def clip(m):\n    m.clip_grad_norm_(1.0)\n",
        "tools/run.py": "import helpers\nfrom lib.steps import update\nhelpers.clip(m)\nupdate(o)\n",
    })
    proj = project(tmp_path)
    run = FunctionRef(tmp_path / "tools/run.py", "<module>")
    assert proj.resolve_call(run, "helpers.clip") == FunctionRef(tmp_path / "tools/helpers.py", "clip")
    assert proj.resolve_call(run, "update") == FunctionRef(tmp_path / "src/lib/steps.py", "update")
    assert proj.effects(run) == {"step", "clip_grad_norm_"}


def test_nested_functions_locals_and_class_methods(tmp_path):
    write(tmp_path, {"m.py": """
        class Helper:
            def __call__(self, loss):
                loss.backward()

            @staticmethod
            def make():
                return Helper()

        def outer(loader):
            helper = Helper()
            def inner(x):
                helper(x)
            for x in loader:
                inner(x)
            Helper.make()
    """})
    proj = project(tmp_path)
    outer = FunctionRef(tmp_path / "m.py", "outer")
    assert proj.resolve_call(outer, "inner") == FunctionRef(tmp_path / "m.py", "outer.inner")
    assert proj.resolve_call(outer, "Helper.make") == FunctionRef(tmp_path / "m.py", "Helper.make")
    inner = FunctionRef(tmp_path / "m.py", "outer.inner")
    assert proj.resolve_call(inner, "helper") == FunctionRef(tmp_path / "m.py", "Helper.__call__")  # a closure's name
    assert proj.effects(outer) == {"backward"}


def test_a_receiver_that_is_one_of_several_classes(tmp_path):
    write(tmp_path, {"runners.py": """
        class Runner:
            def run(self, model):
                model.backward()
            def close(self):
                pass

        class AmpRunner(Runner):
            def run(self, model):
                model.step()

        class Other:
            def run(self, model):
                pass

        def make(cfg):
            if cfg.amp:
                return AmpRunner()
            return Runner()

        def make_pair(cfg, model):
            if cfg.train:
                return model, Other()
            return model

        def make_or_unknown(cfg):
            if cfg.amp:
                return AmpRunner()
            return cfg.runner

        def script(cfg, model):
            runner = make(cfg)
            runner.run(model)
            runner.close()
            cls = Other if cfg.other else AmpRunner
            other = cls()
            other.run(model)
            same = (AmpRunner if cfg.amp else Runner)()
            same.close()
            unknown = make_or_unknown(cfg)
            unknown.run(model)
    """})
    proj = project(tmp_path)
    path = tmp_path / "runners.py"
    script = FunctionRef(path, "script")
    run = {name: FunctionRef(path, f"{name}.run") for name in ("Runner", "AmpRunner", "Other")}
    # the one method all the classes run resolves; where they differ, the call may run each
    assert proj.resolve_call(script, "runner.close") == FunctionRef(path, "Runner.close")
    assert proj.resolve_call(script, "same.close") == FunctionRef(path, "Runner.close")
    assert proj.resolve_call(script, "runner.run") is None
    assert set(proj.resolve_call_alternatives(script, "runner.run")) == {run["Runner"], run["AmpRunner"]}
    assert set(proj.resolve_call_alternatives(script, "other.run")) == {run["Other"], run["AmpRunner"]}
    assert proj.resolve_call_alternatives(script, "unknown.run") == ()  # one of them is not known
    assert proj.resolve_call_alternatives(script, "runner.close") == ()  # resolve_call knows it
    assert [site.caller for site in proj.callers(run["Runner"])] == [script]
    assert proj.resolve_class(path, "make") is None
    # a tuple and a single value: unpacking takes the tuple's elements
    assert proj.resolve_class(path, "make_pair[1]") == ClassRef(path, "Other")
    assert proj.resolve_classes(path, "make") == [ClassRef(path, "AmpRunner"), ClassRef(path, "Runner")]


def test_an_absolute_import_of_the_importing_files_own_name_is_the_other_module(tmp_path):
    # helpers/optim.py imports the root package `optim`; Python finds that one, since the helper,
    # imported as helpers.optim, is not what `optim` names on sys.path
    write(tmp_path, {
        "pyproject.toml": "",
        "optim/__init__.py": "from .wrapped import Wrapped\n",
        "optim/wrapped.py": "class Wrapped:\n    def advance(self):\n        self.inner.step()\n",
        "helpers/optim.py": "from optim import Wrapped\n\ndef build():\n    return Wrapped()\n",
        "helpers/local.py": "import optim\n",
    })
    proj = project(tmp_path)
    helper = tmp_path / "helpers" / "optim.py"
    assert proj.module_path(helper, "optim") == tmp_path / "optim" / "__init__.py"
    assert proj.resolve_class(helper, "Wrapped") == ClassRef(tmp_path / "optim" / "wrapped.py", "Wrapped")
    # a sibling importing `optim` by name finds the neighbour first, as `python helpers/local.py` would
    assert proj.module_path(tmp_path / "helpers" / "local.py", "optim") == helper


def test_cycles_in_calls_and_bases_end(tmp_path):
    write(tmp_path, {"m.py": """
        from m import B
        class A(B):
            def f(self):
                self.g()
            def g(self):
                self.f()
                x.backward()
        class B(A):
            pass
        def r():
            r()
    """})
    proj = project(tmp_path)
    assert proj.effects(FunctionRef(tmp_path / "m.py", "A.f")) == {"backward"}
    assert proj.effects(FunctionRef(tmp_path / "m.py", "r")) == frozenset()
    proj.mro(ClassRef(tmp_path / "m.py", "A"))  # ends


def test_summary_of_unparseable_text_is_empty():
    assert summarize("def f(:\n", EFFECTS).functions == {}


def test_summary_screens_calls_not_strings_or_comments():
    summary = summarize(textwrap.dedent("""
        def f(loss, opt):
            print("loss.backward()")  # opt.step()
            scaler.scale(loss).backward()
            for b in loader:
                self.run(b)
    """), EFFECTS)
    function = summary.functions["f"]
    assert function.effects == {"backward"}
    assert function.calls == {"scaler.scale": False, "self.run": True}


def test_summary_keeps_settings_a_constructor_does_not_spell_out_and_watched_names_in_code():
    summary = summarize(textwrap.dedent("""
        import pytorch_lightning as pl
        def main(args, cfg):
            # accumulate_grad_batches in a comment is no mention
            a = pl.Trainer.from_argparse_args(args, max_epochs=3)
            b = pl.Trainer(**cfg.trainer)
            c = pl.Trainer(accumulate_grad_batches=4)
            d = pl.Trainer.__name__
            return "accumulate_grad_batches"
    """), EFFECTS, frozenset({"Trainer"}), frozenset({"accumulate_grad_batches"}))
    assert summary.constructions == [("pl.Trainer.from_argparse_args", {"max_epochs": "3", "**": "?"}),
                                     ("pl.Trainer", {"**": "?"}), ("pl.Trainer", {"accumulate_grad_batches": "4"})]
    assert summary.names == {"accumulate_grad_batches"}  # the keyword of c, not the comment or the string
    unnamed = summarize('x = 1  # accumulate_grad_batches\ny = "accumulate_grad_batches"\n', EFFECTS,
                        frozenset({"Trainer"}), frozenset({"accumulate_grad_batches"}))
    assert unnamed.names == frozenset()
    named = summarize("class M:\n    def __init__(self, accumulate_grad_batches):\n        self.n = accumulate_grad_batches\n",
                      EFFECTS, frozenset({"Trainer"}), frozenset({"accumulate_grad_batches"}))
    assert named.names == {"accumulate_grad_batches"}
    assert ModuleSummary.from_json(named.to_json()).names == named.names


def test_cache_reuses_unchanged_files_and_recomputes_edited_ones(tmp_path):
    write(tmp_path, TRAINERS)
    cache = tmp_path / ".accumcheck_cache"
    first = SummaryStore(tmp_path, EFFECTS, directory=cache)
    proj = Project(tmp_path, first)
    for path in proj.files:
        proj.summary(path)
    first.save()
    assert first.computed == len(proj.files)
    second = SummaryStore(tmp_path, EFFECTS, directory=cache)
    for path in proj.files:
        second.get(path)
    assert second.computed == 0
    losses = tmp_path / "pkg/losses.py"
    losses.write_text("def masked_mean(x, mask):\n    x.backward()\n")
    third = SummaryStore(tmp_path, EFFECTS, directory=cache)
    assert third.get(losses).functions["masked_mean"].effects == {"backward"}
    assert third.computed == 1
    # another vocabulary is another cache
    assert SummaryStore(tmp_path, EFFECTS | {"no_sync"}, directory=cache).file != first.file
    assert SummaryStore(tmp_path, EFFECTS, directory=cache, words=frozenset({"x"})).file != first.file


def test_a_damaged_cache_is_ignored(tmp_path):
    write(tmp_path, TRAINERS)
    cache = tmp_path / ".accumcheck_cache"
    store = SummaryStore(tmp_path, EFFECTS, directory=cache)
    store.file.parent.mkdir(parents=True)
    store.file.write_text("{not json")
    again = SummaryStore(tmp_path, EFFECTS, directory=cache)
    assert "masked_mean" in again.get(tmp_path / "pkg/losses.py").functions


@pytest.mark.parametrize("written", ["torch.nn.Module", "nn.Module"])
def test_outside_classes_keep_their_qualified_name(tmp_path, written):
    write(tmp_path, {"m.py": f"import torch\nfrom torch import nn\nclass M({written}):\n    pass\n"})
    proj = project(tmp_path)
    assert proj.mro(ClassRef(tmp_path / "m.py", "M"))[1:] == ["torch.nn.Module"]


def test_a_file_outside_the_project_files_is_reached_only_from_itself(tmp_path):
    """A file linted from an environment (or an ignored directory) is no project file: imports resolve
    to project files alone, so no other file's call can run its functions. Its callers are looked for
    in it alone, and the project's files are not summarised for them."""
    write(tmp_path, TRAINERS)
    write(tmp_path, {".venv/lib/site-packages/opt/sgd.py": """
        class SGD:
            def step(self):
                self.loss.backward()

            def train_step(self):
                self.step()
    """})
    guest = tmp_path / ".venv/lib/site-packages/opt/sgd.py"
    proj = project(tmp_path)
    assert not proj.contains(guest) and proj.reaching(guest) == [guest]
    assert proj.reaching(tmp_path / "pkg/trainers/sft.py") == proj.files
    (site,) = proj.callers(FunctionRef(guest, "SGD.step"))
    assert site.caller == FunctionRef(guest, "SGD.train_step")
    assert proj.summaries.computed == 1  # the guest file alone: TRAINERS' base.py calls `step` too
    # a project file is still reached from every file that can call it
    base_step = FunctionRef(tmp_path / "pkg/trainers/sft.py", "SFTTrainer.train_step")
    assert [s.caller.qualname for s in proj.callers(base_step)] == ["BaseTrainer.fit"]


def test_callers_of_functions_of_one_name_are_told_apart(tmp_path):
    """Calls are gathered once per last name; which function each one runs is still resolved."""
    write(tmp_path, {
        "pyproject.toml": "",
        "a.py": "def train_step(batch):\n    batch.loss.backward()\n",
        "b.py": "def train_step(batch):\n    batch.loss.backward()\n",
        "run_a.py": "from a import train_step\nfor batch in loader:\n    train_step(batch)\n",
        "run_b.py": "import b\nfor batch in loader:\n    b.train_step(batch)\n",
    })
    proj = project(tmp_path)
    for module, runner in (("a.py", "run_a.py"), ("b.py", "run_b.py")):
        (site,) = proj.callers(FunctionRef(tmp_path / module, "train_step"))
        assert site.caller == FunctionRef(tmp_path / runner, "<module>") and site.in_loop


@pytest.mark.parametrize(("files", "old"), [
    ({"requirements.txt": "accelerate==0.15.0\ntorch\n"}, True),
    ({"requirements.txt": "accelerate[deepspeed] >=0.12, <0.16\n"}, True),
    ({"requirements-train.txt": "accelerate==0.15.*\n"}, True),
    ({"pyproject.toml": '[project]\ndependencies = ["accelerate<=0.15.2", "torch"]\n'}, True),
    ({"setup.py": 'setup(install_requires=["accelerate==0.14.0"])\n'}, True),
    # a release from 0.16 on may run: any declaration without a cap below it, or none at all
    ({"requirements.txt": "accelerate==0.16.0\n"}, False),
    ({"requirements.txt": "accelerate<=0.16\n"}, False),
    ({"requirements.txt": "accelerate>=0.14\n"}, False),
    ({"requirements.txt": "accelerate==0.15.0\n", "pyproject.toml": '[project]\ndependencies = ["accelerate"]\n'},
     False),
    ({"requirements.txt": "# accelerate==0.15.0\naccelerate\n"}, False),
    ({"requirements.txt": "accelerate-tools==0.1\n"}, False),
    ({"requirements.txt": "torch\n"}, False),
])
def test_a_dependency_capped_below_a_release(tmp_path, files, old):
    write(tmp_path, files)
    assert project(tmp_path).requires_below("accelerate", (0, 16)) is old
