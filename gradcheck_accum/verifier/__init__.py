"""The dynamic checker: run a model on one big batch and as accumulated micro-batches, compare
against a float64 reference, and name what is wrong.

Names load lazily so that `gradcheck_accum.verifier.command` (imported by the CLI, which must
not import torch for `accumcheck lint`) can live in this package without pulling torch in.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "verify": "gradcheck_accum.verifier.check",
    "verify_loop": "gradcheck_accum.verifier.loop",
    "verify_trainer": "gradcheck_accum.verifier.trainers",
    "verify_hf_trainer": "gradcheck_accum.verifier.trainers",
    "verify_accelerate": "gradcheck_accum.verifier.trainers",
    "verify_lightning": "gradcheck_accum.verifier.trainers",
    "Report": "gradcheck_accum.verifier.report",
    "Row": "gradcheck_accum.verifier.report",
    "ModeResult": "gradcheck_accum.verifier.report",
    "VerifyError": "gradcheck_accum.verifier.errors",
    "diagnose": "gradcheck_accum.verifier.diagnose",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gradcheck_accum.verifier' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = sorted(_EXPORTS)
