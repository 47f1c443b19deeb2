"""LoRA adapters (peft) on a loaded model, from the config's ``lora`` section."""

from __future__ import annotations

import torch

from agentic_rl.config import LoraConfig


def apply_lora(model, lora: LoraConfig):
    """``model`` with trainable adapters on ``lora.target_modules`` (unchanged when LoRA is off)."""
    if not lora.enabled:
        return model
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    return get_peft_model(
        model,
        PeftLoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=lora.target_modules,
            task_type="CAUSAL_LM",
        ),
    )


SHARED_ADAPTER = "default"
"""peft's first adapter: the policy every role plays unless ``lora.roles`` gives it its own."""
FROZEN_ADAPTER = "frozen"
"""One adapter for every frozen role, never trained: LoRA's B starts at zero, so it is the base model exactly."""
SNAPSHOT_ADAPTER = "snapshot"
"""One adapter for every snapshot role, never trained: a copy of the shared adapter, refreshed
every ``lora.snapshot_every`` steps (:func:`refresh_snapshot`)."""


def add_role_adapters(model, lora: LoraConfig):
    """``model`` (a peft model from :func:`apply_lora`) with one more adapter per ``own``
    role of ``lora.roles`` and one for the frozen roles, all trainable (an optimizer built
    now holds every adapter; an adapter's parameters get gradients only from its role's
    samples), the shared one active."""
    if not lora.roles:
        return model
    config = model.peft_config[SHARED_ADAPTER]
    for name in sorted({adapter_for_role(lora.roles, role) for role in lora.roles}):
        model.add_adapter(name, config)  # peft leaves a new adapter frozen
    model.set_adapter(SHARED_ADAPTER)
    _all_trainable(model)
    return model


def adapter_for_role(roles: dict[str, str], role: str | None) -> str:
    """The adapter that plays ``role`` (None: a sample without a role plays the shared one)."""
    kind = roles.get(role) if role is not None else None
    return {"own": role, "frozen": FROZEN_ADAPTER, "snapshot": SNAPSHOT_ADAPTER}.get(kind, SHARED_ADAPTER)


def select_adapter(model, name: str) -> None:
    """Make adapter ``name`` the one forwards use. peft's ``set_adapter`` also freezes the
    other adapters' parameters; they stay trainable here, so that checkpoints and the
    optimizer keep seeing every adapter (unused ones simply get no gradient)."""
    if getattr(model, "active_adapter", None) == name:
        return
    model.set_adapter(name)
    _all_trainable(model)


def _all_trainable(model) -> None:
    for key, parameter in model.named_parameters():
        if ".lora_" in key:
            parameter.requires_grad_(True)


def save_role_adapters(model, lora: LoraConfig, folder) -> None:
    """Every role's adapter in peft's folder format (``folder`` holds the shared one,
    ``folder/<role>`` each ``own`` role's: ``PeftModel.from_pretrained(base, folder /
    role)``), then the shared adapter active again (what a merged export writes); nothing
    without ``lora.roles``."""
    if not lora.roles:
        return
    model.save_pretrained(str(folder), selected_adapters=[SHARED_ADAPTER, *sorted(set(lora.roles) - set(frozen(lora)))])
    select_adapter(model, SHARED_ADAPTER)


def frozen(lora: LoraConfig) -> list[str]:
    """The roles ``lora.roles`` serves but never trains: ``frozen`` (the base) and ``snapshot``
    (a past copy of the shared policy)."""
    return [role for role, kind in lora.roles.items() if kind in ("frozen", "snapshot")]


def snapshot_due(lora: LoraConfig, steps_done: int) -> bool:
    """Whether the snapshot roles' adapter takes a copy of the shared one after step
    ``steps_done`` (1-based): every ``lora.snapshot_every`` steps, with a snapshot role."""
    return "snapshot" in lora.roles.values() and steps_done % lora.snapshot_every == 0


def refresh_snapshot(model) -> int:
    """Copy the shared adapter's weights into the snapshot adapter (the policy ``snapshot``
    roles play from now on); returns how many tensors were copied (0: no snapshot adapter)."""
    return copy_adapter(model, SHARED_ADAPTER, SNAPSHOT_ADAPTER)


def seed_role_adapters(model, lora: LoraConfig) -> int:
    """After a cold start trained the shared adapter: every ``own`` and ``snapshot`` role
    starts from it (the frozen roles stay the base). Returns the tensors copied."""
    names = {adapter_for_role(lora.roles, role) for role, kind in lora.roles.items() if kind != "frozen"}
    return sum(copy_adapter(model, SHARED_ADAPTER, name) for name in sorted(names - {SHARED_ADAPTER}))


def copy_adapter(model, source: str, target: str) -> int:
    """Copy adapter ``source``'s LoRA weights into adapter ``target``; returns how many tensors."""
    parameters = dict(model.named_parameters())
    copied = 0
    for key, parameter in parameters.items():
        if ".lora_" in key and f".{source}." in key:
            into = parameters.get(key.replace(f".{source}.", f".{target}."))
            if into is not None:
                with torch.no_grad():
                    into.copy_(parameter)
                copied += 1
    return copied
