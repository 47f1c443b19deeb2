"""The memory planner: parameter counts against the published models, hand-computed
byte counts, the advice line, the CLI, and the estimate against a measured peak."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentic_rl.cli import main
from agentic_rl.config import LoraConfig
from agentic_rl.models.lora import apply_lora
from agentic_rl.planning import KNOWN_CONFIGS, ModelShape, PlanSettings, advice, model_shape, plan_memory
from agentic_rl.planning.config_plan import shape_of
from agentic_rl.planning.memory import OVERHEAD_BYTES, OVERHEAD_FRACTION

ROOT = Path(__file__).resolve().parents[2]
GB = 1e9


@pytest.mark.parametrize(
    ("name", "published"),
    [
        # The parameter counts the models' cards and `model.num_parameters()` give.
        ("HuggingFaceTB/SmolLM2-135M-Instruct", 134_515_008),
        ("Qwen/Qwen2.5-0.5B-Instruct", 494_032_768),
        ("Qwen/Qwen2.5-3B-Instruct", 3_085_938_688),
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
        ("Qwen/Qwen3-4B", 4_022_468_096),
        ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
    ],
)
def test_parameter_counts_match_the_published_models(name, published):
    assert model_shape(name).num_params == published


def test_tiny_model_shape_counts_its_real_parameters_and_lora_adapters(tiny):
    model, _ = tiny
    shape = shape_of("tiny-random")
    assert shape.num_params == sum(p.numel() for p in model.parameters())
    adapted = apply_lora(copy.deepcopy(model), LoraConfig(enabled=True, r=8))
    assert shape.lora_params(8) == sum(p.numel() for p in adapted.parameters() if p.requires_grad)


def test_lora_parameters_by_hand():
    # Qwen2.5-0.5B, r=16 on all seven projections: r * (in + out) per projection, 24 layers.
    per_layer = 16 * ((896 + 896) + 2 * (896 + 128) + (896 + 896) + 3 * (896 + 4864))
    assert model_shape("Qwen/Qwen2.5-0.5B-Instruct").lora_params(16) == 24 * per_layer == 8_798_208


def test_full_fine_tune_of_7b_by_hand():
    shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
    plan = plan_memory(shape, PlanSettings(precision="fp32", micro_batch_tokens=1024))
    p = 7_615_616_512
    assert plan.trainer["weights (fp32 masters)"] == 4 * p
    assert plan.trainer["gradients"] == 4 * p
    assert plan.trainer["optimizer state (AdamW)"] == 8 * p  # 16 bytes a parameter: ~122 GB before activations
    assert set(plan.trainer) == {
        "weights (fp32 masters)",
        "optimizer state (AdamW)",
        "gradients",
        "activations",
        "overhead",
    }
    # Gradients and activations peak at opposite ends of the backward: the larger counts.
    held = 12 * p + max(plan.trainer["activations"], 4 * p)
    assert plan.trainer["overhead"] == pytest.approx(OVERHEAD_FRACTION * held + OVERHEAD_BYTES)
    assert plan.update_peak == pytest.approx(held + plan.trainer["overhead"])
    line = advice(plan, 80 * GB)
    assert line.startswith("7.6B full fine-tune (single, fp32) needs ~")
    assert "fits with lora.enabled=true (~" in line and " or with 8 GPUs under trainer.strategy=fsdp2 (~" in line
    # The suggestions were planned: they fit.
    for change in ({"lora_r": 16}, {"strategy": "fsdp2", "nproc": 8}):
        assert (
            advice(plan_memory(shape, PlanSettings(precision="fp32", micro_batch_tokens=1024, **change)), 80 * GB)
            is None
        )


def test_fsdp2_shards_weights_gradients_and_optimizer_state():
    shape = model_shape("Qwen/Qwen2.5-7B-Instruct")
    single = plan_memory(shape, PlanSettings(precision="bf16-mixed"))
    sharded = plan_memory(shape, PlanSettings(strategy="fsdp2", nproc=8, precision="bf16-mixed"))
    for item in ("weights (fp32 masters)", "gradients", "optimizer state (AdamW)"):
        assert sharded.trainer[item] == pytest.approx(single.trainer[item] / 8)
    assert sharded.trainer["activations"] == single.trainer["activations"]
    assert "gathered layers (FSDP2)" in sharded.trainer and "bf16 weight casts (autocast)" not in sharded.trainer


def test_ddp_adds_gradient_buckets_and_lora_trains_only_adapters():
    shape = model_shape("Qwen/Qwen2.5-3B-Instruct")
    ddp = plan_memory(shape, PlanSettings(strategy="ddp", nproc=2))
    assert ddp.trainer["gradient buckets (DDP)"] == ddp.trainer["gradients"]
    lora = plan_memory(shape, PlanSettings(lora_r=16))
    adapters = shape.lora_params(16)
    assert lora.trainer["weights (fp32 masters)"] == 4 * (shape.num_params + adapters)
    assert lora.trainer["optimizer state (AdamW)"] == 8 * adapters


def test_activations_scale_with_tokens_and_shrink_with_checkpointing_and_bf16():
    shape = model_shape("Qwen/Qwen2.5-3B-Instruct")

    def activations(**kw):
        return plan_memory(shape, PlanSettings(**kw)).trainer["activations"]

    base = activations(micro_batch_tokens=4096)
    assert activations(micro_batch_tokens=8192) == pytest.approx(2 * base, rel=0.01)
    assert activations(micro_batch_tokens=4096, gradient_checkpointing=True) < base / 4
    assert activations(micro_batch_tokens=4096, precision="bf16-mixed") < base


def test_3b_and_7b_fit_8_gpus_the_way_people_train_them():
    for name in ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-7B-Instruct"):
        settings = PlanSettings(
            strategy="fsdp2",
            nproc=8,
            precision="bf16-mixed",
            gradient_checkpointing=True,
            micro_batch_tokens=8192,
            engine="vllm",
        )
        plan = plan_memory(model_shape(name), settings)
        assert advice(plan, 80 * GB) is None, name
        assert plan.engine_device > 2 * model_shape(name).num_params  # bf16 weights plus a KV cache


def test_shape_from_a_local_folder_and_clear_errors(tmp_path):
    config = dict(KNOWN_CONFIGS["Qwen/Qwen2.5-0.5B-Instruct"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert model_shape(str(tmp_path)).num_params == 494_032_768
    del config["hidden_size"]
    with pytest.raises(ValueError, match="no 'hidden_size'"):
        ModelShape.from_config(config, "broken")
    with pytest.raises(ValueError, match="model.name: no config.json for 'someone/unknown-model'"):
        model_shape("someone/unknown-model")


def test_cli_prints_a_table_and_refuses_a_plan_that_cannot_fit(capsys):
    assert main(["plan", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "tiny-random" in out and "update peak" in out and "fits" in out
    assert main(["plan", "default", "--set", "model.name=Qwen/Qwen2.5-7B-Instruct"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentic-rl: error: 7.6B full fine-tune") and "fits with" in err[0]
    assert main(["plan", "default", "--set", "model.name=nobody/nothing"]) == 2
    assert "no config.json for 'nobody/nothing'" in capsys.readouterr().err


@pytest.mark.slow
def test_estimate_within_25_percent_of_the_measured_peak():
    """The tiny model's update on this CPU (benchmarks/memory_plan.py measures it in a fresh process)."""
    out = subprocess.run(
        [
            sys.executable,
            "benchmarks/memory_plan.py",
            "--models",
            "tiny-random",
            "--tokens",
            "8192",
            "--checkpointing",
            "off",
            "on",
            "--json",
            "/dev/stdout",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    results = json.loads(out[out.index("{") :])["results"]
    assert len(results) == 2
    for row in results:
        assert 0.75 <= row["planned_bytes"] / row["measured_bytes"] <= 1.25, row
