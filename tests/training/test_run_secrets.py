"""API keys never reach a run file: config.yaml, the eval JSONs, report.html, anything."""

from __future__ import annotations

import yaml

from agentic_rl.cli import main
from agentic_rl.config import drop_redacted, is_secret_key, redact_secrets, redact_url
from agentic_rl.training.run_dir import RunDirectory

KEY = "sk-test-123"
PASSWORD, URL_KEY = "pw-test-321", "sk-url-789"
URL = f"https://alice:{PASSWORD}@llm.example.com:8443/v1?x=1&api_key={URL_KEY}&access_token=tok-9#frag"


def _files_holding(run, secret: str) -> list[str]:
    return [str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_secret_keys_are_whole_words() -> None:
    assert all(
        is_secret_key(k) for k in ("api_key", "openai_api_key", "hf_token", "client_secret", "password", "apiKey")
    )
    assert not any(
        is_secret_key(k) for k in ("max_new_tokens", "micro_batch_tokens", "entropy_tokens", "keep_checkpoints")
    )
    config = {
        "backend": {"api_key": KEY, "base_url": "http://x"},
        "unset": {"api_key": None},
        "list": [{"hf_token": "t"}],
    }
    redacted = redact_secrets(config)
    assert redacted == {
        "backend": {"api_key": "***", "base_url": "http://x"},
        "unset": {"api_key": None},
        "list": [{"hf_token": "***"}],
    }
    assert drop_redacted(redacted) == {"backend": {"base_url": "http://x"}, "unset": {"api_key": None}, "list": [{}]}


def test_credentials_inside_urls_are_redacted() -> None:
    assert redact_url(URL) == "https://***:***@llm.example.com:8443/v1?x=1&api_key=***&access_token=***#frag"
    assert redact_url("http://KEY@host/v1") == "http://***@host/v1"  # a key passed as the user
    assert (
        redact_url("https://s3.example.com/b/o?X-Amz-Signature=abc&X-Amz-Expires=60&key=AIza;sig=zz")
        == "https://s3.example.com/b/o?X-Amz-Signature=***&X-Amz-Expires=60&key=***;sig=***"
    )
    assert redact_url("https://host/cb#access_token=t1&state=s") == "https://host/cb#access_token=***&state=s"
    # Anything else stays exactly as written: URLs without credentials, paths, plain text.
    for text in (
        "http://127.0.0.1:8000/v1",
        "http://host/?max_new_tokens=5&q=",
        "/home/a:b@c",
        "user:pw@host",
        "see http:// later",
        "http://[::1/x",
    ):
        assert redact_url(text) == text
    config = {
        "backend": {"base_url": URL, "api_key": None},
        "env": {"mirrors": ["http://u:p@m1/x", "http://m2/"]},
        "rl": {"steps": 3},
    }
    assert redact_secrets(config) == {
        "backend": {"base_url": redact_url(URL), "api_key": None},
        "env": {"mirrors": ["http://***:***@m1/x", "http://m2/"]},
        "rl": {"steps": 3},
    }


def test_api_key_set_on_the_command_line_is_in_no_run_file(tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model": {"name": "tiny-random", "device": "cpu"},
                "precision": "fp32",
                "env": {"name": "arithmetic", "max_turns": 1},
                "rollout": {"max_new_tokens": 4, "max_total_tokens": 256},
                "eval": {"num_tasks": 1},
                "rl": {"steps": 2, "tasks_per_step": 1, "group_size": 2},
                "checkpoint_every": 1,  # a checkpoint at step 1 to resume from
                "tracking": {"sinks": ["jsonl"], "report": True},
            }
        )
    )
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--output-dir", str(run), "--set", f"backend.api_key={KEY}"]) == 0
    assert {"config.yaml", "eval_before.json", "eval_after.json", "report.html"} <= {p.name for p in run.iterdir()}
    assert _files_holding(run, KEY) == []
    assert yaml.safe_load((run / "config.yaml").read_text())["backend"]["api_key"] == "***"
    # A resume reads config.yaml back: the key comes from the environment (None here) or --set, never "***".
    assert RunDirectory.existing(run)[2]["backend"].get("api_key") is None
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "rl.steps=3", "--set", "backend.api_key=sk-test-456"]) == 0
    assert "backend.api_key: changed (not shown)" in capsys.readouterr().err
    assert _files_holding(run, "sk-test-456") == [] and _files_holding(run, KEY) == []


def test_url_credentials_are_in_no_run_file_and_a_resume_asks_for_them(tmp_path, capsys) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "model": {"name": "tiny-random", "device": "cpu"},
                "precision": "fp32",
                "env": {"name": "arithmetic", "max_turns": 1},
                "rollout": {"max_new_tokens": 4, "max_total_tokens": 256},
                "eval": {"num_tasks": 1},
                "rl": {"steps": 2, "tasks_per_step": 1, "group_size": 2},
                "checkpoint_every": 1,
                "tracking": {"sinks": ["jsonl"], "report": True},
            }
        )
    )
    run = tmp_path / "run"
    # The hf backend ignores base_url: the URL only has to travel through every run file.
    assert main(["train", str(recipe), "--output-dir", str(run), "--set", f"backend.base_url={URL}"]) == 0
    assert {"config.yaml", "eval_before.json", "eval_after.json", "report.html"} <= {p.name for p in run.iterdir()}
    for secret in (PASSWORD, URL_KEY, "tok-9", "alice"):
        assert _files_holding(run, secret) == [], secret
    saved = yaml.safe_load((run / "config.yaml").read_text())["backend"]["base_url"]
    assert saved == "https://***:***@llm.example.com:8443/v1?x=1&api_key=***&access_token=***#frag"
    # A resume must not run against the *** URL: it asks for it, then takes it (only that URL).
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "rl.steps=3"]) != 0
    assert (
        capsys.readouterr().err.strip().splitlines()[-1]
        == "agentic-rl: error: --resume: backend.base_url was saved with its credentials as *** (run files never hold them); give it again: --set backend.base_url=URL"
    )
    assert (
        main(
            ["train", "--resume", str(run), "--set", "rl.steps=3", "--set", "backend.base_url=https://a:b@elsewhere/v1"]
        )
        != 0
    )
    assert (
        "backend.base_url must be the URL the run started with (https://***:***@llm.example.com:8443/v1?x=1&api_key=***&access_token=***#frag"
        in capsys.readouterr().err
    )
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "rl.steps=3", "--set", f"backend.base_url={URL}"]) == 0
    assert "backend.base_url: credentials given again (not shown)" in capsys.readouterr().err
    for secret in (PASSWORD, URL_KEY, "tok-9", "alice"):
        assert _files_holding(run, secret) == [], secret


def test_urls_inside_error_messages_are_redacted() -> None:
    from agentic_rl.config import redact_urls
    from agentic_rl.engines.http import BackendError

    message = f"POST {URL} failed; retried via 'http://bob:{PASSWORD}@mirror/v1' and http://127.0.0.1:8000/v1"
    redacted = redact_urls(message)
    assert (
        redacted
        == f"POST {redact_url(URL)} failed; retried via 'http://***:***@mirror/v1' and http://127.0.0.1:8000/v1"
    )
    assert str(BackendError(message)) == redacted
    assert redact_urls("no url here: a:b@c") == "no url here: a:b@c"


def test_an_unreachable_endpoint_is_one_line_without_its_credentials(capsys) -> None:
    import socket

    with socket.socket() as probe:  # a free loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://alice:{PASSWORD}@127.0.0.1:{port}/v1?api_key={URL_KEY}"
    assert main(["eval", "--base-url", url, "--set", "num_tasks=1", "--set", "k=1"]) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("agentic-rl: error:")]
    assert (
        len(errors) == 1
        and errors[0].startswith("agentic-rl: error: POST http://***:***@127.0.0.1:")
        and "Connection refused" in errors[0]
    )
    assert PASSWORD not in err and URL_KEY not in err and "Traceback" not in err
