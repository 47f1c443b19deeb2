"""Context policies on a long episode, same model, same machine: ``--turns``-turn episodes
whose every step returns a tool output of about ``--output-tokens`` tokens (a fixed
synthetic env), sampled with ``full`` (the prompt grows, KV reused across turns),
``window`` and ``fold`` (``--keep`` turns) and ``summarize`` (the model writes a summary
whenever the next prompt would pass ``--budget`` tokens). Reported per policy: the longest
sequence any forward pass attends to (the peak context: what memory and attention cost
scale with), samples per episode, summaries per episode, and the wall time of the rollout
(median of ``--repeats``).

    python benchmarks/context_policies.py [--model smollm2-135m] [--turns 20] [--keep 4] [--budget 512] [--episodes 4] [--policies full,window,summarize]
"""

from __future__ import annotations

import argparse
import statistics
import time


class LongToolEnv:
    """``turns`` turns; each step answers with the same long tool output."""

    num_tasks = 1000

    def __init__(self, turns: int, output_tokens: int) -> None:
        self.turns, self.output = turns, " ".join(f"value{i}" for i in range(output_tokens // 3))

    def reset(self, *, seed=None, options=None):
        self.step_index = 0
        index = (options or {}).get("task_index", 0)
        return [
            {"role": "system", "content": "Inspect the data with the tool, step by step."},
            {"role": "user", "content": f"Task {index}: summarise the data."},
        ], {}

    def step(self, message):
        self.step_index += 1
        if self.step_index >= self.turns:
            return [], 0.0, True, False, {}
        return [{"role": "tool", "content": f"page {self.step_index}: {self.output}"}], 0.0, False, False, {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--keep", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget", type=int, default=512, help="summarize: rollout.context_tokens")
    parser.add_argument("--policies", default="full,window,fold,summarize")
    args = parser.parse_args()

    from agentic_rl.config import RolloutConfig
    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.rollout.engine import rollout

    model, tokenizer = load(args.model, device="cpu")
    backend = HFBackend(model.float(), tokenizer)
    make_env = lambda: LongToolEnv(args.turns, args.output_tokens)  # noqa: E731
    for policy in args.policies.split(","):
        config = RolloutConfig(
            max_new_tokens=args.new_tokens,
            max_total_tokens=32768,
            context=policy,
            context_turns=args.keep,
            context_tokens=args.budget,
        )
        times, peak, samples = [], 0, 0
        for repeat in range(args.repeats + 1):
            started = time.monotonic()
            groups = rollout(backend, make_env, list(range(args.episodes)), config=config, seed=repeat)
            if repeat:  # the first run warms up
                times.append(time.monotonic() - started)
            episodes = [t for g in groups for t in g.trajectories]
            peak = max(len(s.token_ids) for t in episodes for s in t.samples)
            samples = sum(len(t.samples) for t in episodes) / len(episodes)
            summaries = sum(t.summary_turns for t in episodes) / len(episodes)
            turns = sum(t.num_turns for t in episodes) / len(episodes)
        print(
            f"{policy:9s}: peak context {peak} tokens, {samples:.1f} samples and {summaries:.1f} summaries per episode, {turns:.0f} turns, rollout {statistics.median(times):.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
