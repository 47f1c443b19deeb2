"""A turn stops at the family's own end-of-turn token, even where the tokenizer's eos_token
is another one (Gemma keeps <eos>, gpt-oss <|return|>)."""

from __future__ import annotations

from template_families import FAMILIES, build_tokenizer

from agentic_rl.chat import ChatRenderer
from agentic_rl.models import load_tokenizer


def _renderer(name: str, eos: str) -> tuple[ChatRenderer, object]:
    family = next(f for f in FAMILIES if f.name == name)
    tokenizer = build_tokenizer(family, load_tokenizer("smollm2-135m"))
    tokenizer.eos_token = eos  # the real tokenizer's eos, not the fixture's stand-in
    return ChatRenderer(tokenizer), tokenizer


def test_gemma_stops_at_end_of_turn_with_eos_as_its_eos_token() -> None:
    renderer, tokenizer = _renderer("gemma3", "<eos>")
    assert tokenizer.convert_tokens_to_ids("<end_of_turn>") in renderer.stop_token_ids
    assert tokenizer.convert_tokens_to_ids("<eos>") in renderer.stop_token_ids


def test_harmony_stops_at_call_and_return() -> None:
    renderer, tokenizer = _renderer("gpt-oss", "<|return|>")
    assert {tokenizer.convert_tokens_to_ids(t) for t in ("<|call|>", "<|return|>")} <= set(renderer.stop_token_ids)
