"""The RL stage's batch and update (``rl`` section of a training config): how many steps,
tasks and samples, how a task's samples are drawn (independent groups or ARPO's
branching), how each step's batch is split into optimizer updates, and when a step's
update is skipped or the run stopped."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentic_rl.config.base import MicroBatchTokens, Section, TaskOffset


class ARPOConfig(Section):
    """ARPO's entropy-based adaptive rollout, used when ``rl.sampling`` is arpo (paper
    defaults; the budget M per task is ``rl.group_size``)."""

    initial_samples: int = Field(8, ge=1)
    """N: global samples per task before branching (at most rl.group_size)."""
    entropy_tokens: int = Field(20, ge=1)
    """k: leading tokens of a turn whose mean entropy (normalized by log vocabulary size) is measured."""
    base_probability: float = Field(0.5, ge=0.0, le=1.0)
    """alpha: branch probability at a tool-call point whose entropy did not rise (the paper's threshold 0.5)."""
    entropy_weight: float = Field(0.2, ge=0.0)
    """beta: branch probability = alpha + beta * (entropy increase over the episode's first turn)."""
    branches: int = Field(2, ge=1)
    """Z: partial rollouts started at a branching point."""
    max_rounds: int = Field(4, ge=1)
    """Most branching rounds (branches of branches) before the budget is filled with global samples."""
    attribution: Literal["soft", "hard"] = "soft"
    """soft: the advantage as computed over all trajectories, branches included; hard: tokens of a shared prefix get the mean advantage of the trajectories sharing them."""


class RLConfig(Section):
    """One RL step samples ``tasks_per_step`` tasks x ``group_size`` trajectories, scores
    them and updates the policy ``epochs`` x ``mini_batches`` times."""

    steps: int = Field(10, ge=0)
    """RL steps (each: sample groups, score, update)."""
    tasks_per_step: int = Field(8, ge=1)
    """Tasks (groups) sampled per step."""
    group_size: int = Field(8, ge=1)
    """Samples per task (G); with sampling arpo, the budget M per task."""
    sampling: Literal["group", "arpo"] = "group"
    """How a task's trajectories are sampled: group (group_size independent samples) or arpo (entropy-based branching after tool calls, see rl.arpo)."""
    arpo: ARPOConfig = Field(default_factory=ARPOConfig)
    """ARPO's branching (when sampling is arpo)."""
    max_generation_rounds: int = Field(1, ge=1)
    """Dynamic sampling: generation rounds per step while the groups algorithm.group_filter keeps fill fewer than tasks_per_step (1 = no resampling)."""
    epochs: int = Field(1, ge=1)
    """Passes over each step's batch (PPO epochs)."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split into this many mini-batches)."""
    micro_batch_tokens: MicroBatchTokens = 8192
    skip_zero_advantage: bool = True
    """Leave trajectories whose advantages are all zero (e.g. every GRPO group whose samples
    scored alike) out of the update's forward and backward passes. The gradient is unchanged
    (the loss's normalisers stay the whole batch's); it applies where that holds: a row-local
    policy loss, no KL loss term, no critic. The update's entropy and ratio metrics then cover
    the trained trajectories; ``zero_advantage_skipped`` reports the fraction left out."""
    task_offset: TaskOffset = 0
    """First training task index used by RL (collection uses its own offset)."""
    log_rollouts: int = Field(4, ge=0)
    """Sampled rollouts written per step to rollouts.jsonl."""
    max_failed_fraction: float = Field(0.5, ge=0.0, le=1.0)
    """Skip a step's update when more than this fraction of its trajectories hit infrastructure errors."""
    max_nonfinite_steps: int = Field(3, ge=1)
    """Stop the run (with a valid checkpoint) after this many non-finite losses or gradients in a row."""
