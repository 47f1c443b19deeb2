"""``agentic-rl report RUN_DIR``: one self-contained ``report.html`` for a run directory.

It reads only the files a run leaves behind (``metrics.jsonl``, ``sft_metrics.jsonl``,
the eval JSONs, ``rollouts.jsonl``, ``config.yaml``), so it works on finished runs,
on crashed runs and while a run is still writing. Plots are matplotlib PNGs embedded as
base64; there is no JavaScript dependency and no network access, so the file can be
mailed or attached to an issue as is. All model text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.evaluation.behaviour import DEFAULT_TOKENS_PER_CALL, MODES, behaviour_metrics
from agentic_rl.tracking.diagnostics import check_thresholds

__all__ = ["NotARunDirectory", "RunData", "build_report", "is_run_dir", "load_run", "render_report"]

RUN_MARKERS: tuple[str, ...] = ("metrics.jsonl", "summary.json", "rollouts.jsonl", "eval_before.json", "eval_after_sft.json", "eval_after.json")
EVAL_STAGES: tuple[tuple[str, str], ...] = (("before", "eval_before.json"), ("after SFT", "eval_after_sft.json"), ("after RL", "eval_after.json"))

PLOTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("reward_mean",)),
    ("accuracy", ("accuracy",)),
    ("entropy", ("entropy",)),
    ("KL", ("kl", "approx_kl")),
    ("response length (sampled tokens)", ("response_length",)),
    ("tool calls per episode", ("tool_calls_per_episode",)),
    ("tool success", ("tool_success_rate", "malformed_call_rate")),
    ("collapse diagnostics", ("repeated_token_ratio", "identical_answer_ratio", "frac_zero_std_groups")),
)
"""(title, metrics.jsonl keys); a plot whose keys are all missing is left out."""


class NotARunDirectory(ValueError):
    """The path is missing, not a directory, or holds none of the files a run writes."""


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    sft_steps: list[dict[str, Any]] = field(default_factory=list)
    evals: dict[str, dict[str, Any]] = field(default_factory=dict)
    """stage label -> the eval JSON (``metrics``, ``config``, ``trajectories``)."""
    rollouts: list[dict[str, Any]] = field(default_factory=list)


def is_run_dir(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and any((path / name).is_file() for name in RUN_MARKERS)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a run killed mid-write leaves a partial last line
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def load_run(run_dir: str | Path) -> RunData:
    """Everything the report shows, read tolerantly (missing files are simply absent).

    Raises:
        NotARunDirectory: with a one-line reason.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunDirectory(f"{run_dir} is not a run directory (no such directory)")
    if not is_run_dir(run_dir):
        raise NotARunDirectory(f"{run_dir} is not a run directory (it has none of {', '.join(RUN_MARKERS)})")
    data = RunData(run_dir)
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        data.config = config if isinstance(config, dict) else {}
    except (OSError, yaml.YAMLError):
        pass
    data.steps = _read_jsonl(run_dir / "metrics.jsonl")
    data.sft_steps = _read_jsonl(run_dir / "sft_metrics.jsonl")
    known = {filename for _, filename in EVAL_STAGES}
    stages = [*EVAL_STAGES, *((p.stem.removeprefix("eval_"), p.name) for p in sorted(run_dir.glob("eval_*.json")) if p.name not in known)]
    for label, filename in stages:
        loaded = _read_json(run_dir / filename)
        if loaded is not None and isinstance(loaded.get("metrics"), dict):
            data.evals[label] = loaded
    data.rollouts = _read_jsonl(run_dir / "rollouts.jsonl")
    return data


# ---------------------------------------------------------------- plots


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _line_plot(title: str, rows: Sequence[dict[str, Any]], keys: Sequence[str], x_key: str = "step", *, zero_based: bool = True) -> str | None:
    """A base64 PNG of ``keys`` over ``x_key``, or None when no key has a value."""
    from matplotlib.figure import Figure  # the OO API: no pyplot, no global backend state

    present = [key for key in keys if any(math.isfinite(_number(row.get(key))) for row in rows)]
    if not present:
        return None
    xs = [_number(row.get(x_key, index)) for index, row in enumerate(rows)]
    if zero_based:
        xs = [x + 1 for x in xs]  # RL steps are logged 0-based and shown 1-based, like the terminal
    figure = Figure(figsize=(5.2, 3.0))
    axes = figure.add_subplot()
    for key in present:
        ys = [_number(row.get(key)) for row in rows]
        axes.plot(xs, ys, marker="o" if len(rows) <= 30 else None, markersize=3, linewidth=1.5, label=key)
        if key == "reward_mean" and any(math.isfinite(_number(row.get("reward_std"))) for row in rows):
            std = [_number(row.get("reward_std")) for row in rows]
            axes.fill_between(xs, [y - s for y, s in zip(ys, std)], [y + s for y, s in zip(ys, std)], alpha=0.15, label="± reward_std")
    axes.set_title(title)
    axes.set_xlabel(x_key)
    axes.grid(alpha=0.3)
    if len(keys) > 1 or title == "reward":
        axes.legend(fontsize=8)
    return _png(figure)


def _plots(data: RunData) -> list[tuple[str, str]]:
    plots: list[tuple[str, str]] = []
    for title, keys in PLOTS:
        image = _line_plot(title, data.steps, keys)
        if image:
            plots.append((title, image))
    tools = sorted({key for row in data.steps for key in row if key.startswith("tool_failure_ratio/")})
    if tools:
        image = _line_plot("tool failure ratio per tool", data.steps, tools)
        if image:
            plots.append(("tool failure ratio per tool", image))
    if data.sft_steps:
        image = _line_plot("SFT loss", data.sft_steps, ("loss",), zero_based=False)
        if image:
            plots.append(("SFT loss", image))
    return plots


# ---------------------------------------------------------------- tables

_HEADLINE = ("mean_reward", "tool_success_rate", "tool_calls_per_episode", "malformed_call_rate", "episodes_with_tool_call", "correct_with_tool_call", "mean_turns", "mean_response_tokens", "infra_error_rate", "num_tasks", "num_samples")


def _fmt(value: Any) -> str:
    number = _number(value)
    if not math.isfinite(number):
        return "–"
    return f"{number:g}" if number.is_integer() else f"{number:.3f}"


def _eval_keys(evals: dict[str, dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    every = [key for stage in evals.values() for key in stage["metrics"]]
    keys += sorted({k for k in every if re.fullmatch(r"(avg|pass|maj)@\d+", k)}, key=lambda k: (k.split("@")[1], ["avg", "pass", "maj"].index(k.split("@")[0])))
    keys += [k for k in _HEADLINE if k in every]
    for prefix in ("termination/", "tool/"):
        keys += sorted({k for k in every if k.startswith(prefix)})
    keys += sorted({k for k in every if k not in keys and not k.startswith("behaviour/")})
    return keys


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], css: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _eval_table(evals: dict[str, dict[str, Any]]) -> str:
    stages = list(evals)
    rows = [[f"<code>{html.escape(key)}</code>", *(_fmt(evals[s]["metrics"].get(key)) for s in stages)] for key in _eval_keys(evals)]
    return _table(["metric", *stages], rows, "numbers")


def _behaviour(stage: dict[str, Any], threshold: float) -> dict[str, float]:
    metrics = {k: v for k, v in stage["metrics"].items() if k.startswith("behaviour/")}
    if metrics:
        return metrics
    # Runs from before behaviour metrics existed: recompute from the stored episodes.
    return behaviour_metrics(stage.get("trajectories") or [], threshold)


def _behaviour_table(data: RunData, threshold: float) -> str:
    columns: list[tuple[str, dict[str, float]]] = [(label, _behaviour(stage, threshold)) for label, stage in data.evals.items()]
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
                rows.append([f"{mode} · {stat.replace('_', ' ')}", *(_fmt(metrics.get(key)) for _, metrics in columns)])
    rows.append(["sampled tokens per call (mean)", *(_fmt(metrics.get("behaviour/tokens_per_call_mean")) for _, metrics in columns)])
    return _table(["behaviour", *(label for label, _ in columns)], rows, "numbers")


def _warnings(data: RunData) -> list[str]:
    found: list[str] = []
    for index, row in enumerate(data.steps):
        step = int(_number(row.get("step", index))) + 1 if math.isfinite(_number(row.get("step", index))) else index + 1
        found += [f"step {step}: {message}" for message in check_thresholds({k: v for k, v in row.items() if v is not None})]
    return found


# ---------------------------------------------------------------- rollouts

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
    oks: list[bool | None] = [bool(c.get("ok", True)) and not c.get("malformed", False) for c in calls] if len(calls) == len(tool_messages) else [None] * len(tool_messages)
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
        f" · reward {_fmt(episode.get('reward'))} · answer <code>{html.escape(str(episode.get('answer')))}</code>"
        f" · {html.escape(str(episode.get('termination_reason', '')))} · {_fmt(episode.get('num_turns'))} turns"
        f" · {len(calls)} call{'' if len(calls) == 1 else 's'} ({failed_calls} failed) · {_fmt(episode.get('response_tokens'))} sampled tokens"
    )
    if episode.get("infra_error"):
        summary += f' · <span class="badge bad">infra error: {html.escape(str(episode["infra_error"]))}</span>'
    return f'<details class="episode" data-correct="{int(correct)}"><summary>{summary}</summary>{"".join(parts)}</details>'


def _spread(items: Sequence[Any], limit: int) -> list[Any]:
    """Up to ``limit`` items spread evenly over the sequence (first and last included)."""
    if len(items) <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:limit])
    return [items[round(i * (len(items) - 1) / (limit - 1))] for i in range(limit)]


def _rollout_section(rollouts: Sequence[dict[str, Any]], max_rollouts: int) -> str:
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
        blocks.append(f"<h3>{html.escape(label)} <span class='muted'>({len(episodes)} of {len(by_step[step])} logged)</span></h3>")
        blocks += [_render_episode(e, label) for e in episodes]
    # Open the first episode so the colour coding is visible without a click.
    return "".join(blocks).replace('<details class="episode"', '<details open class="episode"', 1)


def _eval_samples(data: RunData, per_stage: int) -> str:
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
        blocks.append(f"<h3>eval {html.escape(label)} <span class='muted'>({len(chosen)} of {len(episodes)}; wrong ones first)</span></h3>")
        blocks += [_render_episode(e, f"eval {label}") for e in chosen]
    return "".join(blocks) or "<p class='muted'>No stored evaluation episodes.</p>"


# ---------------------------------------------------------------- page

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1b1f24;background:#fff;max-width:1400px}
h1{margin-bottom:4px}h2{border-bottom:1px solid #d0d7de;padding-bottom:4px;margin-top:32px}
.muted{color:#6e7781;font-weight:normal}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plots figure{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:6px;background:#fff}
.plots img{display:block;width:360px}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #d0d7de;padding:3px 10px;text-align:left}
table.numbers td:not(:first-child){text-align:right;font-variant-numeric:tabular-nums}th{background:#f6f8fa}
.warn{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px}
.warn li{margin:2px 0}
.legend span{display:inline-block;padding:2px 8px;margin-right:8px;border-radius:4px}
details.episode{border:1px solid #d0d7de;border-radius:6px;margin:6px 0;padding:4px 8px;background:#fafbfc}
details.episode>summary{cursor:pointer}
.msg{margin:6px 0;border-radius:6px;padding:4px 8px;border-left:5px solid}
.msg pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:12.5px}
.msg .role{font-size:11px;font-weight:bold;text-transform:uppercase;letter-spacing:.03em;color:#57606a}
.trained{background:#dafbe1;border-color:#1a7f37}
.observation{background:#ddf4ff;border-color:#0969da}
.observation.failed{background:#ffebe9;border-color:#cf222e}
.prompt{background:#f6f8fa;border-color:#8c959f}
.call{background:#fff1b8;outline:1px solid #d4a72c;border-radius:3px}
.answer{background:#fbefff;outline:1px solid #8250df;border-radius:3px;font-weight:bold}
.badge{border-radius:10px;padding:0 8px;font-size:12px;color:#fff}.badge.ok{background:#1a7f37}.badge.bad{background:#cf222e}
"""

_JS = """
function filterEpisodes(mode){document.querySelectorAll('details.episode').forEach(function(e){
e.style.display=(mode==='all'||(mode==='wrong')===(e.dataset.correct==='0'))?'':'none';});}
"""

_LEGEND = (
    '<p class="legend"><span class="msg prompt">prompt: system / user (loss_mask=0)</span>'
    '<span class="msg trained">assistant: sampled and trained (loss_mask=1)</span>'
    '<span class="msg observation">tool observation (loss_mask=0)</span>'
    '<span class="msg observation failed">observation of a failed call</span>'
    '<span class="call">tool call</span> <span class="answer">final answer</span></p>'
)


def render_report(data: RunData, *, max_rollouts: int = 24, eval_samples: int = 4, tokens_per_call_threshold: float = DEFAULT_TOKENS_PER_CALL) -> str:
    """The report as one HTML string."""
    config = data.config
    title = f"agentic-rl report · {data.run_dir.name}"
    facts = []
    for label, value in (
        ("recipe", config.get("recipe")),
        ("model", (config.get("model") or {}).get("name") if isinstance(config.get("model"), dict) else None),
        ("env", (config.get("env") or {}).get("name") if isinstance(config.get("env"), dict) else None),
        ("algorithm", (config.get("algorithm") or {}).get("preset") if isinstance(config.get("algorithm"), dict) else None),
        ("RL steps logged", len(data.steps) if data.steps else None),
        ("group size", config.get("group_size")),
    ):
        if value is not None:
            facts.append(f"{html.escape(label)}: <b>{html.escape(str(value))}</b>")
    description = html.escape(str(config.get("description", ""))) if config.get("description") else ""

    sections = [f"<h1>{html.escape(title)}</h1>", f"<p class='muted'>{html.escape(str(data.run_dir.resolve()))}</p>"]
    if description:
        sections.append(f"<p>{description}</p>")
    if facts:
        sections.append("<p>" + " · ".join(facts) + "</p>")

    warnings = _warnings(data)
    if warnings:
        items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings[:50])
        more = f"<li>… and {len(warnings) - 50} more</li>" if len(warnings) > 50 else ""
        sections.append(f'<h2>Diagnostics warnings</h2><div class="warn"><ul>{items}{more}</ul></div>')

    sections.append("<h2>Training curves</h2>")
    plots = _plots(data)
    if plots:
        figures = "".join(f'<figure><img alt="{html.escape(t)}" title="{html.escape(t)}" src="data:image/png;base64,{img}"></figure>' for t, img in plots)
        sections.append(f'<div class="plots">{figures}</div>')
    else:
        sections.append("<p class='muted'>No RL steps logged (<code>metrics.jsonl</code> missing or empty).</p>")

    sections.append("<h2>Evaluation</h2>")
    sections.append(_eval_table(data.evals) if data.evals else "<p class='muted'>No evaluation results in this run.</p>")

    sections.append(
        f"<h2>Behaviour</h2><p class='muted'>reactive: at most {tokens_per_call_threshold:g} sampled tokens per tool call; "
        "deliberative: more; no_tool: no call. Accuracy and tool success are within each mode.</p>"
    )
    sections.append(_behaviour_table(data, tokens_per_call_threshold))

    sections.append("<h2>Rollouts</h2>" + _LEGEND)
    sections.append(
        '<p>show: <button onclick="filterEpisodes(\'all\')">all</button> '
        '<button onclick="filterEpisodes(\'wrong\')">wrong only</button> '
        '<button onclick="filterEpisodes(\'right\')">correct only</button></p>'
    )
    sections.append(_rollout_section(data.rollouts, max_rollouts))
    sections.append("<h2>Evaluation samples</h2>" + _eval_samples(data, eval_samples))

    if config:
        dumped = yaml.safe_dump(config, sort_keys=False)
        sections.append(f"<h2>Config</h2><details><summary>config.yaml</summary><pre>{html.escape(dumped)}</pre></details>")

    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style><script>{_JS}</script></head><body>{''.join(sections)}</body></html>"
    )


def build_report(
    run_dir: str | Path,
    output: str | Path | None = None,
    *,
    max_rollouts: int = 24,
    eval_samples: int = 4,
    tokens_per_call_threshold: float = DEFAULT_TOKENS_PER_CALL,
) -> Path:
    """Write ``report.html`` (or ``output``) for a run directory and return its path.

    Raises:
        NotARunDirectory: with a one-line reason.
    """
    data = load_run(run_dir)
    path = Path(output) if output else data.run_dir / "report.html"
    html_text = render_report(data, max_rollouts=max_rollouts, eval_samples=eval_samples, tokens_per_call_threshold=tokens_per_call_threshold)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(html_text, encoding="utf-8")
    tmp.replace(path)
    return path
