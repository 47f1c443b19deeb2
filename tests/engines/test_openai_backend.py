"""OpenAIChatBackend against a real fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentic_rl.engines.openai import BackendError, ChatCompletion, OpenAIChatBackend


class FakeServer(ThreadingHTTPServer):
    """Canned replies ("echo: <last user message>") plus knobs for failure modes."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []  # {"path", "headers", "body"}
        self.fail_first = 0  # answer the next N requests with fail_status
        self.fail_status = 500
        self.always_fail = False
        self.reject_logprobs = False
        self.delays: dict[str, float] = {}  # last user message -> seconds to sleep
        self.finish_reason = "stop"
        self.content_is_none = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.reject_tools = False
        self.tool_reply = None  # (name, arguments JSON string): answer requests with tools with this call

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class FakeHandler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            fail = srv.always_fail or srv.fail_first > 0
            srv.fail_first = max(0, srv.fail_first - 1)
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            if self.path != "/v1/chat/completions":
                return self._send(404, {"error": {"message": "not found"}})
            if fail:
                return self._send(srv.fail_status, {"error": {"message": "server exploded"}})
            if srv.reject_logprobs and "logprobs" in body:
                return self._send(400, {"error": {"message": "logprobs are not supported by this server"}})
            if srv.reject_tools and "tools" in body:
                return self._send(
                    400,
                    {
                        "error": {
                            "message": '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
                        }
                    },
                )
            if srv.tool_reply is not None and "tools" in body:
                if body["messages"][-1]["role"] == "tool":  # the result is back: answer with it
                    message = {"role": "assistant", "content": f"<answer>{body['messages'][-1]['content']}</answer>"}
                else:
                    name, arguments = srv.tool_reply
                    message = {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "chatcmpl-tool-1",
                                "type": "function",
                                "function": {"name": name, "arguments": arguments},
                            }
                        ],
                    }
                return self._send(200, {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})
            last_user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
            time.sleep(srv.delays.get(last_user, 0.0))
            text = f"echo: {last_user}"
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": None if srv.content_is_none else text},
                "finish_reason": srv.finish_reason,
            }
            words = text.split()
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": w, "logprob": -0.5 * (i + 1), "top_logprobs": []} for i, w in enumerate(words)
                    ]
                }
            self._send(200, {"choices": [choice], "usage": {"completion_tokens": len(words), "prompt_tokens": 3}})
        finally:
            with srv.lock:
                srv.in_flight -= 1


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def make_backend(server: FakeServer, **kwargs: Any) -> OpenAIChatBackend:
    kwargs.setdefault("retry_backoff_s", 0.01)
    return OpenAIChatBackend("fake-model", server.base_url, **kwargs)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


SAMPLING = {"temperature": 0.7, "top_p": 0.9, "max_tokens": 32}


def test_request_contents_and_parsing(server: FakeServer) -> None:
    with make_backend(server, api_key="sk-test") as backend:
        [result] = backend.chat([user("hello world")], seed=7, stop=["\n\n"], **SAMPLING)
    assert result == ChatCompletion(
        text="echo: hello world", finish_reason="stop", token_logprobs=[-0.5, -1.0, -1.5], completion_tokens=3
    )
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "fake-model"
    assert body["messages"] == user("hello world")
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, 32)
    assert body["seed"] == 7
    assert body["stop"] == ["\n\n"]
    assert body["logprobs"] is True


def test_optional_fields_omitted_and_env_key(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with make_backend(server, request_logprobs=False) as backend:
        [result] = backend.chat([user("a")], **SAMPLING)
    assert result.token_logprobs is None
    body = server.requests[0]["body"]
    assert "seed" not in body and "stop" not in body and "logprobs" not in body
    assert "Authorization" not in server.requests[0]["headers"]

    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    with make_backend(server) as backend:
        backend.chat([user("b")], **SAMPLING)
    assert server.requests[1]["headers"]["Authorization"] == "Bearer sk-env"


def test_messages_keep_only_portable_keys(server: FakeServer) -> None:
    conversation = [
        {"role": "user", "content": "q", "name": "alice", "extra": 1},
        {"role": "assistant", "content": "call", "tool_calls": [{"id": "1"}], "reasoning": "..."},
        {"role": "tool", "content": "out", "tool_call_id": "1"},
        {"role": "user", "content": "last"},
    ]
    with make_backend(server) as backend:
        backend.chat([conversation], **SAMPLING)
    assert server.requests[0]["body"]["messages"] == [
        {"role": "user", "content": "q", "name": "alice"},
        {"role": "assistant", "content": "call"},
        {"role": "tool", "content": "out", "tool_call_id": "1"},
        {"role": "user", "content": "last"},
    ]
    assert "extra" in conversation[0]  # the caller's messages are not mutated


@pytest.mark.parametrize(
    ("server_reason", "expected"), [("length", "length"), ("content_filter", "stop"), (None, "stop")]
)
def test_finish_reason_normalised(server: FakeServer, server_reason: str | None, expected: str) -> None:
    server.finish_reason = server_reason  # type: ignore[assignment]
    with make_backend(server) as backend:
        assert backend.chat([user("x")], **SAMPLING)[0].finish_reason == expected


def test_none_content_becomes_empty_text(server: FakeServer) -> None:
    server.content_is_none = True
    with make_backend(server) as backend:
        assert backend.chat([user("x")], **SAMPLING)[0].text == ""


def test_results_keep_input_order_under_concurrency(server: FakeServer) -> None:
    prompts = [f"q{i}" for i in range(6)]
    server.delays = {p: 0.05 * (len(prompts) - i) for i, p in enumerate(prompts)}  # first finishes last
    with make_backend(server, max_concurrency=6) as backend:
        results = backend.chat([user(p) for p in prompts], **SAMPLING)
    assert [r.text for r in results] == [f"echo: {p}" for p in prompts]
    assert server.max_in_flight > 1


def test_concurrency_is_bounded(server: FakeServer) -> None:
    prompts = [f"q{i}" for i in range(6)]
    server.delays = {p: 0.05 for p in prompts}
    with make_backend(server, max_concurrency=2) as backend:
        backend.chat([user(p) for p in prompts], **SAMPLING)
    assert server.max_in_flight <= 2


@pytest.mark.parametrize("status", [500, 503, 429])
def test_retries_transient_failures(server: FakeServer, status: int) -> None:
    server.fail_first, server.fail_status = 2, status
    with make_backend(server, max_retries=2) as backend:
        [result] = backend.chat([user("retry me")], **SAMPLING)
    assert result.text == "echo: retry me"
    assert len(server.requests) == 3


def test_gives_up_after_max_retries(server: FakeServer) -> None:
    server.always_fail = True
    with make_backend(server, max_retries=2) as backend:
        with pytest.raises(BackendError) as info:
            backend.chat([user("doomed")], **SAMPLING)
    message = str(info.value)
    assert "\n" not in message
    assert server.base_url + "/chat/completions" in message and "500" in message
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(server: FakeServer) -> None:
    with OpenAIChatBackend("fake-model", server.base_url + "/wrong", retry_backoff_s=0.01) as backend:
        with pytest.raises(BackendError, match="404"):
            backend.chat([user("x")], **SAMPLING)
    assert len(server.requests) == 1


def test_logprobs_rejection_falls_back_and_is_remembered(server: FakeServer) -> None:
    server.reject_logprobs = True
    with make_backend(server, max_retries=0) as backend:
        [first] = backend.chat([user("a")], **SAMPLING)
        [second] = backend.chat([user("b")], **SAMPLING)
    assert first.text == "echo: a" and first.token_logprobs is None
    assert second.text == "echo: b"
    assert ["logprobs" in r["body"] for r in server.requests] == [True, False, False]


def test_connection_refused_raises_backend_error() -> None:
    with socket.socket() as sock:  # grab a free loopback port, then leave it closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with OpenAIChatBackend("m", url, max_retries=1, retry_backoff_s=0.01) as backend:
        with pytest.raises(BackendError, match=f"127.0.0.1:{port}"):
            backend.chat([user("x")], **SAMPLING)


def test_kind_is_chat() -> None:
    assert OpenAIChatBackend.interface == "chat"


# --- tools ------------------------------------------------------------------------

ADD = {
    "name": "add",
    "description": "a + b",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
}


def test_tools_are_sent_and_parsed_calls_come_back_in_the_parser_format(server: FakeServer) -> None:
    """A server that parses tool calls (vLLM with a tool parser) returns them structured;
    the reply's text is the call written in the env's format, which the env's parser reads
    back to the same call."""
    from agentic_rl.parsers import get_parser

    server.tool_reply = ("add", '{"a": 2, "b": 3}')
    with make_backend(server) as backend:
        [reply] = backend.chat([user("2+3?")], tools=[[ADD]], **SAMPLING)
    body = server.requests[0]["body"]
    assert body["tools"] == [{"type": "function", "function": ADD}]
    assert reply.text == '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    assert [(c.name, c.arguments, c.id) for c in reply.tool_calls] == [("add", {"a": 2, "b": 3}, "chatcmpl-tool-1")]
    [call] = get_parser("hermes").parse(reply.text).calls
    assert (call.name, call.arguments) == ("add", {"a": 2, "b": 3})
    assert reply.finish_reason == "stop"


def test_history_goes_out_structured_when_tools_are_sent(server: FakeServer) -> None:
    conversation = [
        *user("2+3?"),
        {
            "role": "assistant",
            "content": 'Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>',
        },
        {"role": "tool", "name": "add", "content": "<tool_response>\n5\n</tool_response>"},
        {"role": "assistant", "content": "<tool_call>\nnot json\n</tool_call>"},
        {"role": "tool", "content": "<tool_response>\nError: invalid JSON\n</tool_response>"},
        {"role": "user", "content": "go on"},
    ]
    with make_backend(server) as backend:
        backend.chat([conversation], tools=[[ADD]], **SAMPLING)
    messages = server.requests[0]["body"]["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": "Adding.",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_0", "content": "5"}
    # A malformed call stays text, and its error (no call to answer) goes back as a user message.
    assert messages[4] == {"role": "assistant", "content": "<tool_call>\nnot json\n</tool_call>"}
    assert messages[5] == {"role": "user", "content": "<tool_response>\nError: invalid JSON\n</tool_response>"}
    assert messages[6] == {"role": "user", "content": "go on"}


def test_plain_content_is_the_fallback(server: FakeServer) -> None:
    with make_backend(server) as backend:
        [reply] = backend.chat([user("<tool_call>as text</tool_call>")], tools=[[ADD]], **SAMPLING)
    assert reply.text == "echo: <tool_call>as text</tool_call>" and reply.tool_calls == []
    assert "tools" in server.requests[0]["body"]


def test_a_server_that_refuses_tools_gets_plain_text_from_then_on(server: FakeServer) -> None:
    server.reject_tools = True
    conversation = [
        *user("2+3?"),
        {"role": "assistant", "content": '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>'},
        {"role": "tool", "name": "add", "content": "<tool_response>\n5\n</tool_response>"},
        {"role": "user", "content": "and?"},
    ]
    with make_backend(server, max_retries=0) as backend:
        [first] = backend.chat([conversation], tools=[[ADD]], **SAMPLING)
        [second] = backend.chat([user("b")], tools=[[ADD]], **SAMPLING)
    assert first.text == "echo: and?" and second.text == "echo: b"
    assert ["tools" in r["body"] for r in server.requests] == [True, False, False]
    assert server.requests[1]["body"]["messages"] == [
        {k: m[k] for k in ("role", "content", "name") if k in m} for m in conversation
    ]


def test_no_tools_no_tools_field(server: FakeServer) -> None:
    with make_backend(server) as backend:
        backend.chat([user("a"), user("b")], tools=[None, []], **SAMPLING)
    assert all("tools" not in r["body"] for r in server.requests)


def test_a_rollout_through_a_tool_parsing_server_runs_the_env_tools(server: FakeServer) -> None:
    """The rollout engine sends the env's tool schemas; the server's structured call reaches
    the env as text in its format, the calculator runs, and its result goes back as a tool
    message tied to the call."""
    from agentic_rl import envs
    from agentic_rl.config import RolloutConfig
    from agentic_rl.rollout.engine import rollout

    server.tool_reply = ("calculator", '{"expression": "2 + 3"}')
    with make_backend(server) as backend:
        [group] = rollout(backend, lambda: envs.make("arithmetic", max_turns=3), [0], config=RolloutConfig())
    [trajectory] = group.trajectories
    calculator_schema = envs.make("arithmetic").tools.schemas()
    assert (
        server.requests[0]["body"]["tools"] == calculator_schema
        and calculator_schema[0]["function"]["name"] == "calculator"
    )
    [call_turn, answer_turn] = trajectory.turns
    assert call_turn.assistant_text.startswith("<tool_call>") and [r.ok for r in call_turn.tool_results] == [True]
    result = call_turn.tool_results[0].content
    assert server.requests[1]["body"]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0", "content": result}
    assert answer_turn.assistant_text == f"<answer>{result}</answer>" and trajectory.termination_reason == "answered"
