"""Reading a run directory for the report: tolerant of missing files and partial lines."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config import redact_secrets

RUN_MARKERS: tuple[str, ...] = (
    "metrics.jsonl",
    "summary.json",
    "rollouts.jsonl",
    "eval_before.json",
    "eval_after_sft.json",
    "eval_after.json",
)
EVAL_STAGES: tuple[tuple[str, str], ...] = (
    ("before", "eval_before.json"),
    ("after SFT", "eval_after_sft.json"),
    ("after RL", "eval_after.json"),
)


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
    precision: dict[str, Any] = field(default_factory=dict)
    """precision.json: the setting, the precision it resolved to and why."""


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
        # The page is shareable: redact again, for runs written before config.yaml was redacted.
        data.config = redact_secrets(config) if isinstance(config, dict) else {}
    except (OSError, yaml.YAMLError):
        pass
    data.steps = _read_jsonl(run_dir / "metrics.jsonl")
    data.sft_steps = _read_jsonl(run_dir / "sft_metrics.jsonl")
    known = {filename for _, filename in EVAL_STAGES}
    stages = [
        *EVAL_STAGES,
        *((p.stem.removeprefix("eval_"), p.name) for p in sorted(run_dir.glob("eval_*.json")) if p.name not in known),
    ]
    for label, filename in stages:
        loaded = _read_json(run_dir / filename)
        if loaded is not None and isinstance(loaded.get("metrics"), dict):
            data.evals[label] = loaded
    data.rollouts = _read_jsonl(run_dir / "rollouts.jsonl")
    data.precision = _read_json(run_dir / "precision.json") or {}
    return data
