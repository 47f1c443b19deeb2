"""The gateway against the engine it serves, same model, same machine, same prompts:

1. Throughput at ``--concurrency`` concurrent episodes: ``--concurrency`` chat requests of
   ``--max-tokens`` tokens each sent at once through the `openai` SDK, against the same
   prompts decoded in one batch by the engine directly. Goal: the gateway keeps >= 85%
   of the engine's tokens/s.
2. Per-request latency overhead: a 1-token completion, through the gateway vs directly
   (HTTP, JSON, chat rendering and tool parsing on top of the engine).

Both sides: the in-process HF engine (float32, continuous batching), median of
``--repeats`` runs after a warm-up. Request i is seeded i on both sides (the gateway's
first choice draws from ``stream_seed(i, 0)``, as the direct rows do) and stops at the
same chat-template stop tokens, so both sides decode the very same tokens.

    python benchmarks/gateway.py [--model smollm2-135m] [--concurrency 16] [--max-tokens 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import openai

    from agentic_rl.engines.base import SamplingParams
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.gateway.server import GatewayServer
    from agentic_rl.models import load
    from agentic_rl.rollout.chat import ChatRenderer
    from agentic_rl.seeds import stream_seed

    model, tokenizer = load(args.model, device="cpu")
    backend = HFBackend(model.float(), tokenizer)
    renderer = ChatRenderer(tokenizer)
    conversations = [[{"role": "user", "content": f"Write a short story about the number {i}."}] for i in range(args.concurrency)]
    prompts = [renderer.prompt_ids(c) for c in conversations]

    def direct(max_tokens: int, count: int) -> tuple[int, float]:
        started = time.monotonic()
        sampling = SamplingParams(temperature=1.0, max_new_tokens=max_tokens, row_seeds=[stream_seed(i, 0) for i in range(count)])
        completions = backend.generate(prompts[:count], sampling, stop_token_ids=renderer.stop_token_ids, max_new_tokens=[max_tokens] * count)
        return sum(len(c.token_ids) for c in completions), time.monotonic() - started

    server = GatewayServer(backend, model_name=args.model, port=0)
    server.start()
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    pool = ThreadPoolExecutor(args.concurrency)

    def one(i: int, max_tokens: int) -> int:
        reply = client.chat.completions.create(model=args.model, messages=conversations[i], max_tokens=max_tokens, seed=i)
        return reply.usage.completion_tokens

    def through_gateway(max_tokens: int, count: int) -> tuple[int, float]:
        started = time.monotonic()
        tokens = sum(pool.map(lambda i: one(i, max_tokens), range(count)))
        return tokens, time.monotonic() - started

    results = {}
    for label, run in (("engine directly", direct), ("through the gateway", through_gateway)):
        run(args.max_tokens, args.concurrency)  # warm-up
        rates = []
        for _ in range(args.repeats):
            tokens, seconds = run(args.max_tokens, args.concurrency)
            rates.append(tokens / seconds)
        latency = statistics.median(run(1, 1)[1] for _ in range(max(args.repeats, 5)))
        results[label] = (statistics.median(rates), latency)
        print(f"{label}: {results[label][0]:.1f} tokens/s at {args.concurrency} concurrent ({args.max_tokens} tokens each); 1-token request {1000 * latency:.1f} ms", flush=True)
    (engine_rate, engine_latency), (gateway_rate, gateway_latency) = results.values()
    print(f"gateway / engine: {gateway_rate / engine_rate:.1%} of the throughput; +{1000 * (gateway_latency - engine_latency):.1f} ms per request")
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
