"""The stages before RL and around it (``sft``, ``filter``, ``curriculum``, ``dpo``, ``eval``
sections of a training config): each stage's own data, sampling and optimizer knobs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentic_rl.config.base import (
    BatchSize,
    Epochs,
    LearningRate,
    MaxGradNorm,
    MaxLength,
    MicroBatchTokens,
    NumTasks,
    SamplesPerTask,
    Section,
    TaskOffset,
    Temperature,
    WarmupSteps,
)


class _FineTuneSection(Section):
    """What the offline fine-tuning stages share: AdamW with warmup and clipping over
    shuffled batches, in length-bounded micro-batches. SFT's defaults; DPO sets its own."""

    epochs: Epochs = 2
    """Passes over the data."""
    lr: LearningRate = 1e-5
    """Peak learning rate."""
    batch_size: BatchSize = 16
    """Conversations per optimizer step."""
    micro_batch_tokens: MicroBatchTokens = 4096
    max_length: MaxLength = 2048
    """Longer conversations are dropped (and counted)."""
    warmup_steps: WarmupSteps = 2
    max_grad_norm: MaxGradNorm = 1.0
    seed: int = 0
    """Shuffling seed."""


class SFTConfig(_FineTuneSection):
    """Supervised fine-tuning on conversations (the cold start); the fine-tuning defaults are its own."""


class _TaskSampling(Section):
    """What the data-collection sections share: which training tasks are sampled, how
    often and how hot. The cold-start collection's defaults; pair collection sets its own."""

    num_tasks: NumTasks = 256
    """Training tasks to attempt."""
    samples_per_task: SamplesPerTask = 2
    """Attempts per task."""
    temperature: Temperature = 0.7
    """Sampling temperature while collecting."""
    task_offset: TaskOffset = 0
    """First training task index used (keeps collection and RL tasks apart)."""


class CollectConfig(_TaskSampling):
    """Cold-start data: the model's own correct rollouts (with demonstrations), or an env's expert."""

    source: Literal["model", "expert"] = "model"
    """model: the model's own correct rollouts, sampled with ``few_shot`` demonstrations; expert:
    one episode per task played by the env's scripted expert (envs with ``expert_reply``, e.g.
    search-qa), for a model too weak to find the behaviour in its own samples
    (``samples_per_task``, ``temperature``, ``few_shot`` and ``max_per_task`` do not apply)."""
    few_shot: int = Field(4, ge=0)
    """Demonstrations shown while collecting (removed from the stored data)."""
    max_per_task: int = Field(1, ge=1)
    """Keep at most this many successful trajectories per task (diversity)."""


class FilterConfig(Section):
    """Model-aware data: keep training tasks whose pass rate under the current model lies in a band."""

    enabled: bool = False
    """Run difficulty filtering before RL."""
    num_tasks: NumTasks = 128
    """Candidate training tasks to score."""
    samples_per_task: SamplesPerTask = 4
    """Rollouts per task used to estimate its pass rate."""
    min_pass_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Keep tasks whose pass rate is strictly above this (default 0: drop tasks never solved)."""
    max_pass_rate: float = Field(1.0, ge=0.0, le=1.0)
    """Keep tasks whose pass rate is strictly below this (default 1: drop tasks always solved)."""


class CurriculumConfig(Section):
    """Model-aware sampling during RL: pass rates re-estimated from the run's own rollouts
    every ``every`` steps, and tasks (or a mix's envs) of middle difficulty drawn more often,
    with weight ``max(p (1 - p), floor)``."""

    enabled: bool = False
    """Reweight the training tasks by their measured pass rates as RL runs."""
    every: int = Field(4, ge=1)
    """Re-estimate the pass rates, and the sampling weights, every N RL steps from the rollouts of those steps."""
    by: Literal["task", "env"] = "task"
    """task: each training task's own pass rate (suits task sets small enough for tasks to recur); env: each env.mix entry's pass rate scales its mix weight."""
    floor: float = Field(0.01, gt=0.0, le=0.25)
    """Smallest weight (p (1 - p) peaks at 0.25): tasks never or always solved are still drawn now and then, and re-measured."""
    prior: float = Field(0.5, ge=0.0, le=1.0)
    """Pass rate assumed for a task (or env) not measured yet (0.5: drawn as often as the most informative ones)."""


class RunEvalConfig(Section):
    """The held-out evaluations a training run does (before, after SFT, after RL)."""

    num_tasks: NumTasks = 100
    """Held-out test tasks."""
    k: int = Field(1, ge=1)
    """Samples per task (avg@k / pass@k / maj@k)."""
    temperature: Temperature = 0.0
    """Sampling temperature (0 = greedy: a deterministic accuracy)."""
    env: dict[str, Any] = Field(default_factory=lambda: {"few_shot": 0})
    """Env options that differ at evaluation (default: zero-shot, no demonstrations)."""

    @field_validator("env", mode="after")
    @classmethod
    def _zero_shot_unless_said(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Setting other eval options (eval.env.hops=...) must not bring back the training
        # env's demonstrations: zero-shot stays the default underneath.
        return {"few_shot": 0, **value}


class SFTStageConfig(Section):
    enabled: bool = False
    """Run the SFT cold start (collect successful trajectories, then fine-tune) before RL."""
    data: str | None = None
    """Use this JSONL of conversations instead of collecting."""
    collect: CollectConfig = Field(default_factory=CollectConfig)
    """How to collect cold-start data."""
    env: dict[str, Any] = Field(default_factory=dict)
    """Env options that differ while collecting the cold-start data, on top of ``env``'s (for
    a mix, of each entry's): e.g. a broad task mix for SFT and only the hard case for RL."""
    train: SFTConfig = Field(default_factory=SFTConfig)
    """Fine-tuning settings."""


class DPOConfig(_FineTuneSection):
    """Offline DPO on preference pairs (chosen / rejected conversations sharing a prompt)."""

    epochs: Epochs = 1
    """Passes over the pairs."""
    lr: LearningRate = 1e-6
    """Peak learning rate."""
    batch_size: BatchSize = 8
    """Pairs per optimizer step."""
    max_length: MaxLength = 2048
    """Pairs with a longer side are dropped (and counted)."""
    warmup_steps: WarmupSteps = 0
    beta: float = Field(0.1, gt=0)
    """Strength of the implicit KL to the reference policy (the initial policy)."""
    label_smoothing: float = Field(0.0, ge=0.0, lt=0.5)
    """Assumed probability that a preference label is flipped (conservative DPO; sigmoid loss only)."""
    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    """sigmoid: DPO; ipo: IPO's squared loss on per-token mean log-ratios."""

    @model_validator(mode="after")
    def _smoothing_is_for_sigmoid(self) -> DPOConfig:
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError("label_smoothing: only the sigmoid (DPO) loss uses it")
        return self


class PairCollectConfig(_TaskSampling):
    """Preference pairs sampled with the current policy: per task, best against worst reward."""

    num_tasks: NumTasks = 64
    """Training tasks to sample a group on."""
    samples_per_task: int = Field(4, ge=2)  # a pair needs two samples
    """Group size per task (more samples: more groups with a reward difference)."""
    temperature: Temperature = 1.0
    """Sampling temperature while collecting."""
    task_offset: TaskOffset = 0
    """First training task index used."""


class DPOStageConfig(Section):
    enabled: bool = False
    """Run offline DPO (after SFT and filtering, before RL)."""
    data: str | None = None
    """Use this JSONL of preference pairs instead of collecting."""
    collect: PairCollectConfig = Field(default_factory=PairCollectConfig)
    """How to collect pairs."""
    train: DPOConfig = Field(default_factory=DPOConfig)
    """DPO settings."""
