"""Conversations in the report: messages coloured by loss mask, tool calls and answers highlighted."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

from agentic_rl.tracking.report.formatting import format_number
from agentic_rl.tracking.report.run_data import RunData

_CALL = re.compile(r"&lt;tool_call&gt;.*?(?:&lt;/tool_call&gt;|$)", re.DOTALL)
_ANSWER = re.compile(r"&lt;answer&gt;.*?&lt;/answer&gt;", re.DOTALL)


def _highlight_assistant(text: str) -> str:
    escaped = html.escape(text)
    escaped = _CALL.sub(lambda m: f'<span class="call">{m.group(0)}</span>', escaped)
    return _ANSWER.sub(lambda m: f'<span class="answer">{m.group(0)}</span>', escaped)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else json.dumps(content, ensure_ascii=False)


def _render_message(message: dict[str, Any], call_ok: bool | None) -> str:
    role = str(message.get("role", "?"))
    text = _content_text(message.get("content"))
    if role == "assistant":
        body = _highlight_assistant(text)
        for call in message.get("tool_calls") or []:
            body += f'\n<span class="call">{html.escape(json.dumps(call, ensure_ascii=False))}</span>'
        css, label = "trained", "assistant · trained (loss_mask=1)"
    elif role == "tool":
        body = html.escape(text)
        css, label = "observation", f"tool {html.escape(str(message.get('name', '')))} · observation (loss_mask=0)"
        if call_ok is False:
            css += " failed"
            label += " · call failed"
    else:
        body = html.escape(text)
        css, label = "prompt", f"{html.escape(role)} · prompt (loss_mask=0)"
    inner = f'<div class="role">{label}</div><pre>{body}</pre>'
    if role == "system":
        return f'<details class="msg {css}"><summary class="role">{label} ({len(text)} chars)</summary><pre>{body}</pre></details>'
    return f'<div class="msg {css}">{inner}</div>'


def _render_episode(episode: dict[str, Any], heading: str) -> str:
    calls = episode.get("tool_calls") or []
    tool_messages = [m for m in episode.get("messages") or [] if isinstance(m, dict) and m.get("role") == "tool"]
    # Observations follow calls in order; only trust the pairing when the counts agree.
    oks: list[bool | None] = (
        [bool(c.get("ok", True)) and not c.get("malformed", False) for c in calls]
        if len(calls) == len(tool_messages)
        else [None] * len(tool_messages)
    )
    tool_index = 0
    parts = []
    for message in episode.get("messages") or []:
        if not isinstance(message, dict):
            continue
        ok = None
        if message.get("role") == "tool":
            ok = oks[tool_index] if tool_index < len(oks) else None
            tool_index += 1
        parts.append(_render_message(message, ok))
    correct = bool(episode.get("correct"))
    failed_calls = sum(not (c.get("ok", True) and not c.get("malformed", False)) for c in calls)
    summary = (
        f'<span class="badge {"ok" if correct else "bad"}">{"correct" if correct else "wrong"}</span> '
        f"{html.escape(heading)} · task <code>{html.escape(str(episode.get('task_id', '')))}</code>"
        f" · reward {format_number(episode.get('reward'))} · answer <code>{html.escape(str(episode.get('answer')))}</code>"
        f" · {html.escape(str(episode.get('termination_reason', '')))} · {format_number(episode.get('num_turns'))} turns"
        f" · {len(calls)} call{'' if len(calls) == 1 else 's'} ({failed_calls} failed) · {format_number(episode.get('response_tokens'))} sampled tokens"
    )
    if episode.get("infra_error"):
        summary += f' · <span class="badge bad">infra error: {html.escape(str(episode["infra_error"]))}</span>'
    return (
        f'<details class="episode" data-correct="{int(correct)}"><summary>{summary}</summary>{"".join(parts)}</details>'
    )


def _spread(items: Sequence[Any], limit: int) -> list[Any]:
    """Up to ``limit`` items spread evenly over the sequence (first and last included)."""
    if len(items) <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:limit])
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]


def rollout_section(rollouts: Sequence[dict[str, Any]], max_rollouts: int) -> str:
    """Up to ``max_rollouts`` logged training episodes from steps spread over the run."""
    if not rollouts:
        return "<p class='muted'>No <code>rollouts.jsonl</code> in this run.</p>"
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for row in rollouts:
        by_step.setdefault(row.get("step"), []).append(row)
    steps = list(by_step)
    chosen_steps = _spread(steps, max(1, min(len(steps), max_rollouts // 4 or 1)))
    per_step = max(1, max_rollouts // len(chosen_steps))
    blocks: list[str] = []
    for step in chosen_steps:
        label = f"step {int(step) + 1}" if isinstance(step, int) else "step ?"
        episodes = by_step[step][:per_step]
        blocks.append(
            f"<h3>{html.escape(label)} <span class='muted'>({len(episodes)} of {len(by_step[step])} logged)</span></h3>"
        )
        blocks += [_render_episode(e, label) for e in episodes]
    # Open the first episode so the colour coding is visible without a click.
    return "".join(blocks).replace('<details class="episode"', '<details open class="episode"', 1)


def eval_samples_section(data: RunData, per_stage: int) -> str:
    """Up to ``per_stage`` stored episodes of each eval stage, wrong ones first."""
    blocks = []
    for label, stage in data.evals.items():
        episodes = stage.get("trajectories") or []
        if not episodes:
            continue
        wrong = [e for e in episodes if not e.get("correct")]
        right = [e for e in episodes if e.get("correct")]
        shown_wrong = wrong[: (per_stage + 1) // 2]
        shown_right = right[: per_stage - len(shown_wrong)]
        shown_wrong = wrong[: per_stage - len(shown_right)]  # fill up when few are correct
        chosen = shown_wrong + shown_right
        blocks.append(
            f"<h3>eval {html.escape(label)} <span class='muted'>({len(chosen)} of {len(episodes)}; wrong ones first)</span></h3>"
        )
        blocks += [_render_episode(e, f"eval {label}") for e in chosen]
    return "".join(blocks) or "<p class='muted'>No stored evaluation episodes.</p>"
