"""Rollout throughput: the HF backend's decode loop against ``model.generate``, and a
4-turn episode against a 1-turn one with the same number of sampled tokens.

    python benchmarks/rollout.py [--model smollm2-135m] [--batch-sizes 1 8 16 32]
                                 [--new-tokens 64] [--repeats 2] [--json out.json]

Throughput: B distinct chat prompts, exactly ``--new-tokens`` sampled tokens per row (no
stop tokens), temperature 1, prefill included; tokens/s = B x new tokens / seconds (best
of ``--repeats``). Episodes: 16 trajectories, either one turn of 4n tokens or four turns
of n tokens with a 20-token observation appended (KV reuse: only the observation is
encoded) after each of the first three; also the 4-turn episode without KV reuse (one
``generate`` per turn over the whole history, the per-turn reference path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def prompts_for(tokenizer, batch: int) -> list[list[int]]:
    from agentic_rl.rollout.chat import ChatRenderer

    renderer = ChatRenderer(tokenizer)
    return [
        renderer.prompt_ids([{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": f"Task {i}: what is {17 * i + 3} times {i + 11}? Think step by step."}])
        for i in range(batch)
    ]


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def hf_generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> None:
    """The reference: stock ``model.generate`` with PyTorch's own linear kernels."""
    from agentic_rl.models.kernels import linear_kernel, set_linear_kernel

    kernel = linear_kernel(model)
    set_linear_kernel(model, "torch")
    try:
        _generate(model, tokenizer, prompts, new_tokens)
    finally:
        set_linear_kernel(model, kernel)


def _generate(model, tokenizer, prompts: list[list[int]], new_tokens: int) -> None:
    width = max(len(p) for p in prompts)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        model.generate(
            input_ids=input_ids, attention_mask=attention_mask, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
            max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=pad,
        )


def ours(backend, prompts: list[list[int]], new_tokens: int) -> None:
    from agentic_rl.rollout.backends.base import SamplingParams

    backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=0), stop_token_ids=[])


def episodes(backend, prompts: list[list[int]], turns: int, tokens_per_turn: int, observation: list[int], *, reuse: bool) -> None:
    """``turns`` turns of exactly ``tokens_per_turn`` sampled tokens per trajectory."""
    from agentic_rl.rollout.backends.base import SamplingParams

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--episode-tokens", type=int, default=128, help="sampled tokens per episode (split over 4 turns)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from agentic_rl.models import load
    from agentic_rl.rollout.backends.hf import HFBackend

    model, tokenizer = load(args.model)  # oneDNN linear kernels where available ("auto")
    backend = HFBackend(model, tokenizer)
    results: dict = {"model": args.model, "threads": torch.get_num_threads(), "new_tokens": args.new_tokens, "throughput": [], "episodes": {}}
    ours(backend, prompts_for(tokenizer, 2), 4)  # warm-up
    hf_generate(model, tokenizer, prompts_for(tokenizer, 2), 4)
    print(f"{'batch':>5} {'model.generate tok/s':>21} {'agentic-rl tok/s':>17} {'speed-up':>9}")
    for batch in args.batch_sizes:
        prompts = prompts_for(tokenizer, batch)
        tokens = batch * args.new_tokens
        reference = tokens / best_of(args.repeats, lambda: hf_generate(model, tokenizer, prompts, args.new_tokens))
        fast = tokens / best_of(args.repeats, lambda: ours(backend, prompts, args.new_tokens))
        results["throughput"].append({"batch": batch, "hf_generate_tokens_per_s": reference, "agentic_rl_tokens_per_s": fast, "speedup": fast / reference})
        print(f"{batch:>5} {reference:>21.1f} {fast:>17.1f} {fast / reference:>8.2f}x", flush=True)

    prompts = prompts_for(tokenizer, 16)
    observation = tokenizer("<|im_end|>\n<|im_start|>tool\n<tool_response>\n4242\n</tool_response><|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"][:20]
    per_turn = args.episode_tokens // 4
    one = best_of(args.repeats, lambda: episodes(backend, prompts, 1, 4 * per_turn, observation, reuse=True))
    four = best_of(args.repeats, lambda: episodes(backend, prompts, 4, per_turn, observation, reuse=True))
    four_no_reuse = best_of(args.repeats, lambda: episodes(backend, prompts, 4, per_turn, observation, reuse=False))
    results["episodes"] = {"trajectories": 16, "sampled_tokens": 4 * per_turn, "one_turn_s": one, "four_turns_s": four, "four_turns_no_kv_reuse_s": four_no_reuse, "ratio": four / one}
    print(f"\n16 episodes x {4 * per_turn} sampled tokens: 1 turn {one:.2f} s | 4 turns {four:.2f} s ({four / one:.2f}x) | 4 turns without KV reuse {four_no_reuse:.2f} s ({four_no_reuse / one:.2f}x)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
