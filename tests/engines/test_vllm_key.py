"""The managed vLLM server's random key: every route but /health asks for it, the weight
reload's /collective_rpc included (vLLM's own --api-key leaves that route open; the fake
server applies vLLM's rule and runs the real --middleware class, engines/vllm_guard.py),
the backend sends it on every request, and it never appears on the command line."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest

from agentic_rl.config import BackendConfig, ConfigError
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.http import BackendError
from agentic_rl.engines.vllm import VLLMBackend, build_vllm_backend
from agentic_rl.engines.vllm_guard import RequireKey, authorized
from agentic_rl.engines.vllm_server import VLLMServer
from agentic_rl.models import load

FAKE = Path(__file__).with_name("fake_vllm")


@pytest.fixture(scope="module")
def tiny():
    return load("tiny-random", device="cpu")


@pytest.fixture(scope="module")
def backend(tiny):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
        backend = build_vllm_backend(BackendConfig(kind="vllm", python=sys.executable), "tiny-random", loaded=tiny)
    yield backend
    backend.close()


def test_every_route_but_health_needs_the_key_and_the_backend_sends_it(backend, tiny) -> None:
    url, key = backend.base_url, backend.server.api_key
    assert len(key) >= 32 and backend.api_key == key
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(backend.weights_folder)}}
    assert httpx.post(f"{url}/collective_rpc", json=rpc).status_code == 401
    assert httpx.post(f"{url}/collective_rpc", json=rpc, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.post(f"{url}/v1/completions", json={"prompt": [1], "max_tokens": 1}).status_code == 401
    assert httpx.get(f"{url}/v1/models").status_code == 401
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    # The backend's own requests (completions, the weight reload through /collective_rpc) carry it.
    before = httpx.get(f"{url}/fake/state").json()["reloads"]
    sampling = SamplingParams(max_new_tokens=4, seed=0)
    assert backend.generate([[5, 6]], sampling, stop_token_ids=[2])[0].token_ids
    backend.sync_weights(tiny[0])
    assert httpx.get(f"{url}/fake/state").json()["reloads"] == before + 1


def test_the_key_travels_in_the_environment_not_on_the_command_line(backend) -> None:
    server = backend.server
    command = server.command()
    assert server.api_key not in " ".join(command) and "--middleware" in command
    assert server.environment()["VLLM_API_KEY"] == server.api_key
    environ = Path(f"/proc/{server.process.pid}/environ")
    if environ.exists():
        assert f"VLLM_API_KEY={server.api_key}".encode() in environ.read_bytes().split(b"\0")


def test_a_running_server_takes_its_key_from_the_config_or_the_environment(backend, monkeypatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(BackendError, match=r"HTTP 401: the server needs its key \(backend.api_key or \$VLLM_API_KEY\)"):
        VLLMBackend(backend.tokenizer, backend.base_url)
    named = build_vllm_backend(
        BackendConfig(kind="vllm", base_url=backend.base_url, api_key=backend.api_key), "tiny-random"
    )
    named.close()
    monkeypatch.setenv("VLLM_API_KEY", backend.api_key)
    from_environment = build_vllm_backend(BackendConfig(kind="vllm", base_url=backend.base_url), "tiny-random")
    assert from_environment.model_name == "policy"
    from_environment.close()


def test_a_key_of_ones_own_is_refused_for_a_managed_server(tmp_path) -> None:
    with pytest.raises(ConfigError, match="--api-key is set by the managed server itself"):
        VLLMServer(tmp_path, extra_args=["--api-key", "mine"])


def test_the_guard_lets_through_only_the_key_and_health(monkeypatch) -> None:
    assert authorized("/health", None, "k")
    assert not authorized("/collective_rpc", None, "k") and not authorized("/collective_rpc", "Bearer x", "k")
    assert authorized("/collective_rpc", "Bearer k", "k") and not authorized("/sleep", "Bearer ", "")
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="VLLM_API_KEY is not set"):
        RequireKey(app=None)
    monkeypatch.setenv("VLLM_API_KEY", "k")
    sent = []

    async def app(scope, receive, send) -> None:
        sent.append("route")

    async def send(message) -> None:
        sent.append(message.get("status"))

    scope = {"type": "http", "path": "/collective_rpc", "root_path": "", "headers": []}
    asyncio.run(RequireKey(app)(scope, None, send))
    asyncio.run(RequireKey(app)({**scope, "headers": [(b"authorization", b"Bearer k")]}, None, send))
    assert sent == [401, None, "route"]
