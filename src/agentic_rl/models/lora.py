"""LoRA adapters (peft) on a loaded model, from the config's ``lora`` section."""

from __future__ import annotations

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
