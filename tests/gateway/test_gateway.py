"""The OpenAI-compatible gateway, driven by the official `openai` SDK: chat completions
(plain, streamed, with tools), OpenAI-style errors, and per-episode traces whose token ids
are exactly what the engine sampled and chain into multi-turn trajectories."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

openai = pytest.importorskip("openai")

from agentic_rl.engines.base import Completion  # noqa: E402
from agentic_rl.engines.hf import HFBackend  # noqa: E402
from agentic_rl.gateway import calls_to_trajectories  # noqa: E402
from agentic_rl.gateway.server import GatewayServer  # noqa: E402
from agentic_rl.gateway.traces import Call  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
HELLO = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]


@pytest.fixture(scope="module")
def server(tiny):
    model, tokenizer = tiny
    server = GatewayServer(HFBackend(copy.deepcopy(model), tokenizer), model_name="tiny", port=0)
    server.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


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
    chunks = list(client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=8, seed=5, n=2, stream=True, stream_options={"include_usage": True}))
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    for index in range(2):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == index)
        assert text == whole.choices[index].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_concurrent_requests_get_what_they_would_get_alone(client) -> None:
    """16 requests at once share decode batches; each one's tokens depend only on its seed."""
    alone = [client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, seed=s).choices[0].message.content for s in range(4)]
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda s: client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=6, seed=s % 4).choices[0].message.content, range(16)))
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
    ],
)
def test_bad_requests_are_openai_style_400s(server, body, param) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and "\n" not in error["message"]


def test_malformed_json_unknown_routes_and_the_sdk_error(server, client) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["message"] == "the body must be JSON"
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
    history = [*HELLO, first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "And again."}]
    episode.chat.completions.create(model="tiny", messages=history, max_tokens=6, seed=2)
    assert httpx.post(f"{server.url}/episodes/agent-1/reward", json={"reward": 1.0}).json()["reward"] == 1.0
    trace = httpx.get(f"{server.url}/episodes/agent-1").json()
    assert trace["reward"] == 1.0 and len(trace["calls"]) == 2
    one, two = trace["calls"]
    assert two["prompt_ids"][: len(one["prompt_ids"]) + len(one["completion_ids"])] == one["prompt_ids"] + one["completion_ids"]
    tokenizer = tiny[1]
    assert tokenizer.decode(two["prompt_ids"][len(one["prompt_ids"]) + len(one["completion_ids"]) :]).count("And again.") == 1
    calls = server.store.get("agent-1").calls
    [trajectory] = calls_to_trajectories(calls, reward=1.0)
    assert trajectory.token_ids == two["prompt_ids"] + two["completion_ids"]
    sampled = [t for t, m in zip(trajectory.token_ids, trajectory.loss_mask) if m]
    assert sampled == one["completion_ids"] + two["completion_ids"]
    assert [lp for lp, m in zip(trajectory.sampler_logprobs, trajectory.loss_mask) if m] == one["logprobs"] + two["logprobs"]
    assert trajectory.reward == 1.0 and trajectory.num_turns == 2


def test_an_agent_that_rewrites_its_history_gives_one_sample_per_call(server) -> None:
    episode = openai.OpenAI(base_url=server.episode_url("summariser"), api_key="unused", max_retries=0)
    episode.chat.completions.create(model="tiny", messages=HELLO, max_tokens=4, seed=1)
    episode.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Summary: they said hi. Continue."}], max_tokens=4, seed=2)
    assert len(calls_to_trajectories(server.store.get("summariser").calls, reward=0.5)) == 2


def test_the_episode_header_joins_an_episode_on_the_plain_routes(server) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", json={"model": "tiny", "messages": HELLO, "max_tokens": 3}, headers={"x-episode-id": "by-header"})
    assert response.status_code == 200 and len(server.store.get("by-header").calls) == 1


class _ScriptedSession:
    """A decode session that answers every prompt with the same scripted tokens."""

    def __init__(self, reply_ids: list[int]) -> None:
        self.reply_ids, self.queued = reply_ids, []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    @property
    def busy(self) -> bool:
        return bool(self.queued)

    def submit(self, key, token_ids, max_new_tokens, seed) -> None:
        self.queued.append(key)

    def step(self):
        done, self.queued = self.queued, []
        return [(key, Completion(list(self.reply_ids), [-0.5] * len(self.reply_ids), "stop")) for key in done]

    def release(self, key) -> None:
        return None


class _ScriptedEngine:
    interface = "tokens"
    weight_version = 0

    def __init__(self, tokenizer, text: str) -> None:
        self.tokenizer = tokenizer
        self.reply_ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]

    def session(self, sampling, *, stop_token_ids):
        return _ScriptedSession(self.reply_ids)


def test_tool_calls_come_back_as_openai_tool_calls_and_results_go_in(tiny) -> None:
    _, tokenizer = tiny
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    server = GatewayServer(_ScriptedEngine(tokenizer, call), model_name="scripted", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=server.episode_url("tools"), api_key="unused", max_retries=0)
        tools = [{"type": "function", "function": {"name": "add", "description": "a + b", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
        response = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=tools)
        choice = response.choices[0]
        assert choice.finish_reason == "tool_calls"
        [tool_call] = choice.message.tool_calls
        assert tool_call.function.name == "add" and json.loads(tool_call.function.arguments) == {"a": 2, "b": 3}
        history = [{"role": "user", "content": "2+3?"}, choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": tool_call.id, "content": "5"}]
        client.chat.completions.create(model="scripted", messages=history, tools=tools)
        one, two = server.store.get("tools").calls
        assert two.prompt_ids[: len(one.prompt_ids) + len(one.completion_ids)] == one.prompt_ids + one.completion_ids
        added = tokenizer.decode(two.prompt_ids[len(one.prompt_ids) + len(one.completion_ids) :])
        assert "<tool_response>\n5\n</tool_response>" in added
        assert "add" in tokenizer.decode(one.prompt_ids)  # the tools are described in the system prompt
        plain = client.chat.completions.create(model="scripted", messages=[{"role": "user", "content": "2+3?"}], tools=tools, tool_choice="none")
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
    assert [(t.response_start, t.response_end, t.observation_end, t.weight_version) for t in first.turns] == [(2, 4, 6, 0), (6, 7, 0, 1)]
    assert second.token_ids == [9, 8] and second.loss_mask == [0, 1] and first.reward == second.reward == 2.0
    assert first.weight_versions == [0, 1]


def test_stage_weights_reach_the_next_completion(tiny) -> None:
    model, tokenizer = tiny
    backend = HFBackend(copy.deepcopy(model), tokenizer)
    server = GatewayServer(backend, model_name="tiny", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2).system_fingerprint == "weights-v0"
        server.service.stage_weights({n: p.detach().clone() for n, p in model.named_parameters()}, 4)
        assert client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2).system_fingerprint == "weights-v4"
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
