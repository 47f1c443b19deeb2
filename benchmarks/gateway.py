"""The gateway against the engine it serves, same model, same machine, same prompts:

1. Throughput at ``--concurrency`` concurrent episodes: ``--concurrency`` chat requests of
   ``--max-tokens`` tokens each sent at once through the `openai` SDK, against the same
   prompts sampled from the engine without the gateway. Goal: the gateway keeps >= 85%
   of the engine's tokens/s.
2. Per-request latency overhead: a 1-token completion, through the gateway vs without it
   (HTTP, JSON, chat rendering and tool parsing on top of the engine).
3. ``--engine hf``: an agent's turns, one at a time with its tool running in between
   (``--turns`` turns of 8 tokens, ``--tool-gap-ms`` apart), through the gateway's
   completion service with idle sessions kept open (``keep_idle_s``, the default) vs closed
   after every turn (``keep_idle_s=0``, as under a trainer sharing the weights), the two
   sides alternating; median turn latency.

``--engine hf``: the in-process HF engine (float32, continuous batching); without the
gateway, the prompts are decoded in one batch by the engine directly. Two gateway rows:
in this process, beside the clients' 16 threads (as ``agents.train`` runs agents: they
share the interpreter's lock with the engine), and ``agentic-rl serve`` in a process of
its own (as an agent program in another process sees it).

``--engine vllm``: the gateway serves a vLLM server through the token-level vLLM backend
(the one training uses; managed from ``--vllm-python``, or ``--base-url`` of a running
one). Two rows without the gateway: vLLM's own ``/v1/chat/completions`` through the same
SDK at the same concurrency (what a user would point an agent at instead: the headline
ratio), and the vLLM backend's ``generate`` (token ids in and out, the gateway's engine).

Median of ``--repeats`` runs after a warm-up. Request i is seeded i on every side (the
gateway's first choice draws from ``stream_seed(i, 0)``, as the direct rows do) and stops
at the same chat-template stop tokens.

    python benchmarks/gateway.py [--engine hf|vllm] [--model smollm2-135m] [--concurrency 16] [--max-tokens 64] [--repeats 3]
    python benchmarks/gateway.py --part turns [--turns 10] [--tool-gap-ms 100]     # part 3 alone
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("hf", "vllm"), default="hf")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--vllm-python",
        default=".venv-vllm/bin/python",
        help="--engine vllm: the interpreter whose environment has vLLM (`make vllm`)",
    )
    parser.add_argument(
        "--base-url", default=None, help="--engine vllm: a running vLLM server to use instead of starting one"
    )
    parser.add_argument("--part", choices=("all", "turns"), default="all", help="turns: part 3 alone (--engine hf)")
    parser.add_argument("--turns", type=int, default=10, help="--engine hf: agent turns per side and repeat (part 3)")
    parser.add_argument(
        "--tool-gap-ms", type=float, default=100.0, help="--engine hf: the tool's time between two turns (part 3)"
    )
    args = parser.parse_args()
    if args.part == "turns" and args.engine != "hf":
        parser.error("--part turns: measured on the in-process engine (--engine hf)")

    import openai

    from agentic_rl.chat import ChatRenderer
    from agentic_rl.engines.base import SamplingParams
    from agentic_rl.gateway.server import GatewayServer
    from agentic_rl.models import load
    from agentic_rl.seeds import stream_seed

    model, tokenizer = load(args.model, device="cpu")
    if args.engine == "hf":
        from agentic_rl.engines.hf import HFBackend

        backend = HFBackend(model.float(), tokenizer)
    else:
        from agentic_rl.config.sections import BackendConfig
        from agentic_rl.engines.vllm import build_vllm_backend

        config = BackendConfig(
            kind="vllm", base_url=args.base_url, python=args.vllm_python, max_concurrency=max(64, args.concurrency)
        )
        print(
            "starting vLLM (the first start compiles)..." if not args.base_url else f"vLLM at {args.base_url}",
            flush=True,
        )
        backend = build_vllm_backend(config, args.model, loaded=(model, tokenizer))
    renderer = ChatRenderer(tokenizer)
    if args.part == "turns":
        _agent_turns(backend, renderer, args)
        return
    conversations = [
        [{"role": "user", "content": f"Write a short story about the number {i}."}] for i in range(args.concurrency)
    ]
    prompts = [renderer.prompt_ids(c) for c in conversations]
    pool = ThreadPoolExecutor(args.concurrency)

    def direct(max_tokens: int, count: int) -> tuple[int, float]:
        started = time.monotonic()
        sampling = SamplingParams(
            temperature=1.0, max_new_tokens=max_tokens, row_seeds=[stream_seed(i, 0) for i in range(count)]
        )
        completions = backend.generate(
            prompts[:count], sampling, stop_token_ids=renderer.stop_token_ids, max_new_tokens=[max_tokens] * count
        )
        if failed := next((c.error for c in completions if c.error), None):
            raise SystemExit(f"the engine failed: {failed}")
        return sum(len(c.token_ids) for c in completions), time.monotonic() - started

    def chat_side(client, model_name: str, extra: dict | None = None) -> Callable[[int, int], tuple[int, float]]:
        def one(i: int, max_tokens: int) -> int:
            reply = client.chat.completions.create(
                model=model_name,
                messages=conversations[i],
                max_tokens=max_tokens,
                seed=i,
                temperature=1.0,
                extra_body=extra,
            )
            return reply.usage.completion_tokens

        def run(max_tokens: int, count: int) -> tuple[int, float]:
            started = time.monotonic()
            tokens = sum(pool.map(lambda i: one(i, max_tokens), range(count)))
            return tokens, time.monotonic() - started

        return run

    server = GatewayServer(backend, model_name=args.model, port=0)
    server.start()
    served = None
    sides: dict[str, Callable[[int, int], tuple[int, float]] | None] = {}
    try:
        if args.engine == "vllm":
            key = backend.api_key or "unused"  # a managed server's random key
            vllm_client = openai.OpenAI(base_url=f"{backend.base_url}/v1", api_key=key, max_retries=0)
            # the same stop tokens as the gateway's (the chat template's turn end)
            sides["vLLM's own chat endpoint"] = chat_side(
                vllm_client, backend.model_name, {"stop_token_ids": list(renderer.stop_token_ids)}
            )
            sides["vLLM backend generate (no HTTP chat layer)"] = direct
        else:
            sides["engine directly"] = direct
        sides["through the gateway"] = chat_side(
            openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0), args.model
        )
        if args.engine == "hf":
            sides["through `agentic-rl serve` (own process)"] = (
                None  # started when its turn comes: idle, it would still hold the CPU's caches
            )

        results = {}
        for label, run in sides.items():
            if run is None:
                served = _serve(args.model)
                run = chat_side(openai.OpenAI(base_url=f"{served[1]}/v1", api_key="unused", max_retries=0), args.model)
            run(args.max_tokens, args.concurrency)  # warm-up
            rates = []
            for _ in range(args.repeats):
                tokens, seconds = run(args.max_tokens, args.concurrency)
                rates.append(tokens / seconds)
            latency = statistics.median(run(1, 1)[1] for _ in range(max(args.repeats, 5)))
            results[label] = (statistics.median(rates), latency)
            print(
                f"{label}: {results[label][0]:.1f} tokens/s at {args.concurrency} concurrent ({args.max_tokens} tokens each); 1-token request {1000 * latency:.1f} ms",
                flush=True,
            )
        baseline = next(iter(results))
        engine_rate, engine_latency = results[baseline]
        for label in [label for label in results if label.startswith("through")]:
            rate, latency = results[label]
            print(
                f"{label} / {baseline}: {rate / engine_rate:.1%} of the throughput; {1000 * (latency - engine_latency):+.1f} ms per request"
            )
        if args.engine == "hf":
            _agent_turns(backend, renderer, args)
    finally:
        if served is not None:
            served[0].terminate()
            served[0].wait(timeout=60)
        server.shutdown()
        server.server_close()
        if hasattr(backend, "close"):
            backend.close()  # a managed vLLM server stops here


def _agent_turns(backend, renderer, args) -> None:
    """Part 3: sequential turns with a tool gap, idle sessions kept vs closed, alternating."""
    from agentic_rl.gateway.service import KEEP_IDLE_S, CompletionService

    prompt = renderer.prompt_ids([{"role": "user", "content": "What is 482 * 37? Use the calculator."}])
    latencies: dict[float, list[float]] = {0.0: [], KEEP_IDLE_S: []}
    for _ in range(args.repeats):
        for keep in latencies:
            service = CompletionService(backend, stop_token_ids=renderer.stop_token_ids, keep_idle_s=keep)
            try:
                service.submit(prompt, max_tokens=8, seed=0).result()  # warm-up
                for turn in range(args.turns):
                    time.sleep(args.tool_gap_ms / 1000)
                    started = time.monotonic()
                    service.submit(prompt, max_tokens=8, seed=turn).result()
                    latencies[keep].append(time.monotonic() - started)
            finally:
                service.close()
    closed, kept = (statistics.median(values) for values in latencies.values())
    print(
        f"agent turns (8 tokens, {args.tool_gap_ms:g} ms tool gap): {1000 * closed:.0f} ms with sessions closed after each turn, "
        f"{1000 * kept:.0f} ms with idle sessions kept ({closed / kept:.2f}x)",
        flush=True,
    )


def _serve(model: str):
    """``agentic-rl serve MODEL`` on a free port, answering: (process, url)."""
    import socket
    import subprocess
    import sys

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "agentic_rl", "serve", model, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"agentic-rl serve {model} did not come up")


if __name__ == "__main__":
    main()
