"""Envs for the Ray tests, named by import path (``ray_envs:ParityEnv``) so rollout worker
processes can build them: the tests put this folder on the workers' PYTHONPATH."""

from __future__ import annotations

import os
import time
import zlib


class ParityEnv:
    """One turn; reward 1 when the reply has an even number of characters. Random text from
    the tiny model gets both outcomes, so groups have reward variance."""

    num_tasks = 64

    def __init__(
        self,
        split: str = "train",
        slow_every: int = 0,
        slow_s: float = 0.0,
        step_s: float = 0.0,
        slow_tasks_every: int = 0,
    ) -> None:
        self.slow_every, self.slow_s, self.step_s, self.slow_tasks_every = slow_every, slow_s, step_s, slow_tasks_every
        self.index = 0

    def reset(self, *, seed=None, options=None):
        self.index = (options or {}).get("task_index", 0)
        # The reset info (kept in Trajectory.info) shows the training step the env was given.
        info = {"task_id": f"parity-{self.index}", "training_step": (options or {}).get("training_step")}
        return [
            {"role": "system", "content": "Reply."},
            {"role": "user", "content": f"Task {self.index}: say something."},
        ], info

    def step(self, message):
        content = message["content"]
        delay = self.step_s
        # The slow tail: one episode in slow_every (by its reply, so it is the same in every run) takes slow_s.
        if self.slow_every and zlib.crc32(content.encode()) % self.slow_every == 0:
            delay = self.slow_s
        if self.slow_tasks_every and self.index % self.slow_tasks_every == 0:  # a whole group slow
            delay = self.slow_s
        if delay:
            time.sleep(delay)
        reward = float(len(content) % 2 == 0)
        return (
            [],
            reward,
            True,
            False,
            {"answer": content, "correct": reward > 0, "tool_results": [], "pid": os.getpid()},
        )


class NoteTakingEnv(ParityEnv):
    """ParityEnv that also writes a note per episode into the process's shared memory store
    ``ray-notes`` (as an agent with ``env.memory: shared`` does): the notes stay in the
    worker process that ran the episode."""

    def step(self, message):
        from agentic_rl.tools.memory_store import shared_store

        shared_store("ray-notes", max_notes=16).write(
            f"worker {os.getpid()} ran task {self.index}", key=f"task-{self.index}"
        )
        return super().step(message)
