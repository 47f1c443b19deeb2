"""Cold-start collection with a scripted backend on arithmetic (real tokenizer and template)."""

from __future__ import annotations

import json
import re

import pytest

from agentic_rl.chat import ChatRenderer
from agentic_rl.config import CollectConfig
from agentic_rl.data import render_example
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs.arithmetic import DEFAULT_SYSTEM_PROMPT, ArithmeticTasks
from agentic_rl.parsers import HermesParser
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
        result = episode[episode.rindex("<tool_response>\n") + len("<tool_response>\n") :].split("\n</tool_response>")[
            0
        ]
        return f"<answer>{result if INDEX_OF[expression] % 2 == 0 else result + '1'}</answer>"

    return script


def collect(tokenizer, **overrides):
    from agentic_rl.training.collect import collect_successful

    config = CollectConfig(
        **{"num_tasks": 4, "task_offset": 2, "samples_per_task": 2, "max_per_task": 1, "few_shot": 2, **overrides}
    )
    trajectories = []
    backend = ScriptedBackend(tokenizer, solver(tokenizer))
    result = collect_successful(
        backend, "arithmetic", {"split": "test"}, config, seed=3, on_trajectory=trajectories.append
    )
    return result, trajectories


def test_keeps_only_successful_trajectories_without_demonstrations(tokenizer):
    result, trajectories = collect(tokenizer)
    assert (result.attempted, result.successful, result.tasks_with_success) == (8, 4, 2)
    assert len(trajectories) == 8
    assert [e["metadata"]["task_id"] for e in result.examples] == [
        TASKS[2].id,
        TASKS[4].id,
    ]  # train split, one per task
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
        assert messages[3] == {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": "calculator",
            "content": calculator(task.metadata["expression"]),
        }
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


# --------------------------------------------------------------------------- what counts as success


def test_rewarded_but_wrong_episodes_are_not_kept(tokenizer):
    """A partly right answer after a search earns search-qa's F1 (and the reward section's
    format term, ``reward.format_weight``): such an episode is rewarded but not correct, and
    the cold start must not learn from it."""
    from agentic_rl.config import RewardConfig
    from agentic_rl.envs.search_data import SearchQATasks
    from agentic_rl.rewards.qa import best_f1
    from agentic_rl.training.collect import collect_successful
    from agentic_rl.training.scoring import episode_rewards

    tasks = SearchQATasks(split="train", hops=1)[:3]

    def task_of(episode: str):
        return next(task for task in tasks if task.prompt in episode)

    def search_then_half_right(prompt_ids: list[int], call_index: int) -> str:
        episode = tokenizer.decode(prompt_ids)
        episode = episode[episode.rindex("<|im_start|>user\n") :]
        if "<tool_response>" not in episode:
            return PARSER.format_call(ToolCall(name="search", arguments={"query": "headquarters"}))
        return f"<answer>{task_of(episode).answer} and more</answer>"

    trajectories = []
    config = CollectConfig(num_tasks=3, samples_per_task=1, few_shot=0)
    backend = ScriptedBackend(tokenizer, search_then_half_right)
    result = collect_successful(
        backend, "search-qa", {"reward": "f1", "hops": 1}, config, on_trajectory=trajectories.append
    )
    by_id = {task.id: task for task in tasks}
    expected = [
        best_f1(f"{by_id[t.task_id].answer} and more", by_id[t.task_id].metadata["answers"]) for t in trajectories
    ]
    assert sorted(t.task_id for t in trajectories) == sorted(by_id)
    assert all(0.0 < f1 < 1.0 for f1 in expected)
    assert [t.reward for t in trajectories] == pytest.approx(expected)
    assert all(t.info["format_ok"] for t in trajectories)
    shaped = episode_rewards(trajectories, RewardConfig(format_weight=0.1))
    assert shaped.tolist() == pytest.approx([f1 + 0.1 for f1 in expected])
    assert not any(t.correct for t in trajectories)
    assert (result.attempted, result.successful, result.examples) == (3, 0, [])


def test_expert_source_plays_each_task_through_the_env(tokenizer):
    from agentic_rl.envs.search_data import SearchQATasks
    from agentic_rl.training.collect import collect_expert

    options = {"hops": [1, 2], "top_k": 2, "max_doc_chars": 160}
    result = collect_expert("search-qa", options, CollectConfig(source="expert", num_tasks=12, task_offset=30))
    tasks = SearchQATasks(split="train", hops=[1, 2])
    assert (result.attempted, result.successful, len(result.examples)) == (12, 12, 12)
    assert [e["metadata"]["task_id"] for e in result.examples] == [tasks[30 + i].id for i in range(12)]
    renderer = ChatRenderer(tokenizer)
    for example, index in zip(result.examples, range(30, 42)):
        task, messages = tasks[index], example["messages"]
        calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        assert len(calls) == task.metadata["hops"]  # one search per hop, each answered by the env's tool
        assert sum(m["role"] == "tool" for m in messages) == len(calls)
        assert messages[1] == {"role": "user", "content": task.prompt}  # no demonstrations stored
        assert messages[-1] == {"role": "assistant", "content": f"<answer>{task.answer}</answer>"}
        ids, mask = render_example(messages, renderer, PARSER)
        trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
        assert task.answer in trained and "search" in trained and "Doc 1" not in trained  # results are not trained on


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_expert_source_plays_the_text_games_which_have_no_close(name):
    """Envs without the optional ``close`` (the text games) collect too; every episode is
    the shortest solution, one move per assistant turn."""
    from agentic_rl import envs
    from agentic_rl.envs.frozenlake import shortest_path
    from agentic_rl.envs.sokoban import solve
    from agentic_rl.training.collect import collect_expert

    assert not hasattr(envs.make(name), "close")
    result = collect_expert(name, {}, CollectConfig(source="expert", num_tasks=6, task_offset=100))
    assert (result.attempted, result.successful) == (6, 6)
    tasks = envs.make(name).tasks
    for position, example in enumerate(result.examples):
        plan = (shortest_path if name == "frozenlake" else solve)(tasks[100 + position].metadata["level"])
        moves = [m["content"] for m in example["messages"] if m["role"] == "assistant"]
        assert moves == [f"<answer>{move}</answer>" for move in plan]


def test_expert_data_takes_the_layout_of_the_model_it_is_for(tokenizer, framing_tokenizer):
    """For a model whose template describes tools and frames their output (Qwen's), the
    expert's examples carry ``tools`` and render as a rollout on that model does: the
    template's tool description, one <tool_response> frame; for SmolLM2, the text layout."""
    from agentic_rl import envs
    from agentic_rl.config import RolloutConfig
    from agentic_rl.rollout.engine import rollout
    from agentic_rl.training.collect import collect_expert

    config = CollectConfig(source="expert", num_tasks=2, task_offset=0)
    text = collect_expert("arithmetic", {}, config, renderer=ChatRenderer(tokenizer))
    assert text.examples == collect_expert("arithmetic", {}, config).examples and "tools" not in text.examples[0]
    framing = ChatRenderer(framing_tokenizer)
    result = collect_expert("arithmetic", {}, config, renderer=framing)
    example = result.examples[0]
    assert example["tools"][0]["function"]["name"] == "calculator"
    ids, mask = render_example(example["messages"], framing, PARSER, tools=example["tools"])
    rendered = framing_tokenizer.decode(ids)
    assert (
        "# Tools\n" in rendered
        and "You can call these tools" not in rendered
        and rendered.count("<tool_response>") == 1
    )
    # Token for token what the expert's moves give as a rollout on that model.
    shadow, said = envs.make("arithmetic", split="train"), []
    shadow.reset(options={"task_index": 0})

    def expert(prompt_ids, call_index):
        if call_index:
            shadow.step({"role": "assistant", "content": said[-1]})
        said.append(shadow.expert_reply())
        return said[-1]

    [group] = rollout(
        ScriptedBackend(framing_tokenizer, expert),
        lambda: envs.make("arithmetic", split="train"),
        [0],
        config=RolloutConfig(),
    )
    [trajectory] = group.trajectories
    assert trajectory.correct and (ids, mask) == (trajectory.token_ids, trajectory.loss_mask)


def test_expert_source_needs_an_env_with_an_expert():
    from agentic_rl.config import ConfigError
    from agentic_rl.training.collect import collect_expert

    with pytest.raises(ConfigError, match="sft.collect.source"):
        collect_expert("gymnasium", {}, CollectConfig(source="expert", num_tasks=2))


def test_arithmetic_expert_calls_the_calculator_then_answers():
    from agentic_rl.training.collect import collect_expert

    result = collect_expert("arithmetic", {"phrasing": "words"}, CollectConfig(source="expert", num_tasks=3))
    assert (result.attempted, result.successful) == (3, 3)
    task = ArithmeticTasks(split="train", phrasing="words")[0]
    call, _, answer = result.examples[0]["messages"][2:]
    assert call["tool_calls"][0]["function"] == {
        "name": "calculator",
        "arguments": json.dumps({"expression": task.metadata["expression"]}),
    }
    assert answer["content"] == f"<answer>{task.answer}</answer>"


@pytest.mark.parametrize(
    ("name", "options", "limits"),
    [
        # MemAgent-style: the summary replaces the history past 896 tokens (several summaries an episode).
        (
            "long-qa",
            {"num_chunks": 6, "chunk_sentences": 8, "num_facts": 2, "num_questions": 1},
            {"context": "summarize", "context_tokens": 896, "max_total_tokens": 1536},
        ),
        # RAGEN-style window of the last turn: every move after the first starts a segment.
        ("frozenlake", {"size": 4, "num_holes": 2}, {"context": "window", "context_turns": 1}),
    ],
)
def test_expert_examples_under_a_context_policy_are_the_rollout_segments(tokenizer, name, options, limits):
    """With a context policy that cuts the history, the expert's examples are one per
    segment, and each renders token for token (mask included) as the rollout engine
    builds that segment when the same moves, summaries included, are sampled; turns that a
    segment shows as context carry weight 0 (they are trained in the segment they were
    sampled in)."""
    from agentic_rl import envs
    from agentic_rl.config import RolloutConfig
    from agentic_rl.rollout.context import SUMMARY_REQUEST
    from agentic_rl.rollout.engine import rollout
    from agentic_rl.training.collect import collect_expert

    renderer, config = ChatRenderer(tokenizer), RolloutConfig(**limits)
    for index in (3, 6):  # frozenlake: 4 and 5 moves
        result = collect_expert(
            name,
            options,
            CollectConfig(source="expert", num_tasks=1, task_offset=index),
            renderer=renderer,
            rollout_config=config,
        )
        assert result.successful == 1 and len(result.examples) >= 3
        shadow, pending = envs.make(name, split="train", **options), []
        shadow.reset(options={"task_index": index})

        def expert(prompt_ids, call_index):
            if pending:
                shadow.step({"role": "assistant", "content": pending.pop()})
            if tokenizer.decode(prompt_ids).endswith(SUMMARY_REQUEST + "<|im_end|>\n<|im_start|>assistant\n"):
                return shadow.expert_summary()
            pending.append(shadow.expert_reply())
            return pending[-1]

        [group] = rollout(
            ScriptedBackend(tokenizer, expert),
            lambda: envs.make(name, split="train", **options),
            [index],
            config=config,
        )
        [trajectory] = group.trajectories
        assert trajectory.correct and len(trajectory.samples) == len(result.examples)
        if name == "long-qa":
            assert trajectory.summary_turns == len(trajectory.samples) - 1
        for example, sample in zip(result.examples, trajectory.samples):
            assert render_example(example["messages"], renderer, PARSER) == (sample.token_ids, sample.loss_mask)
        shown = [
            m
            for example in result.examples[1:]
            for m in example["messages"]
            if m["role"] == "assistant" and m.get("weight") == 0
        ]
        assert bool(shown) == (
            name == "frozenlake"
        )  # the window shows the last move again; a summary context shows none


def test_expert_summaries_need_an_env_that_writes_them(tokenizer):
    from agentic_rl.config import ConfigError, RolloutConfig
    from agentic_rl.training.collect import collect_expert

    with pytest.raises(ConfigError, match="expert_summary"):
        collect_expert(
            "frozenlake",
            {},
            CollectConfig(source="expert", num_tasks=1),
            renderer=ChatRenderer(tokenizer),
            rollout_config=RolloutConfig(context="summarize", context_tokens=512),
        )
