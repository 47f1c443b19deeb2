"""The stages of a training run, each a function of the shared ``RunState``.

baseline eval -> [collect + SFT -> eval] -> [difficulty filter] -> [DPO] -> RL -> eval
-> final model -> report. ``pipeline.train`` runs them in order over a ``RunDirectory``;
a finished stage is recorded there, and a resumed run restores a recorded stage's
outputs (``restore``) instead of running it again. This module holds what every stage
shares (``RunState``, ``RunEvents``), the held-out evaluation and the outputs (final model,
report); the stages before RL live in ``pre_rl_stages``, the RL stage in ``rl_stage``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentic_rl.config import EnvConfig, EvalConfig, TrainConfig
from agentic_rl.distributed import DistContext
from agentic_rl.evaluation.harness import EvalResult, prepare
from agentic_rl.seeds import derive_seed
from agentic_rl.training.run_dir import RunDirectory


@dataclass
class RunEvents:
    """Display hooks; the training code only calls them."""

    on_config: Callable[[TrainConfig], None] = lambda config: None
    on_stage: Callable[[str], None] = lambda message: None
    on_step: Callable[[dict[str, float]], None] = lambda metrics: None
    on_eval: Callable[[str, EvalResult], None] = lambda name, result: None
    progress: Callable[..., Any] | None = None
    """``progress(total, description, transient=False)`` -> a context manager yielding a callback
    per finished item: a trajectory, or a training step's metrics dict (SFT, DPO)."""

    def progress_bar(self, total: int, description: str, *, transient: bool = False):
        return self.progress(total, description, transient=transient) if self.progress else NoProgress()


class NoProgress:
    """A progress bar that shows nothing: its callback ignores every finished item."""

    def __enter__(self):
        return lambda item: None

    def __exit__(self, *exc) -> None:
        return None


@dataclass
class RunState:
    """What the stages share: the config, the run directory, the policy and its engine."""

    config: TrainConfig
    run: RunDirectory
    events: RunEvents
    model: Any
    tokenizer: Any
    backend: Any
    train_env: Callable
    task_indices: list[int]
    evals: dict[str, dict[str, float]] = field(default_factory=dict)
    steps: list[dict[str, float]] = field(default_factory=list)
    checkpoint: Path | None = None
    """The checkpoint a resumed run continues from."""
    trainer: Any = None
    dist: DistContext = field(default_factory=DistContext)
    """The data-parallel ranks (rank 0 writes checkpoints, the final model and the report)."""
    checkpoints_root: Path | None = None
    """Rank 0's checkpoint folder, where every rank writes its shards of a sharded checkpoint."""


# --- evaluation ----------------------------------------------------------------------


def eval_env_options(config: TrainConfig) -> dict:
    """The held-out env's options: the training env's with ``eval.env`` on top (for a mix, on
    top of each entry's); the default ``few_shot: 0`` (zero-shot evaluation) only for envs
    that take demonstrations."""
    return _stage_env_options(config, config.eval.env)


def sft_env_options(config: TrainConfig) -> dict:
    """The cold-start collection env's options: the training env's with ``sft.env`` on top."""
    return _stage_env_options(config, config.sft.env)


def _stage_env_options(config: TrainConfig, overrides: dict) -> dict:
    if config.env.is_mix:  # each entry's options, with the overrides on top of each
        return {"mix": [_merged_options(entry["name"], entry, overrides) for entry in config.env.options["mix"]]}
    return _merged_options(config.env.name, config.env.options, overrides)


def _merged_options(name: str, options: dict, overrides: dict) -> dict:
    from agentic_rl import envs

    merged = {**options, **overrides}
    if merged.get("few_shot") == 0 and "few_shot" not in options and not envs.accepts_option(name, "few_shot"):
        del merged["few_shot"]
    return merged


def eval_config(config: TrainConfig, output: Path) -> EvalConfig:
    """The held-out evaluation a training run does: test split, ``eval`` section's options."""
    options = eval_env_options(config)
    return EvalConfig(
        model=config.model,
        env=EnvConfig(name=config.env.name, **options),
        backend=config.backend,
        rollout=config.rollout.model_copy(update={"temperature": config.eval.temperature}),
        num_tasks=config.eval.num_tasks,
        k=config.eval.k,
        split="test",
        seed=derive_seed(config.seed, "run"),
        output=str(output),
    )


def evaluation(label: str) -> tuple[Callable[[RunState], None], Callable[[RunState], None]]:
    """(run, restore) of the held-out evaluation ``label`` (written to eval_<label>.json)."""
    filename = f"eval_{label}.json"

    def run(state: RunState) -> None:
        state.events.on_stage(f"evaluating ({label})")
        prepared = prepare(eval_config(state.config, state.run.file(filename)), backend=state.backend)
        # With several ranks each samples its share of the tasks; the bar counts rank 0's.
        total = len(prepared.tasks_of(state.dist.rank, state.dist.world_size)) * prepared.config.samples_per_task
        with state.events.progress_bar(total, f"eval {label}") as on_finish:
            result = prepared.run(on_finish, dist=state.dist)
        state.evals[label] = result.metrics
        state.events.on_eval(label, result)

    def restore(state: RunState) -> None:
        if state.run.file(filename).is_file():
            state.evals[label] = state.run.read_json(filename)["metrics"]

    return run, restore


# --- outputs -------------------------------------------------------------------------


def run_final(state: RunState) -> None:
    """final/ (a Hugging Face folder, plus the critic when there is one) and summary.json."""
    from safetensors.torch import save_file

    from agentic_rl.models.lora import save_role_adapters
    from agentic_rl.training.final_model import final_dtype, save_final

    final = state.run.file("final")
    # A sharded trainer's weights are gathered on every rank (a collective); rank 0 saves them.
    weights = state.trainer.strategy.full_weights(state.model) if state.trainer is not None else state.model
    critic = state.trainer.critic if state.trainer is not None else None
    critic_weights = _full_critic_state(critic) if critic is not None else None  # a collective when sharded
    if not state.dist.is_main:
        return
    model, gathered = state.model, weights if isinstance(weights, dict) else None
    if gathered is not None and hasattr(model, "merge_and_unload"):
        # Sharded LoRA: peft merges an unsharded model; the engine's full copy holds the same weights.
        model, gathered = state.backend.model, None
    save_role_adapters(model, state.config.lora, final / "adapters", base=state.config.model.name)  # lora.roles
    save_final(
        model,
        state.tokenizer,
        final,
        state_dict=gathered,
        dtype=final_dtype(state.config.final_dtype, state.config.model.name),
    )
    if critic_weights is not None:  # the value function, for continuing PPO or inspecting values
        save_file(critic_weights, final / "critic.safetensors")
    state.run.write_json("summary.json", {"evals": state.evals, "steps": len(state.steps)})


def _full_critic_state(critic) -> dict:
    """The critic's weights as one-process tensors (a sharded critic's gathered on every rank)."""
    from agentic_rl.training.checkpoint import trainable_state

    if not critic.sharded:
        return trainable_state(critic.module)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    # The gathered dict names tied weights twice (lm_head and the embedding); keep the
    # one-process file's names: each parameter once.
    names = {name for name, _ in critic.module.named_parameters()}
    full = get_model_state_dict(critic.module, options=StateDictOptions(full_state_dict=True))
    return {name: value.contiguous() for name, value in full.items() if name in names}


def run_report(state: RunState) -> None:
    from agentic_rl.tracking.report import build_report

    if not state.dist.is_main:
        return
    try:  # a report problem must never fail a finished training run
        state.events.on_stage(f"report: {build_report(state.run.path)}")
    except Exception as exc:
        state.events.on_stage(f"report not written: {exc}")
