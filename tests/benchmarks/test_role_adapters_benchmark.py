"""``benchmarks/role_adapters.py`` on the tiny model: both sides run, and their first steps
sample the same episodes (LoRA's B starts at zero: both start from the base)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "role_adapters.py"


def test_both_sides_start_from_the_same_episodes(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("role_adapters_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "result.json"
    module.main(
        ["--model", "tiny-random", "--steps", "2", "--tasks-per-step", "2", "--group-size", "2"]
        + ["--work-dir", str(tmp_path / "runs"), "--output", str(out)]
    )
    result = json.loads(out.read_text())
    shared, adapters = result["shared"]["steps"], result["adapters"]["steps"]
    assert len(shared) == len(adapters) == 2
    assert {k: v for k, v in shared[0].items() if k in module.SAMPLED} == {
        k: v for k, v in adapters[0].items() if k in module.SAMPLED
    }
    assert result["adapters_over_shared"]["step1_update_time_s"] == pytest.approx(
        adapters[0]["update_time_s"] / shared[0]["update_time_s"]
    )
