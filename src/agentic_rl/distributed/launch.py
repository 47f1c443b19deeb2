"""The torchrun command that runs an ``agentic-rl`` command on several processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

_OWN_FLAGS = ("--nproc", "--max-restarts")


def strip_launch_flags(argv: list[str]) -> list[str]:
    """``argv`` without the launcher's own flags (--nproc, --max-restarts)."""
    rest, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item in _OWN_FLAGS:
            skip = True
        elif not item.startswith(tuple(f"{flag}=" for flag in _OWN_FLAGS)):
            rest.append(item)
    return rest


def torchrun_command(
    argv: list[str], *, nproc: int, max_restarts: int, recipe: str, fixed_output_dir: bool
) -> list[str]:
    """``python -m torch.distributed.run --standalone ... -m agentic_rl`` + ``argv`` without
    the launcher's own flags. ``fixed_output_dir``: add ``--output-dir runs/<recipe>-<time>``,
    so that processes restarted after a failure find the run they continue."""
    rest = strip_launch_flags(argv)
    if fixed_output_dir:
        name = Path(recipe).stem if recipe.endswith((".yaml", ".yml")) else recipe
        rest += ["--output-dir", str(Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "agentic_rl",
        *rest,
    ]
