"""OpenAI-format conversations <-> tokens, with the real SmolLM2 tokenizer and chat template."""

from __future__ import annotations

import json

import pytest

from agentic_rl.chat import ChatRenderer
from agentic_rl.data import read_jsonl, render_example, trajectory_to_example, write_jsonl
from agentic_rl.data.conversations import validate_example
from agentic_rl.parsers import HermesParser
from agentic_rl.parsers.messages import unwrap_observation
from agentic_rl.types import ToolCall, ToolResult, Trajectory

PARSER = HermesParser()


def call_block(expression: str) -> str:
    return PARSER.format_call(ToolCall(name="calculator", arguments={"expression": expression}))


def structured(expression: str, call_id: str = "call_0") -> dict:
    arguments = json.dumps({"expression": expression})
    return {"id": call_id, "type": "function", "function": {"name": "calculator", "arguments": arguments}}


CONVERSATION = [
    {"role": "system", "content": "You solve arithmetic problems."},
    {"role": "user", "content": "What is 12 * 3 + 4?"},
    {
        "role": "assistant",
        "content": "Let me compute.",
        "tool_calls": [structured("12 * 3"), structured("4 + 0", "call_1")],
    },
    {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "36"},
    {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "4"},
    {"role": "assistant", "content": "", "tool_calls": [structured("36 + 4")]},
    {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "40"},
    {"role": "user", "content": "Are you sure?"},
    {"role": "assistant", "content": "<answer>40</answer>"},
]

# What the env and engine see for the same conversation: text only, results wrapped.
TEXT_ONLY = [
    CONVERSATION[0],
    CONVERSATION[1],
    {"role": "assistant", "content": "Let me compute.\n" + call_block("12 * 3") + "\n" + call_block("4 + 0")},
    {"role": "tool", "content": "<tool_response>\n36\n</tool_response>"},
    {"role": "tool", "content": "<tool_response>\n4\n</tool_response>"},
    {"role": "assistant", "content": call_block("36 + 4")},
    {"role": "tool", "content": "<tool_response>\n40\n</tool_response>"},
    CONVERSATION[7],
    CONVERSATION[8],
]


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return ChatRenderer(tokenizer)


def template_ids(renderer, messages) -> list[int]:
    """Tokens of the chat template's rendering, minus the final "\n" the model never samples."""
    text = renderer.tokenizer.apply_chat_template(messages, tokenize=False)
    assert text.endswith("<|im_end|>\n")
    return renderer.encode_text(text[:-1])


def test_render_matches_chat_template_and_masks_assistant_tokens(tokenizer, renderer):
    ids, mask = render_example(CONVERSATION, renderer, PARSER)
    assert ids == template_ids(renderer, TEXT_ONLY)
    assert len(mask) == len(ids)
    # mask 1 exactly on assistant content + <|im_end|>
    im_end = renderer.end_of_turn_id()
    assert tokenizer.decode([im_end]) == "<|im_end|>"
    assistant_ids = []
    for message in TEXT_ONLY:
        if message["role"] == "assistant":
            assistant_ids += renderer.encode_text(message["content"]) + [im_end]
    assert [t for t, m in zip(ids, mask) if m] == assistant_ids
    runs = [m for i, m in enumerate(mask) if i == 0 or mask[i - 1] != m]
    assert runs == [0, 1, 0, 1, 0, 1]  # three assistant turns, contiguous each
    assert mask[-1] == 1 and ids[-1] == im_end


def test_trailing_non_assistant_messages_are_dropped(renderer):
    ids, mask = render_example(CONVERSATION[:7], renderer, PARSER)
    assert mask[-1] == 1 and sum(mask) > 0
    assert (ids, mask) == render_example(CONVERSATION[:6], renderer, PARSER)


def test_weight_zero_turns_are_prompt(tokenizer, renderer):
    """OpenAI's ``"weight": 0`` on an assistant message: shown, not trained. Leading ones
    belong to the prompt, rendered in one piece with the chat template (as a context
    policy's segment prompt is); a later one is a turn with mask 0."""
    leading = [*CONVERSATION[:2], {**CONVERSATION[2], "weight": 0}, *CONVERSATION[3:]]
    ids, mask = render_example(leading, renderer, PARSER)
    prompt = renderer.prompt_ids(TEXT_ONLY[:5])[:-3]  # up to the generation prompt of the second assistant turn
    assert ids == template_ids(renderer, TEXT_ONLY) and not any(mask[: len(prompt)])
    im_end = renderer.end_of_turn_id()
    trained = (
        renderer.encode_text(TEXT_ONLY[5]["content"])
        + [im_end]
        + renderer.encode_text(TEXT_ONLY[8]["content"])
        + [im_end]
    )
    assert [t for t, m in zip(ids, mask) if m] == trained
    later = [*CONVERSATION[:5], {**CONVERSATION[5], "weight": 0}, *CONVERSATION[6:]]
    ids, mask = render_example(later, renderer, PARSER)
    assert ids == template_ids(renderer, TEXT_ONLY)
    assert [t for t, m in zip(ids, mask) if m] == renderer.encode_text(TEXT_ONLY[2]["content"]) + [
        im_end
    ] + renderer.encode_text(TEXT_ONLY[8]["content"]) + [im_end]


def test_a_segment_marks_the_turns_of_its_prompt_weight_zero():
    """A segment a context policy started (``info["prompt_messages"]``) shows earlier turns
    as its prompt: they come out with weight 0, its own turns without a weight."""
    segment = make_trajectory(TEXT_ONLY)
    segment.info["prompt_messages"] = 5
    messages = trajectory_to_example(segment, PARSER)["messages"]
    assert [m.get("weight") for m in messages if m["role"] == "assistant"] == [0, None, None]
    assert [
        m.get("weight")
        for m in trajectory_to_example(make_trajectory(TEXT_ONLY), PARSER)["messages"]
        if m["role"] == "assistant"
    ] == [None] * 3


def make_trajectory(messages) -> Trajectory:
    return Trajectory(
        task_id="t-1",
        group_id="g",
        messages=messages,
        reward=1.0,
        correct=True,
        answer="40",
        termination_reason="answered",
    )


def test_trajectory_to_example_structures_calls_and_skips_demonstrations(renderer):
    demo = [
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": call_block("1 + 1")},
        PARSER.format_result(ToolResult(name="calculator", content="2")),
        {"role": "assistant", "content": "<answer>2</answer>"},
    ]
    messages = [TEXT_ONLY[0], *demo, TEXT_ONLY[1]]
    for message in TEXT_ONLY[2:]:
        if message["role"] == "tool":
            content = unwrap_observation(message["content"], PARSER)
            message = PARSER.format_result(ToolResult(name="calculator", content=content))
        messages.append(message)
    example = trajectory_to_example(make_trajectory(messages), PARSER, skip_messages=len(demo))
    assert example["messages"] == CONVERSATION
    assert example["metadata"]["task_id"] == "t-1" and example["metadata"]["reward"] == 1.0
    # lossless: rendering the stored example gives the tokens of the text-only conversation
    assert render_example(example["messages"], renderer, "hermes")[0] == template_ids(renderer, TEXT_ONLY)


def test_non_canonical_or_malformed_calls_stay_raw_text():
    odd = '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'  # no newlines
    bad = "<tool_call>\n{not json}\n</tool_call>"
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": odd},
        {"role": "assistant", "content": bad},
    ]
    stored = trajectory_to_example(make_trajectory(messages), PARSER)["messages"]
    assert stored[1] == {"role": "assistant", "content": odd}
    assert stored[2] == {"role": "assistant", "content": bad}
    canonical = trajectory_to_example(make_trajectory(messages), PARSER, exact=False)["messages"]
    assert canonical[1]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "1+1"}'}
    assert canonical[2] == {"role": "assistant", "content": bad}  # malformed: never structured


def test_unwrap_observation():
    assert unwrap_observation("<tool_response>\na\nb\n</tool_response>", PARSER) == "a\nb"
    assert unwrap_observation(PARSER.wrap_observation(""), PARSER) == ""
    with pytest.raises(ValueError, match="not wrapped"):
        unwrap_observation("36", PARSER)


@pytest.mark.parametrize(
    ("example", "message"),
    [
        ({"msgs": []}, "example 3: missing 'messages'"),
        ({"messages": [{"role": "robot", "content": "x"}]}, r"example 3: messages\[0\].role: unknown role 'robot'"),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}],
                    },
                ]
            },
            r"example 3: messages\[1\].tool_calls\[0\].function.arguments: not valid JSON",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "name": "f"}]},
            r"example 3: messages\[1\].content: a tool message needs string content",
        ),
        ({"messages": [{"role": "user", "content": "q"}]}, "example 3: no assistant message"),
        (
            {"messages": [{"role": "user", "content": "q", "weight": 0}, {"role": "assistant", "content": "a"}]},
            r"example 3: messages\[0\].weight: expected 0 or 1 on an assistant message",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0.5}]},
            r"messages\[1\].weight: expected 0 or 1 on an assistant message, got 0.5",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0}]},
            "example 3: no assistant message with weight 1",
        ),
    ],
)
def test_validation_errors_name_example_and_field(example, message):
    with pytest.raises(ValueError, match=message) as info:
        validate_example(example, 3)
    assert "\n" not in str(info.value)


def test_jsonl_round_trip_and_errors(tmp_path):
    rows = [{"messages": CONVERSATION}, {"text": "ünïcode"}]
    path = write_jsonl(tmp_path / "sub" / "data.jsonl", rows)
    assert read_jsonl(path) == rows
    assert [p.name for p in path.parent.iterdir()] == ["data.jsonl"]  # no temp file left behind
    path.write_text('{"a": 1}\n\n{"b": \n')
    with pytest.raises(ValueError, match=r"data\.jsonl:3: invalid JSON"):
        read_jsonl(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"data\.jsonl:1: expected a JSON object"):
        read_jsonl(path)
