"""A fake vLLM OpenAI-compatible server (stdlib only) for the vllm backend's tests, started
exactly as the real one (``python -m vllm.entrypoints.openai.api_server --model DIR ...``).

The "model": for a prompt of token ids and a seed it samples ``FAKE_TOKENS`` ids that
depend on the prompt and the seed, then the first stop token (finish "stop"), or
``max_tokens`` ids (finish "length") when that is fewer; every log-prob is
``-0.5 / (1 + reloads)``, so a test sees which weights answered. ``/collective_rpc``
``reload_weights`` reads the safetensors in ``weights_path`` (their sum is reported by
``GET /fake/state``); ``POST /fake/die`` ends the process (a crash);
``POST /fake/fail_next`` makes the next N completions answer HTTP 500.

LoRA as vLLM serves it: with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1``,
``POST /v1/load_lora_adapter`` reads peft's adapter folder (``lora_path``; a name already
loaded needs ``load_inplace``; no more names than ``--max-loras``); ``/fake/state`` reports
the loads, the last adapter's tensor sum, each name's (``lora_sums``) and the
``--max-lora-rank``. A completion naming a loaded adapter has log-prob ``-0.125``.

``"stream": true`` answers as server-sent events, one token per event (``token_ids`` and
``logprobs`` per event, the finish reason on the last, then ``[DONE]``), as vLLM does.
``POST /fake/slow {"delay_s", "tokens"}`` makes completions sample ``tokens`` ids (no stop
token) at ``delay_s`` each; a stream whose client went away stops sampling and is counted
in ``/fake/state``'s ``aborted``. ``POST /fake/slow_reload {"delay_s"}`` makes every
reload take that long; completions that arrive meanwhile are counted in
``during_reload`` (a trainer that samples before its weight sync finished);
``POST /fake/fail_reload {"n"}`` makes the next N reloads answer HTTP 500.

Keys as vLLM applies them: with ``--api-key`` or ``VLLM_API_KEY`` the ``/v1``, ``/v2``,
``/inference`` and ``/cohere`` routes need ``Authorization: Bearer <key>``
(vllm/entrypoints/serve/middleware/authenticate.py); every ``--middleware`` class is
imported and run (as pure ASGI) on each request before it is answered, so the managed
server's own key check is the real one. The ``/fake/*`` test controls are not vLLM's and
need no key.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FAKE_TOKENS = 3
VLLM_GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


def refusal(path: str, headers, keys: list[str], middlewares: list) -> tuple[int, bytes] | None:
    """(status, body) when vLLM would not let the request through to its route, else None."""
    if (
        path.startswith(VLLM_GUARDED_PREFIXES)
        and keys
        and headers.get("Authorization") not in [f"Bearer {k}" for k in keys]
    ):
        return 401, json.dumps({"error": "Unauthorized"}).encode()
    answer: dict = {}

    async def route(scope, receive, send) -> None:
        answer["passed"] = True

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message) -> None:
        answer.setdefault("status", message.get("status"))
        answer["body"] = answer.get("body", b"") + message.get("body", b"")

    app = route
    for middleware in reversed(middlewares):
        app = middleware(app)
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "root_path": "",
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
    }
    asyncio.run(app(scope, receive, send))
    return None if answer.get("passed") else (answer["status"], answer["body"])


class State:
    def __init__(self, model: str, name: str) -> None:
        self.model = model
        self.name = name
        self.reloads = 0
        self.weights_sum = None
        self.requests: list[dict] = []
        self.fail_next = 0
        self.delay_s = 0.0
        self.slow_tokens = 0
        self.aborted = 0
        self.lora_enabled = False
        self.max_lora_rank = None
        self.adapters: dict[str, str] = {}
        self.lora_loads = 0
        self.lora_sum = None
        self.lora_sums: dict[str, float] = {}
        self.max_loras = 1
        self.reload_delay_s = 0.0
        self.reloading = False
        self.during_reload = 0
        self.fail_reload = 0
        self.lock = threading.Lock()


def sample(prompt: list[int], seed: int, max_tokens: int, stops: list[int]) -> tuple[list[int], str]:
    base = (sum(prompt) * 31 + len(prompt) * 7 + seed) % 1000
    ids = [10 + (base + 13 * i) % 50 for i in range(FAKE_TOKENS)]
    if stops:
        ids.append(stops[0])
    if len(ids) > max_tokens:
        return ids[:max_tokens], "length"
    return ids, "stop"


def make_handler(state: State, keys: list[str], middlewares: list):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def handle_one_request(self) -> None:  # vLLM's key checks before any route
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline or not self.parse_request():
                self.close_connection = True
                return
            path = self.path.split("?")[0]
            refused = None if path.startswith("/fake/") else refusal(path, self.headers, keys, middlewares)
            if refused is not None:
                self.send_response(refused[0])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(refused[1])))
                self.end_headers()
                self.wfile.write(refused[1])
                return
            getattr(self, f"do_{self.command}")()
            self.wfile.flush()

        def _send(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, ids: list[int], finish: str, logprob: float) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            try:
                for position, token in enumerate(ids):
                    if state.delay_s:
                        time.sleep(state.delay_s)
                    last = position == len(ids) - 1
                    choice = {
                        "index": 0,
                        "text": "",
                        "token_ids": [token],
                        "finish_reason": finish if last else None,
                        "logprobs": {"token_logprobs": [logprob], "tokens": [str(token)]},
                    }
                    self.wfile.write(
                        f"data: {json.dumps({'id': 'cmpl-fake', 'object': 'text_completion', 'choices': [choice]})}\n\n".encode()
                    )
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                with state.lock:
                    state.aborted += 1
            self.close_connection = True

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": state.name, "object": "model"}]})
            elif self.path == "/fake/state":
                with state.lock:
                    self._send(
                        200,
                        {
                            "reloads": state.reloads,
                            "weights_sum": state.weights_sum,
                            "requests": state.requests,
                            "model": state.model,
                            "aborted": state.aborted,
                            "lora_loads": state.lora_loads,
                            "lora_sum": state.lora_sum,
                            "lora_sums": state.lora_sums,
                            "max_loras": state.max_loras,
                            "adapters": state.adapters,
                            "max_lora_rank": state.max_lora_rank,
                            "during_reload": state.during_reload,
                        },
                    )
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/fake/die":
                os._exit(1)
            if self.path == "/fake/fail_next":
                with state.lock:
                    state.fail_next = int(body["n"])
                self._send(200, {})
                return
            if self.path == "/fake/slow":
                with state.lock:
                    state.delay_s, state.slow_tokens = float(body["delay_s"]), int(body["tokens"])
                self._send(200, {})
                return
            if self.path == "/fake/fail_reload":
                with state.lock:
                    state.fail_reload = int(body["n"])
                self._send(200, {})
                return
            if self.path == "/fake/slow_reload":
                with state.lock:
                    state.reload_delay_s = float(body["delay_s"])
                self._send(200, {})
                return
            if self.path == "/collective_rpc":
                if body.get("method") != "reload_weights":
                    self._send(400, {"error": {"message": "unknown method"}})
                    return
                from safetensors.torch import load_file

                with state.lock:
                    failing = state.fail_reload > 0
                    state.fail_reload -= failing
                if failing:
                    self._send(500, {"error": {"message": "scripted reload failure"}})
                    return
                with state.lock:
                    state.reloading = True
                time.sleep(state.reload_delay_s)
                tensors = load_file(str(Path(body["kwargs"]["weights_path"]) / "model.safetensors"))
                with state.lock:
                    state.reloads += 1
                    state.reloading = False
                    state.weights_sum = float(sum(float(t.double().sum()) for t in tensors.values()))
                self._send(200, {"results": [None]})
                return
            if self.path == "/v1/load_lora_adapter":
                if not (state.lora_enabled and os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == "1"):
                    self._send(404, {"detail": "Not Found"})
                    return
                if body["lora_name"] in state.adapters and not body.get("load_inplace"):
                    self._send(
                        400, {"error": {"message": f"The lora adapter '{body['lora_name']}' has already been loaded."}}
                    )
                    return
                if body["lora_name"] not in state.adapters and len(state.adapters) >= state.max_loras:
                    self._send(400, {"error": {"message": f"more adapters than --max-loras {state.max_loras}"}})
                    return
                from safetensors.torch import load_file

                folder = Path(body["lora_path"])
                json.loads((folder / "adapter_config.json").read_text())
                tensors = load_file(str(folder / "adapter_model.safetensors"))
                with state.lock:
                    state.adapters[body["lora_name"]] = str(folder)
                    state.lora_loads += 1
                    state.lora_sum = float(sum(float(t.double().sum()) for t in tensors.values()))
                    state.lora_sums[body["lora_name"]] = state.lora_sum
                self._send(200, {})
                return
            if self.path == "/v1/completions":
                with state.lock:
                    state.requests.append(body)
                    state.during_reload += state.reloading
                    failing = state.fail_next > 0
                    state.fail_next -= failing
                    reloads = state.reloads
                if failing:
                    self._send(500, {"error": {"message": "scripted failure"}})
                    return
                if body.get("model") != state.name and body.get("model") not in state.adapters:
                    self._send(404, {"error": {"message": f"model {body.get('model')} does not exist"}})
                    return
                ids, finish = sample(
                    body["prompt"],
                    int(body.get("seed") or 0),
                    int(body["max_tokens"]),
                    body.get("stop_token_ids") or [],
                )
                if state.slow_tokens:
                    ids = [10 + i % 50 for i in range(min(state.slow_tokens, int(body["max_tokens"])))]
                    finish = "length" if len(ids) == int(body["max_tokens"]) else "stop"
                logprob = -0.125 if body.get("model") in state.adapters else -0.5 / (1 + reloads)
                if body.get("stream"):
                    self._stream(ids, finish, logprob)
                    return
                choice = {
                    "index": 0,
                    "text": "",
                    "token_ids": ids,
                    "finish_reason": finish,
                    "logprobs": {"token_logprobs": [logprob] * len(ids), "tokens": [str(i) for i in ids]},
                }
                self._send(200, {"id": "cmpl-fake", "object": "text_completion", "choices": [choice]})
                return
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--max-model-len", default=None)
    parser.add_argument("--logprobs-mode", default="raw_logprobs")
    parser.add_argument("--enable-lora", action="store_true")
    parser.add_argument("--max-lora-rank", type=int, default=None)
    parser.add_argument("--max-loras", type=int, default=1)
    parser.add_argument("--api-key", action="append", default=None)
    parser.add_argument("--middleware", action="append", default=[])
    args, _ = parser.parse_known_args()
    state = State(args.model, args.served_model_name or args.model)
    state.lora_enabled, state.max_lora_rank, state.max_loras = args.enable_lora, args.max_lora_rank, args.max_loras
    keys = [key for key in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if key]
    middlewares = []
    for name in args.middleware:
        module, _, attribute = name.rpartition(".")
        middlewares.append(getattr(importlib.import_module(module), attribute))
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state, keys, middlewares))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
