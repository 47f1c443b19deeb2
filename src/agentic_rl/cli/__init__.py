"""The ``agentic-rl`` command: one module per subcommand, each with its ``register``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from agentic_rl import __version__
from agentic_rl.cli import (
    agents,
    data,
    doctor,
    evaluate,
    finetune,
    listings,
    plan,
    report,
    retrieval,
    serve,
    show_config,
    train,
)

COMMANDS = (evaluate, listings, train, show_config, plan, doctor, finetune, data, report, retrieval, serve, agents)
"""The modules that register subcommands, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentic-rl", description="Train and evaluate tool-using LLM agents with RL.")
    parser.add_argument("--version", action="version", version=f"agentic-rl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.register(commands)
    return parser


def _terminated(signum: int, frame) -> None:
    print("agentic-rl: terminated", file=sys.stderr)
    sys.exit(128 + signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    # Arguments first: --help, --version and a mistyped command answer before torch loads.
    args = build_parser().parse_args(argv)
    from agentic_rl.config import ConfigError
    from agentic_rl.engines.http import BackendError
    from agentic_rl.models import ModelNotFoundError
    from agentic_rl.optional import MissingPackage
    from agentic_rl.training.pipeline import TrainingStopped

    args.argv = list(sys.argv[1:] if argv is None else argv)
    # Import paths in a config or on the command line (env.name: my_env:make_env, an agent
    # program, a reward) find modules in the working directory, as with python -m; last, so
    # a file there never shadows an installed package.
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    if argv is None and threading.current_thread() is threading.main_thread():
        # SIGTERM (a scheduler, torchrun stopping its workers, `kill`) would end the process
        # without running finally blocks or atexit: managed vLLM servers and scratch folders
        # on /dev/shm would outlive it. Exit through them instead.
        signal.signal(signal.SIGTERM, _terminated)
    try:
        return args.run(args)
    except (ConfigError, ModelNotFoundError, MissingPackage) as exc:
        print(f"agentic-rl: error: {exc}", file=sys.stderr)
        return 2
    except TrainingStopped as exc:
        print(f"agentic-rl: {exc}", file=sys.stderr)
        return 1
    except BackendError as exc:  # an endpoint that is down or refuses: no traceback, credentials already masked
        print(f"agentic-rl: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `agentic-rl recipes | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("agentic-rl: interrupted", file=sys.stderr)
        return 130
