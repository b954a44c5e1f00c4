"""Command line: thin click commands over the linter and the verifier. (Being built.)"""

from __future__ import annotations

import click

from gradcheck_accum import __version__


@click.group()
@click.version_option(__version__, prog_name="accumcheck")
def main() -> None:
    """accumcheck: prove gradient accumulation in PyTorch training code correct."""
