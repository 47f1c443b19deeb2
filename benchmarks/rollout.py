"""Rollout throughput: the HF backend's decode loop (float32 weights, and a bf16 copy of
them) against ``model.generate``, and a 4-turn episode against a 1-turn one with the
same number of sampled tokens.

    python benchmarks/rollout.py [--model smollm2-135m] [--batch-sizes 1 8 16 32]
                                 [--new-tokens 64] [--repeats 3] [--precision fp32 bf16-mixed]
                                 [--vllm .venv-vllm/bin/python] [--json out.json]

Throughput: B distinct chat prompts, exactly ``--new-tokens`` sampled tokens per row (no
stop tokens), temperature 1, prefill included; tokens/s = B x new tokens / seconds (best
of ``--repeats``, every side running once per round, so that the machine's drift hits
all of them). Sides: ``model.generate`` on the float32 model (the reference, PyTorch's
own linear kernels) and our engine in each ``--precision`` (default both): ``fp32``
samples from the float32 model itself (``HFBackend(model, tokenizer)``), ``bf16-mixed``
from a bf16 copy of its weights (``HFBackend(model, tokenizer,
weights_dtype=torch.bfloat16)``, what a bf16-mixed run samples with). Whether bf16 pays
depends on the CPU (about twice the float32 matmul rate with avx512_bf16 / AMX, several
times slower where torch emulates it, e.g. AVX2-only AMD Zen 3): the run prints this
machine's bf16/fp32 matmul speed ratio (``models.precision.bf16_matmul_speedup``) first.

``--vllm PYTHON`` adds a column: the vllm backend (``backend.kind vllm``) on a managed
vLLM server started from that interpreter (``make vllm``) with its default settings
(compiled, prefix caching) in ``--vllm-dtype`` (auto, as ``backend.dtype``: bfloat16 where
bf16 matmuls are fast, float32 where the CPU emulates them), all B prompts requested at once, exactly
``--new-tokens`` tokens each (``ignore_eos``); its startup is not timed. While the server
idles it stays loaded in memory beside the in-process engine.

Episodes (on the fp32 engine): 16 trajectories of four turns of n sampled tokens with a
20-token observation appended (KV reuse: only the observation is encoded) after each of
the first three, against one turn with the same token count: the episode's length
(4n + 60 sampled tokens), and also the same sampled tokens (4n; the 4-turn episode then
holds 60 more tokens). Also the 4-turn episode without KV reuse (one ``generate`` per
turn over the whole history, the per-turn reference path).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from machine import cpu_description


def prompts_for(tokenizer, batch: int) -> list[list[int]]:
    from agentic_rl.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    return [
        renderer.prompt_ids(
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"Task {i}: what is {17 * i + 3} times {i + 11}? Think step by step."},
            ]
        )
        for i in range(batch)
    ]


def best_interleaved(repeats: int, runs: dict) -> dict[str, float]:
    """Best seconds of each run over ``repeats`` rounds that each run every one once."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(best_of(1, run))
    return {name: min(values) for name, values in times.items()}


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def hf_generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> None:
    """The reference: stock ``model.generate`` with PyTorch's own linear kernels."""
    from agentic_rl.accel import linear_kernel, set_linear_kernel

    kernel = linear_kernel(model)
    set_linear_kernel(model, "torch")
    try:
        _generate(model, tokenizer, prompts, new_tokens)
    finally:
        set_linear_kernel(model, kernel)


def _generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> None:
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    with torch.no_grad():
        model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            do_sample=True,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            pad_token_id=pad,
        )


def ours(backend, prompts: list[list[int]], new_tokens: int) -> None:
    from agentic_rl.engines.base import SamplingParams

    backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=0), stop_token_ids=[])


def vllm_generate(backend, prompts: list[list[int]], new_tokens: int) -> None:
    """The vllm backend's concurrent requests, each sampling exactly ``new_tokens`` tokens."""
    from agentic_rl.engines.base import SamplingParams

    sampling = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    bodies = [
        {
            **backend.request_body(p, sampling, stop_token_ids=[], max_new_tokens=new_tokens, seed=i),
            "ignore_eos": True,
            "min_tokens": new_tokens,
        }
        for i, p in enumerate(prompts)
    ]
    for future in [backend.submit(body) for body in bodies]:
        completion = future.result()
        assert completion.error is None and len(completion.token_ids) == new_tokens, completion.error


def episodes(
    backend, prompts: list[list[int]], turns: int, tokens_per_turn: int, observation: list[int], *, reuse: bool
) -> None:
    """``turns`` turns of exactly ``tokens_per_turn`` sampled tokens per trajectory."""
    from agentic_rl.engines.base import SamplingParams

    sampling = SamplingParams(temperature=1.0, max_new_tokens=tokens_per_turn, seed=0)
    if not reuse:
        histories = [list(p) for p in prompts]
        for turn in range(turns):
            for history, completion in zip(histories, backend.generate(histories, sampling, stop_token_ids=[])):
                history.extend(completion.token_ids + (observation if turn < turns - 1 else []))
        return
    done_turns = dict.fromkeys(range(len(prompts)), 0)
    with backend.session(sampling, stop_token_ids=[]) as session:
        for key, prompt in enumerate(prompts):
            session.submit(key, prompt, tokens_per_turn, key)
        while session.busy:
            for key, _ in session.step():
                done_turns[key] += 1
                if done_turns[key] < turns:
                    session.extend(key, observation, tokens_per_turn)
                else:
                    session.release(key)


PRECISIONS = ("fp32", "bf16-mixed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument(
        "--episode-tokens", type=int, default=128, help="sampled tokens per episode (split over 4 turns)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--precision",
        nargs="+",
        choices=PRECISIONS,
        default=list(PRECISIONS),
        help="our engine's weights: fp32 (the model itself), bf16-mixed (a bf16 copy); default both",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument(
        "--vllm",
        default=None,
        metavar="PYTHON",
        help="also measure the vllm backend on a server started from this interpreter (make vllm: .venv-vllm/bin/python)",
    )
    parser.add_argument("--vllm-dtype", default="auto", choices=["auto", "bfloat16", "float32"])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    precisions = list(dict.fromkeys(args.precision))

    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.models.precision import bf16_matmul_speedup

    print(f"CPU: {cpu_description()}; torch {torch.__version__}", flush=True)
    speedup = bf16_matmul_speedup()
    kind = (
        "native bf16 (avx512_bf16 / AMX class)" if speedup >= 1.0 else "bf16 emulated: slower than float32 on this CPU"
    )
    print(
        f"bf16/fp32 matmul speed on this machine: {speedup:.2f}x ({kind}; models.precision.bf16_matmul_speedup, {torch.get_num_threads()} threads)\n",
        flush=True,
    )
    model, tokenizer = load(args.model)  # float32, oneDNN linear kernels where available ("auto")
    backends = {
        "fp32": HFBackend(model, tokenizer),
        "bf16-mixed": HFBackend(model, tokenizer, weights_dtype=torch.bfloat16) if "bf16-mixed" in precisions else None,
    }
    results: dict = {
        "model": args.model,
        "cpu": cpu_description(),
        "threads": torch.get_num_threads(),
        "new_tokens": args.new_tokens,
        "bf16_matmul_speedup": speedup,
        "precisions": precisions,
        "throughput": [],
        "episodes": {},
    }
    vllm = None
    if args.vllm:
        from agentic_rl.config import BackendConfig
        from agentic_rl.engines.remote import server_dtype
        from agentic_rl.engines.vllm import build_vllm_backend

        dtype = server_dtype(args.vllm_dtype)  # the library's backend.dtype: auto
        results["vllm_dtype"] = dtype
        print(f"starting the vLLM server in {dtype} (not timed) ...", flush=True)
        vllm = build_vllm_backend(
            BackendConfig(kind="vllm", python=args.vllm, max_concurrency=max(args.batch_sizes), dtype=dtype),
            args.model,
            loaded=(model, tokenizer),
        )
        vllm_generate(vllm, prompts_for(tokenizer, 2), 4)
    for precision in precisions:  # warm-up
        ours(backends[precision], prompts_for(tokenizer, 2), 4)
    hf_generate(model, tokenizer, prompts_for(tokenizer, 2), 4)
    columns = {"fp32": "ours fp32", "bf16-mixed": "ours bf16"}
    header = f"{'batch':>5} {'model.generate':>15}" + "".join(
        f" {columns[p] + ' tok/s':>16} {'vs generate':>11}" for p in precisions
    )
    print(
        header
        + (f" {'bf16/fp32':>9}" if len(precisions) == 2 else "")
        + (f" {'vllm tok/s':>11}" + "".join(f" {p.split('-')[0] + '/vllm':>9}" for p in precisions) if vllm else "")
    )
    for batch in args.batch_sizes:
        prompts = prompts_for(tokenizer, batch)
        tokens = batch * args.new_tokens
        runs = {"reference": lambda: hf_generate(model, tokenizer, prompts, args.new_tokens)}
        for precision in precisions:
            runs[precision] = lambda backend=backends[precision]: ours(backend, prompts, args.new_tokens)
        if vllm:
            runs["vllm"] = lambda: vllm_generate(vllm, prompts, args.new_tokens)
        best = best_interleaved(args.repeats, runs)
        reference = tokens / best["reference"]
        fast = {p: tokens / best[p] for p in precisions}
        row = {
            "batch": batch,
            "hf_generate_tokens_per_s": reference,
            "agentic_rl_tokens_per_s": fast,
            "speedup_vs_generate": {p: fast[p] / reference for p in precisions},
        }
        line = f"{batch:>5} {reference:>15.1f}" + "".join(
            f" {fast[p]:>16.1f} {fast[p] / reference:>10.2f}x" for p in precisions
        )
        if len(precisions) == 2:
            row["bf16_over_fp32"] = fast["bf16-mixed"] / fast["fp32"]
            line += f" {row['bf16_over_fp32']:>8.2f}x"
        if vllm:
            row["vllm_tokens_per_s"] = tokens / best["vllm"]
            row["over_vllm"] = {p: fast[p] / row["vllm_tokens_per_s"] for p in precisions}
            line += f" {row['vllm_tokens_per_s']:>11.1f}" + "".join(
                f" {row['over_vllm'][p]:>8.2f}x" for p in precisions
            )
        results["throughput"].append(row)
        print(line, flush=True)

    if vllm:
        vllm.close()
    backend = backends["fp32"]  # episodes: the fp32 engine
    prompts = prompts_for(tokenizer, 16)
    observation = tokenizer(
        "<|im_end|>\n<|im_start|>tool\n<tool_response>\n4242\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )["input_ids"][:20]
    per_turn = args.episode_tokens // 4
    length = 4 * per_turn + 3 * len(observation)
    runs = {
        "one_turn_same_length_s": lambda: episodes(backend, prompts, 1, length, observation, reuse=True),
        "one_turn_same_sampled_s": lambda: episodes(backend, prompts, 1, 4 * per_turn, observation, reuse=True),
        "four_turns_s": lambda: episodes(backend, prompts, 4, per_turn, observation, reuse=True),
    }
    # Interleaved repeats: the machine's speed drifts between runs, not within one round.
    best = best_interleaved(args.repeats, runs)
    four_no_reuse = best_of(args.repeats, lambda: episodes(backend, prompts, 4, per_turn, observation, reuse=False))
    same_length, same_sampled, four = (
        best["one_turn_same_length_s"],
        best["one_turn_same_sampled_s"],
        best["four_turns_s"],
    )
    results["episodes"] = {
        "trajectories": 16,
        "sampled_tokens": 4 * per_turn,
        "episode_tokens_after_prompt": length,
        **best,
        "four_turns_no_kv_reuse_s": four_no_reuse,
        "ratio_same_length": four / same_length,
        "ratio_same_sampled": four / same_sampled,
    }
    print(
        f"\n16 episodes on the fp32 engine, 4 turns x {per_turn} sampled tokens + 3 x {len(observation)}-token observations: {four:.2f} s"
    )
    print(
        f"  1 turn of the same length ({length} tokens):       {same_length:.2f} s -> 4 turns cost {four / same_length:.2f}x"
    )
    print(
        f"  1 turn of the same sampled tokens ({4 * per_turn}): {same_sampled:.2f} s -> 4 turns cost {four / same_sampled:.2f}x"
    )
    print(
        f"  4 turns without KV reuse: {four_no_reuse:.2f} s ({four_no_reuse / same_length:.2f}x the 1-turn episode of the same length)"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
