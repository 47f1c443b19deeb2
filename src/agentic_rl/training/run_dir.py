"""``RunDirectory``: one training run's folder and what each stage leaves in it.

config.yaml          the resolved config (plus the recipe name): what --resume reads
                     (and rewrites with what its --set changed); API keys, tokens
                     and passwords as *** (config/secrets.py), as in every run file
stages.json          the stages finished so far, in order
eval_*.json, sft_data.jsonl, filtered_tasks.json, dpo_pairs.jsonl, *_metrics.jsonl
metrics.jsonl, rollouts.jsonl, tensorboard/   per-RL-step logs
checkpoints/step-N/  resumable checkpoints (training/checkpoint.py)
final/               a Hugging Face model folder; summary.json; report.html
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from agentic_rl.config import ConfigError, drop_redacted, redact_secrets


class RunDirectory:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, path: str | Path | None, *, name: str, config: dict[str, Any]) -> RunDirectory:
        """A new run directory (default ``runs/<name>-<time>``) holding ``config.yaml``; refuses
        a directory that already holds a run."""
        run = cls(path if path else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        if run.file("metrics.jsonl").exists() or run.checkpoints.exists():
            raise ConfigError(f"output_dir: {run.path} already holds a run; choose another directory or --resume it")
        run.path.mkdir(parents=True, exist_ok=True)
        run.write_config(name, config)
        return run

    @classmethod
    def scratch(cls, rank: int) -> RunDirectory:
        """A private, temporary run directory for a data-parallel rank other than 0: what
        it writes (its copies of evaluations, logs) is never read."""
        import tempfile

        return cls(tempfile.mkdtemp(prefix=f"agentic-rl-rank{rank}-"))

    @classmethod
    def existing(cls, path: str | Path) -> tuple[RunDirectory, str, dict[str, Any]]:
        """An existing run to resume: (directory, recipe name, its config as saved)."""
        run = cls(path)
        if not run.file("config.yaml").is_file():
            raise ConfigError(f"--resume: {run.path} is not a run directory (no config.yaml)")
        saved = yaml.safe_load(run.file("config.yaml").read_text()) or {}
        # Secrets were saved as ***: their defaults (the environment) or --set supply them again.
        saved = drop_redacted(saved)
        return run, saved.pop("recipe", "custom"), saved

    def write_config(self, name: str, config: dict[str, Any]) -> None:
        """config.yaml: the recipe name and the resolved config, secrets as *** (a resume
        with overrides rewrites it, never half-written)."""
        path = self.file("config.yaml")
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(yaml.safe_dump(redact_secrets({"recipe": name, **config}), sort_keys=False))
        tmp.replace(path)

    def file(self, name: str) -> Path:
        return self.path / name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    # --- stage records ---------------------------------------------------------------

    def completed_stages(self) -> list[str]:
        path = self.file("stages.json")
        return json.loads(path.read_text())["completed"] if path.is_file() else []

    def mark_complete(self, stage: str) -> None:
        completed = [s for s in self.completed_stages() if s != stage] + [stage]
        self.write_json("stages.json", {"completed": completed})

    # --- files -----------------------------------------------------------------------

    def write_json(self, name: str, data: Any) -> None:
        path = self.file(name)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)  # never a half-written record

    def read_json(self, name: str) -> Any:
        return json.loads(self.file(name).read_text())

    def count_lines(self, name: str) -> int:
        path = self.file(name)
        return sum(1 for _ in path.open()) if path.is_file() else 0

    def read_lines(self, name: str) -> list[dict]:
        path = self.file(name)
        return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []

    def truncate_lines(self, name: str, keep: int) -> None:
        """Drop lines logged after a checkpoint (a resumed run logs them again)."""
        path = self.file(name)
        if path.is_file():
            path.write_text("".join(path.read_text().splitlines(keepends=True)[:keep]))
