"""``benchmarks/first_update.py`` in wiring mode on the tiny model (the smoke recipe): both
sides update the same batch from the same start, and their updated weights agree."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "first_update.py"


def test_both_sides_time_the_same_update(tmp_path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as running the script does: its shared helper beside it
    spec = importlib.util.spec_from_file_location("first_update_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "result.json"
    assert (
        module.main(
            ["--model", "tiny-random", "--recipe", "smoke", "--repeats", "2", "--allow-flat", "--json", str(out)]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result["recipe"] == "smoke" and result["batch"]["trajectories"] == 4 and result["batch"]["mini_batches"] == 2
    assert [len(result["update_s"][side]) for side in ("every_row", "later_updates")] == [2, 2]
    assert result["speedup"] == pytest.approx(
        result["median_update_s"]["every_row"] / result["median_update_s"]["later_updates"]
    )
    assert result["max_weight_diff"] < 1e-4
