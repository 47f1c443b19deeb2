"""Optional packages: one place that turns a missing one into one line naming the
``pip install`` to run (the CLI prints it and exits 2, never a traceback)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


class MissingPackage(ImportError):
    """An optional package that is not installed: ``"{purpose} needs {module}: {install}"``."""


def _message(module: str, install: str, purpose: str) -> str:
    return f"{purpose} needs the {module} package, which is not installed: {install}"


def require(module: str, install: str, purpose: str) -> ModuleType:
    """Import ``module``, or raise MissingPackage with ``install`` (e.g. ``pip install openai``)."""
    try:
        __import__(module)  # through builtins, so a test can hide a package
    except ImportError as exc:
        if exc.name is not None and exc.name != module and not module.startswith(exc.name + "."):
            raise  # the package is there but one of its own imports failed: its error, not ours
        raise MissingPackage(_message(module, install, purpose)) from None
    return sys.modules[module]


def check(module: str, install: str, purpose: str) -> None:
    """Raise MissingPackage unless ``module`` is importable, without importing it (before a model loads)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingPackage(_message(module, install, purpose))
