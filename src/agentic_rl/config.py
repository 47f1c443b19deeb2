"""Typed configuration with validation: one flat section per stage.

Every field has a one-line docstring. Bad values fail with one line naming the key and
what was expected (``ConfigError``), which the CLI prints without a traceback.
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agentic_rl.errors import ConfigError  # re-exported: the CLI and users catch agentic_rl.config.ConfigError

class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class ModelConfig(_Section):
    name: str = "smollm2-135m"
    """Built-in model name (smollm2-135m, tiny-random), local Hugging Face folder, or hub id."""
    device: str = "auto"
    """"auto" (GPU when present, else CPU), "cpu", "cuda", "cuda:1", ..."""
    linear_kernel: Literal["auto", "onednn", "torch"] = "auto"
    """Linear layers: auto = oneDNN for float32 on CPU (2-3x MKL on some CPUs), torch = PyTorch's default."""


class EnvConfig(BaseModel):
    """``name`` plus any options of that env's factory (e.g. ``few_shot``, ``digits``)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    name: str = "arithmetic"
    """Registered env name (see ``agentic-rl envs``)."""

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class BackendConfig(_Section):
    kind: Literal["hf", "openai"] = "hf"
    """hf: the model in this process; openai: any OpenAI-compatible chat endpoint."""
    batch_size: int = Field(64, ge=1)
    """Most sequences the hf backend decodes in one batch."""
    base_url: str | None = None
    """Endpoint base URL for kind=openai, e.g. http://127.0.0.1:8000/v1."""
    api_key: str | None = None
    """API key for kind=openai (default: the OPENAI_API_KEY variable)."""
    max_concurrency: int = Field(8, ge=1)
    """Parallel requests for kind=openai."""


class RolloutConfig(_Section):
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    max_new_tokens: int = Field(256, ge=1)
    """Most tokens sampled in one assistant turn."""
    max_total_tokens: int = Field(4096, ge=16)
    """Most tokens in a whole trajectory; reaching it truncates (max_tokens)."""
    max_turns: int = Field(16, ge=1)
    """Engine-side cap on assistant turns (envs have their own max_turns too)."""
    timeout_s: float = Field(1800.0, gt=0)
    """Wall-clock limit per trajectory, from its reset (checked between turns and while its env
    steps; in a batched engine it includes waiting for the batch: a backstop for hung episodes)."""
    continuous_batching: bool = True
    """With an engine that offers decode sessions (HF): each trajectory decodes on its own schedule and keeps its KV cache across turns; false: one batched generate per turn (the reference path, same tokens for the same seed)."""


class EvalConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to evaluate."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment and its options."""
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Where generation runs."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling and episode limits."""
    num_tasks: int = Field(32, ge=1)
    """Held-out tasks to evaluate (the first N of the split)."""
    k: int = Field(4, ge=1)
    """The k of avg@k / pass@k / maj@k."""
    num_samples: int | None = Field(None, ge=1)
    """Samples per task (default k); more than k lowers the variance of pass@k."""
    split: str = "test"
    """Task split, passed to envs that have splits."""
    seed: int = 0
    """Sampling seed: the same seed gives the same samples."""
    output: str | None = None
    """Write the JSON result here."""

    @model_validator(mode="after")
    def _samples_cover_k(self) -> EvalConfig:
        if self.num_samples is not None and self.num_samples < self.k:
            raise ValueError(f"num_samples ({self.num_samples}) must be at least k ({self.k})")
        return self

    @property
    def samples_per_task(self) -> int:
        return self.num_samples or self.k


class AlgorithmConfig(_Section):
    """The RL objective. ``preset`` fills every field you leave unset (see
    ``agentic_rl.algorithms.PRESETS``); explicit fields win."""

    preset: str = "grpo-tcr"
    """A name in agentic_rl.algorithms.PRESETS: grpo, dr-grpo, grpo-t, grpo-scr, grpo-tcr (default: token-level loss, clip-higher, overlong shaping, no KL), ppo, reinforce++, rloo, dapo, mt-grpo, gigpo, starpo-s, ..."""
    advantage: str | None = None
    """Advantage estimator name in the registry (grpo, rloo, ...)."""
    normalize_by_std: bool | None = None
    """GRPO: divide by the group's reward std (False = Dr. GRPO)."""
    clip_low: float | None = Field(None, ge=0.0, lt=1.0)
    """Lower clip range: the ratio is clipped below at 1 - clip_low."""
    clip_high: float | None = Field(None, ge=0.0)
    """Upper clip range: the ratio is clipped above at 1 + clip_high (clip-higher: > clip_low)."""
    clip_ratio_c: float | None = Field(None, gt=1.0)
    """Dual-clip bound for negative advantages (None = off)."""
    aggregation: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] | None = None
    """How per-token losses become one number."""
    kl_coef: float | None = Field(None, ge=0.0)
    """Weight of the KL-to-reference loss term (0 = no reference model)."""
    kl_estimator: Literal["k1", "k2", "k3"] | None = None
    """KL estimator."""
    overlong_buffer: int | None = Field(None, ge=0)
    """Soft overlong punishment: tokens before the length limit where the penalty ramps to -1 (0 = off)."""
    rollout: Literal["group", "arpo"] = "group"
    """How a task's trajectories are sampled: group (group_size independent samples) or arpo (entropy-based branching, see the arpo section; group_size is its budget M)."""
    kl_in_reward: bool | None = None
    """Subtract kl_coef * KL per sampled token from the token rewards (REINFORCE++, classic PPO) instead of a KL loss term."""
    gamma: float | None = Field(None, ge=0.0, le=1.0)
    """Discount over sampled tokens (GAE, REINFORCE++) or over turns (GiGPO step returns)."""
    lam: float | None = Field(None, ge=0.0, le=1.0)
    """GAE lambda (PPO)."""
    whiten_advantages: bool | None = None
    """PPO: whiten GAE advantages over the batch's sampled tokens."""
    critic: Literal["none", "shared", "separate"] | None = None
    """Learned value function: none, a value head on the policy backbone (shared), or a separate copy of the initial model with its own head."""
    value_loss_coef: float | None = Field(None, ge=0.0)
    """Weight of the value loss (with a shared critic it also shapes the backbone)."""
    value_clip: float | None = Field(None, ge=0.0)
    """Value clipping range around the values at sampling time (0 = plain squared error)."""
    critic_lr: float | None = Field(None, gt=0.0)
    """Learning rate of the critic (value head, and the separate backbone)."""
    group_filter: Literal["none", "zero-variance", "top-std"] | None = None
    """Which sampled groups enter the update: all, DAPO's non-zero reward variance, or StarPO-S's top keep_fraction by reward std."""
    keep_fraction: float | None = Field(None, gt=0.0, le=1.0)
    """top-std filter: fraction of groups kept."""
    max_generation_rounds: int | None = Field(None, ge=1)
    """Dynamic sampling: generation rounds per step while filtered groups fill fewer than tasks_per_step (1 = no resampling)."""
    step_advantage_weight: float | None = Field(None, ge=0.0)
    """GiGPO: weight of the step-level (anchor-state) advantage."""
    tool_turn_reward: float | None = None
    """Per-turn process reward for a turn whose tool calls all ran (added to the env's info["turn_reward"]; MT-GRPO's tool-execution reward)."""

    @model_validator(mode="after")
    def _fill_from_preset(self) -> AlgorithmConfig:
        from agentic_rl.algorithms.presets import PRESETS

        if self.preset not in PRESETS:
            close = difflib.get_close_matches(self.preset, PRESETS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"unknown preset {self.preset!r}{hint}; presets: {', '.join(PRESETS)}")
        for key, value in PRESETS[self.preset].items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)
        if self.advantage == "gae" and self.critic == "none":
            raise ValueError("critic: the gae advantage needs a critic ('shared' or 'separate')")
        return self


class ARPOConfig(_Section):
    """ARPO's entropy-based adaptive rollout, used when ``algorithm.rollout`` is arpo (paper
    defaults; the budget M per task is ``group_size``)."""

    initial_samples: int = Field(8, ge=1)
    """N: global samples per task before branching (at most group_size)."""
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


class OptimConfig(_Section):
    lr: float = Field(1e-6, gt=0)
    """Peak learning rate (AdamW)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    warmup_steps: int = Field(0, ge=0)
    """Optimizer steps of linear warmup."""
    schedule: Literal["constant", "cosine"] = "constant"
    """Learning-rate schedule after warmup."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping by global norm."""


class LoraConfig(_Section):
    enabled: bool = False
    """Train LoRA adapters (peft) instead of all weights; the reference policy is the base with adapters off."""
    r: int = Field(16, ge=1)
    """Adapter rank."""
    alpha: int = Field(32, ge=1)
    """Adapter scaling numerator."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Adapter dropout."""
    target_modules: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    """Module names that get adapters."""


class SFTConfig(_Section):
    epochs: int = Field(2, ge=1)
    """Passes over the data."""
    lr: float = Field(1e-5, gt=0)
    """Peak learning rate."""
    batch_size: int = Field(16, ge=1)
    """Conversations per optimizer step."""
    micro_batch_tokens: int = Field(4096, ge=64)
    """Most padded tokens per forward/backward pass (gradient accumulation beyond)."""
    max_length: int = Field(2048, ge=16)
    """Longer conversations are dropped (and counted)."""
    warmup_steps: int = Field(2, ge=0)
    """Optimizer steps of linear warmup."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping by global norm."""
    seed: int = 0
    """Shuffling seed."""


class CollectConfig(_Section):
    """Cold-start data from the model's own successful rollouts (with demonstrations)."""

    num_tasks: int = Field(256, ge=1)
    """Training tasks to attempt."""
    samples_per_task: int = Field(2, ge=1)
    """Attempts per task."""
    few_shot: int = Field(4, ge=0)
    """Demonstrations shown while collecting (removed from the stored data)."""
    max_per_task: int = Field(1, ge=1)
    """Keep at most this many successful trajectories per task (diversity)."""
    temperature: float = Field(0.7, ge=0)
    """Sampling temperature while collecting."""
    task_offset: int = Field(0, ge=0)
    """First training task index used (keeps collection and RL tasks apart)."""


class FilterConfig(_Section):
    """Model-aware data: keep training tasks whose pass rate under the current model lies in a band."""

    enabled: bool = False
    """Run difficulty filtering before RL."""
    num_tasks: int = Field(128, ge=1)
    """Candidate training tasks to score."""
    samples_per_task: int = Field(4, ge=1)
    """Rollouts per task used to estimate its pass rate."""
    min_pass_rate: float = Field(0.0, ge=0.0, le=1.0)
    """Keep tasks whose pass rate is strictly above this (default 0: drop tasks never solved)."""
    max_pass_rate: float = Field(1.0, ge=0.0, le=1.0)
    """Keep tasks whose pass rate is strictly below this (default 1: drop tasks always solved)."""


class RunEvalConfig(_Section):
    """The held-out evaluations a training run does (before, after SFT, after RL)."""

    num_tasks: int = Field(100, ge=1)
    """Held-out test tasks."""
    k: int = Field(1, ge=1)
    """Samples per task (avg@k / pass@k / maj@k)."""
    temperature: float = Field(0.0, ge=0.0)
    """Sampling temperature (0 = greedy: a deterministic accuracy)."""
    env: dict[str, Any] = Field(default_factory=lambda: {"few_shot": 0})
    """Env options that differ at evaluation (default: zero-shot, no demonstrations)."""


class SFTStageConfig(_Section):
    enabled: bool = False
    """Run the SFT cold start (collect successful trajectories, then fine-tune) before RL."""
    data: str | None = None
    """Use this JSONL of conversations instead of collecting."""
    collect: CollectConfig = Field(default_factory=CollectConfig)
    """How to collect cold-start data."""
    train: SFTConfig = Field(default_factory=SFTConfig)
    """Fine-tuning settings."""


class DPOConfig(_Section):
    """Offline DPO on preference pairs (chosen / rejected conversations sharing a prompt)."""

    epochs: int = Field(1, ge=1)
    """Passes over the pairs."""
    lr: float = Field(1e-6, gt=0)
    """Peak learning rate."""
    batch_size: int = Field(8, ge=1)
    """Pairs per optimizer step."""
    beta: float = Field(0.1, gt=0)
    """Strength of the implicit KL to the reference policy (the initial policy)."""
    label_smoothing: float = Field(0.0, ge=0.0, lt=0.5)
    """Assumed probability that a preference label is flipped (conservative DPO; sigmoid loss only)."""
    loss_type: Literal["sigmoid", "ipo"] = "sigmoid"
    """sigmoid: DPO; ipo: IPO's squared loss on per-token mean log-ratios."""
    micro_batch_tokens: int = Field(4096, ge=64)
    """Most padded tokens per forward/backward pass (gradient accumulation beyond)."""
    max_length: int = Field(2048, ge=16)
    """Pairs with a longer side are dropped (and counted)."""
    warmup_steps: int = Field(0, ge=0)
    """Optimizer steps of linear warmup."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping by global norm."""
    seed: int = 0
    """Shuffling seed."""

    @model_validator(mode="after")
    def _smoothing_is_for_sigmoid(self) -> DPOConfig:
        if self.label_smoothing and self.loss_type != "sigmoid":
            raise ValueError("label_smoothing: only the sigmoid (DPO) loss uses it")
        return self


class PairCollectConfig(_Section):
    """Preference pairs sampled with the current policy: per task, best against worst reward."""

    num_tasks: int = Field(64, ge=1)
    """Training tasks to sample a group on."""
    samples_per_task: int = Field(4, ge=2)
    """Group size per task (more samples: more groups with a reward difference)."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature while collecting."""
    task_offset: int = Field(0, ge=0)
    """First training task index used."""


class DPOStageConfig(_Section):
    enabled: bool = False
    """Run offline DPO (after SFT and filtering, before RL)."""
    data: str | None = None
    """Use this JSONL of preference pairs instead of collecting."""
    collect: PairCollectConfig = Field(default_factory=PairCollectConfig)
    """How to collect pairs."""
    train: DPOConfig = Field(default_factory=DPOConfig)
    """DPO settings."""


class TrackingConfig(_Section):
    sinks: list[str] = Field(default_factory=lambda: ["tensorboard"])
    """Metric sinks besides metrics.jsonl: tensorboard, wandb, mlflow (the last two when installed)."""
    thresholds: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the collapse / hacking warning thresholds (see tracking.diagnostics.DEFAULT_THRESHOLDS; None turns one off)."""
    report: bool = True
    """Write report.html into the run directory at the end."""

    @model_validator(mode="after")
    def _known_sinks(self) -> TrackingConfig:
        from agentic_rl.tracking.sinks import check_sink_names

        check_sink_names(self.sinks)
        return self


class TrainConfig(_Section):
    """One training run: evals, optional SFT cold start and filtering, then RL."""

    description: str = ""
    """One line shown by ``agentic-rl recipes``."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to train."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Training env and its options (split is set per stage)."""
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Generation (kind must be hf: the trainer shares its model with the backend)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling and episode limits during RL."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """The RL objective."""
    arpo: ARPOConfig = Field(default_factory=ARPOConfig)
    """ARPO branching (when algorithm.rollout is arpo)."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """Optimizer for RL."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning."""
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    """SFT cold start."""
    filter: FilterConfig = Field(default_factory=FilterConfig)
    """Difficulty filtering."""
    dpo: DPOStageConfig = Field(default_factory=DPOStageConfig)
    """Offline DPO on preference pairs (collected best-vs-worst, or from a JSONL)."""
    eval: RunEvalConfig = Field(default_factory=RunEvalConfig)
    """Held-out evaluations."""
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    """Metric sinks, warnings and the HTML report."""
    steps: int = Field(10, ge=0)
    """RL steps (each: sample groups, score, update)."""
    tasks_per_step: int = Field(8, ge=1)
    """Tasks (groups) sampled per step."""
    group_size: int = Field(8, ge=1)
    """Samples per task (G)."""
    ppo_epochs: int = Field(1, ge=1)
    """Passes over each step's batch."""
    mini_batches: int = Field(1, ge=1)
    """Optimizer steps per epoch (the batch is split into this many mini-batches)."""
    micro_batch_tokens: int = Field(8192, ge=64)
    """Most padded tokens per forward/backward pass (gradient accumulation beyond)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory for long episodes, ~1.3x compute."""
    compile: bool = False
    """torch.compile the decoder layers (pays off on GPUs; on CPU compilation outweighs the gain)."""
    task_offset: int = Field(0, ge=0)
    """First training task index used by RL (collection uses its own offset)."""
    log_rollouts: int = Field(4, ge=0)
    """Sampled rollouts written per step to rollouts.jsonl."""
    checkpoint_every: int = Field(10, ge=0)
    """Save a resumable checkpoint every N RL steps (and after SFT/filtering); 0 = never."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest complete checkpoints kept (older ones are deleted only after a new one is complete)."""
    max_failed_fraction: float = Field(0.5, ge=0.0, le=1.0)
    """Skip a step's update when more than this fraction of its trajectories hit infrastructure errors."""
    max_nonfinite_steps: int = Field(3, ge=1)
    """Stop the run (with a valid checkpoint) after this many non-finite losses or gradients in a row."""
    seed: int = 0
    """Seed for sampling, shuffling and initialisation."""
    output_dir: str | None = None
    """Run directory (default runs/<recipe>-<time>)."""

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.backend.kind != "hf":
            raise ValueError("backend.kind: training needs 'hf' (the in-process model)")
        if self.group_size == 1 and self.algorithm.advantage in ("grpo", "rloo", "mt-grpo", "gigpo"):
            raise ValueError(f"group_size: the {self.algorithm.advantage} advantage needs at least 2 samples per task")
        if self.algorithm.rollout == "arpo" and self.arpo.initial_samples > self.group_size:
            raise ValueError(f"arpo.initial_samples: must be at most group_size (the budget M = {self.group_size}), got {self.arpo.initial_samples}")
        if self.mini_batches > self.tasks_per_step * self.group_size:
            raise ValueError("mini_batches: more mini-batches than trajectories per step")
        return self


def _format_validation_error(error: ValidationError) -> str:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"]) or "config"
    if first["type"] == "extra_forbidden":
        parent, _, leaf = key.rpartition(".")
        section = _section_for(error.title, parent)
        known = list(section.model_fields) if section else []
        close = difflib.get_close_matches(leaf, known, n=1)
        hint = f"; did you mean {'.'.join(filter(None, [parent, close[0]]))!r}?" if close else (f"; known keys: {', '.join(known)}" if known else "")
        return f"unknown config key {key!r}{hint}"
    value = first.get("input")
    shown = f" (got {value!r})" if not isinstance(value, dict) else ""
    return f"{key}: {first['msg'][0].lower() + first['msg'][1:]}{shown}"


def _section_for(title: str, dotted: str) -> type[BaseModel] | None:
    models = {cls.__name__: cls for cls in (EvalConfig, TrainConfig)}
    model: Any = models.get(title)
    for part in filter(None, dotted.split(".")):
        field = model.model_fields.get(part) if model else None
        model = field.annotation if field else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    return model


def parse_assignment(assignment: str) -> tuple[list[str], Any]:
    """``"rollout.temperature=0.7"`` -> (["rollout", "temperature"], 0.7); values are YAML scalars."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. rollout.temperature=0.7")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_assignments(data: dict[str, Any], assignments: list[str]) -> dict[str, Any]:
    for assignment in assignments:
        path, value = parse_assignment(assignment)
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {assignment!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = value
    return data


def build(model_cls: type[BaseModel], data: dict[str, Any]):
    """Validate ``data`` into ``model_cls``, turning pydantic errors into one ConfigError line."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error)) from None
