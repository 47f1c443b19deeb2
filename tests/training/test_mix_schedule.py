"""Seeded weighted draws over a mix's envs, and the curriculum that reweights them from the
run's own rollouts (no model: groups are built by hand)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from agentic_rl.config import CurriculumConfig
from agentic_rl.training.curriculum import Curriculum
from agentic_rl.training.task_schedule import MixedTaskSchedule
from agentic_rl.types import Trajectory, TrajectoryGroup

POOLS = {"a": list(range(0, 100)), "b": list(range(100, 150)), "c": list(range(150, 160))}


def _group(task_index: int, correct: list[bool]) -> TrajectoryGroup:
    group = TrajectoryGroup(task_id=str(task_index), group_id=f"g{task_index}", task_index=task_index)
    group.trajectories = [
        Trajectory(task_id=str(task_index), group_id=group.group_id, correct=c, reward=float(c)) for c in correct
    ]
    return group


def test_draws_follow_the_weights() -> None:
    schedule = MixedTaskSchedule(POOLS, {"a": 1.0, "b": 2.0, "c": 5.0}, seed=3)
    draws = 8000
    counts = Counter(schedule.pool_of(index) for index in schedule.next(draws))
    # Binomial standard deviation is at most sqrt(0.25 / 8000) = 0.0056: a 0.025 bound is over 4 sigma.
    for label, share in {"a": 1 / 8, "b": 2 / 8, "c": 5 / 8}.items():
        assert abs(counts[label] / draws - share) < 0.025, (label, counts)


def test_within_a_pool_tasks_follow_its_shuffle_until_weights_are_set() -> None:
    schedule = MixedTaskSchedule({"only": list(range(10))}, {"only": 1.0}, seed=0)
    first_pass = schedule.next(10)
    assert sorted(first_pass) == list(range(10))  # every task once per pass
    schedule.set_task_weights("only", {i: (1.0 if i == 7 else 0.0) for i in range(10)})
    assert schedule.next(5) == [7] * 5  # the only task with weight (a duplicate once no other is drawable)


def test_draws_are_seeded_and_resume_exactly() -> None:
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    straight = MixedTaskSchedule(POOLS, weights, seed=11)
    expected = [straight.next(4) for _ in range(6)]
    first = MixedTaskSchedule(POOLS, weights, seed=11)
    head = [first.next(4) for _ in range(3)]
    state = first.state_dict()
    resumed = MixedTaskSchedule(POOLS, weights, seed=11)
    resumed.load_state_dict(state)
    assert head + [resumed.next(4) for _ in range(3)] == expected
    assert MixedTaskSchedule(POOLS, weights, seed=12).next(12) != expected[0] + expected[1] + expected[2]


def test_empty_pool_and_bad_weight_fail_clearly() -> None:
    with pytest.raises(ValueError, match="no training tasks left for mix entry 'b'"):
        MixedTaskSchedule({"a": [0], "b": []}, {"a": 1.0, "b": 1.0})
    with pytest.raises(ValueError, match="mix entry 'b': expected a weight > 0"):
        MixedTaskSchedule({"a": [0], "b": [1]}, {"a": 1.0, "b": 0.0})


def test_curriculum_by_env_hand_values() -> None:
    schedule = MixedTaskSchedule(POOLS, {"a": 1.0, "b": 1.0, "c": 2.0}, seed=0)
    curriculum = Curriculum(CurriculumConfig(enabled=True, every=2, by="env", floor=0.01), schedule)
    # a: 3 of 4 correct (p = 0.75), b: 0 of 4 (p = 0), c: unseen (prior 0.5).
    curriculum.observe([_group(0, [True, True, False, True]), _group(100, [False] * 4)])
    assert not curriculum.due(1) and curriculum.due(2)
    metrics = curriculum.update()
    # weights: a 1 * 0.1875, b 1 * 0.01 (floor), c 2 * 0.25 -> total 0.6975
    assert schedule.pool_weights == pytest.approx({"a": 0.1875, "b": 0.01, "c": 0.5})
    assert metrics["curriculum/probability@a"] == pytest.approx(0.1875 / 0.6975)
    assert metrics["curriculum/pass_rate@a"] == 0.75 and metrics["curriculum/pass_rate@b"] == 0.0
    assert "curriculum/pass_rate@c" not in metrics
    # A window without b keeps b's estimate; infrastructure failures do not count.
    failed = _group(1, [True, False])
    failed.trajectories[1].infra_error = "sandbox died"
    curriculum.observe([failed])
    curriculum.update()
    assert curriculum.pass_rates == {"a": 1.0, "b": 0.0}


def test_curriculum_by_task_moves_sampling_to_middle_difficulty() -> None:
    """A fixed 'model' solves tasks 0-9 always, 10-19 never and 20-29 half the time: after the
    first estimates, the schedule draws the half-solved tasks far more often than before."""
    tasks = list(range(30))

    def true_rate(index: int) -> float:
        return 1.0 if index < 10 else 0.0 if index < 20 else 0.5

    schedule = MixedTaskSchedule({"only": tasks}, {"only": 1.0}, seed=5)
    curriculum = Curriculum(CurriculumConfig(enabled=True, every=5, by="task", floor=0.01), schedule)
    rng = random.Random(0)
    steps_done = 0

    def middle_share(steps: int) -> float:
        nonlocal steps_done
        drawn = []
        for _ in range(steps):
            picked = schedule.next(6)
            drawn += picked
            curriculum.observe([_group(i, [rng.random() < true_rate(i) for _ in range(8)]) for i in picked])
            steps_done += 1
            if curriculum.due(steps_done):
                curriculum.update()
        return sum(i >= 20 for i in drawn) / len(drawn)

    before = middle_share(5)  # until the first estimate: the shuffle, each task once
    after = middle_share(40)
    assert before == pytest.approx(1 / 3)
    # Weights 0.25 for the middle tasks, 0.01 for the rest: 7.5 / 7.7 of the draws.
    assert after > 0.9, after
    assert set(curriculum.pass_rates) == set(tasks)


def test_curriculum_state_restores_the_weights() -> None:
    config = CurriculumConfig(enabled=True, every=1, by="task")
    schedule = MixedTaskSchedule({"only": list(range(20))}, {"only": 1.0}, seed=1)
    curriculum = Curriculum(config, schedule)
    curriculum.observe([_group(i, [i % 2 == 0, True]) for i in schedule.next(10)])
    curriculum.update()
    curriculum.observe([_group(3, [False, False])])  # pending, not yet folded in
    state, schedule_state = curriculum.state_dict(), schedule.state_dict()
    expected = schedule.next(12)

    restored_schedule = MixedTaskSchedule({"only": list(range(20))}, {"only": 1.0}, seed=1)
    restored = Curriculum(config, restored_schedule)
    restored_schedule.load_state_dict(schedule_state)
    restored.load_state_dict(state)
    assert restored_schedule.next(12) == expected
    assert restored.counts == {3: [0, 2]}
