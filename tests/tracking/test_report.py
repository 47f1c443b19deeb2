"""``agentic-rl report``: HTML from a small synthetic run directory, rendered headless."""

from __future__ import annotations

import html
import json
import shutil
import subprocess

import pytest

from agentic_rl.cli import main
from agentic_rl.tracking.report import NotARunDirectory, build_report

EVIL = "<script>alert('x')</script>"


def _episode(step: int | None, index: int, *, correct: bool) -> dict:
    messages = [
        {"role": "system", "content": "You solve arithmetic problems."},
        {"role": "user", "content": f"What is {index} + 1?"},
        {
            "role": "assistant",
            "content": f'thinking {EVIL}\n<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "{index} + 1"}}}}\n</tool_call>',
        },
        {
            "role": "tool",
            "name": "calculator",
            "content": "<tool_response>\nError: boom\n</tool_response>"
            if not correct
            else f"<tool_response>\n{index + 1}\n</tool_response>",
        },
        {"role": "assistant", "content": f"<answer>{index + 1 if correct else 0}</answer>"},
    ]
    row = {
        "task_id": f"task-{index}",
        "group_id": f"g{index // 2}",
        "messages": messages,
        "reward": float(correct),
        "correct": correct,
        "answer": str(index + 1 if correct else 0),
        "termination_reason": "answered",
        "infra_error": None,
        "num_turns": 2,
        "response_tokens": 40,
        "tool_calls": [{"name": "calculator", "ok": correct, "malformed": False, "latency_s": 0.001}],
        "wall_time_s": 0.1,
    }
    return row if step is None else {"step": step, **row}


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run-synthetic"
    run.mkdir()
    (run / "config.yaml").write_text(
        "recipe: smoke\ndescription: synthetic run\nmodel:\n  name: tiny-random\nenv:\n  name: arithmetic\nalgorithm:\n  preset: grpo\nrl:\n  group_size: 2\n"
    )
    with (run / "metrics.jsonl").open("w") as f:
        for step in range(5):
            f.write(
                json.dumps(
                    {
                        "reward_mean": 0.2 * step,
                        "reward_std": 0.1,
                        "accuracy": 0.2 * step,
                        "entropy": 0.5 / (step + 1),
                        "kl": 0.01 * step,
                        "response_length": 40 + step,
                        "tool_calls_per_episode": 1.0,
                        "tool_success_rate": 0.5 + 0.1 * step,
                        "frac_zero_std_groups": 0.95 if step == 4 else 0.1,
                        "step": step,
                        "segments_per_episode": 1.0 + step,
                        "reflection/correct_at_1": 0.1 * step,
                        "reflection/correct_at_final": 0.15 * step,
                        "memory/writes": 2.0,
                        "memory/read_hits": 1.0,
                    }
                )
                + "\n"
            )
        f.write('{"reward_mean": 0.9, "step"')  # a partial last line from a killed run
    with (run / "rollouts.jsonl").open("w") as f:
        for step in range(5):
            for index in range(2):
                f.write(json.dumps(_episode(step, index, correct=index == 0)) + "\n")
    for name, accuracy in (("eval_before.json", 0.0), ("eval_after.json", 0.5)):
        trajectories = [_episode(None, i, correct=i < 2 * accuracy) for i in range(2)]
        metrics = {
            "avg@1": accuracy,
            "pass@1": accuracy,
            "maj@1": accuracy,
            "mean_reward": accuracy,
            "tool_success_rate": accuracy,
            "tool_calls_per_episode": 1.0,
            "num_samples": 2.0,
        }
        (run / name).write_text(
            json.dumps({"metrics": metrics, "config": {"k": 1}, "wall_time_s": 1.0, "trajectories": trajectories})
        )
    return run


def test_report_contains_plots_tables_rollouts_and_escapes_text(run_dir) -> None:
    path = build_report(run_dir)
    assert path == run_dir / "report.html"
    text = path.read_text()
    for title in (
        "reward",
        "accuracy",
        "entropy",
        "KL",
        "response length (sampled tokens)",
        "tool calls per episode",
        "tool success",
    ):
        assert f'alt="{title}"' in text, title
    # The env's episode metrics that RL steps log: context samples, reflection, memory use.
    for title in (
        "context: samples and summaries per episode",
        "reflection: correct at attempt 1 vs the final attempt",
        "memory tools (per episode)",
    ):
        assert f'alt="{title}"' in text, title
    assert 'alt="search (per episode)"' not in text  # no search/* metrics logged: no empty plot
    assert text.count("data:image/png;base64,") >= 10
    assert 'alt="SFT loss"' not in text  # no sft_metrics.jsonl: skipped, not an empty plot
    # Eval table: before and after RL (no SFT stage in this run).
    assert (
        "<th>before</th><th>after RL</th>" in text
        and "after SFT" not in text.split("<h2>Evaluation</h2>")[1].split("<h2>")[0]
    )
    assert "<code>avg@1</code></td><td>0</td><td>0.500</td>" in text
    # Behaviour recomputed from the stored episodes (old eval JSONs have no behaviour keys).
    assert "reactive · fraction" in text
    # Threshold warnings from the step that crossed frac_zero_std_groups > 0.9.
    assert "step 5: frac_zero_std_groups = 0.95 &gt; 0.9" in text
    # Rollouts with the loss-mask styling and legend; model text escaped.
    assert 'class="msg trained"' in text and 'class="msg observation failed"' in text and 'class="msg prompt"' in text
    assert "loss_mask=1" in text and '<span class="call">&lt;tool_call&gt;' in text
    assert EVIL not in text and html.escape(EVIL) in text


def test_report_cli_and_not_a_run_directory(run_dir, tmp_path, capsys) -> None:
    out = tmp_path / "elsewhere" / "r.html"
    assert main(["report", str(run_dir), "--output", str(out)]) == 0
    assert out.is_file()
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("agentic-rl: error:") and "is not a run directory" in err and "\n" not in err
    assert main(["report", str(tmp_path / "missing")]) == 2
    with pytest.raises(NotARunDirectory):
        build_report(tmp_path / "missing")


def test_report_of_run_with_only_evals(tmp_path) -> None:
    run = tmp_path / "evals-only"
    run.mkdir()
    (run / "eval_before.json").write_text(json.dumps({"metrics": {"avg@1": 0.25}, "trajectories": []}))
    text = build_report(run).read_text()
    assert "No RL steps logged" in text and "<code>avg@1</code>" in text


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(
    _chromium() is None,
    reason="chromium is not installed (apt-get install chromium); needed to render the report headless",
)
def test_report_renders_in_headless_chromium(run_dir, tmp_path) -> None:
    image_module = pytest.importorskip("PIL.Image", reason="Pillow is not installed")
    path = build_report(run_dir)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1200,2000",
            path.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with image_module.open(shot) as image:
        rgb = image.convert("RGB")
        assert rgb.size == (1200, 2000)
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 50  # text, plot lines, tables
        white = sum(count for count, colour in colours if min(colour) >= 250)
        assert 1 - white / (rgb.size[0] * rgb.size[1]) > 0.05  # not a blank page
