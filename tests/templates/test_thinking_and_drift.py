"""The thinking policy and the drift measure, by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from template_families import BY_NAME, build_tokenizer

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import RolloutConfig
from agentic_rl.models import load_tokenizer
from agentic_rl.templates import strip_reasoning, template_drift_tokens, thinking_context


def test_strip_reasoning() -> None:
    assert strip_reasoning("<think>\nplan\n</think>\n\nanswer") == "answer"
    assert strip_reasoning("plan opened by the prompt</think>answer") == "answer"
    assert strip_reasoning("no reasoning here") == "no reasoning here"


def test_thinking_context_strips_assistant_turns_only() -> None:
    messages = [
        {"role": "user", "content": "a </think> in the task stays"},
        {"role": "assistant", "content": "<think>x</think>call"},
        {"role": "tool", "content": "out"},
    ]
    assert thinking_context("keep", messages) is messages
    stripped = thinking_context("strip", messages)
    assert [m["content"] for m in stripped] == ["a </think> in the task stays", "call", "out"]
    assert messages[1]["content"] == "<think>x</think>call"  # the history itself is never changed
    with pytest.raises(ValueError, match="rollout.thinking"):
        thinking_context("drop", messages)
    with pytest.raises(ValidationError):
        RolloutConfig(thinking="drop")


def test_drift_tokens_count_where_the_texts_part() -> None:
    renderer = ChatRenderer(build_tokenizer(BY_NAME["deepseek-r1"], load_tokenizer("smollm2-135m")))
    messages = [{"role": "user", "content": "u"}]
    prompt = renderer.prompt_ids(messages)
    reply = "plan\n</think>\n\nanswer"
    grown = prompt + renderer.encode_text(reply + "<｜end▁of▁sentence｜><｜User｜>more")
    assert template_drift_tokens(renderer, prompt, messages) == 0
    later = [*messages, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
    # The template drops the <think> its generation prompt opened and the reasoning: the
    # texts part right after <｜Assistant｜>, and the count is the longer tail's tokens.
    appended_tail = "<think>\n" + reply + "<｜end▁of▁sentence｜><｜User｜>more"
    template_tail = "\n\nanswer<｜end▁of▁sentence｜><｜User｜>more<｜Assistant｜><think>\n"
    assert renderer.prompt_text(later).endswith("<｜Assistant｜>" + template_tail)
    expected = max(len(renderer.encode_text(appended_tail)), len(renderer.encode_text(template_tail)))
    assert template_drift_tokens(renderer, grown, later) == expected


def test_harmony_keeps_reasoning_across_tool_calls_and_drops_it_after_a_new_user_message() -> None:
    renderer = ChatRenderer(build_tokenizer(BY_NAME["gpt-oss"], load_tokenizer("smollm2-135m")))
    call = (
        "<|channel|>analysis<|message|>Need the calculator.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.calculator <|constrain|>json<|message|>{"expression": "2+3"}'
    )
    messages = [{"role": "user", "content": "What is 2+3?"}]
    prompt = renderer.prompt_ids(messages)
    grown = prompt + renderer.encode_text(call + "<|call|>")
    messages += [{"role": "assistant", "content": call}, {"role": "tool", "name": "calculator", "content": "5"}]
    grown += renderer.observation_ids(messages[-1:], stopped=True)
    assert template_drift_tokens(renderer, grown, messages) == 0  # the analysis stays across the tool call
    answer = "<|channel|>final<|message|>5"
    grown += renderer.encode_text(answer + "<|call|>") + renderer.observation_ids(
        [{"role": "user", "content": "And 3+4?"}], stopped=True
    )
    later = [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": "And 3+4?"}]
    assert "Need the calculator." not in renderer.prompt_text(later)  # dropped once a new user message follows
    assert template_drift_tokens(renderer, grown, later) > 0
