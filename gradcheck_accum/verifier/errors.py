"""The one error type the verifiers raise for input they cannot check. Torch-free, so the CLI can
catch it by name; its message is a single line meant for the user."""


class VerifyError(ValueError):
    """Bad input or a run that could not complete (loss_fn raised, no parameters, ...)."""
