"""Property-based fuzzing (hypothesis, bounded) of the HTTP servers' request bodies, in
process: OpenAI chat completions and text completions against the gateway's app (the tiny
model, short contexts), and ``/retrieve`` against the retrieval app. Whatever the shape,
the answer is never a 5xx, and a refusal is a 4xx with a JSON error body."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl.chat import ChatRenderer
from agentic_rl.engines.hf import HFBackend
from agentic_rl.gateway.app import create_app as gateway_app
from agentic_rl.gateway.service import CompletionService
from agentic_rl.parsers.base import get_parser
from agentic_rl.retrieval import BM25Retriever, Document
from agentic_rl.retrieval.app import create_app as retrieval_app

TestClient = pytest.importorskip("fastapi.testclient").TestClient
pytestmark = pytest.mark.usefixtures("one_thread")

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

# Numbers at and past every bound: huge, overflowing, negative, fractional, NaN-free (JSON has none).
numbers = st.sampled_from([0, 1, 2, 3, -1, 16, 17, 10**30, -(10**30), 2**63, 0.5, 1.5, 2.5, 1e300, -1e300])
# Text a tokenizer drops (control characters), cannot take (a lone surrogate), or reads as markup.
nasty = st.sampled_from(["\ud800", "\x04", "\x04\x06", "\x00", " ", "<|im_end|>", "<tool_call>", "</tool_call>"])
text = st.text(max_size=12) | nasty
scalars = st.none() | st.booleans() | numbers | st.integers() | st.floats(allow_nan=False) | text
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)


def mostly(valid, junk=json_values):
    """``valid`` three times in four, else ``junk``: most requests get past the first check."""
    return st.sampled_from([valid, valid, valid, junk]).flatmap(lambda chosen: chosen)


function = st.fixed_dictionaries(
    {"name": mostly(st.sampled_from(["add", "calc"]))},
    optional={"arguments": mostly(st.sampled_from(['{"a": 1}', "{}", "[1]", "{", "null", ""]))},
)
tool_call = st.fixed_dictionaries(
    {"function": mostly(function)},
    optional={"id": mostly(st.sampled_from(["call_1", ""])), "type": mostly(st.just("function"))},
)
content = (
    st.text(max_size=30)
    | nasty
    | st.lists(st.fixed_dictionaries({"type": mostly(st.just("text")), "text": mostly(text)}), max_size=2)
)
message = st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["system", "developer", "user", "assistant", "tool"]))},
    optional={
        "content": mostly(content),
        "tool_calls": mostly(st.lists(tool_call, max_size=2)),
        "tool_call_id": mostly(st.sampled_from(["call_1", "call_2"])),
        "name": mostly(st.text(max_size=8)),
        "extra": json_values,
    },
)
tool = st.fixed_dictionaries(
    {
        "function": mostly(
            st.fixed_dictionaries(
                {"name": mostly(st.sampled_from(["add", "calc"]))},
                optional={"description": scalars, "parameters": json_values},
            )
        )
    },
    optional={"type": mostly(st.just("function"))},
)
sampling = {
    "max_tokens": mostly(st.integers(-1, 4), numbers),
    "temperature": mostly(st.floats(0, 2), numbers),
    "top_p": mostly(st.floats(0, 1), numbers),
    "n": mostly(st.integers(0, 3), numbers),
    "seed": mostly(st.integers(), numbers),
    "stop": mostly(st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=5)),
    "stream": mostly(st.booleans()),
    "stream_options": mostly(st.fixed_dictionaries({}, optional={"include_usage": st.booleans()})),
    "extra_key": json_values,
}
chat_body = st.fixed_dictionaries(
    {"messages": mostly(st.lists(message, min_size=1, max_size=4))},
    optional={
        **sampling,
        "max_completion_tokens": mostly(st.integers(-1, 4)),
        "tools": mostly(st.lists(tool, max_size=2)),
        "tool_choice": mostly(st.sampled_from(["auto", "none", "required"])),
        "logprobs": mostly(st.booleans()),
        "top_logprobs": mostly(st.integers(-1, 21)),
    },
)
text_body = st.fixed_dictionaries(
    {
        "prompt": mostly(
            st.text(min_size=1, max_size=20)
            | nasty
            | st.lists(st.integers(-5, 300), min_size=1, max_size=6)
            | st.lists(text | st.lists(st.integers(-1, 300), max_size=4), max_size=3)
        )
    },
    optional={
        **sampling,
        "logprobs": mostly(st.integers(-1, 21)),
        "echo": mostly(st.booleans()),
        "best_of": mostly(st.integers(0, 3)),
        "suffix": scalars,
    },
)
raw_bodies = st.sampled_from(
    [b"", b"{", b"[]", b"null", b"[" * 5000, b'{"a": 1e999}', b'{"n": NaN}', b"\xff\xfe", b"1" * 5000, b'"x"']
) | st.binary(max_size=40)


@pytest.fixture(scope="module")
def gateway(tiny):
    model, tokenizer = tiny
    renderer = ChatRenderer(tokenizer)
    service = CompletionService(HFBackend(copy.deepcopy(model), tokenizer), stop_token_ids=renderer.stop_token_ids)
    app = gateway_app(
        service,
        renderer,
        get_parser("hermes"),
        model_name="tiny",
        max_context=96,
        default_max_tokens=4,
        write_token="w",
        max_concurrency=8,
    )
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client
    service.close()


@pytest.fixture(scope="module")
def retrieval():
    retriever = BM25Retriever.from_documents([Document("a", "Lina Marsh", "Lina Marsh was a chemist.")])
    app = retrieval_app(retriever, max_concurrency=8)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client


def _check(response, *, openai_error: bool) -> None:
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["message"] if openai_error else error, str)


def _send(client, path: str, body, episode: bool = False):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    prefix = "/episodes/fuzz" if episode else ""
    return client.post(prefix + path, content=content, headers={"content-type": "application/json"})


@FUZZ
@given(body=chat_body | raw_bodies, episode=st.booleans())
def test_chat_completions_never_answer_5xx(gateway, body, episode: bool) -> None:
    _check(_send(gateway, "/v1/chat/completions", body, episode), openai_error=True)


@FUZZ
@given(body=text_body | raw_bodies, episode=st.booleans())
def test_text_completions_never_answer_5xx(gateway, body, episode: bool) -> None:
    _check(_send(gateway, "/v1/completions", body, episode), openai_error=True)


@FUZZ
@given(body=json_values | st.fixed_dictionaries({"reward": numbers | json_values}, optional={"info": json_values}))
def test_reward_writes_never_answer_5xx(gateway, body) -> None:
    content = json.dumps(body).encode()
    response = gateway.post("/episodes/fuzz/reward", content=content, headers={"authorization": "Bearer w"})
    _check(response, openai_error=True)


@FUZZ
@given(
    body=raw_bodies
    | json_values
    | st.fixed_dictionaries(
        {},
        optional={
            "queries": st.lists(st.text(max_size=10) | json_values, max_size=3) | json_values,
            "query": st.text(max_size=10) | json_values,
            "topk": numbers | json_values,
            "k": numbers | json_values,
            "return_scores": json_values,
        },
    )
)
def test_retrieval_requests_never_answer_5xx(retrieval, body) -> None:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    _check(retrieval.post("/retrieve", content=content), openai_error=False)


@pytest.mark.parametrize("topk", [b"1e400", b"1e30", str(10**30).encode(), b"2.5", b'"3"', b"true", b"[1]"])
def test_an_overflowing_or_mistyped_topk_is_a_400(retrieval, topk: bytes) -> None:
    response = retrieval.post("/retrieve", content=b'{"queries": ["x"], "topk": ' + topk + b"}")
    assert response.status_code == 400 and response.json()["error"]
