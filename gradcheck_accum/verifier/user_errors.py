"""Turning an exception raised in the user's code into one line that points at their code."""

from __future__ import annotations

import os
import traceback

import torch

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LIBRARY = (os.path.dirname(torch.__file__), os.path.dirname(os.__file__), _PACKAGE)


def one_line(text: str, limit: int = 300) -> str:
    """Error messages from torch can span paragraphs; a report gets one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def user_frame(exc: BaseException) -> str:
    """' (at file.py:line)' for the innermost frame of exc's traceback outside torch, the standard
    library and this package; empty when there is none."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_LIBRARY)]
    return f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
