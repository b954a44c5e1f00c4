"""Command line: thin click commands over the linter and the verifier. (Being built.)"""

from __future__ import annotations

import click

from gradcheck_accum import __version__


@click.group()
@click.version_option(__version__, prog_name="accumcheck")
def main() -> None:
    """accumcheck: prove gradient accumulation in PyTorch training code correct."""


# The verifier's command imports torch only when it runs, so `accumcheck lint` stays torch-free.
from gradcheck_accum.verifier.command import verify_command  # noqa: E402

main.add_command(verify_command, "verify")
