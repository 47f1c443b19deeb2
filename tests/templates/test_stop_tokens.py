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


HARMONY_CALL = (
    "<|channel|>analysis<|message|>Need the calculator.<|end|><|start|>assistant<|channel|>commentary"
    ' to=functions.calculator <|constrain|>json<|message|>{"expression": "2+3"}'
)


def test_harmony_samples_on_past_a_messages_end_where_phi_stops() -> None:
    """gpt-oss writes <|end|> after each message of a turn (its analysis, then a call or the
    final answer): stopping there would cut every real turn after its reasoning. Phi-4-mini
    ends its turn with the same token."""
    renderer, tokenizer = _renderer("gpt-oss", "<|return|>")
    end = tokenizer.convert_tokens_to_ids("<|end|>")
    assert end not in renderer.stop_token_ids and end in renderer.turn_end_token_ids
    phi, phi_tokenizer = _renderer("phi4-mini", "<|endoftext|>")
    assert phi_tokenizer.convert_tokens_to_ids("<|end|>") in phi.stop_token_ids
    assert phi.end_of_turn_id("5") == phi_tokenizer.convert_tokens_to_ids("<|end|>")


def test_harmony_turns_end_as_sampled_with_call_or_return() -> None:
    """A demonstration's turn (cold start, stored conversations) ends with the token the
    model samples there: <|call|> after a call, <|return|> after a final answer (the
    template writes <|end|> for the latter in history), and the observation after a call
    goes on as the template renders it."""
    renderer, tokenizer = _renderer("gpt-oss", "<|return|>")
    assert renderer.end_of_turn_id(HARMONY_CALL) == tokenizer.convert_tokens_to_ids("<|call|>")
    final = "<|channel|>final<|message|><answer>5</answer>"
    assert renderer.end_of_turn_id(final) == tokenizer.convert_tokens_to_ids("<|return|>")
    observation = renderer.observation_text([{"role": "tool", "name": "calculator", "content": "5"}], stopped=True)
    assert observation.startswith("<|start|>functions.calculator to=assistant")
