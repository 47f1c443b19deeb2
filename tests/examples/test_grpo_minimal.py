"""examples/grpo_minimal.py runs top to bottom on the tiny model and reports every step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import agentic_rl

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "grpo_minimal.py"


def test_grpo_minimal_runs_on_the_tiny_model() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(agentic_rl.__file__).parents[1])}
    args = [
        "--model",
        "tiny-random",
        "--steps",
        "2",
        "--tasks-per-step",
        "2",
        "--group-size",
        "2",
        "--eval-tasks",
        "2",
        "--few-shot",
        "0",
        "--max-new-tokens",
        "8",
    ]
    result = subprocess.run([sys.executable, str(EXAMPLE), *args], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"held-out accuracy before: \d\.\d{3}", lines[0])
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in steps] == ["1/2", "2/2"]
    for line in steps:
        values = dict(zip(line.split()[2::2], map(float, line.split()[3::2])))
        assert set(values) == {"reward", "solved", "loss", "grad_norm", "clip_frac_high"}
        assert 0.0 <= values["solved"] <= 1.0
    assert re.fullmatch(r"held-out accuracy after: \d\.\d{3} \(before \d\.\d{3}\)", lines[-1])
