"""``agentic-rl envs`` and ``agentic-rl recipes``: what is registered."""

from __future__ import annotations

import argparse
import sys


def _envs(args: argparse.Namespace) -> int:
    from agentic_rl import envs
    from agentic_rl.envs.registry import describe, options, reward_terms
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
    print_listing(("option", "type", "default", "what it does"), rows)
    try:
        terms = reward_terms(args.name)
    except Exception as error:  # an env that needs options (a data file) or a missing extra to build
        print(f"\nreward terms: not listed (the env does not build with its defaults: {error})")
        return 0
    if terms:
        print("\nreward terms it reports (weigh them with reward.terms; with its default options):\n")
        print_listing(("term", "per", "one unit is"), terms)
    return 0


def _recipes(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import describe, recipe_names
    from agentic_rl.tracking.display import print_listing

    print_listing(("recipe", "description"), [(name, describe(name)) for name in recipe_names()])
    return 0


def _recipe_show(args: argparse.Namespace) -> int:
    from agentic_rl.recipes import load_recipe, recipe_text

    load_recipe(args.name)  # the whole base chain resolves, or one line says why not
    print(recipe_text(args.name), end="")
    print(f"# every key resolved: agentic-rl config {args.name}; run it: agentic-rl train {args.name}")
    return 0


def register(commands) -> None:
    list_envs = commands.add_parser("envs", help="list registered environments, or one env's options")
    list_envs.add_argument("name", nargs="?", help="an env (registered name or module:factory): show its options")
    list_envs.set_defaults(run=_envs)

    recipes = commands.add_parser("recipes", help="list built-in recipes, or show one (recipes show NAME)")
    recipes.set_defaults(run=_recipes)
    show = recipes.add_subparsers(dest="recipes_command", metavar="{show}").add_parser(
        "show", help="print a recipe's YAML as written (`agentic-rl config NAME` resolves every key)"
    )
    show.add_argument("name", help="recipe name (see `agentic-rl recipes`) or a YAML file")
    show.set_defaults(run=_recipe_show)
