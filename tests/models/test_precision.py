"""Choosing a precision: explicit settings, ``auto`` by device and by a cached CPU measurement,
and the autocast context the training forwards run in."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.models import precision


def test_explicit_settings_are_taken_as_given() -> None:
    assert precision.resolve_precision("fp32", "cpu").precision == "fp32"
    assert precision.resolve_precision("bf16-mixed", "cpu").precision == "bf16-mixed"


def test_unknown_setting_names_the_field() -> None:
    with pytest.raises(ValueError, match="precision: expected one of auto, fp32, bf16-mixed, got 'fp16'"):
        precision.resolve_precision("fp16", "cpu")


@pytest.mark.parametrize(
    ("speedup", "expected"), [(2.1, "bf16-mixed"), (1.3, "bf16-mixed"), (1.29, "fp32"), (0.14, "fp32")]
)
def test_auto_on_cpu_follows_the_measured_speedup(monkeypatch, speedup: float, expected: str) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: speedup)
    resolved = precision.resolve_precision("auto", "cpu")
    assert resolved.precision == expected
    assert f"{speedup:.2f}x" in resolved.reason


def test_cpu_measurement_is_cached_per_cpu_model(monkeypatch, tmp_path, cpu_without_fast_bf16) -> None:
    measured_speedup = cpu_without_fast_bf16  # the real function (conftest stubs it for every other test)
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path))
    calls = []

    def measure(*args, **kwargs) -> float:
        calls.append(1)
        return 0.5

    monkeypatch.setattr(precision, "bf16_matmul_speedup", measure)
    assert measured_speedup() == 0.5
    assert measured_speedup() == 0.5
    assert len(calls) == 1  # the second call read the cache
    cached = json.loads((tmp_path / "precision.json").read_text())
    assert list(cached.values()) == [0.5]
    assert f"torch {torch.__version__}" in next(iter(cached))
    # Another CPU model (or torch build) is measured on its own.
    monkeypatch.setattr(precision, "_cpu_key", lambda: "another cpu")
    assert measured_speedup() == 0.5 and len(calls) == 2
    assert len(json.loads((tmp_path / "precision.json").read_text())) == 2


def test_bf16_matmul_speedup_is_a_positive_ratio() -> None:
    speedup = precision.bf16_matmul_speedup(repeats=2, shape=(32, 64, 64))
    assert 0.0 < speedup < 1000.0


def test_compute_autocast_is_bf16_only_for_bf16_mixed(tiny) -> None:
    model, _ = tiny
    assert precision.compute_precision(model) == "fp32"
    with precision.compute_autocast(model):
        assert not torch.is_autocast_enabled("cpu")
    copy = torch.nn.Linear(2, 2)
    precision.set_compute_precision(copy, "bf16-mixed")
    with precision.compute_autocast(copy):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert copy(torch.ones(1, 2)).dtype == torch.bfloat16
    assert copy.weight.dtype == torch.float32  # the parameters never change dtype
    with pytest.raises(ValueError, match="precision"):
        precision.set_compute_precision(copy, "auto")
