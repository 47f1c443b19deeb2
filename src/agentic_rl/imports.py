"""Objects named by import path, ``package.module:attribute``: how a config or the command
line names user code (an env factory, an agent function, a reward function) so that any
process can load it."""

from __future__ import annotations

import importlib
from typing import Any


class ImportPathError(ValueError):
    """An import path that names nothing usable: ``"{what}: {reason}"`` in one line."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def import_object(path: str, what: str = "object") -> Any:
    """The callable ``module:attribute`` names; ImportPathError when the module does not
    import, has no such attribute, or the attribute is not callable."""
    module_name, colon, attribute = path.partition(":")
    if not colon or not module_name or not attribute:
        raise ImportPathError(what, f"expected an import path package.module:name, got {path!r}")
    try:
        value = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as exc:
        raise ImportPathError(what, f"cannot import {path!r}: {type(exc).__name__}: {exc}") from None
    if not callable(value):
        raise ImportPathError(what, f"{path!r} is not a class or function")
    return value
