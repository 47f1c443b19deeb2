"""``agentic-rl doctor MODEL``: what a model's chat template and tokenizer need from a run."""

from __future__ import annotations

import argparse
from pathlib import Path


def _doctor(args: argparse.Namespace) -> int:
    from agentic_rl.models import MODEL_NAMES, ModelNotFoundError, load_tokenizer
    from agentic_rl.templates.doctor import inspect_template, report_table

    if args.model not in MODEL_NAMES and not Path(args.model).expanduser().is_dir():
        raise ModelNotFoundError(
            f"no model folder at {args.model!r} (doctor reads a local folder or a built-in name: {', '.join(MODEL_NAMES)})"
        )
    print(report_table(inspect_template(load_tokenizer(args.model)), args.model), end="")
    return 0


def register(commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="check a model's chat template: append-only across tool turns, parser, tools, thinking",
        description="Inspect a model's chat template and tokenizer and print what a run with it needs: whether the "
        "template is append-only across tool turns, which tool-call parser fits, whether it renders tools, and how "
        "it treats reasoning.",
    )
    doctor.add_argument("model", metavar="MODEL", help="a local model folder or a built-in model name")
    doctor.set_defaults(run=_doctor)
