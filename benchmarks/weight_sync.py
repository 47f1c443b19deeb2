"""Weight sync into a managed vLLM server, files against collective, same server, same run:

- files: the full weights written as safetensors into the served folder (tmpfs where there
  is one) and reloaded by the server (``/collective_rpc`` ``reload_weights``);
- collective: broadcast from this process into the server's workers in buckets of
  ``--bucket-mb`` (gloo on CPU), loaded in place (engines/weight_sync.py).

    python benchmarks/weight_sync.py --vllm .venv-vllm/bin/python [--model smollm2-135m]
                                     [--repeats 5] [--bucket-mb 256] [--json out.json]

Each repeat pushes with both transports in turn (alternating which goes first), the model
and a perturbed copy taking turns, so every push changes the served weights. Printed: the
CPU, the dtype and size of what is pushed, and per transport the fastest and the median
push as ``sync_weights`` times it (``last_sync_s``), plus the part of a collective push
spent packing buckets on this side and loading them in the server (its time not spent
waiting for data), each the fastest seen. The server's startup is not timed. After the
pushes one greedy answer is compared across transports (they must agree exactly). The
machine's load average is printed too: on a shared machine, compare the fastest pushes.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_profile import cpu_description  # noqa: E402 -- the CPU line every benchmark prints


def pack_seconds(weights: dict[str, torch.Tensor], dtype: torch.dtype, bucket_bytes: int) -> float:
    """What packing every bucket costs on this side alone (conversion + copy, no network)."""
    from agentic_rl.engines.vllm_receiver import bucket_layout, views
    from agentic_rl.engines.weight_sync import plan_buckets, tensor_specs

    started = time.perf_counter()
    for bucket in plan_buckets(tensor_specs(weights, dtype), bucket_bytes):
        flat = torch.empty(bucket_layout(bucket)[1], dtype=torch.uint8)
        for name, view in views(flat, bucket):
            view.copy_(weights[name].detach())
    return time.perf_counter() - started


def greedy(backend, tokenizer) -> tuple[list[int], list[float]]:
    from agentic_rl.engines.base import SamplingParams

    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    completion = backend.generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=16), stop_token_ids=[tokenizer.eos_token_id]
    )[0]
    return completion.token_ids, completion.logprobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", required=True, metavar="PYTHON", help="the vLLM environment's interpreter")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--bucket-mb", type=int, default=256)
    parser.add_argument("--vllm-dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from agentic_rl.config import BackendConfig
    from agentic_rl.engines.vllm import build_vllm_backend
    from agentic_rl.models import load

    model, tokenizer = load(args.model, device="cpu")
    perturbed = copy.deepcopy(model)
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in perturbed.parameters():
            parameter.add_(torch.randn_like(parameter) * 1e-3)
    config = BackendConfig(kind="vllm", python=args.vllm, dtype=args.vllm_dtype)
    started = time.perf_counter()
    backend = build_vllm_backend(config, args.model, loaded=(model, tokenizer))
    startup = time.perf_counter() - started
    backend.sender.bucket_bytes = args.bucket_mb << 20
    weights = dict(model.named_parameters())
    size_mb = sum(p.numel() for p in weights.values()) * backend.weights_dtype.itemsize / 2**20
    times: dict[str, list[float]] = {"files": [], "collective": []}
    answers = {}
    server_side: list[tuple[float, float]] = []
    try:
        for repeat in range(args.repeats):
            order = ("files", "collective") if repeat % 2 == 0 else ("collective", "files")
            for transport in order:
                backend.weight_sync = transport
                backend.sync_weights(perturbed if len(times[transport]) % 2 == 0 else model)
                assert backend.last_transport == transport, backend.last_transport
                times[transport].append(backend.last_sync_s)
                if transport == "collective":
                    [worker] = backend.sender.last_report["results"]
                    server_side.append((worker["seconds"], worker["waiting_s"]))
        for transport in times:  # the same weights by each transport: the same greedy answer
            backend.weight_sync = transport
            backend.sync_weights(perturbed)
            answers[transport] = greedy(backend, tokenizer)
    finally:
        backend.close()
    packing = min(pack_seconds(weights, backend.weights_dtype, args.bucket_mb << 20) for _ in range(3))
    loading = min(seconds - waiting for seconds, waiting in server_side)
    result = {
        "cpu": cpu_description(),
        "model": args.model,
        "dtype": str(backend.weights_dtype).removeprefix("torch."),
        "pushed_mb": round(size_mb, 1),
        "bucket_mb": args.bucket_mb,
        "repeats": args.repeats,
        "server_startup_s": round(startup, 1),
        "collective_packing_s": round(packing, 3),
        "collective_server_loading_s": round(loading, 3),
        "load_average": os.getloadavg(),
        "same_greedy_answer": answers["files"] == answers["collective"],
    }
    for transport, seconds in times.items():
        result[f"{transport}_min_s"] = round(min(seconds), 3)
        result[f"{transport}_median_s"] = round(statistics.median(seconds), 3)
    print(f"CPU: {result['cpu']}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(
        f"{args.model}: {size_mb:.0f} MB pushed in {result['dtype']}, {args.repeats} pushes per transport, "
        f"buckets of {args.bucket_mb} MB (server started in {startup:.0f} s, not timed below)"
    )
    for transport, seconds in times.items():
        print(f"  {transport:<10} min {min(seconds):6.3f} s   median {statistics.median(seconds):6.3f} s")
    print(
        f"  (collective, fastest: {packing:.3f} s packing buckets here, {loading:.3f} s loading them in the server "
        f"besides waiting for data; same greedy answer: {result['same_greedy_answer']}; "
        f"load average {', '.join(f'{x:.1f}' for x in result['load_average'])})"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
