"""``template_drift_tokens`` in evaluation: the eval harness (what ``agentic-rl eval`` prints
and saves) reports the same per-episode drift the training step does, here for the Mistral
v3 fixture (a space before each assistant turn that the model never samples) and for a
family whose template is append-only."""

from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console
from template_families import BY_NAME
from test_conformance import FamilyBackend, family_tokenizer, solver

from agentic_rl.evaluation.harness import evaluate
from agentic_rl.tracking.display import metrics_table
from agentic_rl.training.rl_metrics import rollout_metrics


@pytest.mark.parametrize(("name", "drifts"), [("mistral-v3", True), ("llama3.1", False)])
def test_eval_reports_template_drift(name: str, drifts: bool, tmp_path) -> None:
    family = BY_NAME[name]
    fmt = next(iter(family.formats))
    tokenizer = family_tokenizer(family)
    backend = FamilyBackend(tokenizer, solver(family, fmt, tokenizer), family.end_token)
    output = tmp_path / "eval.json"
    config = {
        "model": {"name": "smollm2-135m"},
        "env": {"name": "arithmetic", "parser": family.parser},  # the parser reads every layout of its format
        "num_tasks": 2,
        "k": 1,
        "output": str(output),
        "rollout": {"max_new_tokens": 400, "max_total_tokens": 8192},
    }
    result = evaluate(config, backend=backend)
    assert result.metrics["avg@1"] == 1.0
    per_episode = [t.info.get("template_drift_tokens", 0) for g in result.groups for t in g.trajectories]
    drift = result.metrics["template_drift_tokens"]
    assert drift == pytest.approx(sum(per_episode) / len(per_episode))
    assert (drift > 0) == drifts
    step = rollout_metrics(result.groups, torch.zeros(len(per_episode)), excluded=0)  # the training step's value
    assert drift == pytest.approx(step["template_drift_tokens"])
    assert json.loads(output.read_text())["metrics"]["template_drift_tokens"] == pytest.approx(drift)  # saved
    console = Console(width=200, record=True)
    console.print(metrics_table(result.metrics, 1))  # the table `agentic-rl eval` prints
    assert "template_drift_tokens" in console.export_text()
