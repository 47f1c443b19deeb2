"""One GRPO step in agentic-rl and in TRL's GRPOTrainer, each in fp32 and in bf16, same
workload, same run.

    pip install -e ".[bench]"   # TRL, benchmark-only
    python benchmarks/grpo_step.py [--model smollm2-135m] [--steps 5] [--max-new-tokens 128]
        [--precision fp32 bf16-mixed] [--trl-precision fp32 bf16] [--skip-trl] [--json out.json]

Workload (every side): the model (default SmolLM2-135M-Instruct, float32 weights, on
CPU), 2 prompts x 8 generations, at most 128 new tokens at temperature 1, no KL,
token-mean clipped loss, one optimizer step per step: a step is generation + loss +
optimizer. Reward: the same deterministic function of the completion text (so groups
have non-zero advantages). No side uses activation checkpointing (TRL's GRPOConfig turns
it on by default, which recomputes the forward in the backward;
``--trl-gradient-checkpointing`` restores that default).

Sides, each a freshly loaded model and its own trainer:

- agentic-rl ``fp32``: float32 everywhere, the engine samples from the trained model.
- agentic-rl ``bf16-mixed``: float32 master weights, training forwards under bf16
  autocast (``set_compute_precision``), rollouts from a bf16 copy of the weights
  (``HFBackend(weights_dtype=torch.bfloat16)``, synced after each optimizer step) and
  config ``precision: bf16-mixed``, as a bf16-mixed run has them (rollout correction
  ``auto`` then applies TIS: the sampler's weights differ from the trainer's).
- TRL ``fp32``: ``GRPOConfig(bf16=False)``.
- TRL ``bf16``: ``GRPOConfig(bf16=True, use_cpu=True)``: float32 weights, accelerate
  wraps the model's forward in bf16 autocast, so generation and the loss's forward run
  bf16 products (TRL 1.16 / transformers 5.23 / accelerate 1.15, checked with a forward
  hook on a fresh model).

Whether bf16 pays depends on the CPU (about twice the float32 matmul rate with
avx512_bf16 / AMX, several times slower where torch emulates it, e.g. AVX2-only AMD Zen
3): the run prints this machine's bf16/fp32 matmul speed ratio
(``models.precision.bf16_matmul_speedup``) first. Our two sides alternate step by step
(drift hits both); TRL's trainers run one after the other (``trainer.train()``). Each
side reports the median seconds per step over ``--steps`` steps after one warm-up step.
The headline is the speed-up of our fastest side against TRL's fastest side (TRL median
s / ours); every pairwise ratio is in the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator

import torch
from machine import cpu_description

PROMPTS = [
    "What is 17 * 23? Show your steps, then give the answer.",
    "A train travels 60 km in 45 minutes. What is its speed in km/h? Explain.",
]
PRECISIONS = ("fp32", "bf16-mixed")
TRL_PRECISIONS = ("fp32", "bf16")


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


def our_trainer(model_name: str, precision: str, steps: int, max_new_tokens: int):
    """An RLTrainer on a freshly loaded float32 model, set up for ``precision`` as the
    pipeline does it (compute precision on the model, engine weights, config)."""
    from agentic_rl.config import TrainConfig
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.models.precision import set_compute_precision
    from agentic_rl.training.rl import RLTrainer

    model, tokenizer = load(model_name, device="cpu")
    set_compute_precision(model, precision)
    backend = HFBackend(model, tokenizer, weights_dtype=torch.bfloat16 if precision == "bf16-mixed" else None)
    config = TrainConfig.model_validate(
        {
            "rl": {"tasks_per_step": 2, "group_size": 8, "steps": steps + 1},
            "precision": precision,
            "optim": {"lr": 1e-6},
            "algorithm": {"preset": "grpo-t", "kl": {"coef": 0.0}},
            "rollout": {
                "temperature": 1.0,
                "top_p": 1.0,
                "max_new_tokens": max_new_tokens,
                "max_total_tokens": 1024,
            },
        }
    )
    return RLTrainer(config, model, tokenizer, backend, PromptEnv, [0, 1])


def ours(model_name: str, precisions: list[str], steps: int, max_new_tokens: int) -> dict[str, list[float]]:
    """Seconds of each timed step per precision; the trainers alternate step by step."""
    trainers = {p: our_trainer(model_name, p, steps, max_new_tokens) for p in precisions}
    times: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(steps + 1):
        for precision, trainer in trainers.items():
            started = time.perf_counter()
            trainer.step()
            times[precision].append(time.perf_counter() - started)
    return {p: t[1:] for p, t in times.items()}  # the first step warms up


@contextlib.contextmanager
def hf_folders(model_name: str) -> Iterator[tuple[str, str]]:
    """(model folder, tokenizer folder) TRL can load ``model_name`` from: the cached
    safetensors folders of the embedded model, a temporary save of tiny-random, or the
    path / hub id itself."""
    from agentic_rl.cache import cache_dir
    from agentic_rl.models import embedded

    if model_name == "smollm2-135m":
        yield str(embedded.model_folder(cache_dir())), str(embedded.tokenizer_folder(cache_dir()))
    elif model_name == "tiny-random":
        from agentic_rl.models import load

        model, tokenizer = load(model_name, device="cpu", linear_kernel="torch")
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            yield folder, folder
    else:
        yield model_name, model_name


def trl(
    model_folder: str, tokenizer_folder: str, bf16: bool, steps: int, max_new_tokens: int, gradient_checkpointing: bool
) -> list[float]:
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

    # A fresh model per trainer: accelerate wraps the forward of the model it prepares.
    model = AutoModelForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS] * (steps + 1))
    timer = StepTimes()
    with tempfile.TemporaryDirectory() as output:
        args = GRPOConfig(
            output_dir=output,
            use_cpu=True,
            bf16=bf16,
            report_to="none",
            save_strategy="no",
            logging_steps=1000,
            per_device_train_batch_size=16,
            num_generations=8,
            max_completion_length=max_new_tokens,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            loss_type="dapo",
            learning_rate=1e-6,
            max_steps=steps + 1,
            num_iterations=1,
            gradient_accumulation_steps=1,
            seed=0,
            shuffle_dataset=False,
            gradient_checkpointing=gradient_checkpointing,
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            args=args,
            train_dataset=dataset,
            reward_funcs=[
                lambda completions, **kw: [reward(c[0]["content"] if isinstance(c, list) else c) for c in completions]
            ],
            callbacks=[timer],
        )
        trainer.train()
    return timer.times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default="smollm2-135m",
        help="a built-in name (smollm2-135m, tiny-random) or a local Hugging Face folder",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=5,
        help="timed steps after the warm-up (median reported); the first steps of a run also grow the heap as longer batches arrive",
    )
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--precision", nargs="+", choices=PRECISIONS, default=list(PRECISIONS), help="agentic-rl sides (default both)"
    )
    parser.add_argument(
        "--trl-precision",
        nargs="+",
        choices=TRL_PRECISIONS,
        default=list(TRL_PRECISIONS),
        help="TRL sides: fp32 = bf16=False, bf16 = bf16=True (default both)",
    )
    parser.add_argument(
        "--trl-gradient-checkpointing",
        action="store_true",
        help="TRL's default activation checkpointing (off here: our side does not checkpoint)",
    )
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from agentic_rl.models.precision import bf16_matmul_speedup

    print(f"CPU: {cpu_description()}; torch {torch.__version__}", flush=True)
    speedup = bf16_matmul_speedup()
    kind = (
        "native bf16 (avx512_bf16 / AMX class)" if speedup >= 1.0 else "bf16 emulated: slower than float32 on this CPU"
    )
    print(
        f"bf16/fp32 matmul speed on this machine: {speedup:.2f}x ({kind}; models.precision.bf16_matmul_speedup, {torch.get_num_threads()} threads)",
        flush=True,
    )

    sides: dict[str, list[float]] = {}
    for precision, times in ours(
        args.model, list(dict.fromkeys(args.precision)), args.steps, args.max_new_tokens
    ).items():  # also converts the cached model if missing
        sides[f"agentic-rl {precision}"] = times
    if not args.skip_trl:
        with hf_folders(args.model) as (model_folder, tokenizer_folder):
            for precision in dict.fromkeys(args.trl_precision):
                sides[f"TRL {precision}"] = trl(
                    model_folder,
                    tokenizer_folder,
                    precision == "bf16",
                    args.steps,
                    args.max_new_tokens,
                    args.trl_gradient_checkpointing,
                )

    medians = {name: statistics.median(times) for name, times in sides.items()}
    result: dict = {
        "model": args.model,
        "cpu": cpu_description(),
        "threads": torch.get_num_threads(),
        "steps": args.steps,
        "max_new_tokens": args.max_new_tokens,
        "bf16_matmul_speedup": speedup,
        "trl_gradient_checkpointing": args.trl_gradient_checkpointing,
        "step_seconds": sides,
        "median_s": medians,
    }
    print()
    for name, times in sides.items():
        print(f"{name:<22} {medians[name]:7.2f} s/step  (steps: {', '.join(f'{t:.1f}' for t in times)})")
    ours_names = [n for n in sides if n.startswith("agentic-rl")]
    trl_names = [n for n in sides if n.startswith("TRL")]
    if ours_names and trl_names:
        # TRL s/step over ours: > 1 means agentic-rl is faster.
        result["speedup_pairwise"] = {f"{o} vs {t}": medians[t] / medians[o] for o in ours_names for t in trl_names}
        best_ours, best_trl = min(ours_names, key=medians.get), min(trl_names, key=medians.get)
        result.update(best_agentic_rl=best_ours, best_trl=best_trl, speedup=medians[best_trl] / medians[best_ours])
        pairwise = ", ".join(f"{pair} {ratio:.2f}x" for pair, ratio in result["speedup_pairwise"].items())
        print(
            f"speed-up, best vs best: {result['speedup']:.2f}x  ({best_ours} {medians[best_ours]:.2f} s vs {best_trl} {medians[best_trl]:.2f} s)"
        )
        print(f"pairwise (TRL s / ours): {pairwise}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
