"""``agentic-rl config``: the resolved configuration of a recipe, as a run would save it."""

from __future__ import annotations

import argparse


def _config(args: argparse.Namespace) -> int:
    import yaml

    from agentic_rl.config import TrainConfig, apply_assignments, build
    from agentic_rl.config.secrets import redact_secrets
    from agentic_rl.recipes import load_recipe

    name, data = load_recipe(args.recipe)
    config = build(TrainConfig, apply_assignments(data, args.set or []))
    # The run directory's config.yaml holds the same keys: every knob once, defaults filled in.
    print(f"# recipe: {name}")
    print(yaml.safe_dump(redact_secrets(config.model_dump()), sort_keys=False), end="")
    return 0


def register(commands) -> None:
    config = commands.add_parser(
        "config", help="print a recipe's resolved configuration (every key, defaults filled in) without running it"
    )
    config.add_argument("recipe", nargs="?", default="default", help="recipe name or a YAML file")
    config.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key, as with train")
    config.set_defaults(run=_config)
