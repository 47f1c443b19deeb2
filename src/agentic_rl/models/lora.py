"""LoRA adapters (peft) on a loaded model, from the config's ``lora`` section."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from agentic_rl.config import ConfigError, LoraConfig


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


ROLES_FILE = "roles.json"
"""Beside a run's saved role adapters: the base model's name and ``lora.roles`` (which role
plays which adapter), what :func:`load_role_adapters` needs to sample as training did."""


def save_role_adapters(model, lora: LoraConfig, folder, *, base: str) -> None:
    """Every adapter a role plays, in peft's folder format (``folder`` holds the shared one,
    ``folder/<role>`` each ``own`` role's, ``folder/snapshot`` the snapshot roles' current
    copy: ``PeftModel.from_pretrained(base, folder / role)``) and :data:`ROLES_FILE` naming
    ``base``, then the shared adapter active again (what a merged export writes); nothing
    without ``lora.roles``."""
    if not lora.roles:
        return
    names = {adapter_for_role(lora.roles, role) for role in lora.roles} - {SHARED_ADAPTER, FROZEN_ADAPTER}
    model.save_pretrained(str(folder), selected_adapters=[SHARED_ADAPTER, *sorted(names)])
    manifest = {"base": base, "roles": dict(lora.roles)}
    (Path(folder) / ROLES_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    select_adapter(model, SHARED_ADAPTER)


def read_roles_manifest(folder) -> dict:
    """:data:`ROLES_FILE` of a role-adapters folder: ``{"base": name, "roles": {role: kind}}``."""
    path = Path(folder) / ROLES_FILE
    if not path.is_file():
        raise ConfigError(f"adapters: {folder} has no {ROLES_FILE} (expected a run's final/adapters, from lora.roles)")
    try:
        manifest = json.loads(path.read_text())
        kinds = set(manifest["roles"].values())
        base = manifest["base"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(f"adapters: {path} is not a roles file (expected base and roles)") from None
    if not isinstance(base, str) or not kinds <= {"own", "frozen", "snapshot"}:
        raise ConfigError(f"adapters: {path} is not a roles file (expected base and roles)")
    return manifest


def load_role_adapters(model, folder):
    """A base ``model`` (what the run trained on) with a run's role adapters
    (:func:`save_role_adapters`' folder): a peft model holding every adapter a role plays,
    the shared one active, and the role -> kind map (``lora.roles``) that
    :func:`adapter_for_role` routes by. Frozen roles play a zero adapter: the base. The
    adapters take the base's dtype, as in the bf16 copy a run samples with."""
    from peft import PeftModel

    roles = read_roles_manifest(folder)["roles"]
    folder = Path(folder)
    names = {adapter_for_role(roles, role) for role in roles} - {SHARED_ADAPTER, FROZEN_ADAPTER}
    missing = [name for name in sorted(names) if not (folder / name / "adapter_config.json").is_file()]
    if missing:
        raise ConfigError(f"adapters: {folder} lacks the adapter of {', '.join(missing)} (a folder each)")
    peft_model = PeftModel.from_pretrained(
        model, str(folder), adapter_name=SHARED_ADAPTER, autocast_adapter_dtype=False
    )
    for name in sorted(names):
        peft_model.load_adapter(str(folder / name), adapter_name=name, autocast_adapter_dtype=False)
    if FROZEN_ADAPTER in {adapter_for_role(roles, role) for role in roles}:
        config = peft_model.peft_config[SHARED_ADAPTER]
        peft_model.add_adapter(FROZEN_ADAPTER, config, autocast_adapter_dtype=False)  # B = 0: the base
    peft_model.set_adapter(SHARED_ADAPTER)
    return peft_model, roles


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
