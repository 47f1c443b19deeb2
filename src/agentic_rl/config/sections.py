"""The config sections of evaluation and training runs (the RL objective's section is in
``config.algorithm``); ``TrainConfig`` and ``EvalConfig`` are the roots."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentic_rl.config.algorithm import DEFAULT_PRESET, AlgorithmConfig, merge_preset
from agentic_rl.config.base import (
    LearningRate,
    MaxGradNorm,
    NumTasks,
    Section,
    WarmupSteps,
)
from agentic_rl.config.consistency import check_consistent
from agentic_rl.config.renamed import moved_key
from agentic_rl.config.rewards import RewardConfig
from agentic_rl.config.rl import RLConfig
from agentic_rl.config.sinks import check_sink_names
from agentic_rl.config.stages import (
    CurriculumConfig,
    DPOStageConfig,
    FilterConfig,
    RunEvalConfig,
    SFTStageConfig,
)
from agentic_rl.config.trainer import DistributedConfig, TrainerConfig


class ModelConfig(Section):
    name: str = "smollm2-135m"
    """Built-in model name (smollm2-135m, tiny-random), local Hugging Face folder, or hub id."""
    device: str = "auto"
    """"auto" (GPU when present, else CPU), "cpu", "cuda", "cuda:1", ..."""
    linear_kernel: Literal["auto", "onednn", "torch"] = "auto"
    """Linear layers: auto = oneDNN for float32 on CPU (2-3x MKL on some CPUs), torch = PyTorch's default."""


class EnvConfig(BaseModel):
    """``name`` plus any options of that env's factory (e.g. ``few_shot``, ``digits``); or
    ``mix``: several envs in one run, ``[{name, weight, label, options...}]`` (then ``name``
    is ``mix``; the entries are checked where the env is built, ``agentic_rl.envs.mixed``)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)
    name: str = "arithmetic"
    """Registered env name (see ``agentic-rl envs``)."""

    @model_validator(mode="after")
    def _mix_or_name(self) -> EnvConfig:
        extra = self.model_extra or {}
        if "mix" not in extra:
            if self.name == "mix":
                raise ValueError(
                    "mix: env.name mix needs the entries, e.g. env.mix: [{name: arithmetic, weight: 1}, {name: frozenlake, weight: 1}]"
                )
            return self
        if "name" in self.model_fields_set and self.name != "mix":
            raise ValueError(f"name: set either env.name (one env, here {self.name!r}) or env.mix (several), not both")
        others = sorted(set(extra) - {"mix"})
        if others:
            raise ValueError(f"{others[0]}: with env.mix, options go into each entry (env.mix[i].{others[0]})")
        self.name = "mix"
        return self

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def is_mix(self) -> bool:
        return "mix" in (self.model_extra or {})


class BackendConfig(Section):
    kind: Literal["hf", "vllm", "sglang", "openai"] = "hf"
    """hf: the model in this process; vllm: a vLLM server, managed or running (token level, weights pushed after every step: training and evaluation); sglang: a running SGLang server (likewise); openai: any OpenAI-compatible chat endpoint (evaluation only)."""
    batch_size: int = Field(64, ge=1)
    """Most sequences the hf backend decodes in one batch."""
    base_url: str | None = None
    """Endpoint base URL: for kind=openai (e.g. http://127.0.0.1:8000/v1, required) and kind=sglang (e.g. http://127.0.0.1:30000, required); for kind=vllm a running server to use instead of starting one (e.g. http://127.0.0.1:8000)."""
    api_key: str | None = None
    """API key for kind=openai (default: the OPENAI_API_KEY variable) and for kind=vllm's running server at base_url (default: the VLLM_API_KEY variable; a managed vLLM server gets a random key of its own)."""
    max_concurrency: int = Field(8, ge=1)
    """Parallel requests for kind=openai, vllm and sglang."""
    python: str | None = None
    """kind=vllm: the interpreter whose environment has vLLM (default: the one running agentic-rl; `make vllm` builds .venv-vllm/bin/python)."""
    vllm_args: list[str] = Field(default_factory=list)
    """kind=vllm: extra command-line arguments for the managed server (e.g. ["--gpu-memory-utilization", "0.5"])."""
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """kind=vllm / sglang: the dtype the weights are pushed in (and a managed vLLM server runs); auto = bfloat16 on a GPU or a CPU with fast bf16 matmuls, float32 where the CPU emulates bf16."""
    startup_timeout_s: float = Field(900.0, gt=0)
    """kind=vllm: how long a managed server may take to come up (the first start compiles)."""
    request_timeout_s: float = Field(600.0, gt=0)
    """kind=vllm / sglang: most seconds one request may take before its episode ends as an infrastructure error."""
    weight_sync: Literal["auto", "collective", "files"] = "auto"
    """kind=vllm: how new weights reach the server: collective = broadcast in memory into a managed server's workers (gloo on CPU, NCCL on GPU); files = safetensors the server reloads (a running server at base_url, and LoRA adapters, always); auto = collective where the managed server takes it, else files."""


class RolloutConfig(Section):
    temperature: float = Field(1.0, ge=0.0)
    """Sampling temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling threshold."""
    max_new_tokens: int = Field(256, ge=1)
    """Most tokens sampled in one assistant turn."""
    max_total_tokens: int = Field(4096, ge=16)
    """Most tokens in a whole trajectory; reaching it truncates (max_tokens)."""
    timeout_s: float = Field(1800.0, gt=0)
    """Wall-clock limit per trajectory (checked between turns and while its env steps): a
    backstop for hung episodes. With continuous batching the clock starts when the episode
    gets a decode slot (time queued behind a big batch does not count); on the per-turn
    path it starts at reset and includes each turn's whole batched generate call."""
    context: Literal["full", "window", "fold", "summarize"] = "full"
    """What each turn's prompt shows (agentic_rl.rollout.context): full = the whole episode; window = the opening messages and the last context_turns turns; fold = the whole episode with tool outputs older than context_turns turns replaced by a stub; summarize = the whole episode until the next prompt would pass context_tokens, then the model writes a summary (sampled and trained) that replaces the history. window, fold and summarize start a new segment (a new exact sample, sharing the episode's advantage) whenever they cut what the model saw."""
    thinking: Literal["keep", "strip"] = "keep"
    """Earlier turns' reasoning (<think>...</think>) in later prompts (agentic_rl.templates.thinking): keep = every turn as sampled; strip = removed before the next prompt is rendered (as DeepSeek-R1's template always does and Qwen3's after a new user message). A prompt that no longer extends the sampled sequence starts a new segment, so sampling and training see the same prompts; `agentic-rl doctor MODEL` says which one a template needs (where the template itself drops reasoning, keep shows up as template_drift_tokens)."""
    context_turns: int = Field(2, ge=1)
    """Turns that window keeps, and that fold leaves whole."""
    context_tokens: int = Field(1024, ge=16)
    """summarize: the token budget of a prompt; when the next prompt would pass it, the model is asked for a summary first (the summary turn itself may go past it, up to max_total_tokens)."""
    context_keep_last: bool = False
    """summarize: the context after a summary keeps the last turn verbatim (its assistant message and observations) after the summary."""
    context_summary_request: str | None = None
    """summarize: the user message that asks for the summary (null: agentic_rl.rollout.context.SUMMARY_REQUEST). Say what your task needs kept: a summary is all the model keeps."""
    context_summary_header: str | None = None
    """summarize: the text that opens the user message carrying the summary into the new context (null: agentic_rl.rollout.context.SUMMARY_HEADER)."""
    continuous_batching: bool = True
    """With an engine that offers decode sessions (HF): each trajectory decodes on its own schedule and keeps its KV cache across turns; false: one batched generate per turn (the reference path, same tokens for the same seed)."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """rollout.max_turns (built on its own, e.g. ``RolloutConfig(max_turns=3)``): one line naming its home."""
        moved = moved_key({"rollout": data}) if isinstance(data, dict) else None
        if moved:
            raise ValueError(moved)
        return data

    @model_validator(mode="after")
    def _budget_below_limit(self) -> RolloutConfig:
        if self.context == "summarize" and self.context_tokens >= self.max_total_tokens:
            raise ValueError(
                f"context_tokens: with context summarize it must be below max_total_tokens ({self.max_total_tokens}) to leave room for the summary, got {self.context_tokens}"
            )
        if self.context_summary_request is not None and not self.context_summary_request.strip():
            raise ValueError(
                "context_summary_request: expected the text that asks for the summary (or null for the default), got an empty string"
            )
        return self


class SandboxConfig(Section):
    isolation: Literal["auto", "required", "best-effort"] = "auto"
    """Model-written code (the python tool): required = refuse to start unless the sandbox is an unprivileged uid in network/PID/mount/IPC namespaces with hidden homes, a minimal /dev, no /sys and a process bound; best-effort = run with what the machine offers and warn, naming what is missing; auto = required where namespaces work here, else best-effort."""


class EvalConfig(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to evaluate."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The environment and its options."""
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Where generation runs."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling and episode limits."""
    num_tasks: NumTasks = 32
    """Held-out tasks to evaluate (the first N of the split)."""
    k: int = Field(4, ge=1)
    """The k of avg@k / pass@k / maj@k."""
    num_samples: int | None = Field(None, ge=1)
    """Samples per task (default k); more than k lowers the variance of pass@k."""
    split: str = "test"
    """Task split, passed to envs that have splits."""
    seed: int = 0
    """Sampling seed: the same seed gives the same samples."""
    precision: Literal["auto", "fp32", "bf16-mixed"] = "auto"
    """Weights the hf engine samples with: bf16-mixed = bf16 weights; auto = bf16 on GPUs, and on CPUs where bf16 matmuls measure faster (see agentic_rl.models.precision)."""
    output: str | None = None
    """Write the JSON result here."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """What the sandbox running model-written code must guarantee."""
    adapters: str | None = None
    """A run's ``final/adapters`` folder (a run with ``lora.roles``): each of the env's roles sampled by the adapter it trained, on the run's base model (``model.name``, by default the one the folder names); frozen roles play the base. None: ``model.name`` plays every role."""

    @model_validator(mode="after")
    def _samples_cover_k(self) -> EvalConfig:
        if self.num_samples is not None and self.num_samples < self.k:
            raise ValueError(f"num_samples ({self.num_samples}) must be at least k ({self.k})")
        return self

    @model_validator(mode="after")
    def _adapters_on_hf(self) -> EvalConfig:
        if self.adapters is not None and self.backend.kind != "hf":
            raise ValueError(f"adapters: sampled by the hf engine only, not backend.kind {self.backend.kind}")
        return self

    @property
    def samples_per_task(self) -> int:
        return self.num_samples or self.k


class OptimConfig(Section):
    lr: LearningRate = 1e-6
    """Peak learning rate (AdamW)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    warmup_steps: WarmupSteps = 0
    schedule: Literal["constant", "cosine"] = "constant"
    """Learning-rate schedule after warmup."""
    max_grad_norm: MaxGradNorm = 1.0


ROLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""A role with its own adapter names the adapter: no dots (peft's module paths)."""
RESERVED_ADAPTERS = ("default", "frozen", "snapshot")
"""Adapter names the library uses: the shared policy's, the frozen roles' (a zero one) and
the snapshot roles' (a copy of the shared one)."""


class LoraConfig(Section):
    enabled: bool = False
    """Train LoRA adapters (peft) instead of all weights; the reference policy is the base with adapters off."""
    r: int = Field(16, ge=1)
    """Adapter rank."""
    alpha: int = Field(32, ge=1)
    """Adapter scaling numerator."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Adapter dropout."""
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    """Module names that get adapters."""
    roles: dict[str, Literal["own", "frozen", "snapshot"]] = Field(default_factory=dict)
    """Roles with a policy of their own (an agent program's: the ``model`` each call names; an env's: its declared roles): ``own`` = an adapter of its own on the shared base, trained on that role's samples only; ``frozen`` = the base model with no adapter, served and never trained (an opponent, a fixed tool agent); ``snapshot`` = the shared policy as of its last copy (every ``snapshot_every`` steps), served and never trained (self-play against a past self). Roles not named share the ``default`` adapter."""
    snapshot_every: int = Field(10, ge=1)
    """Steps between copies of the shared adapter into the one ``snapshot`` roles play (it starts as the shared one: the base)."""

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, str]) -> dict[str, str]:
        for role in roles:
            if not ROLE_NAME.fullmatch(role) or role in RESERVED_ADAPTERS:
                raise ValueError(
                    f"role {role!r}: expected letters, digits, '_' or '-' (it names an adapter), not {' or '.join(RESERVED_ADAPTERS)}"
                )
        return roles


class TrackingConfig(Section):
    sinks: list[str] = Field(default_factory=lambda: ["tensorboard"])
    """Metric sinks besides metrics.jsonl: tensorboard, wandb, mlflow (the last two when installed)."""
    thresholds: dict[str, Any] = Field(default_factory=dict)
    """Overrides of the collapse / hacking warning thresholds (see tracking.diagnostics.DEFAULT_THRESHOLDS; None turns one off)."""
    report: bool = True
    """Write report.html into the run directory at the end."""

    @field_validator("sinks")
    @classmethod
    def _known_sinks(cls, sinks: list[str]) -> list[str]:
        check_sink_names(sinks)
        return sinks


class TrainConfig(Section):
    """One training run: evals, optional SFT cold start and filtering, then RL."""

    description: str = ""
    """One line shown by ``agentic-rl recipes``."""
    model: ModelConfig = Field(default_factory=ModelConfig)
    """The policy to train."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """Training env and its options (split is set per stage)."""
    backend: BackendConfig = Field(default_factory=BackendConfig)
    """Generation: hf (the trainer's model in process) or vllm (a server the trainer pushes its weights into)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling and episode limits during RL."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """The RL objective."""
    rl: RLConfig = Field(default_factory=RLConfig)
    """The RL stage: steps, tasks and samples per step, sampling, updates per batch, skip rules."""
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """Terms added to every episode's reward: format, tool costs, the two-stage schedule, overlong shaping, the tool-turn reward."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """Optimizer for RL."""
    lora: LoraConfig = Field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """Trainer strategy over processes (single, DDP, FSDP2)."""
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    """Where rollouts run (in process, or Ray rollout workers) and async RL (max_staleness)."""
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    """SFT cold start."""
    filter: FilterConfig = Field(default_factory=FilterConfig)
    """Difficulty filtering."""
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    """Model-aware task sampling during RL (off by default)."""
    dpo: DPOStageConfig = Field(default_factory=DPOStageConfig)
    """Offline DPO on preference pairs (collected best-vs-worst, or from a JSONL)."""
    eval: RunEvalConfig = Field(default_factory=RunEvalConfig)
    """Held-out evaluations."""
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    """Metric sinks, warnings and the HTML report."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """What the sandbox running model-written code must guarantee."""
    precision: Literal["auto", "fp32", "bf16-mixed"] = "auto"
    """fp32, or bf16-mixed (float32 master weights and optimizer state, bf16 forward/backward, float32 log-probs and losses, bf16 rollout weights); auto = bf16-mixed on GPUs and on CPUs where bf16 matmuls measure faster, else fp32."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory for long episodes, ~1.3x compute."""
    compile: bool = False
    """torch.compile the decoder layers (pays off on GPUs; on CPU compilation outweighs the gain)."""
    checkpoint_every: int = Field(10, ge=0)
    """Save a resumable checkpoint every N RL steps (and after SFT/filtering); 0 = never."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest complete checkpoints kept (older ones are deleted only after a new one is complete)."""
    final_dtype: Literal["original", "fp32", "bf16"] = "original"
    """The dtype of the weights in final/: original = the dtype the model was published in (bf16 for SmolLM2-135M-Instruct), fp32 on request."""
    seed: int = 0
    """Seed for sampling, shuffling and initialisation."""
    output_dir: str | None = None
    """Run directory (default runs/<recipe>-<time>)."""

    @model_validator(mode="before")
    @classmethod
    def _moved_keys_and_preset(cls, data: Any) -> Any:
        """An old flat key is an error naming its new home; the preset's ``reward`` and ``rl``
        values go under those given (its ``algorithm`` values: ``AlgorithmConfig``)."""
        if not isinstance(data, dict):
            return data
        moved = moved_key(data)
        if moved:
            raise ValueError(moved)
        algorithm = data.get("algorithm")
        preset = (
            algorithm.get("preset", DEFAULT_PRESET)
            if isinstance(algorithm, dict)
            else getattr(algorithm, "preset", DEFAULT_PRESET)  # an AlgorithmConfig given whole
        )
        from agentic_rl.algorithms import PRESETS

        if not isinstance(preset, str) or preset not in PRESETS:
            return data  # AlgorithmConfig names the unknown preset
        data = dict(data)
        for section in ("reward", "rl"):
            if PRESETS[preset].get(section) and isinstance(data.get(section, {}), dict):
                data[section] = merge_preset(PRESETS[preset][section], data.get(section) or {}, f"{section}.")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        check_consistent(self)
        return self
