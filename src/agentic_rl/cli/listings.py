"""``agentic-rl envs`` and ``agentic-rl recipes``: what is registered."""

from __future__ import annotations

import argparse
import sys


def _envs(args: argparse.Namespace) -> int:
    from agentic_rl import envs
    from agentic_rl.envs.registry import describe, options
    from agentic_rl.tracking.display import print_listing

    if args.name is None:
        print_listing(("env", "description"), [(entry.name, entry.description) for entry in envs.registered()])
        return 0
    try:
        rows = options(args.name)  # a registered name or an import path
    except envs.UnknownEnvError as error:
        print(f"agentic-rl envs: {error}", file=sys.stderr)
        return 2
    print(describe(args.name), end="\n\n")
    print_listing(("option", "type", "default"), rows)
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import describe, recipe_names
    from agentic_rl.tracking.display import print_listing

    print_listing(("recipe", "description"), [(name, describe(name)) for name in recipe_names()])
    return 0


def register(commands) -> None:
    list_envs = commands.add_parser("envs", help="list registered environments, or one env's options")
    list_envs.add_argument("name", nargs="?", help="an env (registered name or module:factory): show its options")
    list_envs.set_defaults(run=_envs)

    recipes = commands.add_parser("recipes", help="list built-in recipes")
    recipes.set_defaults(run=_recipes)
