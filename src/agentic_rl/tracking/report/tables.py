"""The report's tables (eval metrics per stage, behaviour modes) and its threshold warnings."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence
from typing import Any

from agentic_rl.evaluation.behaviour import MODES, behaviour_metrics
from agentic_rl.tracking.diagnostics import check_thresholds
from agentic_rl.tracking.report.formatting import as_number, format_number
from agentic_rl.tracking.report.run_data import RunData

_HEADLINE = (
    "mean_reward",
    "tool_success_rate",
    "tool_calls_per_episode",
    "malformed_call_rate",
    "episodes_with_tool_call",
    "correct_with_tool_call",
    "mean_turns",
    "mean_response_tokens",
    "infra_error_rate",
    "num_tasks",
    "num_samples",
)


def _eval_keys(evals: dict[str, dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    every = [key for stage in evals.values() for key in stage["metrics"]]
    keys += sorted(
        {k for k in every if re.fullmatch(r"(avg|pass|maj)@\d+", k)},
        key=lambda k: (k.split("@")[1], ["avg", "pass", "maj"].index(k.split("@")[0])),
    )
    keys += [k for k in _HEADLINE if k in every]
    for prefix in ("termination/", "tool/"):
        keys += sorted({k for k in every if k.startswith(prefix)})
    keys += sorted({k for k in every if k not in keys and not k.startswith("behaviour/")})
    return keys


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def eval_table(evals: dict[str, dict[str, Any]]) -> str:
    """One row per metric, one column per eval stage."""
    stages = list(evals)
    rows = [
        [f"<code>{html.escape(key)}</code>", *(format_number(evals[s]["metrics"].get(key)) for s in stages)]
        for key in _eval_keys(evals)
    ]
    return _table(["metric", *stages], rows, "numbers")


def _behaviour(stage: dict[str, Any], threshold: float) -> dict[str, float]:
    metrics = {k: v for k, v in stage["metrics"].items() if k.startswith("behaviour/")}
    if metrics:
        return metrics
    # Runs from before behaviour metrics existed: recompute from the stored episodes.
    return behaviour_metrics(stage.get("trajectories") or [], threshold)


def behaviour_table(data: RunData, threshold: float) -> str:
    """Behaviour-mode statistics per eval stage plus the logged training rollouts."""
    columns: list[tuple[str, dict[str, float]]] = [
        (label, _behaviour(stage, threshold)) for label, stage in data.evals.items()
    ]
    if data.rollouts:
        columns.append(("training rollouts (sample)", behaviour_metrics(data.rollouts, threshold)))
    columns = [(label, metrics) for label, metrics in columns if metrics]
    if not columns:
        return "<p class='muted'>No episodes to analyse.</p>"
    rows = []
    for mode in MODES:
        for stat in ("fraction", "accuracy", "tool_success_rate"):
            key = f"behaviour/{mode}/{stat}"
            if any(key in metrics for _, metrics in columns):
                rows.append(
                    [f"{mode} · {stat.replace('_', ' ')}", *(format_number(metrics.get(key)) for _, metrics in columns)]
                )
    rows.append(
        [
            "sampled tokens per call (mean)",
            *(format_number(metrics.get("behaviour/tokens_per_call_mean")) for _, metrics in columns),
        ]
    )
    return _table(["behaviour", *(label for label, _ in columns)], rows, "numbers")


def threshold_warnings(data: RunData) -> list[str]:
    """``step N: message`` for every diagnostics threshold a logged RL step crossed (steps shown 1-based)."""
    found: list[str] = []
    for index, row in enumerate(data.steps):
        step = (
            int(as_number(row.get("step", index))) + 1
            if math.isfinite(as_number(row.get("step", index)))
            else index + 1
        )
        found += [
            f"step {step}: {message}" for message in check_thresholds({k: v for k, v in row.items() if v is not None})
        ]
    return found
