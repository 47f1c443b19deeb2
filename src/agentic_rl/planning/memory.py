"""Per-device memory of a training run, estimated from the model's shape and the run's
settings before anything is loaded: the master weights, gradients and optimizer state
(each sharded under FSDP2), compute copies, the KL reference and a separate critic, the
activations of one micro-batch, and the rollout engine's weights and KV cache.

The figures are byte counts of what the trainer allocates (models/, training/,
distributed/strategy.py), not rules of thumb; the activation factors were measured
(benchmarks/memory_plan.py compares every estimate with a measured peak).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from agentic_rl.planning.shapes import LORA_MODULES, ModelShape

GB = 1e9

ACTIVATION_FACTORS = {"fp32": (4, 6, 4, 4), "bf16-mixed": (2, 13, 2, 4)}
"""Saved activations per token and decoder layer as (bytes per element, multiples of the
hidden size, of the KV width, of the MLP width) for each compute precision: what a
Llama-style layer keeps for its backward (norm outputs, q/k/v, attention output, the
MLP's gate, up, activation and product). fp32 was fitted to the live-memory peaks of the
embedded model at 2k and 8k tokens (benchmarks/memory_plan.py; 42.3 and 41.7 KB per token
and layer measured, 41.5 planned); bf16-mixed counts the tensors autocast keeps (float32
norms, bf16 casts of each projection's input): CPU autocast peaks came within 2-7% of it
(the embedded model at 2k and 8k tokens), CUDA peaks on an H200 within 1-4% (2026-11-28).
A CUDA float32 forward needs models/attention.py's route to stay linear in the row length."""

CHECKPOINTED_LAYERS = 1
"""With gradient checkpointing, the layers' worth of activations the backward holds at
once beside every layer's input: the one it recomputed (measured 1.0-1.3)."""

HEAD_SAVE_BYTES = 256 << 20
"""The chunked vocabulary head keeps its logits for the backward up to this size
(accel/head.py's constant, restated so the planner needs no torch)."""

HEAD_CHUNK_BYTES = 16 << 20
"""One vocabulary chunk of float32 logits (accel/head.py: 1 << 22 elements)."""

OVERHEAD_FRACTION = 0.05
"""Temporaries and allocator rounding on top of the itemised figures."""

OVERHEAD_BYTES = 32 << 20
"""A fixed part of the overhead: kernel workspaces and small buffers of any model size."""


@dataclass(frozen=True)
class PlanSettings:
    """The run settings memory depends on (a training config reduced to numbers)."""

    strategy: str = "single"
    """single, ddp or fsdp2."""
    nproc: int = 1
    precision: str = "fp32"
    """fp32 or bf16-mixed (resolved, never auto)."""
    lora_r: int | None = None
    lora_modules: tuple[str, ...] = LORA_MODULES
    gradient_checkpointing: bool = False
    micro_batch_tokens: int = 8192
    reference: str | None = None
    """The KL reference's placement: fp32, bf16, cpu, or None (no KL term, or LoRA)."""
    critic: str = "none"
    """none, shared or separate."""
    cpu_offload: bool = False
    engine: str = "hf"
    """hf (in-process, shares the trainer's weights) or vllm (its own server)."""
    rollout_sequences: int = 64
    """Sequences decoded at once."""
    rollout_tokens: int = 4096
    """Tokens a sequence may reach (prompt and completion)."""


@dataclass
class MemoryPlan:
    """Bytes per trainer device by item, and the engine's on its own device(s)."""

    shape: ModelShape
    settings: PlanSettings
    trainer: dict[str, float] = field(default_factory=dict)
    """Item -> bytes on each trainer device at the update's peak (persistent items included)."""
    rollout: dict[str, float] = field(default_factory=dict)
    """Item -> bytes the rollout adds on the trainer device (hf engine) or needs on the vLLM server."""

    @property
    def trainable_params(self) -> int:
        s = self.settings
        return self.shape.lora_params(s.lora_r, s.lora_modules) if s.lora_r else self.shape.num_params

    @property
    def update_peak(self) -> float:
        """Everything held through the update, plus the larger of the activations and the
        gradients: the backward frees each layer's activations as it writes its gradients,
        so the two peak at opposite ends of it (measured: adding them overstates a peak)."""
        return _held(self.trainer) + self.trainer["overhead"]

    @property
    def rollout_peak(self) -> float:
        """The trainer device during rollouts (hf engine): persistent state plus the engine's."""
        if self.settings.engine != "hf":
            return 0.0
        persistent = sum(v for k, v in self.trainer.items() if k in PERSISTENT)
        return persistent + sum(self.rollout.values())

    @property
    def peak(self) -> float:
        """The most one trainer device holds at once (update or rollout)."""
        return max(self.update_peak, self.rollout_peak)

    @property
    def engine_device(self) -> float:
        """What a vLLM server needs beside the trainer (0 for the in-process engine)."""
        return sum(self.rollout.values()) if self.settings.engine == "vllm" else 0.0


TRADED = ("activations", "gradients", "gradient buckets (DDP)")
"""Items the backward trades against each other (activations freed, gradients written)."""


def _held(items: dict[str, float]) -> float:
    """The most held at once: every other item, and the larger side of ``TRADED``."""
    others = sum(v for k, v in items.items() if k not in TRADED and k != "overhead")
    gradients = items.get("gradients", 0.0) + items.get("gradient buckets (DDP)", 0.0)
    return others + max(items.get("activations", 0.0), gradients)


PERSISTENT = (
    "weights (fp32 masters)",
    "optimizer state (AdamW)",
    "KL reference",
    "critic (separate)",
    "engine weights (in-process)",
)
"""Items held for the whole run; the others exist only during the update."""


def plan_memory(shape: ModelShape, settings: PlanSettings) -> MemoryPlan:
    """The itemised per-device memory of ``settings`` for a model of ``shape``."""
    s = settings
    plan = MemoryPlan(shape, s)
    total, trainable = shape.num_params, plan.trainable_params
    shards = s.nproc if s.strategy == "fsdp2" else 1
    offloaded = s.strategy == "fsdp2" and s.cpu_offload
    compute_bytes = 2 if s.precision == "bf16-mixed" else 4
    layer_params = shape.layer_params()
    items = plan.trainer
    # Master weights and AdamW's two moments are float32; LoRA trains only the adapters.
    frozen = total if s.lora_r else 0
    items["weights (fp32 masters)"] = 0.0 if offloaded else 4.0 * (frozen + trainable) / shards
    items["optimizer state (AdamW)"] = 0.0 if offloaded else 8.0 * trainable / shards
    items["gradients"] = 4.0 * trainable / shards
    if s.strategy == "ddp":
        items["gradient buckets (DDP)"] = 4.0 * trainable
    if s.strategy == "fsdp2":
        # Two layers' full parameters at once (one computing, one prefetched), and the
        # root's (embedding, head) while they run, in the compute dtype.
        items["gathered layers (FSDP2)"] = compute_bytes * (
            2 * layer_params + shape.embedding_params * (1 if shape.tie_word_embeddings else 2)
        )
    elif s.precision == "bf16-mixed":
        items["bf16 weight casts (autocast)"] = 2.0 * total  # kept by autograd for the backward
    if s.reference is not None:
        reference_bytes = {"fp32": 4.0, "bf16": 2.0, "cpu": 0.0}[s.reference]
        items["KL reference"] = reference_bytes * total / shards
    if s.critic == "separate":
        items["critic (separate)"] = 16.0 * total / shards  # weights, gradients, AdamW moments
    if s.engine == "hf" and (s.strategy == "fsdp2" or s.precision == "bf16-mixed"):
        # The in-process engine decodes from its own full copy (FSDP2 gathers one after each
        # step; bf16-mixed samples from bf16 weights), kept for the whole run.
        items["engine weights (in-process)"] = float(compute_bytes * total)
    items["activations"] = activation_bytes(shape, s)
    items["overhead"] = OVERHEAD_FRACTION * _held(items) + OVERHEAD_BYTES
    engine = plan.rollout
    kv = shape.kv_bytes_per_token(2 if s.engine == "vllm" or s.precision == "bf16-mixed" else 4)
    engine["KV cache"] = float(kv * s.rollout_sequences * s.rollout_tokens)
    if s.engine == "vllm":
        engine["engine weights (bf16)"] = 2.0 * total
    return plan


def activation_bytes(shape: ModelShape, settings: PlanSettings) -> float:
    """What one micro-batch's forward keeps for its backward, plus the vocabulary head's."""
    dtype_bytes, h_factor, kv_factor, i_factor = ACTIVATION_FACTORS[settings.precision]
    per_token_layer = dtype_bytes * (
        h_factor * shape.hidden_size + kv_factor * shape.kv_width + i_factor * shape.intermediate_size
    )
    tokens = settings.micro_batch_tokens
    if settings.gradient_checkpointing:
        # Each layer's input is kept; the backward recomputes one layer at a time.
        layers = 4.0 * shape.hidden_size * tokens * shape.num_layers + CHECKPOINTED_LAYERS * per_token_layer * tokens
    else:
        # Every layer's activations, and one layer's gradients of them during its backward.
        layers = per_token_layer * tokens * (shape.num_layers + 1)
    logits = 4 * tokens * shape.vocab_size
    # The head keeps every chunk's exponentiated logits when they fit, else recomputes them.
    head = (logits if logits <= HEAD_SAVE_BYTES else 0) + HEAD_CHUNK_BYTES
    return float(layers + head)


def advice(plan: MemoryPlan, device_bytes: float) -> str | None:
    """None when the plan fits ``device_bytes`` per device; else one line with what it
    needs and the smallest changes (found by planning them) that make it fit."""
    s, shape = plan.settings, plan.shape
    if plan.peak <= device_bytes:
        return None
    size = f"{shape.num_params / 1e9:.1f}B" if shape.num_params >= 1e9 else f"{shape.num_params / 1e6:.0f}M"
    kind = f"LoRA r={s.lora_r}" if s.lora_r else "full fine-tune"
    needs = f"{size} {kind} ({s.strategy}, {s.precision}) needs ~{plan.peak / GB:.0f} GB per device on {s.nproc} x {device_bytes / GB:.0f} GB"
    fixes, found = [], []
    for label, change in _candidate_changes(s):
        changed = {key for key, value in change.items() if getattr(s, key) != value}
        if any(changed >= other for other in found):
            continue  # the knobs of a change that fits already, turned further or with more
        candidate = plan_memory(shape, replace(s, **change))
        if candidate.peak <= device_bytes:
            found.append(changed)
            fixes.append(f"{label} (~{candidate.peak / GB:.0f} GB)")
            if len(fixes) == 2:
                break
    return f"{needs}: " + (
        f"fits with {' or with '.join(fixes)}"
        if fixes
        else "no change tried fits (more ranks, LoRA, checkpointing, smaller micro-batches); use larger devices"
    )


def _candidate_changes(s: PlanSettings):
    """(what to say, settings to change): fewest GPUs first, then checkpointing, then
    smaller micro-batches; LoRA on the GPUs given."""
    ranks = [s.nproc] + [n for n in (2, 4, 8, 16, 32, 64) if n > s.nproc]
    for n in ranks:
        sharded = {} if n == s.nproc else {"strategy": "fsdp2", "nproc": n}
        where = f"{n} GPUs under trainer.strategy=fsdp2" if sharded else ""
        for checkpointing in sorted({s.gradient_checkpointing, True}):
            for tokens in [s.micro_batch_tokens] + [t for t in (4096, 2048, 1024) if t < s.micro_batch_tokens]:
                said = [where] if where else []
                if checkpointing != s.gradient_checkpointing:
                    said.append("gradient_checkpointing=true")
                if tokens != s.micro_batch_tokens:
                    said.append(f"rl.micro_batch_tokens={tokens}")
                change = {**sharded, "gradient_checkpointing": checkpointing, "micro_batch_tokens": tokens}
                if said:
                    yield " and ".join(said), change
                if n == s.nproc and not s.lora_r:
                    yield " and ".join(["lora.enabled=true", *said]), {**change, "lora_r": 16}
