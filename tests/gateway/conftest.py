"""The gateway tests' server: the tiny model behind a GatewayServer on a free port, one per
test module, and an official ``openai`` client pointed at it."""

from __future__ import annotations

import copy

import pytest

from agentic_rl.engines.hf import HFBackend
from agentic_rl.gateway.server import GatewayServer


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
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
