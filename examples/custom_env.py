"""Your own environment in one file: tasks, a tool, a reward, and a factory that the trainer
imports by path (``env.name: custom_env:make_env``; the working directory is searched).

    cd examples
    agentic-rl envs custom_env:make_env      # its options
    agentic-rl train custom_env.yaml         # train from the command line
    python custom_env.py                     # the same run from Python
"""

from __future__ import annotations

import random

from agentic_rl import Task, ToolEnv, tool, train


@tool
def count_letter(word: str, letter: str) -> str:
    """Count how often a letter occurs in a word.

    Args:
        word: The word to look at.
        letter: The letter to count.
    """
    return str(word.lower().count(letter.lower()))


def reward(answer: str | None, task: Task) -> float:
    """1.0 for the right count, else 0.0. ``ToolEnv`` calls ``reward_fn(answer, task)``."""
    return 1.0 if answer is not None and answer.strip() == task.answer else 0.0


def make_env(split: str = "train", num_tasks: int = 1000, max_turns: int = 3) -> ToolEnv:
    """How many times does a letter occur in a word? Use count_letter, answer in <answer></answer>."""
    rng = random.Random(f"{split}-0")  # each split draws its own words
    tasks = []
    for i in range(num_tasks):
        word = "".join(rng.choices("aabeeilmnorrsst", k=rng.randint(6, 10)))
        letter = rng.choice(word)
        prompt = f"How many times does the letter '{letter}' occur in '{word}'?"
        tasks.append(Task(id=f"letters-{split}-{i}", prompt=prompt, answer=str(word.count(letter))))
    system = "Call the count_letter tool, then give the number inside <answer></answer>."
    return ToolEnv(tasks, [count_letter], reward_fn=reward, max_turns=max_turns, system_prompt=system)


if __name__ == "__main__":
    config = {"model": {"name": "smollm2-135m"}, "rl": {"steps": 8}}
    result = train(config, env=make_env, name="custom-env")  # the factory itself: no name, no import path
    print(result.run_dir, result.evals["before"]["avg@1"], result.evals["after"]["avg@1"])
