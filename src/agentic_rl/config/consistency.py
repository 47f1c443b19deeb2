"""Cross-section checks of a training config: settings that are each valid but cannot run
together. Each raises a ValueError whose message starts with the dotted key to change."""

from __future__ import annotations

from typing import Any

# A TrainConfig: typed loosely because its validator calls these checks (the module it is
# defined in imports this one).
TrainConfig = Any


def check_consistent(config: TrainConfig) -> None:
    """ValueError (one line naming the key) for the first combination that cannot run."""
    for check in (_engines, _ray, _context, _stages, _rl, _roles):
        check(config)


def _roles(config: TrainConfig) -> None:
    """Roles with their own adapters live on a LoRA model, served by the in-process engine or
    by vLLM (each adapter under its own name)."""
    if not config.lora.roles:
        return
    if not config.lora.enabled:
        raise ValueError("lora.roles: the roles' adapters (and the frozen base) need lora.enabled: true")
    if config.backend.kind not in ("hf", "vllm"):
        raise ValueError(f"lora.roles: backend.kind {config.backend.kind} serves one adapter; use hf or vllm")


def _engines(config: TrainConfig) -> None:
    """The engine (backend) choices training can use."""
    if config.backend.kind == "openai":
        raise ValueError("backend.kind: training needs token-level samples: 'hf' (in process) or 'vllm'")
    if config.backend.weight_sync == "collective":
        for needs, missing in (
            ("backend.kind vllm", config.backend.kind != "vllm"),
            ("a managed vLLM server (no backend.base_url)", config.backend.base_url is not None),
            ("full weights (LoRA adapters go through files)", config.lora.enabled),
        ):
            if missing:
                raise ValueError(f"backend.weight_sync: collective needs {needs}; use auto or files")
    if config.backend.kind in ("vllm", "sglang"):
        for field, value, why in (
            (
                "rl.sampling",
                config.rl.sampling == "arpo",
                "ARPO branches on per-token entropies, which only the hf backend returns",
            ),
            (
                "lora.enabled",
                config.lora.enabled and config.backend.kind == "sglang",
                "pushing LoRA adapters into an SGLang server is not implemented yet (backend.kind vllm takes them)",
            ),
            (
                "lora.r",
                config.lora.enabled and config.lora.r > 512,
                f"vLLM serves adapters up to rank 512, got {config.lora.r}",
            ),
        ):
            if value:
                raise ValueError(f"{field}: backend.kind {config.backend.kind}: {why}")


def _ray(config: TrainConfig) -> None:
    """What Ray rollout workers and async mode can run."""
    if config.distributed.engine == "ray":
        for field, value, why in (
            (
                "backend.kind",
                config.backend.kind not in ("hf", "vllm"),
                "Ray rollout workers run the hf engine or a managed vLLM server each",
            ),
            (
                "backend.base_url",
                config.backend.kind == "vllm" and config.backend.base_url is not None,
                "each rollout worker starts and feeds its own vLLM server (drop base_url)",
            ),
            (
                "rl.sampling",
                config.rl.sampling == "arpo",
                "ARPO's branching runs in the trainer process only",
            ),
            (
                "lora.enabled",
                config.lora.enabled,
                "rollout workers receive full weights; LoRA adapters are not shipped yet",
            ),
            (
                "algorithm.correction.kind",
                config.distributed.max_staleness is not None and config.algorithm.correction.kind == "none",
                "async mode samples from older weights: it needs a correction (auto, tis, mis, seq-tis, seq-mis or decoupled)",
            ),
        ):
            if value:
                raise ValueError(f"{field}: distributed.engine ray: {why}")
    elif config.distributed.max_staleness is not None:
        raise ValueError(
            "distributed.max_staleness: async mode needs distributed.engine ray (rollout workers beside the trainer)"
        )


def _context(config: TrainConfig) -> None:
    """What a context policy other than full can train."""
    if config.rollout.context != "full":
        for field, value, why in (
            ("rl.sampling", config.rl.sampling == "arpo", "ARPO branches within one growing context"),
            (
                "algorithm.advantage.name",
                config.algorithm.advantage.name not in ("grpo", "rloo", "opo", "grpo-passk"),
                "segments share one advantage per episode: grpo, rloo, opo or grpo-passk",
            ),
            (
                "algorithm.critic.kind",
                config.algorithm.critic.kind != "none",
                "a critic's values need one growing context",
            ),
            (
                "algorithm.aggregation",
                config.algorithm.aggregation.startswith("seq-mean"),
                "sequence-mean aggregation would count each segment as a sequence (long episodes would weigh more); use token-mean",
            ),
        ):
            if value:
                raise ValueError(f"{field}: rollout.context {config.rollout.context}: {why}")


def _stages(config: TrainConfig) -> None:
    """The stages around RL (SFT data, DPO, curriculum) against the env."""
    if config.sft.env and config.sft.data:
        raise ValueError("sft.env: options for collecting cold-start data, but sft.data gives the data; drop one")
    if config.env.is_mix:
        if config.dpo.enabled and not config.dpo.data:
            raise ValueError(
                "dpo.enabled: collecting this from an env.mix is not supported yet; give a data file (dpo.data) or train on one env"
            )
    elif config.curriculum.enabled and config.curriculum.by == "env":
        raise ValueError("curriculum.by: env reweights the entries of an env.mix; with one env use by: task")


def _rl(config: TrainConfig) -> None:
    """The RL stage against the algorithm."""
    if config.algorithm.advantage.name == "remax":
        # The greedy baseline rollout runs beside the group rollout of a local trainer.
        if config.rl.sampling != "group":
            raise ValueError(
                "algorithm.advantage.name: remax samples a greedy baseline beside each group; use rl.sampling: group"
            )
        if config.distributed.engine == "ray" or config.distributed.max_staleness is not None:
            raise ValueError(
                "algorithm.advantage.name: remax runs with local rollouts for now (distributed.engine: local, no max_staleness)"
            )
    rl = config.rl
    if rl.group_size == 1 and config.algorithm.advantage.name in (
        "grpo",
        "rloo",
        "mt-grpo",
        "gigpo",
        "opo",
        "grpo-passk",
    ):
        raise ValueError(
            f"rl.group_size: the {config.algorithm.advantage.name} advantage needs at least 2 samples per task"
        )
    if rl.sampling == "arpo" and rl.arpo.initial_samples > rl.group_size:
        raise ValueError(
            f"rl.arpo.initial_samples: must be at most rl.group_size (the budget M = {rl.group_size}), got {rl.arpo.initial_samples}"
        )
    if rl.mini_batches > rl.tasks_per_step * rl.group_size:
        raise ValueError("rl.mini_batches: more mini-batches than trajectories per step")
