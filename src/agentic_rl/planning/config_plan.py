"""A training config (``TrainConfig``) as the memory planner's numbers."""

from __future__ import annotations

from agentic_rl.models.precision import resolve_precision
from agentic_rl.models.tiny import tiny_config
from agentic_rl.planning.memory import MemoryPlan, PlanSettings, plan_memory
from agentic_rl.planning.shapes import KNOWN_CONFIGS, ModelShape, model_shape
from agentic_rl.training.reference import resolve_kl_reference

EMBEDDED_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
BUILTIN_CONFIGS = {
    "smollm2-135m": KNOWN_CONFIGS[EMBEDDED_HUB_ID],
    # The tiny model carries the embedded model's tokenizer, hence its vocabulary.
    "tiny-random": tiny_config(KNOWN_CONFIGS[EMBEDDED_HUB_ID]["vocab_size"]),
}


def settings_from_config(config, *, nproc: int = 1, device: str = "cuda") -> PlanSettings:
    """What ``config`` (a ``TrainConfig``) asks of each of ``nproc`` trainer ranks on ``device``."""
    strategy = config.trainer.strategy
    if strategy == "auto":
        strategy = "single" if nproc == 1 else "ddp"
    if device == "cuda":  # planned for GPUs that may not be this machine's: auto means bf16 there
        precision = "bf16-mixed" if config.precision == "auto" else config.precision
    else:
        precision = resolve_precision(config.precision, device).precision
    algorithm = config.algorithm
    reference = None
    if algorithm.kl.coef and not config.lora.enabled:
        reference = resolve_kl_reference(config.algorithm.kl.reference, precision)
    rollout_tokens = config.rollout.max_total_tokens
    sequences = config.rl.tasks_per_step * config.rl.group_size
    # A rank's mini-batch bounds its micro-batches; a sequence longer than the cap goes alone.
    per_rank = sequences * rollout_tokens // max(nproc * config.rl.mini_batches, 1)
    micro = min(max(config.rl.micro_batch_tokens, rollout_tokens), max(per_rank, rollout_tokens))
    engine = "vllm" if config.backend.kind == "vllm" else "hf"
    decoding = sequences if engine == "vllm" else min(sequences, config.backend.batch_size)
    return PlanSettings(
        strategy=strategy,
        nproc=nproc,
        precision=precision,
        lora_r=config.lora.r if config.lora.enabled else None,
        lora_modules=tuple(config.lora.target_modules),
        gradient_checkpointing=config.gradient_checkpointing,
        micro_batch_tokens=micro,
        reference=reference,
        critic=algorithm.critic.kind,
        cpu_offload=config.trainer.cpu_offload,
        engine=engine,
        rollout_sequences=decoding,
        rollout_tokens=rollout_tokens,
    )


def shape_of(name_or_path: str) -> ModelShape:
    return model_shape(name_or_path, BUILTIN_CONFIGS)


def plan_config(config, *, nproc: int = 1, device: str = "cuda") -> MemoryPlan:
    """The memory plan of a training config on ``nproc`` ranks of ``device``."""
    return plan_memory(shape_of(config.model.name), settings_from_config(config, nproc=nproc, device=device))
