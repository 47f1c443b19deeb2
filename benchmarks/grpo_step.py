"""One GRPO step in agentic-rl and in TRL's GRPOTrainer, same workload, same run.

    pip install -e ".[bench]"   # TRL, benchmark-only
    python benchmarks/grpo_step.py [--steps 5] [--max-new-tokens 128] [--json out.json]

Workload (both): SmolLM2-135M-Instruct in float32 on CPU (the cached safetensors folder
of the embedded model), 2 prompts x 8 generations, at most 128 new tokens at temperature
1, no KL, token-mean clipped loss, one optimizer step per step: a step is generation +
loss + optimizer. Reward: the same deterministic function of the completion text (so
groups have non-zero advantages). Reports the median seconds per step over ``--steps``
steps after one warm-up step, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

PROMPTS = ["What is 17 * 23? Show your steps, then give the answer.", "A train travels 60 km in 45 minutes. What is its speed in km/h? Explain."]


def reward(text: str) -> float:
    """Prefers answers near 300 characters that contain a digit: varies within a group."""
    return -abs(len(text) - 300) / 300 + (0.5 if any(c.isdigit() for c in text) else 0.0)


class PromptEnv:
    """Single-turn env over PROMPTS: the episode ends after one reply, scored by ``reward``."""

    num_tasks = len(PROMPTS)

    def reset(self, *, seed=None, options=None):
        self.index = (options or {}).get("task_index", 0)
        return [{"role": "user", "content": PROMPTS[self.index]}], {"task_id": str(self.index)}

    def step(self, message):
        return [], reward(message["content"]), True, False, {}


def ours(model_name: str, steps: int, max_new_tokens: int) -> list[float]:
    from agentic_rl.config import TrainConfig
    from agentic_rl.models import load
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.training.rl import RLTrainer

    model, tokenizer = load(model_name, device="cpu")
    config = TrainConfig.model_validate({
        "tasks_per_step": 2, "group_size": 8, "steps": steps + 1, "optim": {"lr": 1e-6},
        "algorithm": {"preset": "grpo-t", "kl_coef": 0.0},
        "rollout": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": max_new_tokens, "max_turns": 1, "max_total_tokens": 1024},
    })
    trainer = RLTrainer(config, model, tokenizer, HFBackend(model, tokenizer), PromptEnv, [0, 1])
    times = []
    for _ in range(steps + 1):
        started = time.perf_counter()
        trainer.step()
        times.append(time.perf_counter() - started)
    return times[1:]


def trl(model_folder: str, tokenizer_folder: str, steps: int, max_new_tokens: int) -> list[float]:
    import tempfile

    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepTimes(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.started)

    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS] * (steps + 1))
    timer = StepTimes()
    with tempfile.TemporaryDirectory() as output:
        args = GRPOConfig(
            output_dir=output, use_cpu=True, bf16=False, report_to="none", save_strategy="no", logging_steps=1000,
            per_device_train_batch_size=16, num_generations=8, max_completion_length=max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, beta=0.0, loss_type="dapo", learning_rate=1e-6,
            max_steps=steps + 1, num_iterations=1, gradient_accumulation_steps=1, seed=0, shuffle_dataset=False,
        )
        trainer = GRPOTrainer(
            model=model, processing_class=tokenizer, args=args, train_dataset=dataset,
            reward_funcs=[lambda completions, **kw: [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]],
            callbacks=[timer],
        )
        trainer.train()
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps after the warm-up (median reported); the first steps of a run also grow the heap as longer batches arrive")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from agentic_rl.models.loading import cache_dir

    ours_times = ours("smollm2-135m", args.steps, args.max_new_tokens)  # also converts the cached model if missing
    result = {"threads": torch.get_num_threads(), "steps": args.steps, "agentic_rl_s": ours_times, "agentic_rl_median_s": statistics.median(ours_times)}
    print(f"agentic-rl  {statistics.median(ours_times):7.2f} s/step  (steps: {', '.join(f'{t:.1f}' for t in ours_times)})", flush=True)
    if not args.skip_trl:
        trl_times = trl(str(cache_dir() / "smollm2-135m"), str(cache_dir() / "smollm2-135m-tokenizer"), args.steps, args.max_new_tokens)
        result.update(trl_s=trl_times, trl_median_s=statistics.median(trl_times), speedup=statistics.median(trl_times) / statistics.median(ours_times))
        print(f"TRL         {statistics.median(trl_times):7.2f} s/step  (steps: {', '.join(f'{t:.1f}' for t in trl_times)})")
        print(f"speed-up    {result['speedup']:7.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
