"""accumcheck: prove gradient accumulation in PyTorch training code correct.

`accumcheck lint` (the static half) must never import torch, so the verifier's names are
loaded lazily on first access.
"""

_VERIFY_NAMES = {"verify", "verify_loop", "verify_trainer", "verify_hf_trainer", "verify_accelerate",
                 "verify_lightning", "Report"}
_GUARD_NAMES = {"guard", "Guard", "GuardError"}


def __getattr__(name: str):
    if name == "__version__":  # kept out of `import gradcheck_accum`, which settings pay for
        from gradcheck_accum.version import __version__

        return __version__
    if name in _VERIFY_NAMES:
        # The subpackage is `verifier`, not `verify`, so importing it never shadows the function.
        from gradcheck_accum import verifier

        return getattr(verifier, name)
    if name in _GUARD_NAMES:
        # Likewise `guards`, not `guard`.
        from gradcheck_accum import guards

        return getattr(guards, name)
    raise AttributeError(f"module 'gradcheck_accum' has no attribute {name!r}")


__all__ = ["__version__", "verify", "verify_loop", "verify_trainer", "verify_hf_trainer", "verify_accelerate",
           "verify_lightning", "Report", "guard", "Guard", "GuardError"]
