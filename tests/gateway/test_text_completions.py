"""``/v1/completions`` (legacy text completions) through the official ``openai`` SDK: string
and token-id prompts, several prompts and choices, the legacy ``logprobs`` object with the
engine's alternatives, echo, stop strings, streaming, OpenAI-style errors, and episode
traces whose calls chain by tokens."""

from __future__ import annotations

import httpx
import pytest
import torch

openai = pytest.importorskip("openai")

from agentic_rl.engines.base import SamplingParams  # noqa: E402
from agentic_rl.engines.hf import HFBackend  # noqa: E402
from agentic_rl.gateway import calls_to_trajectories  # noqa: E402
from agentic_rl.seeds import stream_seed  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
PROMPT = "The capital of France is"


def engine_sample(tiny, prompt_ids: list[int], seed: int, max_tokens: int) -> list[int]:
    """What the engine samples for choice ``i`` of a request with ``seed`` (stream i of it)."""
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer)
    [completion] = backend.generate(
        [prompt_ids],
        SamplingParams(max_new_tokens=max_tokens, row_seeds=[seed]),
        stop_token_ids=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")],
    )
    return completion.token_ids


def test_a_string_prompt_validates_as_the_sdk_type_and_is_the_engines_sample(client, tiny) -> None:
    _, tokenizer = tiny
    response = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, seed=3)
    assert isinstance(response, openai.types.Completion) and response.object == "text_completion"
    [choice] = response.choices
    ids = engine_sample(tiny, tokenizer(PROMPT)["input_ids"], stream_seed(3, 0), 8)
    assert choice.text == tokenizer.decode(
        ids[:-1] if ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") else ids
    )
    assert choice.logprobs is None and choice.finish_reason in ("stop", "length") and choice.index == 0
    assert response.usage.prompt_tokens == len(
        tokenizer(PROMPT)["input_ids"]
    ) and response.usage.completion_tokens == len(ids)
    assert client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, seed=3).choices[0].text == choice.text


def test_default_max_tokens_is_openais_16(client) -> None:
    response = client.completions.create(model="tiny", prompt=PROMPT, seed=1, temperature=0)
    assert response.usage.completion_tokens <= 16 and (
        response.choices[0].finish_reason == "stop" or response.usage.completion_tokens == 16
    )


def test_token_prompts_several_prompts_and_choices(client, tiny) -> None:
    """Prompt p's choice j is index p * n + j, sampled from stream (p * n + j) of the seed."""
    _, tokenizer = tiny
    token_prompt = tokenizer("Once upon a time")["input_ids"]
    response = client.completions.create(model="tiny", prompt=[token_prompt, PROMPT], n=2, max_tokens=5, seed=9)
    assert [c.index for c in response.choices] == [0, 1, 2, 3]
    for choice in response.choices:
        prompt_ids = token_prompt if choice.index < 2 else tokenizer(PROMPT)["input_ids"]
        ids = engine_sample(tiny, prompt_ids, stream_seed(9, choice.index), 5)
        assert choice.text == tokenizer.decode([t for t in ids if t != tokenizer.convert_tokens_to_ids("<|im_end|>")])
    single = client.completions.create(model="tiny", prompt=token_prompt, max_tokens=5, seed=9)
    assert single.choices[0].text == response.choices[0].text and single.usage.prompt_tokens == len(token_prompt)


def test_logprobs_is_the_legacy_object_with_the_engines_alternatives(client, tiny) -> None:
    model, tokenizer = tiny
    response = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, seed=5, temperature=0, logprobs=3)
    [choice] = response.choices
    logprobs = choice.logprobs
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():  # greedy: the argmax chain
        sampled = model.generate(torch.tensor([prompt_ids]), max_new_tokens=6, do_sample=False)[
            0, len(prompt_ids) :
        ].tolist()
    assert (
        len(logprobs.tokens)
        == len(logprobs.token_logprobs)
        == len(logprobs.top_logprobs)
        == len(logprobs.text_offset)
        == response.usage.completion_tokens
    )
    assert logprobs.tokens == [tokenizer.decode([t]) for t in sampled[: len(logprobs.tokens)]]
    with torch.no_grad():
        reference = torch.log_softmax(
            model(torch.tensor([prompt_ids + sampled])).logits[0, len(prompt_ids) - 1 : -1].float(), -1
        )
    for position, (value, top) in enumerate(zip(logprobs.token_logprobs, logprobs.top_logprobs)):
        values, alternatives = reference[position].topk(3)
        assert value == pytest.approx(values[0].item(), abs=1e-4)  # greedy: the most likely token
        assert list(top) == [tokenizer.decode([t]) for t in alternatives.tolist()]
        assert list(top.values()) == pytest.approx(values.tolist(), abs=1e-4)
    assert logprobs.text_offset[0] == 0 and all(
        b - a == len(t) for a, b, t in zip(logprobs.text_offset, logprobs.text_offset[1:], logprobs.tokens)
    )
    if choice.finish_reason == "length":
        assert "".join(logprobs.tokens) == choice.text
    zero = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=3, seed=5, logprobs=0).choices[0].logprobs
    assert [list(top.items()) for top in zero.top_logprobs] == [
        [(t, v)] for t, v in zip(zero.tokens, zero.token_logprobs)
    ]  # only the sampled token


def test_a_log_prob_of_minus_infinity_is_reported_as_vllms_floor(client) -> None:
    """At a very low temperature the alternatives' log-probs are -inf, which JSON cannot carry
    (found by the HTTP fuzz: a 500); they come back as -9999.0, as vLLM's server gives them."""
    text = client.completions.create(model="tiny", prompt="0", max_tokens=3, temperature=0.004, logprobs=2)
    values = [v for top in text.choices[0].logprobs.top_logprobs for v in top.values()]
    assert values and all(-9999.0 <= v <= 0 for v in values) and -9999.0 in values
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "0"}],
        max_tokens=3,
        temperature=0.004,
        logprobs=True,
        top_logprobs=2,
    )
    alternatives = [alt.logprob for entry in chat.choices[0].logprobs.content for alt in entry.top_logprobs]
    assert alternatives and all(-9999.0 <= v <= 0 for v in alternatives)


def test_echo_stop_strings_and_streaming(client) -> None:
    echoed = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, seed=2, echo=True)
    plain = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, seed=2)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    request = {
        "model": "tiny",
        "prompt": [PROMPT, "Hello"],
        "n": 2,
        "max_tokens": 12,
        "seed": 7,
        "stop": ["e", " a"],
        "logprobs": 2,
    }
    whole = client.completions.create(**request)
    assert any(c.finish_reason == "stop" for c in whole.choices)
    chunks = list(client.completions.create(**request, stream=True, stream_options={"include_usage": True}))
    assert all(isinstance(chunk, openai.types.Completion) for chunk in chunks)
    for choice in whole.choices:
        mine = [c.choices[0] for c in chunks if c.choices and c.choices[0].index == choice.index]
        assert "".join(c.text for c in mine) == choice.text and "e" not in choice.text
        assert (
            mine[-1].finish_reason == choice.finish_reason
            and mine[-1].logprobs.model_dump() == choice.logprobs.model_dump()
        )
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    streamed_echo = list(
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, seed=2, echo=True, stream=True)
    )
    assert "".join(c.choices[0].text for c in streamed_echo if c.choices) == echoed.choices[0].text


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": ""}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": [-1]}, "prompt"),
        ({"prompt": [10**9]}, "prompt"),
        ({"prompt": {"text": "x"}}, "prompt"),
        ({"prompt": ["x"] * 17}, "prompt"),
        ({"prompt": "x", "logprobs": 21}, "logprobs"),
        ({"prompt": "x", "logprobs": True}, "logprobs"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "best_of": 3}, "best_of"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"prompt": "x", "n": 17}, "n"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "stream": "yes"}, "stream"),
    ],
)
def test_bad_requests_are_openai_style_400s(server, body, param) -> None:
    response = httpx.post(f"{server.url}/v1/completions", json={"model": "tiny", **body})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and "\n" not in error["message"]


def test_the_sdk_raises_bad_request(client) -> None:
    with pytest.raises(openai.BadRequestError, match="echo"):
        client.completions.create(model="tiny", prompt="x", echo=True, logprobs=2)


def test_episode_calls_are_recorded_and_chain_by_tokens(server, tiny) -> None:
    """An agent that continues its own text by token ids: the second prompt is the first
    prompt + its completion + new tokens, so the calls make one trajectory."""
    _, tokenizer = tiny
    episode = openai.OpenAI(base_url=server.episode_url("text-agent"), api_key="unused", max_retries=0)
    first = episode.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, seed=1)
    [call] = server.store.get("text-agent").calls
    assert call.kind == "completion" and call.prompt_ids == tokenizer(PROMPT)["input_ids"]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.decode([t for t in call.completion_ids if t != end]) == first.choices[0].text
    follow = call.prompt_ids + call.completion_ids + tokenizer(" Next:")["input_ids"]
    episode.completions.create(model="tiny", prompt=follow, max_tokens=3, seed=2)
    trace = httpx.get(f"{server.url}/episodes/text-agent").json()
    assert [c["kind"] for c in trace["calls"]] == ["completion", "completion"]
    [trajectory] = calls_to_trajectories(server.store.get("text-agent").calls, reward=1.0)
    two = server.store.get("text-agent").calls[1]
    assert trajectory.token_ids == two.prompt_ids + two.completion_ids
    assert [
        t for t, m in zip(trajectory.token_ids, trajectory.loss_mask) if m
    ] == call.completion_ids + two.completion_ids
    # A chat call never continues a text completion by its messages (its reply text alone would match).
    chat = [{"role": "assistant", "content": first.choices[0].text}, {"role": "user", "content": "more"}]
    episode.chat.completions.create(model="tiny", messages=chat, max_tokens=2)
    assert server.store.get("text-agent").calls[2].prompt_ids[: len(call.prompt_ids)] != call.prompt_ids
