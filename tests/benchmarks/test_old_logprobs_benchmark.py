"""``benchmarks/old_logprobs.py`` in wiring mode on the tiny model: both sides update the
same batch from the same start, and their updated weights agree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "old_logprobs.py"


def test_both_sides_time_the_same_update(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as running the script does: its shared helper beside it
    spec = importlib.util.spec_from_file_location("old_logprobs_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "result.json"
    assert (
        module.main(
            [
                "--model",
                "tiny-random",
                "--repeats",
                "2",
                "--tasks",
                "2",
                "--group-size",
                "4",
                "--allow-flat",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["batch"]["trajectories"] == 8 and result["batch"]["mini_batches"] == 2
    assert [len(result["update_s"][side]) for side in ("recompute", "sampler")] == [2, 2]
    assert result["speedup"] == pytest.approx(
        result["median_update_s"]["recompute"] / result["median_update_s"]["sampler"]
    )
    assert result["max_weight_diff"] < 1e-4
