"""final/ in the model's published dtype (or fp32/bf16 on request), the in-memory model untouched."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from agentic_rl.config import TrainConfig
from agentic_rl.training.final_model import final_dtype, save_final
from agentic_rl.training.run_dir import RunDirectory
from agentic_rl.training.stages import RunEvents, RunState, run_final

pytestmark = pytest.mark.usefixtures("one_thread")


def _run_final(tiny, tmp_path, **config) -> tuple:
    """final/ of a tiny-random run with ``config``; returns (its folder, the in-memory model)."""
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    config = TrainConfig.model_validate({"model": {"name": "tiny-random", "device": "cpu"}, **config})
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir(parents=True)
    run_final(RunState(config, run, RunEvents(), model, tokenizer, backend=None, train_env=None, task_indices=[]))
    return run.file("final"), model


def test_bf16_final_loads_in_bf16_at_half_the_size_and_the_model_stays_float32(tiny, tmp_path) -> None:
    model = tiny[0]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    folder, trained = _run_final(tiny, tmp_path / "bf16", final_dtype="bf16")
    fp32_folder, _ = _run_final(tiny, tmp_path / "fp32", final_dtype="fp32")
    size, fp32_size = ((f / "model.safetensors").stat().st_size for f in (folder, fp32_folder))
    assert 0.49 < size / fp32_size < 0.51  # tied embeddings stored once, like float32's
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(folder / "model.safetensors").values()} == {torch.bfloat16}
    loaded = AutoModelForCausalLM.from_pretrained(folder, dtype="auto")
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    for name, p in loaded.named_parameters():
        assert torch.equal(p, before[name].to(torch.bfloat16)), name
    # The run's model is not converted in place.
    assert all(p.dtype == torch.float32 and torch.equal(p, before[n]) for n, p in trained.named_parameters())


def test_original_dtype_of_tiny_random_is_float32(tiny, tmp_path) -> None:
    folder, _ = _run_final(tiny, tmp_path)  # final_dtype defaults to original
    assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"
    assert {t.dtype for t in load_file(folder / "model.safetensors").values()} == {torch.float32}


def test_original_dtype_of_a_bf16_folder_gives_a_bf16_final(tiny, tmp_path) -> None:
    model, tokenizer = tiny
    source = tmp_path / "source"
    save_final(model, tokenizer, source, dtype=torch.bfloat16)  # a model published in bf16
    config = json.loads((source / "config.json").read_text())
    config.pop("dtype")
    (source / "config.json").write_text(json.dumps({**config, "torch_dtype": "bfloat16"}))  # the older key
    dtype = final_dtype("original", str(source))
    assert dtype == torch.bfloat16
    save_final(model, tokenizer, tmp_path / "final", dtype=dtype)
    assert {t.dtype for t in load_file(tmp_path / "final" / "model.safetensors").values()} == {torch.bfloat16}
    assert next(model.parameters()).dtype == torch.float32


def test_final_dtype_settings() -> None:
    assert final_dtype("fp32", "smollm2-135m") == torch.float32
    assert final_dtype("bf16", "tiny-random") == torch.bfloat16
    assert final_dtype("original", "smollm2-135m") == torch.bfloat16
    assert final_dtype("original", "tiny-random") == torch.float32
    with pytest.raises(ValueError, match="final_dtype"):
        final_dtype("fp16", "tiny-random")
