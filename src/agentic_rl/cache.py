"""Where agentic-rl keeps what it builds once: converted models and compiled kernels."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Where converted models live; ``AGENTIC_RL_CACHE`` moves it."""
    return Path(os.environ.get("AGENTIC_RL_CACHE") or Path.home() / ".cache" / "agentic-rl")
