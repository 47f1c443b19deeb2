"""Model loading: the tiny test model, unknown names, local folders, the cache location."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentic_rl.models import MODEL_NAMES, ModelNotFoundError, cache_dir, load, load_tokenizer


def test_tiny_random_has_the_real_tokenizer(tiny) -> None:
    model, tokenizer = tiny
    assert len(tokenizer) == 49152
    assert "<|im_start|>" in tokenizer.chat_template
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == tokenizer.eos_token_id
    assert tokenizer.pad_token_id is not None
    # The real BPE: a common word is one token, and the template renders ChatML.
    assert len(tokenizer("hello", add_special_tokens=False)["input_ids"]) == 1
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_tiny_random_model_matches_the_tokenizer(tiny) -> None:
    model, tokenizer = tiny
    assert model.config.vocab_size == len(tokenizer)
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    ids = tokenizer("The quick brown fox", return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()
    assert sum(p.numel() for p in model.parameters()) < 5_000_000  # tiny: fast enough for unit tests


def test_tiny_random_weights_are_deterministic(tiny) -> None:
    model, _ = tiny
    torch.manual_seed(1234)
    before = torch.rand(3)
    torch.manual_seed(1234)
    again, _ = load("tiny-random", device="cpu")
    after = torch.rand(3)
    assert torch.equal(before, after)  # building it does not disturb the caller's RNG
    first, second = model.state_dict(), again.state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first)


def test_unknown_name_lists_the_built_in_names() -> None:
    assert {"smollm2-135m", "tiny-random"} <= set(MODEL_NAMES)
    with pytest.raises(ModelNotFoundError) as raised:
        load("no-such-model")
    message = str(raised.value)
    assert "'no-such-model'" in message and "smollm2-135m" in message and "tiny-random" in message
    with pytest.raises(ModelNotFoundError, match="tiny-random"):
        load_tokenizer("./definitely/not/here")
    assert issubclass(ModelNotFoundError, ValueError)


def test_local_folder_loads(tiny, tmp_path: Path) -> None:
    model, tokenizer = tiny
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded, loaded_tokenizer = load(str(tmp_path), device="cpu")
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert len(loaded_tokenizer) == len(tokenizer)
    ids = torch.tensor([tokenizer("Some text to score.", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        expected, got = model(input_ids=ids).logits, loaded(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-6)
    assert not loaded.training


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"
    monkeypatch.delenv("AGENTIC_RL_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "agentic-rl"
    monkeypatch.setenv("AGENTIC_RL_CACHE", "")  # empty means unset
    assert cache_dir() == Path.home() / ".cache" / "agentic-rl"
