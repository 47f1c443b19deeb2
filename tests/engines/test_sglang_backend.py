"""The sglang backend against a small fake server speaking SGLang's native JSON (there is no
CPU build of SGLang): ``/generate`` with ``input_ids`` and ``meta_info.output_token_logprobs``,
``/update_weights_from_disk``, ``/get_model_info``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentic_rl import envs
from agentic_rl.config import BackendConfig, ModelConfig, RolloutConfig, TrainConfig
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.factory import build_backend
from agentic_rl.engines.http import BackendError
from agentic_rl.models import load
from agentic_rl.rollout import rollout

STOP = 2


class FakeSGLang(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.loaded: list[str] = []
        self.weights_sum: float | None = None
        self.abort_next = 0
        self.refuse_weights = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def sample(input_ids: list[int], params: dict) -> tuple[list[int], str]:
    ids = [10 + (sum(input_ids) + params["sampling_seed"] + 7 * i) % 40 for i in range(3)] + params["stop_token_ids"][
        :1
    ]
    if len(ids) > params["max_new_tokens"]:
        return ids[: params["max_new_tokens"]], "length"
    return ids, "stop"


class Handler(BaseHTTPRequestHandler):
    server: FakeSGLang

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/get_model_info":
            self._send(200, {"model_path": "/models/policy", "is_generation": True})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/update_weights_from_disk":
            if srv.refuse_weights:
                self._send(200, {"success": False, "message": "Failed to load config.json"})
                return
            from safetensors.torch import load_file

            tensors = load_file(str(Path(body["model_path"]) / "model.safetensors"))
            with srv.lock:
                srv.loaded.append(body["model_path"])
                srv.weights_sum = float(sum(float(t.double().sum()) for t in tensors.values()))
            self._send(200, {"success": True, "message": "Succeeded to update model weights."})
            return
        if self.path != "/generate":
            self._send(404, {"error": "not found"})
            return
        with srv.lock:
            srv.requests.append(body)
            abort = srv.abort_next > 0
            srv.abort_next -= abort
            version = len(srv.loaded)
        ids, finish = sample(body["input_ids"], body["sampling_params"])
        meta = {
            "finish_reason": {"type": "abort", "message": "scheduler dropped it"}
            if abort
            else {"type": finish, **({"matched": STOP} if finish == "stop" else {})},
            "output_token_logprobs": [[-1.0 / (1 + version), token, None] for token in ids],
            "prompt_tokens": len(body["input_ids"]),
            "completion_tokens": len(ids),
        }
        self._send(200, {"text": "", "output_ids": ids, "meta_info": meta})


@pytest.fixture
def fake() -> Iterator[FakeSGLang]:
    server = FakeSGLang()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def tiny():
    return load("tiny-random", device="cpu")


@pytest.fixture
def backend(fake, tiny):
    backend = build_backend(
        BackendConfig(kind="sglang", base_url=fake.base_url, max_concurrency=4),
        ModelConfig(name="tiny-random"),
        loaded=tiny,
    )
    yield backend
    backend.close()


def test_generate_sends_input_ids_and_keeps_the_sampled_ids_and_logprobs(backend, fake) -> None:
    assert backend.model_path == "/models/policy"
    completions = backend.generate(
        [[5, 6, 7], [8, 9]],
        SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=16, row_seeds=[3, 4]),
        stop_token_ids=[STOP],
        max_new_tokens=[16, 2],
    )
    request = next(r for r in fake.requests if r["input_ids"] == [5, 6, 7])
    assert request == {
        "input_ids": [5, 6, 7],
        "sampling_params": {
            "temperature": 0.6,
            "top_p": 0.95,
            "max_new_tokens": 16,
            "stop_token_ids": [STOP],
            "skip_special_tokens": False,
            "sampling_seed": 3,
        },
        "return_logprob": True,
        "logprob_start_len": -1,
    }
    assert (
        completions[0].token_ids == sample([5, 6, 7], request["sampling_params"])[0]
        and completions[0].token_ids[-1] == STOP
    )
    assert (
        completions[0].finish_reason == "stop"
        and completions[1].finish_reason == "length"
        and len(completions[1].token_ids) == 2
    )
    assert completions[0].logprobs == [-1.0] * 4


def test_weights_are_written_as_a_loadable_folder_and_loaded(backend, fake, tiny) -> None:
    model, _ = tiny
    folder = backend.weights_folder
    assert (folder / "config.json").is_file() and (folder / "tokenizer_config.json").is_file()
    assert backend.sync_weights(model) == 1
    assert fake.loaded == [str(folder)]
    assert fake.weights_sum == pytest.approx(
        sum(float(p.detach().to(backend.weights_dtype).double().sum()) for p in model.parameters()), rel=1e-9
    )
    completion = backend.generate([[5]], SamplingParams(max_new_tokens=8, seed=0), stop_token_ids=[STOP])[0]
    assert completion.weight_version == 1 and completion.logprobs[0] == -0.5
    fake.refuse_weights = True
    with pytest.raises(BackendError, match="did not load .*: Failed to load config.json"):
        backend.sync_weights(model)
    scratch = folder.parent
    backend.close()
    assert not scratch.exists()


def test_aborted_requests_are_infrastructure_errors_and_rollouts_are_token_exact(backend, fake) -> None:
    fake.abort_next = 1
    groups = rollout(
        backend,
        lambda: envs.make("arithmetic", max_turns=2),
        [0, 1],
        group_size=2,
        config=RolloutConfig(max_new_tokens=8),
        seed=1,
    )
    trajectories = [t for g in groups for t in g.trajectories]
    failed = [t for t in trajectories if t.infra_error]
    assert len(failed) == 1 and "finish_reason" in failed[0].infra_error and "abort" in failed[0].infra_error
    for trajectory in trajectories:
        for turn in trajectory.turns:
            context = trajectory.token_ids[: turn.response_start]
            sampled = trajectory.token_ids[turn.response_start : turn.response_end]
            assert any(
                r["input_ids"] == context and sample(context, r["sampling_params"])[0] == sampled for r in fake.requests
            )


def test_sglang_needs_a_base_url_and_trains_in_one_process() -> None:
    from agentic_rl.config import ConfigError, check_world_size

    with pytest.raises(ConfigError, match="backend.base_url: required when backend.kind is 'sglang'"):
        build_backend(BackendConfig(kind="sglang"), ModelConfig(name="tiny-random"))
    config = TrainConfig.model_validate({"backend": {"kind": "sglang", "base_url": "http://127.0.0.1:1"}})
    with pytest.raises(ValueError, match="backend.kind: sglang runs with one trainer process"):
        check_world_size(config, 2)
