"""The file model that rules query: bindings plus accumulation windows. (Being built.)"""

from __future__ import annotations

import libcst as cst


class FileModel:
    def __init__(self, module: cst.Module) -> None:
        self.module = module
