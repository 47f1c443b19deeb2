"""Cold-start collection with a scripted backend on arithmetic (real tokenizer and template)."""

from __future__ import annotations

import json
import re

import pytest

from agentic_rl.config import CollectConfig
from agentic_rl.data import render_example
from agentic_rl.envs.arithmetic import DEFAULT_SYSTEM_PROMPT, ArithmeticTasks
from agentic_rl.parsers import HermesParser
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.rollout.chat import ChatRenderer
from agentic_rl.tools.calculator import calculator
from agentic_rl.types import ToolCall

PARSER = HermesParser()
TASKS = ArithmeticTasks(split="train")
INDEX_OF = {TASKS[i].metadata["expression"]: i for i in range(16)}


def solver(tokenizer):
    """Calls the calculator on the last question, then answers: right for even task indices, wrong for odd."""

    def script(prompt_ids: list[int], call_index: int) -> str:
        text = tokenizer.decode(prompt_ids)
        episode = text[text.rindex("<|im_start|>user\n") :]  # after the demonstrations
        expression = re.search(r"What is (.+)\?", episode).group(1)
        if "<tool_response>" not in episode:
            return PARSER.format_call(ToolCall(name="calculator", arguments={"expression": expression}))
        result = episode[episode.rindex("<tool_response>\n") + len("<tool_response>\n") :].split("\n</tool_response>")[0]
        return f"<answer>{result if INDEX_OF[expression] % 2 == 0 else result + '1'}</answer>"

    return script


def collect(tokenizer, **overrides):
    from agentic_rl.training.collect import collect_successful

    config = CollectConfig(**{"num_tasks": 4, "task_offset": 2, "samples_per_task": 2, "max_per_task": 1, "few_shot": 2, **overrides})
    trajectories = []
    backend = ScriptedBackend(tokenizer, solver(tokenizer))
    result = collect_successful(backend, "arithmetic", {"split": "test"}, config, seed=3, on_trajectory=trajectories.append)
    return result, trajectories


def test_keeps_only_successful_trajectories_without_demonstrations(tokenizer):
    result, trajectories = collect(tokenizer)
    assert (result.attempted, result.successful, result.tasks_with_success) == (8, 4, 2)
    assert len(trajectories) == 8
    assert [e["metadata"]["task_id"] for e in result.examples] == [TASKS[2].id, TASKS[4].id]  # train split, one per task
    for example, index in zip(result.examples, (2, 4)):
        task = TASKS[index]
        messages = example["messages"]
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
        assert messages[0]["content"].startswith(DEFAULT_SYSTEM_PROMPT)
        assert messages[1] == {"role": "user", "content": task.prompt}
        assert messages[2]["content"] == ""
        (call,) = messages[2]["tool_calls"]
        assert call["type"] == "function" and call["function"]["name"] == "calculator"
        assert json.loads(call["function"]["arguments"]) == {"expression": task.metadata["expression"]}
        assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "name": "calculator", "content": calculator(task.metadata["expression"])}
        assert messages[4] == {"role": "assistant", "content": f"<answer>{task.answer}</answer>"}
        assert example["metadata"]["reward"] == 1.0


def test_stored_example_renders_to_the_rollout_tokens(tokenizer):
    renderer = ChatRenderer(tokenizer)
    # With demonstrations: the episode after the prompt is token-identical.
    result, trajectories = collect(tokenizer)
    by_task = {t.task_id: t for t in reversed(trajectories)}  # the first kept one per task
    for example in result.examples:
        trajectory = by_task[example["metadata"]["task_id"]]
        ids, mask = render_example(example["messages"], renderer, PARSER)
        prompt = len(renderer.prompt_ids(example["messages"][:2]))
        assert trajectory.prompt_length > prompt  # the demonstrations were in the rollout prompt
        assert ids[prompt:] == trajectory.token_ids[trajectory.prompt_length :]
        assert mask[prompt:] == trajectory.loss_mask[trajectory.prompt_length :]
    # Without demonstrations: rollout -> stored example -> SFT tokens is lossless end to end.
    result, trajectories = collect(tokenizer, few_shot=0)
    by_task = {t.task_id: t for t in reversed(trajectories)}
    assert len(result.examples) == 2
    for example in result.examples:
        trajectory = by_task[example["metadata"]["task_id"]]
        assert render_example(example["messages"], renderer, PARSER) == (trajectory.token_ids, trajectory.loss_mask)


def test_max_per_task_and_task_range(tokenizer):
    result, _ = collect(tokenizer, max_per_task=2, num_tasks=2, task_offset=0)
    assert [e["metadata"]["task_id"] for e in result.examples] == [TASKS[0].id, TASKS[0].id]
    assert result.attempted == 4 and result.tasks_with_success == 1


@pytest.mark.parametrize("few_shot", [0, 3])
def test_demonstration_count_follows_few_shot(tokenizer, few_shot):
    result, trajectories = collect(tokenizer, few_shot=few_shot, num_tasks=1)
    assert len(trajectories[0].messages) == 2 + 4 * few_shot + 3  # system, demos, user, episode
    assert len(result.examples[0]["messages"]) == 5
