"""Difficulty filtering keeps tasks the model sometimes, but not always, solves."""

from __future__ import annotations

import itertools
import re

from agentic_rl import envs
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs.arithmetic import ArithmeticTasks
from agentic_rl.training.difficulty import difficulty_filter


def test_band_keeps_partially_solved_tasks_and_reports_histogram(tokenizer) -> None:
    tasks = ArithmeticTasks(split="train", num_tasks=3)
    answers = {t.prompt: t.answer for t in tasks}
    counter = itertools.count()

    def reply(prompt_ids, call_index):
        question = re.findall(r"What is [^?]+\?", tokenizer.decode(prompt_ids))[-1]
        index = [t.prompt for t in tasks].index(question)
        n = next(counter)
        correct = index == 0 or (index == 1 and n % 2 == 0)  # task 0 always, task 1 half, task 2 never
        return f"<answer>{answers[question] if correct else '-1'}</answer>"

    result = difficulty_filter(
        ScriptedBackend(tokenizer, reply), lambda: envs.make("arithmetic", num_tasks=3), [0, 1, 2], samples_per_task=4
    )
    assert result.pass_rates == {0: 1.0, 1: 0.5, 2: 0.0}
    assert result.kept == [1]
    assert result.histogram == {"0.00": 1, "0.50": 1, "1.00": 1}
    wide = difficulty_filter(
        ScriptedBackend(tokenizer, reply),
        lambda: envs.make("arithmetic", num_tasks=3),
        [0, 1, 2],
        samples_per_task=4,
        min_pass_rate=-0.1,
        max_pass_rate=1.0,
    )
    assert sorted(wide.kept) == [1, 2]
