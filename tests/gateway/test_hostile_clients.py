"""The gateway under hostile clients: malformed-but-JSON requests are 4xx with an
OpenAI-style JSON error (never a 500), an episode keeps only what it needs and at most its
bounds, and rewards are written only with the server's write token."""

from __future__ import annotations

import copy

import httpx
import pytest

openai = pytest.importorskip("openai")

from agentic_rl.engines.hf import HFBackend  # noqa: E402
from agentic_rl.gateway.agent_training import AgentSampler  # noqa: E402
from agentic_rl.gateway.server import GatewayServer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
HELLO = [{"role": "user", "content": "Say hi."}]


def _post(server, path: str, body, headers: dict | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else None
    return httpx.post(
        f"{server.url}{path}", json=None if content else body, content=content, headers=headers, timeout=60
    )


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"[" * 200_000 + b"]" * 200_000, None),  # nested deeper than the parser recurses
        (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e400}', None),
        ({"messages": HELLO, "stream": True, "stream_options": [1]}, "stream_options"),
        ({"messages": HELLO + [{"role": "assistant", "tool_calls": [{"id": "a", "function": "f"}]}]}, "messages[1]"),
        ({"messages": HELLO + [{"role": "assistant", "tool_calls": 5}]}, "messages[1]"),
        ({"messages": HELLO + [{"role": "assistant", "tool_calls": [{"id": ["a"], "function": {"name": "f"}}]}]}, None),
        ({"messages": HELLO + [{"role": "tool", "content": "x", "tool_call_id": ["a"]}]}, "messages[1]"),
        ({"messages": HELLO + [{"role": "tool", "content": "x", "name": {"a": 1}}]}, "messages[1]"),
        ({"messages": HELLO, "seed": 10**30}, "seed"),
        ({"messages": HELLO, "n": 10**30}, "n"),
    ],
)
def test_malformed_chat_requests_are_400_with_a_json_error(server, body, param) -> None:
    response = _post(server, "/v1/chat/completions", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param


def test_rewards_are_written_only_with_the_write_token(server) -> None:
    assert len(server.write_token) >= 32
    for headers in (None, {"Authorization": "Bearer unused"}):
        refused = _post(server, "/episodes/r1/reward", {"reward": 1.0}, headers)
        assert refused.status_code == 403 and "write token" in refused.json()["error"]["message"]
    assert server.store.get("r1") is None or server.store.get("r1").reward is None
    writer = {"Authorization": f"Bearer {server.write_token}"}
    assert _post(server, "/episodes/r1/reward", {"reward": 0.5}, writer).json() == {"episode_id": "r1", "reward": 0.5}
    assert server.store.get("r1").reward == 0.5
    for reward in (10**400, float("inf"), "1", True):
        body = b'{"reward": %s}' % str(reward).encode() if not isinstance(reward, str) else {"reward": reward}
        assert _post(server, "/episodes/r1/reward", body, writer).status_code == 400


def test_a_configured_token_is_the_write_token(tiny) -> None:
    model, tokenizer = tiny
    server = GatewayServer(HFBackend(copy.deepcopy(model), tokenizer), model_name="tiny", port=0, token="s3cret")
    server.start()
    try:
        assert server.write_token == "s3cret"
        writer = {"Authorization": "Bearer s3cret"}
        assert _post(server, "/episodes/e/reward", {"reward": 1}, writer).status_code == 200
        assert _post(server, "/episodes/e/reward", {"reward": 1}).status_code == 401
    finally:
        server.shutdown()
        server.server_close()


def test_an_agent_posts_its_reward_with_its_clients_key(server) -> None:
    def agent(task, client):
        client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=2)
        url = str(client.base_url).rstrip("/").removesuffix("/v1") + "/reward"
        httpx.post(url, json={"reward": 1.0}, headers={"Authorization": f"Bearer {client.api_key}"}).raise_for_status()

    sampler = AgentSampler(server, agent, [{"id": "t"}], reward=lambda result, task: 0.0, concurrency=1)
    try:
        groups, metrics = sampler.sample([0], 1, seed=0)
    finally:
        sampler.close()
    assert metrics["agent_errors"] == 0 and groups[0].trajectories[0].reward == 1.0


@pytest.fixture(scope="module")
def bounded(tiny):
    model, tokenizer = tiny
    server = GatewayServer(
        HFBackend(copy.deepcopy(model), tokenizer),
        model_name="tiny",
        port=0,
        max_episode_calls=3,
        max_episode_bytes=200_000,
    )
    server.start()
    yield server
    server.shutdown()
    server.server_close()


def test_an_episode_keeps_no_extra_keys_and_still_chains(bounded) -> None:
    padding = "x" * 1_000_000  # what a client may put beside the fields the prompt is built from
    messages = [{"role": "user", "content": "Say hi.", "junk": padding}]
    first = _post(bounded, "/episodes/lean/v1/chat/completions", {"messages": messages, "max_tokens": 3, "seed": 1})
    assert first.status_code == 200, first.text
    reply = {**first.json()["choices"][0]["message"], "extra": padding}
    history = [*messages, reply, {"role": "user", "content": "Again.", "junk": padding}]
    second = _post(bounded, "/episodes/lean/v1/chat/completions", {"messages": history, "max_tokens": 3, "seed": 2})
    assert second.status_code == 200, second.text
    one, two = bounded.store.get("lean").calls
    assert two.prompt_ids[: len(one.prompt_ids) + len(one.completion_ids)] == one.prompt_ids + one.completion_ids
    assert bounded.store.get("lean").nbytes < 20_000  # the megabytes of extra keys are not kept
    assert not hasattr(one, "messages")


def test_an_episode_past_its_bounds_is_refused_naming_the_bound(bounded) -> None:
    body = {"messages": HELLO, "max_tokens": 2}
    for _ in range(3):
        assert _post(bounded, "/episodes/full/v1/chat/completions", body).status_code == 200
    refused = _post(bounded, "/episodes/full/v1/chat/completions", body)
    assert refused.status_code == 413 and "max_episode_calls" in refused.json()["error"]["message"]
    text = _post(bounded, "/episodes/full/v1/completions", {"prompt": "hi", "max_tokens": 2})
    assert text.status_code == 413 and "max_episode_calls" in text.json()["error"]["message"]
    assert len(bounded.store.get("full").calls) == 3
    assert _post(bounded, "/v1/chat/completions", body).status_code == 200  # outside episodes: nothing is kept
    writer = {"Authorization": f"Bearer {bounded.write_token}"}
    info = {"reward": 1.0, "info": {"log": "y" * 300_000}}
    big = _post(bounded, "/episodes/full/reward", info, writer)
    assert big.status_code == 413 and "max_episode_bytes" in big.json()["error"]["message"]
    wide = {"messages": HELLO, "max_tokens": 2, "n": 16}  # 16 choices would pass the calls bound
    assert _post(bounded, "/episodes/wide/v1/chat/completions", wide).status_code == 413


def test_text_the_tokenizer_drops_or_cannot_take_is_a_400_and_the_engine_lives_on(server) -> None:
    for body in ({"prompt": "\x04", "max_tokens": 2}, b'{"prompt": "\\ud800", "max_tokens": 2}'):
        response = _post(server, "/v1/completions", body)
        assert response.status_code == 400, response.text
    chat = b'{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}'
    assert _post(server, "/v1/chat/completions", chat).status_code == 400
    failed = server.service.submit([], max_tokens=2, seed=0)  # past the checks: only this request fails
    with pytest.raises(ValueError, match="token_ids is empty"):
        failed.result(timeout=60)
    assert _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}).status_code == 200
