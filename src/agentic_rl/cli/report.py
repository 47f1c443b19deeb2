"""``agentic-rl report``: a run's self-contained HTML report."""

from __future__ import annotations

import argparse


def _report(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.tracking.display import console
    from agentic_rl.tracking.report import NotARunDirectory, build_report

    try:
        path = build_report(
            args.run_dir, args.output, max_rollouts=args.max_rollouts, tokens_per_call_threshold=args.tokens_per_call
        )
    except NotARunDirectory as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"wrote {path}")
    return 0


def register(commands) -> None:
    report = commands.add_parser(
        "report", help="write a self-contained report.html (plots, eval table, rollouts) for a run directory"
    )
    report.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by `agentic-rl train`")
    report.add_argument("--output", help="where to write the HTML (default RUN_DIR/report.html)")
    report.add_argument("--max-rollouts", type=int, default=24, help="training rollouts to include (default 24)")
    report.add_argument(
        "--tokens-per-call",
        type=float,
        default=100.0,
        help="behaviour analysis: sampled tokens per tool call above which an episode is deliberative (default 100)",
    )
    report.set_defaults(run=_report)
