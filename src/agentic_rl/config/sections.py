"""The config sections of evaluation and training runs (the RL objective's section is in
``config.algorithm``); ``TrainConfig`` and ``EvalConfig`` are the roots."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentic_rl.config.algorithm import AlgorithmConfig
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
from agentic_rl.config.rewards import RewardConfig
from agentic_rl.config.sinks import check_sink_names
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


class RolloutConfig(Section):
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

    @model_validator(mode="after")
    def _samples_cover_k(self) -> EvalConfig:
        if self.num_samples is not None and self.num_samples < self.k:
            raise ValueError(f"num_samples ({self.num_samples}) must be at least k ({self.k})")
        return self

    @property
    def samples_per_task(self) -> int:
        return self.num_samples or self.k


class ARPOConfig(Section):
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


class OptimConfig(Section):
    lr: LearningRate = 1e-6
    """Peak learning rate (AdamW)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    warmup_steps: WarmupSteps = 0
    schedule: Literal["constant", "cosine"] = "constant"
    """Learning-rate schedule after warmup."""
    max_grad_norm: MaxGradNorm = 1.0


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
    reward: RewardConfig = Field(default_factory=RewardConfig)
    """Terms added to every episode's reward: format, tool costs, the two-stage schedule."""
    arpo: ARPOConfig = Field(default_factory=ARPOConfig)
    """ARPO branching (when algorithm.rollout is arpo)."""
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
    micro_batch_tokens: MicroBatchTokens = 8192
    skip_zero_advantage: bool = True
    """Leave trajectories whose advantages are all zero (e.g. every GRPO group whose samples
    scored alike) out of the update's forward and backward passes. The gradient is unchanged
    (the loss's normalisers stay the whole batch's); it applies where that holds: a row-local
    policy loss, no KL loss term, no critic. The update's entropy and ratio metrics then cover
    the trained trajectories; ``zero_advantage_skipped`` reports the fraction left out."""
    precision: Literal["auto", "fp32", "bf16-mixed"] = "auto"
    """fp32, or bf16-mixed (float32 master weights and optimizer state, bf16 forward/backward, float32 log-probs and losses, bf16 rollout weights); auto = bf16-mixed on GPUs and on CPUs where bf16 matmuls measure faster, else fp32."""
    kl_reference: Literal["auto", "fp32", "bf16", "cpu"] = "auto"
    """The KL reference copy of the initial policy: fp32 = float32 on the policy's device, bf16 = bf16 there (half the memory; float32 log-probs), cpu = float32 on the CPU (for tight GPU memory); auto = bf16 when precision is bf16-mixed, else fp32. With LoRA the reference is the policy with adapters disabled (no copy)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory for long episodes, ~1.3x compute."""
    compile: bool = False
    """torch.compile the decoder layers (pays off on GPUs; on CPU compilation outweighs the gain)."""
    task_offset: TaskOffset = 0
    """First training task index used by RL (collection uses its own offset)."""
    log_rollouts: int = Field(4, ge=0)
    """Sampled rollouts written per step to rollouts.jsonl."""
    checkpoint_every: int = Field(10, ge=0)
    """Save a resumable checkpoint every N RL steps (and after SFT/filtering); 0 = never."""
    keep_checkpoints: int = Field(2, ge=1)
    """Newest complete checkpoints kept (older ones are deleted only after a new one is complete)."""
    final_dtype: Literal["original", "fp32", "bf16"] = "original"
    """The dtype of the weights in final/: original = the dtype the model was published in (bf16 for SmolLM2-135M-Instruct), fp32 on request."""
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
        if self.backend.kind == "openai":
            raise ValueError("backend.kind: training needs token-level samples: 'hf' (in process) or 'vllm'")
        if self.backend.kind in ("vllm", "sglang"):
            for field, value, why in (
                (
                    "algorithm.rollout",
                    self.algorithm.rollout == "arpo",
                    "ARPO branches on per-token entropies, which only the hf backend returns",
                ),
                (
                    "lora.enabled",
                    self.lora.enabled and self.backend.kind == "sglang",
                    "pushing LoRA adapters into an SGLang server is not implemented yet (backend.kind vllm takes them)",
                ),
                (
                    "lora.r",
                    self.lora.enabled and self.lora.r > 512,
                    f"vLLM serves adapters up to rank 512, got {self.lora.r}",
                ),
            ):
                if value:
                    raise ValueError(f"{field}: backend.kind {self.backend.kind}: {why}")
        if self.distributed.engine == "ray":
            for field, value, why in (
                (
                    "backend.kind",
                    self.backend.kind not in ("hf", "vllm"),
                    "Ray rollout workers run the hf engine or a managed vLLM server each",
                ),
                (
                    "backend.base_url",
                    self.backend.kind == "vllm" and self.backend.base_url is not None,
                    "each rollout worker starts and feeds its own vLLM server (drop base_url)",
                ),
                (
                    "algorithm.rollout",
                    self.algorithm.rollout == "arpo",
                    "ARPO's branching runs in the trainer process only",
                ),
                (
                    "lora.enabled",
                    self.lora.enabled,
                    "rollout workers receive full weights; LoRA adapters are not shipped yet",
                ),
                (
                    "algorithm.rollout_correction",
                    self.distributed.max_staleness is not None and self.algorithm.rollout_correction == "none",
                    "async mode samples from older weights: it needs a correction (auto, tis, mis, seq-tis, seq-mis or decoupled)",
                ),
            ):
                if value:
                    raise ValueError(f"{field}: distributed.engine ray: {why}")
        elif self.distributed.max_staleness is not None:
            raise ValueError(
                "distributed.max_staleness: async mode needs distributed.engine ray (rollout workers beside the trainer)"
            )
        if self.rollout.context != "full":
            for field, value, why in (
                ("algorithm.rollout", self.algorithm.rollout == "arpo", "ARPO branches within one growing context"),
                (
                    "algorithm.advantage",
                    self.algorithm.advantage not in ("grpo", "rloo", "opo", "grpo-passk"),
                    "segments share one advantage per episode: grpo, rloo, opo or grpo-passk",
                ),
                ("algorithm.critic", self.algorithm.critic != "none", "a critic's values need one growing context"),
                (
                    "algorithm.aggregation",
                    self.algorithm.aggregation.startswith("seq-mean"),
                    "sequence-mean aggregation would count each segment as a sequence (long episodes would weigh more); use token-mean",
                ),
            ):
                if value:
                    raise ValueError(f"{field}: rollout.context {self.rollout.context}: {why}")
        if self.sft.env and self.sft.data:
            raise ValueError("sft.env: options for collecting cold-start data, but sft.data gives the data; drop one")
        if self.env.is_mix:
            if self.dpo.enabled and not self.dpo.data:
                raise ValueError(
                    "dpo.enabled: collecting this from an env.mix is not supported yet; give a data file (dpo.data) or train on one env"
                )
        elif self.curriculum.enabled and self.curriculum.by == "env":
            raise ValueError("curriculum.by: env reweights the entries of an env.mix; with one env use by: task")
        if self.algorithm.advantage == "remax":
            # The greedy baseline rollout runs beside the group rollout of a local trainer.
            if self.algorithm.rollout != "group":
                raise ValueError(
                    "algorithm.advantage: remax samples a greedy baseline beside each group; use algorithm.rollout: group"
                )
            if self.distributed.engine == "ray" or self.distributed.max_staleness is not None:
                raise ValueError(
                    "algorithm.advantage: remax runs with local rollouts for now (distributed.engine: local, no max_staleness)"
                )
        if self.group_size == 1 and self.algorithm.advantage in (
            "grpo",
            "rloo",
            "mt-grpo",
            "gigpo",
            "opo",
            "grpo-passk",
        ):
            raise ValueError(f"group_size: the {self.algorithm.advantage} advantage needs at least 2 samples per task")
        if self.algorithm.rollout == "arpo" and self.arpo.initial_samples > self.group_size:
            raise ValueError(
                f"arpo.initial_samples: must be at most group_size (the budget M = {self.group_size}), got {self.arpo.initial_samples}"
            )
        if self.mini_batches > self.tasks_per_step * self.group_size:
            raise ValueError("mini_batches: more mini-batches than trajectories per step")
        return self
