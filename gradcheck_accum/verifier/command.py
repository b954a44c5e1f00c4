"""`accumcheck verify TARGET`: load a function that returns `verify` keyword arguments, run the
check and print the report.

This module is imported by the CLI for every command, and `accumcheck lint` must never import
torch, so torch (and every verifier module that uses it) is imported inside the command only.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import click

EXIT_MATCH, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


class TargetError(Exception):
    """TARGET could not be loaded or did not return verify keyword arguments."""


def load_target(target: str) -> Callable[[], Any]:
    """Resolve `path/to/file.py:function` or `package.module:function` to the function."""
    module_part, sep, attr = target.rpartition(":")
    if not sep or not module_part or not attr:
        raise TargetError(f"TARGET must be path/to/file.py:function or package.module:function, got {target!r}")
    if module_part.endswith(".py") or os.sep in module_part or "/" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"no such file: {module_part}")
        name = f"_accumcheck_target_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TargetError(f"cannot import {module_part}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        # Let the file import its siblings, as `python path/to/file.py` would.
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise TargetError(f"importing {module_part} raised {type(exc).__name__}: {exc}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_part)
        except Exception as exc:
            raise TargetError(f"cannot import {module_part}: {type(exc).__name__}: {exc}") from None
    func = getattr(module, attr, None)
    if func is None:
        raise TargetError(f"{module_part} has no attribute {attr!r}")
    if not callable(func):
        raise TargetError(f"{target} is not callable")
    return func


def target_kwargs(func: Callable[[], Any], target: str) -> dict[str, Any]:
    try:
        spec = func()
    except Exception as exc:
        raise TargetError(f"{target} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(spec, dict):
        raise TargetError(f"{target} must return a dict of verify keyword arguments, got {type(spec).__name__}")
    return dict(spec)


def apply_overrides(spec: dict[str, Any], steps: int | None, modes: tuple[str, ...], device: str | None,
                    dtype: str | None) -> dict[str, Any]:
    if steps is not None:
        if spec.get("splits") is not None:
            raise TargetError("--steps conflicts with the target's explicit splits")
        spec["accumulation_steps"] = steps
    if modes:
        spec["modes"] = tuple(dict.fromkeys(modes))
    if device is not None:
        spec["device"] = device
    if dtype is not None:
        spec["dtype"] = dtype
    return spec


def select_runner(spec: dict[str, Any], loop: bool) -> Callable[..., Any]:
    """The checker a target's dict is meant for. `verify` takes model/batch/loss_fn; the loop
    verifier (a dict holding `train_fn`, or --loop), the trainer adapters (a dict holding `trainer`:
    a transformers Trainer or a LightningModule) and accelerate loops (`accelerator_kwargs`) plug in here."""
    from gradcheck_accum.verifier.check import verify

    if "trainer" in spec:
        from gradcheck_accum.verifier.trainers import verify_trainer

        return verify_trainer
    if "accelerator_kwargs" in spec:
        from gradcheck_accum.verifier.trainers.accelerate_loop import verify_accelerate

        return verify_accelerate
    if loop or "train_fn" in spec:
        try:
            from gradcheck_accum.verifier.loop import verify_loop
        except ImportError:
            raise TargetError("this target describes a training loop, but the loop verifier is not available") from None
        return verify_loop
    return verify


@click.command("verify")
@click.argument("target")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Accumulation steps N (overrides the target).")
@click.option("--mode", "modes", type=click.Choice(["eager", "compiled"]), multiple=True,
              help="Mode to check; repeat for both (default: the target's, else eager and compiled).")
@click.option("--device", default=None, help="Device, e.g. cpu or cuda (default: cuda when available).")
@click.option("--dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="Precision of the checked runs (default float32).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--loop", is_flag=True, default=False, help="The target describes a training loop (verify_loop).")
def verify_command(target: str, steps: int | None, modes: tuple[str, ...], device: str | None, dtype: str | None,
                   fmt: str, loop: bool) -> None:
    """Check that accumulated micro-batches reproduce the big-batch gradient.

    TARGET is path/to/file.py:function or package.module:function; the function returns a dict of
    `gradcheck_accum.verify` keyword arguments (model, batch, loss_fn, ...). Exit status: 0 match,
    1 mismatch (or an inherent deviation), 2 error.
    """
    with warnings.catch_warnings():
        # torch warns at import when NumPy is absent; irrelevant to the check.
        warnings.filterwarnings("ignore", message=".*NumPy.*")
        try:
            import torch  # noqa: F401
        except ImportError:
            _fail("torch is not installed: pip install torch (CPU build: add --index-url "
                  "https://download.pytorch.org/whl/cpu); from a checkout, pip install -e '.[verify]'")
    from gradcheck_accum.verifier.errors import VerifyError

    try:
        spec = apply_overrides(target_kwargs(load_target(target), target), steps, modes, device, dtype)
        runner = select_runner(spec, loop)
        try:
            inspect.signature(runner).bind(**spec)
        except TypeError as exc:
            raise TargetError(f"{target} returned arguments {runner.__name__} does not accept: {exc}") from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = runner(**spec)
    except (TargetError, VerifyError) as exc:
        _fail(str(exc))
    except Exception as exc:  # never a traceback on the command line
        _fail(f"unexpected {type(exc).__name__}: {exc}")
    if fmt == "json":
        click.echo(report.to_json())
    else:
        click.echo(report.render())
    sys.exit(EXIT_MATCH if report.ok else EXIT_MISMATCH)


def _fail(message: str) -> None:
    click.echo(f"accumcheck verify: error: {message}", err=True)
    sys.exit(EXIT_ERROR)
