"""The OpenAI-compatible gateway, driven by the official `openai` SDK: chat completions
(plain, streamed, with tools), OpenAI-style errors, and per-episode traces whose token ids
are exactly what the engine sampled and chain into multi-turn trajectories."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import torch

openai = pytest.importorskip("openai")

from agentic_rl.engines.base import Completion  # noqa: E402
from agentic_rl.engines.hf import HFBackend  # noqa: E402
from agentic_rl.gateway import calls_to_trajectories  # noqa: E402
from agentic_rl.gateway.server import GatewayServer  # noqa: E402
from agentic_rl.gateway.traces import Call  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


def test_models_and_a_completion_validate_as_the_sdk_types(client) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    response = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=8, seed=3, logprobs=True)
    assert isinstance(response, openai.types.chat.ChatCompletion)
    choice = response.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert len(choice.logprobs.content) == response.usage.completion_tokens <= 8
    assert all(token.logprob <= 0 for token in choice.logprobs.content)
    again = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=8, seed=3)
    assert again.choices[0].message.content == choice.message.content  # the seed fixes the draws


def test_streaming_gives_the_same_text_as_one_response(client) -> None:
    whole = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=8, seed=5, n=2)
    chunks = list(
        client.chat.completions.create(
            model="tiny", messages=HELLO, max_tokens=8, seed=5, n=2, stream=True, stream_options={"include_usage": True}
        )
    )
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    for index in range(2):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == index)
        assert text == whole.choices[index].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_concurrent_requests_get_what_they_would_get_alone(client) -> None:
    """16 requests at once share decode batches; each one's tokens depend only on its seed."""
    alone = [
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, seed=s).choices[0].message.content
        for s in range(4)
    ]
    with ThreadPoolExecutor(16) as pool:
        together = list(
            pool.map(
                lambda s: (
                    client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, seed=s % 4)
                    .choices[0]
                    .message.content
                ),
                range(16),
            )
        )
    assert together == alone * 4


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "tiny"}, "messages"),
        ({"model": "tiny", "messages": HELLO, "temperature": 5}, "temperature"),
        ({"model": "tiny", "messages": HELLO, "n": 0}, "n"),
        ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
        ({"model": "tiny", "messages": HELLO, "tools": [{"type": "function"}]}, "tools"),
        ({"model": "tiny", "messages": HELLO, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"model": "tiny", "messages": HELLO, "top_logprobs": 3}, "top_logprobs"),
        ({"model": "tiny", "messages": HELLO, "stream": True, "stream_options": "usage"}, "stream_options"),
    ],
)
def test_bad_requests_are_openai_style_400s(server, body, param) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and "\n" not in error["message"]


def test_malformed_json_unknown_routes_and_the_sdk_error(server, client) -> None:
    response = httpx.post(
        f"{server.url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and response.json()["error"]["message"].startswith("the body must be JSON")
    assert httpx.get(f"{server.url}/v1/nothing").status_code == 404
    assert httpx.get(f"{server.url}/v1/nothing").json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=HELLO, temperature=9)
    assert httpx.get(f"{server.url}/health", headers={"host": "evil.example"}).status_code == 400  # loopback names only


def test_an_episode_records_exact_tokens_that_chain_into_one_trajectory(server, tiny) -> None:
    """A two-turn agent through an episode's base_url: the second prompt is the first
    prompt + the sampled completion + only the new message's tokens, so the calls make one
    trajectory whose sampled tokens are the engine's."""
    episode = openai.OpenAI(base_url=server.episode_url("agent-1"), api_key="unused", max_retries=0)
    first = episode.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, seed=1)
    history = [
        *HELLO,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "user", "content": "And again."},
    ]
    episode.chat.completions.create(model="tiny", messages=history, max_tokens=6, seed=2)
    writer = {"Authorization": f"Bearer {server.write_token}"}  # rewards are written with the server's write token
    assert (
        httpx.post(f"{server.url}/episodes/agent-1/reward", json={"reward": 1.0}, headers=writer).json()["reward"]
        == 1.0
    )
    trace = httpx.get(f"{server.url}/episodes/agent-1").json()
    assert trace["reward"] == 1.0 and len(trace["calls"]) == 2
    one, two = trace["calls"]
    assert (
        two["prompt_ids"][: len(one["prompt_ids"]) + len(one["completion_ids"])]
        == one["prompt_ids"] + one["completion_ids"]
    )
    tokenizer = tiny[1]
    assert (
        tokenizer.decode(two["prompt_ids"][len(one["prompt_ids"]) + len(one["completion_ids"]) :]).count("And again.")
        == 1
    )
    calls = server.store.get("agent-1").calls
    [trajectory] = calls_to_trajectories(calls, reward=1.0)
    assert trajectory.token_ids == two["prompt_ids"] + two["completion_ids"]
    sampled = [t for t, m in zip(trajectory.token_ids, trajectory.loss_mask) if m]
    assert sampled == one["completion_ids"] + two["completion_ids"]
    assert [lp for lp, m in zip(trajectory.sampler_logprobs, trajectory.loss_mask) if m] == one["logprobs"] + two[
        "logprobs"
    ]
    assert trajectory.reward == 1.0 and trajectory.num_turns == 2


def test_an_agent_that_rewrites_its_history_gives_one_sample_per_call(server) -> None:
    episode = openai.OpenAI(base_url=server.episode_url("summariser"), api_key="unused", max_retries=0)
    episode.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4, seed=1)
    episode.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Summary: they said hi. Continue."}], max_tokens=4, seed=2
    )
    assert len(calls_to_trajectories(server.store.get("summariser").calls, reward=0.5)) == 2


def test_the_episode_header_joins_an_episode_on_the_plain_routes(server) -> None:
    response = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "tiny", "messages": HELLO, "max_tokens": 3},
        headers={"x-episode-id": "by-header"},
    )
    assert response.status_code == 200 and len(server.store.get("by-header").calls) == 1


class _ScriptedSession:
    """A decode session that answers with scripted tokens, one token per step (streams see
    them as they are "sampled"); the n-th request gets the n-th reply (cycling)."""

    def __init__(self, engine: _ScriptedEngine) -> None:
        self.engine, self.running = engine, {}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def submit(self, key, token_ids, max_new_tokens, seed) -> None:
        self.engine.prompts.append(list(token_ids))
        self.running[key] = [self.engine.replies[self.engine.submitted % len(self.engine.replies)], 0, max_new_tokens]
        self.engine.submitted += 1

    def step(self):
        done = []
        for key, state in list(self.running.items()):
            state[1] += 1
            reply, position, budget = state
            if position >= min(len(reply), budget):
                ids = reply[:position]
                done.append((key, Completion(ids, [-0.5] * len(ids), "stop" if position == len(reply) else "length")))
                del self.running[key]
        return done

    def sampled(self, key) -> list[int]:
        reply, position, _ = self.running[key]
        return reply[:position]

    def cancel(self, key) -> None:
        self.running.pop(key, None)

    def release(self, key) -> None:
        return None


class _ScriptedEngine:
    interface = "tokens"
    weight_version = 0

    def __init__(self, tokenizer, *texts: str) -> None:
        self.tokenizer = tokenizer
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.replies = [tokenizer(text, add_special_tokens=False)["input_ids"] + [end] for text in texts]
        self.submitted, self.prompts = 0, []

    def session(self, sampling, *, stop_token_ids):
        return _ScriptedSession(self)


def test_tool_calls_come_back_as_openai_tool_calls_and_results_go_in(tiny) -> None:
    _, tokenizer = tiny
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    server = GatewayServer(_ScriptedEngine(tokenizer, call), model_name="scripted", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=server.episode_url("tools"), api_key="unused", max_retries=0)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "description": "a + b",
                    "parameters": {
                        "type": "object",
                        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    },
                },
            }
        ]
        response = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=tools
        )
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        [tool_call] = choice.message.tool_calls
        assert tool_call.function.name == "add" and json.loads(tool_call.function.arguments) == {"a": 2, "b": 3}
        history = [
            {"role": "user", "content": "2+3?"},
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": "5"},
        ]
        client.chat.completions.create(model="scripted", messages=history, tools=tools)
        one, two = server.store.get("tools").calls
        assert two.prompt_ids[: len(one.prompt_ids) + len(one.completion_ids)] == one.prompt_ids + one.completion_ids
        added = tokenizer.decode(two.prompt_ids[len(one.prompt_ids) + len(one.completion_ids) :])
        assert "<tool_response>\n5\n</tool_response>" in added
        assert "add" in tokenizer.decode(one.prompt_ids)  # the tools are described in the system prompt
        plain = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=tools, tool_choice="none"
        )
        assert plain.choices[0].message.tool_calls is None and "<tool_call>" in plain.choices[0].message.content
    finally:
        server.shutdown()
        server.server_close()


def test_calls_to_trajectories_by_hand() -> None:
    calls = [
        Call([1, 2], [3, 4], [-0.1, -0.2], 0, "stop"),
        Call([1, 2, 3, 4, 5, 6], [7], [-0.3], 1, "stop"),  # extends: observation [5, 6]
        Call([9], [8], [-0.4], 1, "length"),  # does not: a new sample
    ]
    first, second = calls_to_trajectories(calls, reward=2.0, task_id="t", group_id="g")
    assert first.token_ids == [1, 2, 3, 4, 5, 6, 7] and first.loss_mask == [0, 0, 1, 1, 0, 0, 1]
    assert first.sampler_logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    assert [(t.response_start, t.response_end, t.observation_end, t.weight_version) for t in first.turns] == [
        (2, 4, 6, 0),
        (6, 7, 0, 1),
    ]
    assert second.token_ids == [9, 8] and second.loss_mask == [0, 1] and first.reward == second.reward == 2.0
    assert first.weight_versions == [0, 1]


def test_stage_weights_reach_the_next_completion(tiny) -> None:
    model, tokenizer = tiny
    backend = HFBackend(copy.deepcopy(model), tokenizer)
    server = GatewayServer(backend, model_name="tiny", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        assert (
            client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2).system_fingerprint
            == "weights-v0"
        )
        server.service.stage_weights({n: p.detach().clone() for n, p in model.named_parameters()}, 4)
        assert (
            client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2).system_fingerprint
            == "weights-v4"
        )
        assert httpx.get(f"{server.url}/health").json()["weight_version"] == 4
    finally:
        server.shutdown()
        server.server_close()


def test_one_choice_streams_token_by_token(client) -> None:
    whole = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, seed=8)
    chunks = list(client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, seed=8, stream=True))
    contents = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(contents) > 1  # sent as sampled, not in one piece
    assert "".join(contents) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_a_client_that_leaves_mid_stream_frees_its_slot(server) -> None:
    """Reading a few chunks of a long streamed completion and closing the connection: the
    engine stops that sequence at once (nothing left decoding), and no call is recorded."""
    import time

    body = {"model": "tiny", "messages": HELLO, "max_tokens": 4000, "seed": 1, "stream": True}
    with httpx.stream("POST", f"{server.url}/episodes/leaver/v1/chat/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
    assert any(line.startswith("data: ") for line in received)
    deadline = time.monotonic() + 2  # the whole completion takes over 10 s here
    while server.service.active and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.service.active == 0
    trace = server.store.get("leaver")
    assert trace is None or trace.calls == []


# --- top_logprobs, several choices streamed, tool calls in streams -------------------


def _forward_logprobs(model, ids: list[int], start: int, temperature: float) -> torch.Tensor:
    """Log-probs [len(ids) - start, V] of each position from ``start`` on, from one forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, start - 1 : len(ids) - 1].float()
    return torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), -1)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_top_logprobs_are_the_engines_distribution(server, tiny, temperature) -> None:
    """Each sampled token's alternatives are the k most likely tokens of the distribution its
    log-prob comes from: they match a direct forward pass on the same prefix, and the top one
    is at least the sampled token's (the sampled token itself when greedy)."""
    model, tokenizer = tiny
    episode = openai.OpenAI(base_url=server.episode_url(f"top-{temperature}"), api_key="unused", max_retries=0)
    response = episode.chat.completions.create(
        model="tiny", messages=HELLO, max_tokens=6, seed=2, temperature=temperature, logprobs=True, top_logprobs=5
    )
    [call] = server.store.get(f"top-{temperature}").calls
    reference = _forward_logprobs(model, call.prompt_ids + call.completion_ids, len(call.prompt_ids), temperature)
    content = response.choices[0].logprobs.content
    assert len(content) == len(call.completion_ids) == response.usage.completion_tokens
    for position, (entry, token) in enumerate(zip(content, call.completion_ids)):
        values, ids = reference[position].topk(5)
        assert [alt.token for alt in entry.top_logprobs] == [tokenizer.decode([i]) for i in ids.tolist()]
        assert [alt.logprob for alt in entry.top_logprobs] == pytest.approx(values.tolist(), abs=1e-4)
        assert entry.logprob == pytest.approx(reference[position, token].item(), abs=1e-4)
        assert entry.top_logprobs[0].logprob >= entry.logprob
        if temperature == 0:
            assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (entry.token, entry.logprob)


def test_top_logprobs_bounds_and_without_logprobs(server) -> None:
    for body, message in [({"logprobs": True, "top_logprobs": 21}, "[0, 20]"), ({"top_logprobs": 2}, "logprobs: true")]:
        response = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "tiny", "messages": HELLO, **body})
        assert (
            response.status_code == 400
            and response.json()["error"]["param"] == "top_logprobs"
            and message in response.json()["error"]["message"]
        )
    plain = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "tiny", "messages": HELLO, "max_tokens": 2, "logprobs": True, "top_logprobs": 0},
    ).json()
    assert all(entry["top_logprobs"] == [] for entry in plain["choices"][0]["logprobs"]["content"])


def _accumulated(stream) -> openai.types.chat.ChatCompletion:
    """The SDK's accumulation of a chat stream (without its parsing step, which refuses
    finish_reason length)."""
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state = ChatCompletionStreamState()
    chunks = []
    for chunk in stream:
        chunks.append(chunk)
        state.handle_chunk(chunk)
    return state.current_completion_snapshot, chunks


def test_several_choices_stream_interleaved_and_add_up_to_the_response(client) -> None:
    """n=2 streams both choices as they are sampled, each chunk with its own index; what the
    SDK accumulates (content, log-probs with alternatives, finish reasons) is the
    non-streamed response of the same seed."""
    request = {
        "model": "tiny",
        "messages": HELLO,
        "max_tokens": 12,
        "seed": 11,
        "n": 2,
        "logprobs": True,
        "top_logprobs": 2,
    }
    whole = client.chat.completions.create(**request)
    snapshot, chunks = _accumulated(client.chat.completions.create(**request, stream=True))
    order = [c.choices[0].index for c in chunks if c.choices and c.choices[0].delta.content]
    assert order.index(1) < len(order) - 1 - order[::-1].index(0)  # choice 1 started before choice 0 ended
    for mine, theirs in zip(sorted(snapshot.choices, key=lambda c: c.index), whole.choices):
        assert mine.message.content == theirs.message.content and mine.finish_reason == theirs.finish_reason
        assert mine.logprobs.model_dump() == theirs.logprobs.model_dump()


CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ADD_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "a + b",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]


def test_a_tool_call_streams_as_openai_tool_call_deltas(tiny) -> None:
    """Choice 0 writes some text, then a call: the text streams as it is sampled (the
    whitespace before the call and the call itself are held), the call comes as
    ``delta.tool_calls`` (index, id, type, name, then arguments) with finish_reason
    tool_calls. Choice 1's text only looks like the start of a call. The SDK's stream
    accumulation equals the non-streamed message, and the streamed reply continues the
    episode like a non-streamed one."""
    _, tokenizer = tiny
    engine = _ScriptedEngine(tokenizer, f"Let me add.  \n{CALL}", "Plain <tool text, no call.")
    server = GatewayServer(engine, model_name="scripted", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=server.episode_url("streamed-tools"), api_key="unused", max_retries=0)
        request = {"model": "scripted", "messages": [{"role": "user", "content": "2+3?"}], "tools": ADD_TOOLS, "n": 2}
        whole = client.chat.completions.create(**request)
        with client.chat.completions.stream(**request) as stream:
            chunks = [event.chunk for event in stream if event.type == "chunk"]
            final = stream.get_final_completion()
        for mine, theirs in zip(final.choices, whole.choices):
            assert mine.message.content == theirs.message.content and mine.finish_reason == theirs.finish_reason
            assert [(c.id, c.type, c.function.name, c.function.arguments) for c in mine.message.tool_calls or []] == [
                (c.id, c.type, c.function.name, c.function.arguments) for c in theirs.message.tool_calls or []
            ]
        assert whole.choices[0].message.content == "Let me add." and whole.choices[0].finish_reason == "tool_calls"
        [tool_call] = final.choices[0].message.tool_calls
        assert (tool_call.type, tool_call.function.name, json.loads(tool_call.function.arguments)) == (
            "function",
            "add",
            {"a": 2, "b": 3},
        )
        assert (
            whole.choices[1].message.content == "Plain <tool text, no call."
            and whole.choices[1].message.tool_calls is None
        )
        deltas = [(c.choices[0].index, c.choices[0].delta) for c in chunks if c.choices]
        texts = [d.content for i, d in deltas if i == 0 and d.content]
        first_call = next(n for n, (i, d) in enumerate(deltas) if d.tool_calls)
        assert len(texts) > 1 and "".join(texts) == "Let me add." and not any("<" in t for t in texts)
        assert any(d.content for i, d in deltas[:first_call] if i == 1)  # choice 1 streamed while choice 0 was held
        opening, arguments = deltas[first_call][1].tool_calls[0], deltas[first_call + 1][1].tool_calls[0]
        assert (opening.index, opening.id, opening.type, opening.function.name, opening.function.arguments) == (
            0,
            tool_call.id,
            "function",
            "add",
            "",
        )
        assert (arguments.index, arguments.id, arguments.function.arguments) == (0, None, tool_call.function.arguments)
        # The streamed reply continues the episode exactly like the non-streamed one.
        message = final.choices[0].message.model_dump(exclude_none=True, exclude={"parsed"})
        for call in message["tool_calls"]:
            call["function"].pop("parsed_arguments", None)
        history = [
            {"role": "user", "content": "2+3?"},
            message,
            {"role": "tool", "tool_call_id": tool_call.id, "content": "5"},
        ]
        client.chat.completions.create(model="scripted", messages=history, tools=ADD_TOOLS)
        calls = server.store.get("streamed-tools").calls
        [streamed] = [call for call in calls[2:4] if call.reply.get("tool_calls")]  # the streamed request's choice 0
        follow = calls[-1]
        assert (
            follow.prompt_ids[: len(streamed.prompt_ids) + len(streamed.completion_ids)]
            == streamed.prompt_ids + streamed.completion_ids
        )
    finally:
        server.shutdown()
        server.server_close()


def test_a_chat_template_that_renders_tools_describes_them(tools_tokenizer) -> None:
    """With a template that renders ``tools`` (as Qwen's), the gateway passes the request's
    tools to it instead of writing the parser's tools prompt into the system message."""
    server = GatewayServer(_ScriptedEngine(tools_tokenizer, CALL), model_name="scripted", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        response = client.chat.completions.create(
            model="scripted",
            messages=[{"role": "system", "content": "Be exact."}, {"role": "user", "content": "2+3?"}],
            tools=ADD_TOOLS,
        )
        assert response.choices[0].finish_reason == "tool_calls"
        prompt = tools_tokenizer.decode(server.service.backend.prompts[0])
        assert prompt.startswith("<|im_start|>system\nBe exact.\n\n# Tools\n" + json.dumps(ADD_TOOLS[0]) + "\n")
        assert "You can call these tools" not in prompt
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("framing", [True, False])
def test_tool_results_are_framed_once(framing, tools_tokenizer, framing_tokenizer) -> None:
    """A template that frames tool messages itself (Qwen's <tool_response>) gets the bare
    result; one that does not gets the parser's frame: the model sees one frame either way."""
    tokenizer = framing_tokenizer if framing else tools_tokenizer
    server = GatewayServer(_ScriptedEngine(tokenizer, "5"), model_name="scripted", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        history = [
            {"role": "user", "content": "2+3?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "5"},
        ]
        client.chat.completions.create(model="scripted", messages=history, tools=ADD_TOOLS)
        prompt = tokenizer.decode(server.service.backend.prompts[0])
        assert (
            prompt.count("<tool_response>\n5\n</tool_response>") == 1
            and "<tool_response>\n<tool_response>" not in prompt
        )
    finally:
        server.shutdown()
        server.server_close()


def test_streams_with_stop_strings_and_tools_add_up_to_the_response(client) -> None:
    """The tiny model's real tokens with tools offered and stop strings: what is held back
    while sampling (a possible stop string or call, trailing whitespace) is settled at the
    end, so each streamed choice is the non-streamed one."""
    request = {
        "model": "tiny",
        "messages": HELLO,
        "max_tokens": 16,
        "seed": 4,
        "n": 3,
        "stop": ["e", "<"],
        "tools": ADD_TOOLS,
    }
    whole = client.chat.completions.create(**request)
    snapshot, _ = _accumulated(client.chat.completions.create(**request, stream=True))
    assert any(choice.finish_reason == "stop" for choice in whole.choices)
    for mine, theirs in zip(sorted(snapshot.choices, key=lambda c: c.index), whole.choices):
        assert (mine.message.content, mine.finish_reason) == (theirs.message.content, theirs.finish_reason)


def test_an_engine_without_alternatives_refuses_top_logprobs(tiny) -> None:
    server = GatewayServer(_ScriptedEngine(tiny[1], "hi"), model_name="scripted", port=0)
    server.start()
    try:
        chat = httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "scripted", "messages": HELLO, "logprobs": True, "top_logprobs": 2},
        )
        text = httpx.post(f"{server.url}/v1/completions", json={"model": "scripted", "prompt": "x", "logprobs": 2})
        assert (chat.status_code, chat.json()["error"]["param"]) == (400, "top_logprobs")
        assert (text.status_code, text.json()["error"]["param"]) == (400, "logprobs")
        plain = httpx.post(
            f"{server.url}/v1/completions", json={"model": "scripted", "prompt": "x", "logprobs": 0}
        ).json()
        assert plain["choices"][0]["logprobs"]["token_logprobs"] == [-0.5] * plain["usage"]["completion_tokens"]
    finally:
        server.shutdown()
        server.server_close()


def test_an_idle_session_serves_the_next_turn_until_it_expires_or_its_weights_change(tiny) -> None:
    """An agent's turns come one at a time with its tool running in between: the service
    keeps the idle session (no new weight packing per turn) for ``keep_idle_s``, and closes
    it at once when the engine counts new weights (a trainer updated them in place)."""
    import time

    from agentic_rl.chat import ChatRenderer
    from agentic_rl.gateway.service import CompletionService

    model, tokenizer = tiny
    renderer = ChatRenderer(tokenizer)
    prompt = renderer.prompt_ids(HELLO)

    def service_with_count(keep_idle_s: float):
        backend = HFBackend(copy.deepcopy(model), tokenizer)
        opened = []
        session = backend.session
        backend.session = lambda *args, **kwargs: opened.append(1) or session(*args, **kwargs)
        return (
            backend,
            CompletionService(backend, stop_token_ids=renderer.stop_token_ids, keep_idle_s=keep_idle_s),
            opened,
        )

    backend, service, opened = service_with_count(0.5)
    try:
        first = service.submit(prompt, max_tokens=3, seed=0).result(timeout=60)
        second = service.submit(prompt, max_tokens=3, seed=0).result(timeout=60)
        assert len(opened) == 1 and second.token_ids == first.token_ids
        backend.sync_weights()  # version 1: the kept session's packed copies may be stale
        third = service.submit(prompt, max_tokens=3, seed=0).result(timeout=60)
        assert len(opened) == 2 and third.weight_version == 1 and third.token_ids == first.token_ids
        time.sleep(0.8)  # past keep_idle_s: closed
        service.submit(prompt, max_tokens=3, seed=0).result(timeout=60)
        assert len(opened) == 3
    finally:
        service.close()
    backend, service, opened = service_with_count(0.0)  # a trainer shares the weights: nothing outlives a turn
    try:
        for _ in range(2):
            service.submit(prompt, max_tokens=3, seed=0).result(timeout=60)
        assert len(opened) == 2
    finally:
        service.close()
