"""Model-aware sampling that follows the model: every ``curriculum.every`` RL steps, the
pass rates of the tasks (or of a mix's envs) are re-estimated from those steps' own
rollouts, and the task schedule draws in proportion to ``data.filtering``'s
``middle_difficulty_weights`` of them (the same signal the difficulty filter uses once
before RL, here kept up to date as the model learns)."""

from __future__ import annotations

from collections.abc import Iterable

from agentic_rl.config import CurriculumConfig
from agentic_rl.data.filtering import middle_difficulty_weights
from agentic_rl.training.task_schedule import MixedTaskSchedule
from agentic_rl.types import TrajectoryGroup


class Curriculum:
    """Counts each key's correct and usable episodes since the last estimate (``observe``);
    ``update`` turns them into pass rates (keys not seen since keep their last estimate)
    and sets the schedule's weights. ``by: task`` keys are task indices; ``by: env`` keys
    are the schedule's pool labels, whose weight multiplies the mix's own."""

    def __init__(self, config: CurriculumConfig, schedule: MixedTaskSchedule) -> None:
        self.config = config
        self.schedule = schedule
        self.base_weights = dict(schedule.pool_weights)
        self.counts: dict[int | str, list[int]] = {}
        """key -> [correct, episodes] since the last estimate."""
        self.pass_rates: dict[int | str, float] = {}
        """The latest estimate per measured key."""

    def _key(self, group: TrajectoryGroup) -> int | str | None:
        if group.task_index is None:
            return None
        return group.task_index if self.config.by == "task" else self.schedule.pool_of(group.task_index)

    def observe(self, groups: Iterable[TrajectoryGroup]) -> None:
        """Count the episodes of ``groups`` (infrastructure failures say nothing about difficulty)."""
        for group in groups:
            key = self._key(group)
            usable = [t for t in group.trajectories if t.infra_error is None]
            if key is None or not usable:
                continue
            counts = self.counts.setdefault(key, [0, 0])
            counts[0] += sum(t.correct for t in usable)
            counts[1] += len(usable)

    def due(self, steps_done: int) -> bool:
        return steps_done > 0 and steps_done % self.config.every == 0

    def update(self) -> dict[str, float]:
        """Fold the counts into the pass rates, reweight the schedule; returns metrics."""
        for key, (correct, total) in self.counts.items():
            self.pass_rates[key] = correct / total
        self.counts = {}
        self.apply()
        return self.metrics()

    def apply(self) -> None:
        """Set the schedule's weights from the current pass rates."""
        config, schedule = self.config, self.schedule
        if config.by == "env":
            rates = {label: self.pass_rates.get(label, config.prior) for label in schedule.labels}
            factors = middle_difficulty_weights(rates, floor=config.floor)
            schedule.set_pool_weights({label: self.base_weights[label] * factors[label] for label in schedule.labels})
            return
        for label in schedule.labels:
            if not any(index in self.pass_rates for index in schedule.schedules[label].task_indices):
                continue  # nothing measured yet: the pool keeps its shuffle
            rates = {
                index: self.pass_rates.get(index, config.prior) for index in schedule.schedules[label].task_indices
            }
            schedule.set_task_weights(label, middle_difficulty_weights(rates, floor=config.floor))

    def metrics(self) -> dict[str, float]:
        if self.config.by == "env":
            total = sum(self.schedule.pool_weights.values())
            out = {
                f"curriculum/pass_rate@{label}": self.pass_rates[label]
                for label in self.schedule.labels
                if label in self.pass_rates
            }
            out.update(
                {
                    f"curriculum/probability@{label}": weight / total
                    for label, weight in self.schedule.pool_weights.items()
                }
            )
            return out
        rates = list(self.pass_rates.values())
        return {
            "curriculum/tasks_measured": float(len(rates)),
            "curriculum/middle_fraction": sum(0.0 < rate < 1.0 for rate in rates) / len(rates) if rates else 0.0,
        }

    def state_dict(self) -> dict:
        return {"counts": {key: list(value) for key, value in self.counts.items()}, "pass_rates": dict(self.pass_rates)}

    def load_state_dict(self, state: dict) -> None:
        self.counts = {key: list(value) for key, value in state["counts"].items()}
        self.pass_rates = dict(state["pass_rates"])
        if self.pass_rates:
            self.apply()
