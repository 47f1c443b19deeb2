"""The benchmark env of benchmarks/async_rl.py, importable by Ray rollout workers
(``slow_tail_env:SlowTailEnv``; the benchmark puts this folder on their PYTHONPATH).

One turn; the env step stands for a tool call that takes ``step_s`` seconds, and one
episode in ``slow_every`` (chosen by a hash of the task index and the reply, so the same
in every mode) takes ``slow_factor`` times longer: the slow tail of agentic rollouts
(a long tool call, a slow web page). Reward: the reply has an even number of characters."""

from __future__ import annotations

import time
import zlib


class SlowTailEnv:
    num_tasks = 100_000

    def __init__(
        self, split: str = "train", step_s: float = 0.5, slow_every: int = 10, slow_factor: float = 5.0
    ) -> None:
        self.step_s, self.slow_every, self.slow_factor = step_s, slow_every, slow_factor
        self.index = 0

    def reset(self, *, seed=None, options=None):
        self.index = (options or {}).get("task_index", 0)
        return [
            {"role": "system", "content": "Reply."},
            {"role": "user", "content": f"Task {self.index}: say something."},
        ], {"task_id": f"tail-{self.index}"}

    def step(self, message):
        content = message["content"]
        slow = zlib.crc32(f"{self.index}:{content}".encode()) % self.slow_every == 0
        time.sleep(self.step_s * (self.slow_factor if slow else 1.0))
        reward = float(len(content) % 2 == 0)
        return [], reward, True, False, {"answer": content, "correct": reward > 0, "tool_results": []}
