"""What a training run checks before it creates its run directory or loads a model.

Every check that needs no model weights: the env's options (training, held-out and
cold-start envs), the reward terms the config weighs, the training tasks left after
``task_offset``, a scripted expert where the cold start asks for one, the sandbox where
the env runs code, and the model itself
(a built-in name, a local folder, or a Hub id that is cached or reachable). A failure is one
``ConfigError`` line, and no ``runs/...`` folder is left behind. ``agentic-rl train
--dry-run`` runs exactly these and exits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentic_rl.config import ConfigError, TrainConfig
from agentic_rl.envs import env_factory, mixed_spec_of
from agentic_rl.envs.terms import declared_terms, unknown_weight
from agentic_rl.models import MODEL_NAMES, resolve_auto_parser
from agentic_rl.rollout.episode import env_roles
from agentic_rl.training.stages import eval_env_options, sft_env_options

HUB_TIMEOUT_S = 10.0
"""How long the Hub may take to say whether an uncached model id exists."""


@dataclass
class Preflight:
    """What the checks found: the training env's builder, its task indices, and the
    sandbox's verified isolation with its warnings (None: the env runs no code)."""

    train_env: Callable
    task_indices: list[int]
    sandbox: tuple | None
    model: str


def preflight(config: TrainConfig, *, check_model: bool = True) -> Preflight:
    """Run every check (see the module docstring); raises ``ConfigError`` on the first failure."""
    from agentic_rl.tools.python_tool import check_sandbox_for

    train_env = env_factory(config.env.name, config.env.options, split="train")
    env_factory(config.env.name, eval_env_options(config), split="test")
    if config.sft.enabled and config.sft.env:
        env_factory(config.env.name, sft_env_options(config), split="train")
    probe = train_env()
    try:
        mix = mixed_spec_of(probe)
        # A mix's task_offset applies within each entry; its tasks are interleaved so the first N cover every entry.
        offset = config.rl.task_offset
        task_indices = mix.task_indices(offset) if mix is not None else list(range(offset, probe.num_tasks))
        if not task_indices:
            raise ConfigError(f"rl.task_offset: {offset} leaves no training tasks (the env has {probe.num_tasks})")
        check_roles(config, env_roles(probe))
        check_reward_terms(config, probe)
        if _expert_cold_start(config) and mix is None and not callable(getattr(probe, "expert_reply", None)):
            raise ConfigError(
                f"sft.collect.source: 'expert' needs an env with a scripted expert (expert_reply); "
                f"{config.env.name} has none: use source: model, or sft.enabled: false"
            )
    finally:
        close = getattr(probe, "close", None)
        if callable(close):
            close()
    model = model_source(config.model.name) if check_model else config.model.name
    return Preflight(train_env, task_indices, check_sandbox_for(train_env, config.sandbox.isolation), model)


def check_roles(config: TrainConfig, roles: tuple[str, ...]) -> None:
    """An env with roles trains with independent group samples on one engine per process:
    the settings that assume one conversation per episode stop with one line; ``lora.roles``
    names roles of the env and runs in one trainer process; ``algorithm.role_weights``
    names roles of the env."""
    weights = config.algorithm.role_weights
    for key, named in (("lora.roles", config.lora.roles), ("algorithm.role_weights", weights)):
        if named and not roles:
            raise ConfigError(f"{key}: for envs with roles; env {config.env.name} has one role")
        unknown = next((role for role in named if role not in roles), None) if isinstance(named, dict) else None
        if unknown is not None:
            raise ConfigError(f"{key}.{unknown}: not a role of env {config.env.name} (its roles: {', '.join(roles)})")
    if config.lora.roles:
        if config.trainer.strategy == "fsdp2":  # its engine holds a merged full copy: one policy
            raise ConfigError("trainer.strategy: not with lora.roles (fsdp2's engine samples one full copy)")
    if not roles:
        return
    refused = {
        "rl.sampling": (config.rl.sampling == "arpo", "ARPO branches one conversation"),
        "algorithm.advantage.name": (
            config.algorithm.advantage.name == "remax",
            "ReMax's greedy baseline has one role",
        ),
        "rollout.context": (config.rollout.context != "full", "each role's conversation grows in full"),
        "distributed.engine": (config.distributed.engine == "ray", "Ray rollout workers play one role"),
    }
    for key, (bad, why) in refused.items():
        if bad:
            raise ConfigError(f"{key}: not with an env with roles ({', '.join(roles)}): {why}")


def check_reward_terms(config: TrainConfig, env) -> None:
    """Every term ``reward.terms`` weighs is one the env reports (a misspelt or unreported
    term would weigh nothing, silently)."""
    try:
        problem = unknown_weight(config.reward.terms, declared_terms(env), config.env.name)
    except ValueError as error:  # the env's own declaration is malformed
        raise ConfigError(str(error)) from None
    if problem:
        raise ConfigError(problem)


def resolve_parser(config: TrainConfig, loaded=None) -> None:
    """``parser: auto`` in the env options, the eval env and the cold start's env -> the
    format the model's chat template uses (``agentic_rl.models.resolve_auto_parser``)."""
    resolve_auto_parser([config.env.model_extra or {}, config.eval.env, config.sft.env], config.model.name, loaded)


def _expert_cold_start(config: TrainConfig) -> bool:
    return bool(config.sft.enabled and not config.sft.data and config.sft.collect.source == "expert")


def model_source(name: str) -> str:
    """Where ``model.name`` comes from: ``built-in``, ``local folder``, ``Hub cache`` or
    ``Hub``; a ``ConfigError`` naming ``HF_HUB_OFFLINE``, a local folder and the built-in
    names when it cannot be had (at once: no retries)."""
    builtins = ", ".join(MODEL_NAMES)
    if name in MODEL_NAMES:
        return "built-in"
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.name: the folder {name!r} has no config.json (a Hugging Face model folder)")
        return "local folder"
    if name.count("/") != 1 or name.startswith((".", "/", "~")):
        raise ConfigError(f"model.name: {name!r} is not a built-in name ({builtins}), a local folder or a Hub id")
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return "Hub cache"
    fix = f"download it where the Hub is reachable, pass a local folder, or use a built-in name ({builtins})"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConfigError(f"model.name: {name!r} is not in the Hugging Face cache and HF_HUB_OFFLINE is set: {fix}")
    from huggingface_hub import model_info

    try:
        model_info(name, timeout=HUB_TIMEOUT_S)
    except Exception as error:  # no network, no such repo, no access: one line either way
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"model.name: {name!r} is not in the Hugging Face cache and the Hub did not answer for it ({reason[:160]}); "
            f"set HF_HUB_OFFLINE=1 once it is cached, or {fix}"
        ) from None
    return "Hub"
