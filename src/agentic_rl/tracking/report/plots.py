"""The report's training curves: matplotlib PNGs, base64-encoded for embedding."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from typing import Any

from agentic_rl.tracking.report.formatting import as_number
from agentic_rl.tracking.report.run_data import RunData

PLOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean",)),
    ("accuracy", ("accuracy",)),
    ("entropy", ("entropy",)),
    ("KL", ("kl", "approx_kl")),
    ("response length (sampled tokens)", ("response_length",)),
    ("tool calls per episode", ("tool_calls_per_episode",)),
    ("context: samples and summaries per episode", ("segments_per_episode", "summaries_per_episode")),
    (
        "reflection: correct at attempt 1 vs the final attempt",
        ("reflection/correct_at_1", "reflection/correct_at_final"),
    ),
    ("tool success", ("tool_success_rate", "malformed_call_rate")),
    ("collapse diagnostics", ("repeated_token_ratio", "identical_answer_ratio", "frac_zero_std_groups")),
    ("async: staleness (versions behind)", ("staleness_mean", "staleness_max")),
    ("async: fraction of groups by staleness", ("staleness_0", "staleness_1", "staleness_2", "staleness_3")),
    (
        "async: groups dropped, failed, sampling during the update",
        ("stale_dropped", "rollout_failed_groups", "groups_in_flight"),
    ),
    ("seconds per step", ("step_time_s", "rollout_time_s", "update_time_s", "rollout_wait_s")),
)
"""(title, metrics.jsonl keys); a plot whose keys are all missing is left out."""


PER_NAME_PLOTS: tuple[tuple[str, str], ...] = (
    ("tool failure ratio per tool", "tool_failure_ratio/"),
    ("memory tools (per episode)", "memory/"),
    ("search (per episode)", "search/"),
    ("reward per env (env.mix)", "reward_mean@"),
    ("accuracy per env (env.mix)", "accuracy@"),
    ("share of each step's tasks per env (env.mix)", "mix_share@"),
    ("curriculum: probability of drawing each env", "curriculum/probability@"),
)
"""(title, key prefix): one curve per metrics.jsonl key with the prefix (a tool, a mix's env)."""


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def line_plot(
    title: str, rows: Sequence[dict[str, Any]], keys: Sequence[str], x_key: str = "step", *, zero_based: bool = True
) -> str | None:
    """A base64 PNG of ``keys`` over ``x_key``, or None when no key has a value."""
    from matplotlib.figure import Figure  # the OO API: no pyplot, no global backend state

    present = [key for key in keys if any(math.isfinite(as_number(row.get(key))) for row in rows)]
    if not present:
        return None
    xs = [as_number(row.get(x_key, index)) for index, row in enumerate(rows)]
    if zero_based:
        xs = [x + 1 for x in xs]  # RL steps are logged 0-based and shown 1-based, like the terminal
    figure = Figure(figsize=(5.2, 3.0))
    axes = figure.add_subplot()
    for key in present:
        ys = [as_number(row.get(key)) for row in rows]
        axes.plot(xs, ys, marker="o" if len(rows) <= 30 else None, markersize=3, linewidth=1.5, label=key)
        if key == "reward_mean" and any(math.isfinite(as_number(row.get("reward_std"))) for row in rows):
            std = [as_number(row.get("reward_std")) for row in rows]
            axes.fill_between(
                xs, [y - s for y, s in zip(ys, std)], [y + s for y, s in zip(ys, std)], alpha=0.15, label="± reward_std"
            )
    axes.set_title(title)
    axes.set_xlabel(x_key)
    axes.grid(alpha=0.3)
    if len(keys) > 1 or title == "reward":
        axes.legend(fontsize=8)
    return _png(figure)


def training_plots(data: RunData) -> list[tuple[str, str]]:
    """(title, base64 PNG) for every curve the run has data for: RL metrics, per-tool failures, SFT loss."""
    plots: list[tuple[str, str]] = []
    for title, keys in PLOTS:
        image = line_plot(title, data.steps, keys)
        if image:
            plots.append((title, image))
    for title, prefix in PER_NAME_PLOTS:
        keys = sorted({key for row in data.steps for key in row if key.startswith(prefix)})
        image = line_plot(title, data.steps, keys) if keys else None
        if image:
            plots.append((title, image))
    if data.sft_steps:
        image = line_plot("SFT loss", data.sft_steps, ("loss",), zero_based=False)
        if image:
            plots.append(("SFT loss", image))
    return plots
