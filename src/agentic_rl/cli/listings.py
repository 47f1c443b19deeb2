"""``agentic-rl envs`` and ``agentic-rl recipes``: what is registered."""

from __future__ import annotations

import argparse


def _envs(args: argparse.Namespace) -> int:
    from agentic_rl import envs
    from agentic_rl.tracking.display import print_listing

    print_listing(("env", "description"), [(entry.name, entry.description) for entry in envs.registered()])
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import describe, recipe_names
    from agentic_rl.tracking.display import print_listing

    print_listing(("recipe", "description"), [(name, describe(name)) for name in recipe_names()])
    return 0


def register(commands) -> None:
    list_envs = commands.add_parser("envs", help="list registered environments")
    list_envs.set_defaults(run=_envs)

    recipes = commands.add_parser("recipes", help="list built-in recipes")
    recipes.set_defaults(run=_recipes)
