"""Evaluation: run the rollout engine on held-out tasks with no training and score it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentic_rl import envs
from agentic_rl.config import ConfigError, EvalConfig, build, redact_secrets
from agentic_rl.distributed import DistContext
from agentic_rl.engines.factory import build_backend
from agentic_rl.envs.base import env_roles
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.models.loading import resolve_auto_parser, resolve_device
from agentic_rl.models.precision import resolve_precision
from agentic_rl.rollout.engine import rollout
from agentic_rl.rollout.roles import gather_task_groups, role_of, task_key
from agentic_rl.types import Trajectory, TrajectoryGroup


@dataclass
class EvalResult:
    metrics: dict[str, float]
    config: dict[str, Any]
    groups: list[TrajectoryGroup]
    wall_time_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "config": redact_secrets(self.config),  # eval JSONs are shared: no API keys
            "wall_time_s": self.wall_time_s,
            "trajectories": [t.to_dict() for g in self.groups for t in g.trajectories],
        }

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        tmp.replace(path)  # never leave a half-written result behind
        return path


@dataclass
class PreparedEval:
    """A validated evaluation, ready to run: bad env options or model names fail here,
    before any sampling starts."""

    config: EvalConfig
    make_env: Callable[[], envs.Env]
    backend: Any
    tasks: dict[str, list[int]] | None = None
    """A mix's held-out task indices by env label (the first ``num_tasks`` of each entry);
    None: one env's first ``num_tasks``."""
    weights: dict[str, float] | None = None
    """A mix's weights, by label (the ``@weighted`` metrics)."""

    @property
    def task_indices(self) -> list[int]:
        if self.tasks is None:
            return list(range(self.config.num_tasks))
        return [index for indices in self.tasks.values() for index in indices]

    def run(
        self, on_trajectory: Callable[[Trajectory], None] | None = None, *, dist: DistContext | None = None
    ) -> EvalResult:
        """Sample and score. ``dist``: data-parallel ranks each sample every world-size-th
        task (the samples one process would draw for it) and all get the whole result."""
        config, dist = self.config, dist or DistContext()
        started = time.monotonic()
        positions = self.tasks_of(dist.rank, dist.world_size)
        every = self.task_indices
        groups = rollout(
            self.backend,
            self.make_env,
            [every[p] for p in positions],
            group_size=config.samples_per_task,
            config=config.rollout,
            seed=config.seed,
            on_finish=on_trajectory,
            task_positions=positions if dist.distributed else None,
        )
        if dist.distributed:
            groups = gather_task_groups(dist, positions, groups, len(every))
        metrics = aggregate_metrics([g.trajectories for g in groups], k=config.k)
        if self.tasks is not None:
            metrics.update(per_env_eval_metrics(groups, self.tasks, self.weights or {}, k=config.k))
        metrics.update(per_role_eval_metrics(groups, k=config.k))
        result = EvalResult(
            metrics=metrics, config=config.model_dump(), groups=groups, wall_time_s=time.monotonic() - started
        )
        if config.output:
            result.save(config.output)
        return result

    def tasks_of(self, rank: int, world_size: int) -> list[int]:
        """The positions in ``task_indices`` of the held-out tasks rank ``rank`` of ``world_size`` samples."""
        return list(range(rank, len(self.task_indices), world_size))


def per_env_eval_metrics(
    groups: list[TrajectoryGroup], tasks: dict[str, list[int]], weights: dict[str, float], *, k: int
) -> dict[str, float]:
    """A mix's per-env table, flat: each env's ``aggregate_metrics`` with its label as suffix
    (``avg@1@arithmetic``), and ``<metric>@weighted``: the envs' values averaged with the mix
    weights (``WEIGHTED_METRICS``). The unsuffixed metrics weigh every task the same."""
    by_index = {g.task_index: g for g in groups}
    tables = {
        label: aggregate_metrics([by_index[i].trajectories for i in indices], k=k) for label, indices in tasks.items()
    }
    out = {f"{key}@{label}": value for label, table in tables.items() for key, value in table.items()}
    total = sum(weights[label] for label in tables)
    for key in (f"avg@{k}", f"pass@{k}", f"maj@{k}", *WEIGHTED_METRICS):
        if all(key in table for table in tables.values()):
            out[f"{key}@weighted"] = sum(weights[label] * tables[label][key] for label in tables) / total
    return out


def per_role_eval_metrics(groups: list[TrajectoryGroup], *, k: int) -> dict[str, float]:
    """An env with roles: each role's ``aggregate_metrics`` with the role as suffix
    (``avg@1@planner``), and ``num_tasks`` counting tasks (the unsuffixed metrics weigh every
    (task, role) group the same). Nothing with one role."""
    roles = list(dict.fromkeys(role for role in map(role_of, groups) if role is not None))
    if len(roles) < 2:
        return {}
    out = {"num_tasks": float(len({task_key(group) for group in groups}))}
    for role in roles:
        table = aggregate_metrics([g.trajectories for g in groups if role_of(g) == role], k=k)
        out.update({f"{key}@{role}": value for key, value in table.items()})
    return out


WEIGHTED_METRICS = (
    "mean_reward",
    "tool_success_rate",
    "tool_calls_per_episode",
    "malformed_call_rate",
    "episodes_with_tool_call",
    "correct_with_tool_call",
    "mean_turns",
    "mean_response_tokens",
    "infra_error_rate",
    "template_drift_tokens",
)
"""Besides avg/pass/maj@k, the per-episode rates and means a mix also reports weighted (counts are not)."""


def prepare(config: EvalConfig | dict[str, Any] | None = None, *, loaded=None, backend=None) -> PreparedEval:
    """Validate the config, build the env factory and the backend (loading the model)."""
    if not isinstance(config, EvalConfig):
        config = build(EvalConfig, config or {})
    resolve_auto_parser([config.env.model_extra or {}], config.model.name, loaded)  # parser: auto -> the model's format
    make_env = envs.env_factory(config.env.name, config.env.options, split=config.split)
    _check_sandbox(config, make_env)
    probe = make_env()
    mix = envs.mixed_spec_of(probe)
    tasks = mix.first_tasks(config.num_tasks) if mix is not None else None  # a mix: num_tasks of each entry
    if mix is None and config.num_tasks > probe.num_tasks:
        raise ConfigError(
            f"num_tasks: the env has {probe.num_tasks} tasks in split {config.split!r}, asked for {config.num_tasks}"
        )
    if backend is None and config.adapters is not None:
        config, backend = _role_adapters_backend(config, env_roles(probe))
    elif backend is None:
        backend = build_backend(
            config.backend, config.model, loaded=loaded, precision=_sampling_precision(config, loaded)
        )
    return PreparedEval(config, make_env, backend, tasks=tasks, weights=mix.weights if mix is not None else None)


def _role_adapters_backend(config: EvalConfig, roles_of_env: tuple[str, ...]):
    """``config.adapters``: the run's base with every role's adapter, each role's turns
    routed to its adapter as in training; the config with ``model.name`` the folder's base
    unless one was given. Roles the env does not have stop before the model loads."""
    import warnings
    from functools import partial

    import torch

    from agentic_rl.engines.hf import HFBackend
    from agentic_rl.models import load
    from agentic_rl.models.lora import adapter_for_role, load_role_adapters, read_roles_manifest

    manifest = read_roles_manifest(config.adapters)
    unknown = next((role for role in manifest["roles"] if role not in roles_of_env), None)
    if unknown is not None:
        have = f"its roles: {', '.join(roles_of_env)}" if roles_of_env else "it has one role"
        raise ConfigError(
            f"adapters: role {unknown} of {config.adapters} is not a role of env {config.env.name} ({have})"
        )
    if "name" not in config.model.model_fields_set:
        config = config.model_copy(update={"model": config.model.model_copy(update={"name": manifest["base"]})})
    elif config.model.name != manifest["base"]:
        warnings.warn(
            f"adapters: trained on {manifest['base']}, sampled on model.name {config.model.name}",
            RuntimeWarning,
            stacklevel=3,
        )
    dtype = torch.bfloat16 if _sampling_precision(config, None) == "bf16-mixed" else None
    policy, tokenizer = load(
        config.model.name, device=config.model.device, linear_kernel=config.model.linear_kernel, dtype=dtype
    )
    model, roles = load_role_adapters(policy, config.adapters)
    backend = HFBackend(model, tokenizer, batch_size=config.backend.batch_size)
    backend.adapter_for = partial(adapter_for_role, roles)
    return config, backend


def _check_sandbox(config: EvalConfig, make_env) -> None:
    """Refuse (required) or warn, naming what is missing (best-effort), before the model loads."""
    import warnings

    from agentic_rl.tools.python_tool import check_sandbox_for

    checked = check_sandbox_for(make_env, config.sandbox.isolation)
    for text in checked[1] if checked else ():
        warnings.warn(text, RuntimeWarning, stacklevel=3)


def _sampling_precision(config: EvalConfig, loaded) -> str:
    """The resolved precision the hf engine samples in (its weights' dtype)."""
    if config.backend.kind != "hf":
        return "fp32"
    device = next(loaded[0].parameters()).device if loaded is not None else resolve_device(config.model.device)
    return resolve_precision(config.precision, device).precision


def evaluate(
    config: EvalConfig | dict[str, Any] | None = None,
    *,
    loaded=None,
    backend=None,
    on_trajectory: Callable[[Trajectory], None] | None = None,
) -> EvalResult:
    """Evaluate a policy: ``num_tasks`` held-out tasks x ``num_samples`` samples each.

    ``config``: an ``EvalConfig`` or a dict of its fields (e.g. ``{"model": {"name":
    "smollm2-135m"}, "env": {"name": "arithmetic", "few_shot": 3}, "k": 4}``).
    ``loaded``: an already loaded ``(model, tokenizer)``; ``backend``: a ready backend
    (both optional; by default the config's model is loaded). ``on_trajectory`` is called
    as each episode finishes (progress displays subscribe here). Writes JSON to
    ``config.output`` when set.
    """
    prepared = prepare(config, loaded=loaded, backend=backend)
    try:
        return prepared.run(on_trajectory)
    finally:
        if backend is None:  # built here (e.g. a managed vLLM server): released here
            prepared.backend.close()
