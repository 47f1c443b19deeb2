"""The report page: header facts, sections in order, inline CSS / JS, and the atomic file write."""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

from agentic_rl.evaluation.behaviour import DEFAULT_TOKENS_PER_CALL
from agentic_rl.tracking.report.episodes import eval_samples_section, rollout_section
from agentic_rl.tracking.report.plots import training_plots
from agentic_rl.tracking.report.run_data import RunData, load_run
from agentic_rl.tracking.report.tables import behaviour_table, eval_table, threshold_warnings

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


def _header(data: RunData, title: str) -> list[str]:
    """Title, run path, the config's description and a line of key facts."""
    config = data.config
    facts = []
    for label, value in (
        ("recipe", config.get("recipe")),
        ("model", (config.get("model") or {}).get("name") if isinstance(config.get("model"), dict) else None),
        ("env", (config.get("env") or {}).get("name") if isinstance(config.get("env"), dict) else None),
        (
            "algorithm",
            (config.get("algorithm") or {}).get("preset") if isinstance(config.get("algorithm"), dict) else None,
        ),
        ("RL steps logged", len(data.steps) if data.steps else None),
        ("group size", (config.get("rl") or {}).get("group_size") if isinstance(config.get("rl"), dict) else None),
        (
            "precision",
            f"{data.precision['precision']} ({data.precision.get('reason', '')})"
            if data.precision.get("precision")
            else None,
        ),
    ):
        if value is not None:
            facts.append(f"{html.escape(label)}: <b>{html.escape(str(value))}</b>")
    description = html.escape(str(config.get("description", ""))) if config.get("description") else ""

    sections = [f"<h1>{html.escape(title)}</h1>", f"<p class='muted'>{html.escape(str(data.run_dir.resolve()))}</p>"]
    if description:
        sections.append(f"<p>{description}</p>")
    if facts:
        sections.append("<p>" + " · ".join(facts) + "</p>")
    return sections


def _sandbox_warning(run_dir: Path) -> list[str]:
    """sandbox.json: a best-effort sandbox that ran without some isolation says so here too."""
    try:
        info = json.loads((run_dir / "sandbox.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    missing = info.get("missing") if isinstance(info, dict) else None
    if not missing:
        return []
    return [f"sandbox.isolation is '{info.get('mode')}': model-written code ran without {', '.join(map(str, missing))}"]


def _warnings_section(data: RunData) -> list[str]:
    """The sandbox's missing isolation, then the first 50 threshold warnings (none: no section)."""
    warnings = _sandbox_warning(data.run_dir) + threshold_warnings(data)
    if not warnings:
        return []
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings[:50])
    more = f"<li>… and {len(warnings) - 50} more</li>" if len(warnings) > 50 else ""
    return [f'<h2>Diagnostics warnings</h2><div class="warn"><ul>{items}{more}</ul></div>']


def _plots_section(data: RunData) -> list[str]:
    sections = ["<h2>Training curves</h2>"]
    plots = training_plots(data)
    if plots:
        figures = "".join(
            f'<figure><img alt="{html.escape(t)}" title="{html.escape(t)}" src="data:image/png;base64,{img}"></figure>'
            for t, img in plots
        )
        sections.append(f'<div class="plots">{figures}</div>')
    else:
        sections.append("<p class='muted'>No RL steps logged (<code>metrics.jsonl</code> missing or empty).</p>")
    return sections


def render_report(
    data: RunData,
    *,
    max_rollouts: int = 24,
    eval_samples: int = 4,
    tokens_per_call_threshold: float = DEFAULT_TOKENS_PER_CALL,
) -> str:
    """The report as one HTML string."""
    title = f"agentic-rl report · {data.run_dir.name}"
    sections = [*_header(data, title), *_warnings_section(data), *_plots_section(data)]

    sections.append("<h2>Evaluation</h2>")
    sections.append(eval_table(data.evals) if data.evals else "<p class='muted'>No evaluation results in this run.</p>")

    sections.append(
        f"<h2>Behaviour</h2><p class='muted'>reactive: at most {tokens_per_call_threshold:g} sampled tokens per tool call; "
        "deliberative: more; no_tool: no call. Accuracy and tool success are within each mode.</p>"
    )
    sections.append(behaviour_table(data, tokens_per_call_threshold))

    sections.append("<h2>Rollouts</h2>" + _LEGEND)
    sections.append(
        "<p>show: <button onclick=\"filterEpisodes('all')\">all</button> "
        "<button onclick=\"filterEpisodes('wrong')\">wrong only</button> "
        "<button onclick=\"filterEpisodes('right')\">correct only</button></p>"
    )
    sections.append(rollout_section(data.rollouts, max_rollouts))
    sections.append("<h2>Evaluation samples</h2>" + eval_samples_section(data, eval_samples))

    if data.config:
        dumped = yaml.safe_dump(data.config, sort_keys=False)
        sections.append(
            f"<h2>Config</h2><details><summary>config.yaml</summary><pre>{html.escape(dumped)}</pre></details>"
        )

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
    html_text = render_report(
        data, max_rollouts=max_rollouts, eval_samples=eval_samples, tokens_per_call_threshold=tokens_per_call_threshold
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(html_text, encoding="utf-8")
    tmp.replace(path)
    return path
