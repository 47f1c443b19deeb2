"""The memory plan as a table (``agentic-rl plan``)."""

from __future__ import annotations

from rich.table import Table

from agentic_rl.planning.memory import GB, MemoryPlan


def plan_summary(plan: MemoryPlan) -> str:
    """One line: the model and the settings the figures are for."""
    s, shape = plan.settings, plan.shape
    lora = f", LoRA r={s.lora_r} ({plan.trainable_params / 1e6:.1f}M trainable)" if s.lora_r else ""
    return (
        f"{shape.name}: {shape.num_params / 1e9:.3f}B parameters, {s.strategy} x {s.nproc}, {s.precision}{lora}, "
        f"micro-batch {s.micro_batch_tokens} tokens{', gradient checkpointing' if s.gradient_checkpointing else ''}"
    )


def plan_table(plan: MemoryPlan) -> Table:
    """Item and GB per trainer device, then what the rollout engine needs."""
    s = plan.settings
    table = Table(header_style="bold")
    table.add_column("per trainer device")
    table.add_column("GB", justify="right")
    for item, value in plan.trainer.items():
        table.add_row(item, f"{value / GB:.2f}")
    table.add_row(
        "[bold]update peak[/] (activations or gradients, the larger)", f"[bold]{plan.update_peak / GB:.2f}[/]"
    )
    label = "rollout (in-process engine)" if s.engine == "hf" else "vLLM server (its own device)"
    for item, value in plan.rollout.items():
        table.add_row(f"{label}: {item}", f"{value / GB:.2f}")
    if s.engine == "hf":
        table.add_row("[bold]rollout peak[/]", f"[bold]{plan.rollout_peak / GB:.2f}[/]")
    return table


def plan_verdict(plan: MemoryPlan, device_bytes: float, device_label: str) -> str:
    s = plan.settings
    verdict = "fits" if plan.peak <= device_bytes else "does not fit"
    return f"peak {plan.peak / GB:.2f} GB per device of {device_label}: {verdict} (KV cache for {s.rollout_sequences} sequences x {s.rollout_tokens} tokens)"
