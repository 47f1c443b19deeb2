"""API keys never reach a run file: config.yaml, the eval JSONs, report.html, anything."""

from __future__ import annotations

import yaml

from agentic_rl.cli import main
from agentic_rl.config import drop_redacted, is_secret_key, redact_secrets
from agentic_rl.training.run_dir import RunDirectory

KEY = "sk-test-123"


def _files_holding(run, secret: str) -> list[str]:
    return [str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_secret_keys_are_whole_words() -> None:
    assert all(is_secret_key(k) for k in ("api_key", "openai_api_key", "hf_token", "client_secret", "password", "apiKey"))
    assert not any(is_secret_key(k) for k in ("max_new_tokens", "micro_batch_tokens", "entropy_tokens", "keep_checkpoints"))
    config = {"backend": {"api_key": KEY, "base_url": "http://x"}, "unset": {"api_key": None}, "list": [{"hf_token": "t"}]}
    redacted = redact_secrets(config)
    assert redacted == {"backend": {"api_key": "***", "base_url": "http://x"}, "unset": {"api_key": None}, "list": [{"hf_token": "***"}]}
    assert drop_redacted(redacted) == {"backend": {"base_url": "http://x"}, "unset": {"api_key": None}, "list": [{}]}


def test_api_key_set_on_the_command_line_is_in_no_run_file(tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump({
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "env": {"name": "arithmetic", "max_turns": 1},
        "rollout": {"max_new_tokens": 4, "max_total_tokens": 256},
        "eval": {"num_tasks": 1},
        "steps": 2, "tasks_per_step": 1, "group_size": 2, "checkpoint_every": 1,  # a checkpoint at step 1 to resume from
        "tracking": {"sinks": ["jsonl"], "report": True},
    }))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output-dir", str(run), "--set", f"backend.api_key={KEY}"]) == 0
    assert {"config.yaml", "eval_before.json", "eval_after.json", "report.html"} <= {p.name for p in run.iterdir()}
    assert _files_holding(run, KEY) == []
    assert yaml.safe_load((run / "config.yaml").read_text())["backend"]["api_key"] == "***"
    # A resume reads config.yaml back: the key comes from the environment (None here) or --set, never "***".
    assert RunDirectory.existing(run)[2]["backend"].get("api_key") is None
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "steps=3", "--set", "backend.api_key=sk-test-456"]) == 0
    assert "backend.api_key: changed (not shown)" in capsys.readouterr().err
    assert _files_holding(run, "sk-test-456") == [] and _files_holding(run, KEY) == []
