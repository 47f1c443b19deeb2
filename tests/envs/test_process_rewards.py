"""Per-turn process rewards of the built-in envs (StepSearch's information gain and
repeated-query terms in search-qa, weighed by ``reward.terms``; tests passed by
intermediate runs in code), and their way into the turn-level credit inputs."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl import envs
from agentic_rl.config import RolloutConfig
from agentic_rl.envs.code_tasks import make_task
from agentic_rl.envs.search_qa import oracle_reply
from agentic_rl.rollout.episode import Episode
from agentic_rl.training.credit import build_advantage_inputs, turn_process_reward
from agentic_rl.types import ToolCall, TrajectoryGroup


def search(env, query: str) -> str:
    return env.parser.format_call(ToolCall(name="search", arguments={"query": query}, id="call_0"))


def play(env, replies) -> TrajectoryGroup:
    """One chat-level episode of ``env`` on task 0 with scripted ``replies`` (strings, or
    callables of the env giving a string)."""
    group = TrajectoryGroup(task_id="0", group_id="g")
    episode = Episode.reset(lambda: env, 0, group, limits=RolloutConfig(), renderer=None, on_finish=None)
    for reply in replies:
        turn, message = episode.take_reply(reply(env) if callable(reply) else reply, "stop")
        if not episode.apply_step(turn, lambda: env.step(message)):
            break
    return group


def test_stepsearch_information_gain_and_repeated_query_penalty():
    env = envs.make("search-qa", hops=2, max_turns=6)
    weights = {"info_gain": 1.0, "repeat": -0.25}  # reward.terms: a penalty is a negative weight
    # The oracle's next move from the observations of its own searches (turns 1 and 4).
    hop_1 = lambda e: oracle_reply(e.task, [], e.parser)  # noqa: E731
    hop_2 = lambda e: oracle_reply(e.task, e.retrieved[:1], e.parser)  # noqa: E731
    answer = lambda e: oracle_reply(e.task, [e.retrieved[0], e.retrieved[3]], e.parser)  # noqa: E731
    group = play(
        env,
        [
            hop_1,
            lambda e: search(e, e.queries[0].upper() + "  "),
            lambda e: search(e, "weather tomorrow"),
            hop_2,
            answer,
        ],
    )
    trajectory = group.trajectories[0]
    assert len(env.gold) == 2  # a 2-hop question: two supporting documents
    # hop 1 finds one of two gold docs; the same query again (case and spaces aside) finds
    # nothing new and is counted as a repeat; an unrelated query finds nothing; hop 2 finds
    # the other one. The env reports the terms; the process reward stays the env's own (0).
    assert [turn.turn_terms for turn in trajectory.turns] == [
        {"repeat": 0.0, "info_gain": 0.5},
        {"repeat": 1.0, "info_gain": 0.0},
        {"repeat": 0.0, "info_gain": 0.0},
        {"repeat": 0.0, "info_gain": 0.5},
        {},
    ]
    assert [turn.turn_reward for turn in trajectory.turns] == [0.0] * 5
    assert [turn_process_reward(turn, 0.0, weights) for turn in trajectory.turns] == [0.5, -0.25, 0.0, 0.5, 0.0]
    assert trajectory.reward == 1.0 and trajectory.correct
    assert trajectory.turns[-1].reward_terms == {"evidence": 1.0}  # both documents, a well-formed answer
    assert trajectory.info["episode_metrics"]["search/gold_recall"] == 1.0
    assert trajectory.info["format_ok"] is True
    # The weighted terms reach the turn-level credit inputs (MT-GRPO, GiGPO, GAE, REINFORCE++).
    inputs = build_advantage_inputs(
        [trajectory], torch.tensor([trajectory.reward]), torch.tensor([0]), term_weights=weights
    )
    assert inputs.turn_rewards.tolist() == [[0.5, -0.25, 0.0, 0.5, 0.0]]
    unweighted = build_advantage_inputs([trajectory], torch.tensor([trajectory.reward]), torch.tensor([0]))
    assert unweighted.turn_rewards.tolist() == [[0.0] * 5]  # no reward.terms: the terms weigh nothing


def test_stepsearch_with_a_qa_file_names_gold_documents_by_id_or_title(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    docs = [
        ("d1", "Alpha", "Alpha Corp was founded by Bob Stone."),
        ("d2", "Bob Stone", "Bob Stone was born in Lyon."),
        ("d3", "Gamma", "Gamma is a river."),
    ]
    corpus.write_text("".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs))
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        json.dumps(
            {
                "question": "Where was the founder of Alpha Corp born?",
                "answers": ["Lyon"],
                "supporting_docs": ["Alpha", "d2"],
            }
        )
        + "\n"
    )
    env = envs.make("search-qa", qa_path=str(qa), corpus_path=str(corpus), top_k=1)
    assert set(env.reward_terms) == {"repeat", "info_gain", "evidence"}  # every task names its documents
    group = play(
        env,
        [
            search(env, "Gamma river"),
            search(env, "Alpha Corp founded"),
            search(env, "Bob Stone born"),
            search(env, "bob stone born"),
            "<answer>Lyon</answer>",
        ],
    )
    weights = {"info_gain": 2.0, "repeat": -0.5}
    turns = group.trajectories[0].turns
    assert [turn_process_reward(turn, 0.0, weights) for turn in turns] == [0.0, 1.0, 1.0, -0.5, 0.0]
    assert turns[-1].reward_terms == {"evidence": 1.0}
    # A QA file without supporting_docs: no gold documents, so the env reports ``repeat`` alone.
    qa.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n")
    plain = envs.make("search-qa", qa_path=str(qa), corpus_path=str(corpus), top_k=1)
    assert set(plain.reward_terms) == {"repeat"}
    group = play(plain, [search(plain, "Gamma river"), search(plain, "gamma  river"), "<answer>a</answer>"])
    turns = group.trajectories[0].turns
    assert [turn.turn_terms for turn in turns] == [{"repeat": 0.0}, {"repeat": 1.0}, {}]
    assert [turn.reward_terms for turn in turns] == [{}, {}, {}] and group.trajectories[0].reward == 1.0
    with pytest.raises(ValueError, match="require_evidence: task qa-0 of .* has no supporting_docs"):
        envs.make("search-qa", qa_path=str(qa), corpus_path=str(corpus), require_evidence=True)
    for option, term in (("info_gain_reward", "info_gain"), ("repeat_penalty", "repeat")):
        with pytest.raises(TypeError, match=rf"^env 'search-qa' option {option}: moved to reward\.terms\.{term}"):
            envs.make("search-qa", qa_path=str(qa), corpus_path=str(corpus), **{option: 1.0})


def test_process_rewards_are_off_by_default():
    env = envs.make("search-qa", hops=2)
    group = play(env, [lambda e: oracle_reply(e.task, e.retrieved, e.parser)] * 3)
    turns = group.trajectories[0].turns
    assert [turn.turn_reward for turn in turns] == [0.0, 0.0, 0.0]
    # The terms are reported, but no weight (reward.terms is empty by default) makes them count.
    assert [turn_process_reward(turn, 0.0) for turn in turns] == [0.0, 0.0, 0.0]
    assert [turn_process_reward(turn, 0.0, {}) for turn in turns] == [0.0, 0.0, 0.0]


PROMPT = 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n'
TEST = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(0, 0) == 0\n    assert candidate(-1, 1) == 0\n    assert candidate(2, 2) == 4\n"
TASK = make_task("add", PROMPT, TEST, "add", "    return a + b\n")


def python_call(code: str) -> str:
    return "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": code}}) + "</tool_call>"


def test_code_env_rewards_tests_newly_passed_by_intermediate_runs():
    env = envs.make("code", test_progress=True, max_turns=8, test_timeout_s=5.0)
    assert set(env.reward_terms) == {"test_progress"}
    try:
        env.reset(options={"task": TASK})
        replies = [
            python_call("print(1 + 1)"),  # defines nothing: no test run
            python_call("def add(a, b):\n    return a * b\nprint(add(2, 2))"),  # passes (0,0) and (2,2): 2 of 4
            python_call("def add(a, b):\n    return a * b"),  # the same again: no rise
            python_call("def add(a, b):\n    return a + b\nraise SystemExit(1)"),  # failed to run: not counted
            python_call("def helper(a, b):\n    return a + b"),  # not the entry point: no test run
            python_call("def add(a, b):\n    return helper(a, b)"),  # uses an earlier cell: 4 of 4
            "Done.\n```python\ndef add(a, b):\n    return a + b\n```",
        ]
        rewards = []
        for reply in replies:
            _, reward, terminated, _, info = env.step({"role": "assistant", "content": reply})
            rewards.append(info.get("turn_terms", {}).get("test_progress", 0.0))
        assert rewards == [0.0, 0.5, 0.0, 0.0, 0.0, 0.5, 0.0]
        assert (reward, terminated) == (1.0, True)
    finally:
        env.close()


def test_code_env_runs_no_tests_between_turns_unless_asked():
    env = envs.make("code", max_turns=4, test_timeout_s=5.0)
    try:
        assert env.reward_terms == {}
        env.reset(options={"task": TASK})
        _, _, _, _, info = env.step({"role": "assistant", "content": python_call("def add(a, b):\n    return a + b")})
        assert "turn_terms" not in info and env.best_fraction == 0.0
    finally:
        env.close()
    with pytest.raises(TypeError, match="moved to reward.terms.test_progress, with test_progress: true"):
        envs.make("code", test_progress_reward=1.0)
