"""Reflection (``attempts``): feedback after a wrong answer, retries in the same episode,
the discounted reward of the last attempt, attempt-1 vs final metrics, no gold leaks, and
token-exact trajectories through the engine (feedback masked out)."""

from __future__ import annotations

import json
import re

import pytest
import torch

from agentic_rl.config import ConfigError, RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import check_env, env_factory, make
from agentic_rl.envs.code import make_code_env
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.rewards.qa import squad_normalize
from agentic_rl.rollout import rollout
from agentic_rl.training.rl_metrics import rollout_metrics

IM_END = "<|im_end|>"


def say(env, text: str):
    return env.step({"role": "assistant", "content": text})


def wrong_number(answer: str) -> str:
    """A wrong answer that does not contain the gold one."""
    return "-1" if "1" not in answer else "0" if "0" not in answer else "abc"


# --------------------------------------------------------------------------- the env


def test_wrong_then_right_is_discounted_and_reported():
    env = make("arithmetic", attempts=3, attempt_discount=0.9)
    env.reset(options={"task_index": 0})
    gold = env.task.answer
    observations, reward, terminated, truncated, info = say(env, f"<answer>{wrong_number(gold)}</answer>")
    assert (reward, terminated, truncated, info["correct"], info["answer"]) == (
        0.0,
        False,
        False,
        False,
        wrong_number(gold),
    )
    assert observations == [{"role": "user", "content": f"Your answer {wrong_number(gold)} is incorrect. Try again."}]
    observations, reward, terminated, truncated, info = say(env, f"<answer>{gold}</answer>")
    assert (observations, reward, terminated, truncated, info["correct"]) == ([], pytest.approx(0.9), True, False, True)
    assert env.episode_metrics() == {
        "reflection/attempts_used": 2.0,
        "reflection/correct_at_1": 0.0,
        "reflection/correct_at_final": 1.0,
    }


def test_reward_is_the_final_attempts_times_the_discount_per_extra_attempt():
    env = make("arithmetic", attempts=4, attempt_discount=0.5, max_turns=8)
    env.reset(options={"task_index": 1})
    rewards = [say(env, "<answer>nope</answer>")[1] for _ in range(3)]
    last = say(env, f"<answer>{env.task.answer}</answer>")
    assert rewards == [0.0, 0.0, 0.0] and last[1] == 0.5**3 and last[2] is True
    assert env.episode_metrics()["reflection/attempts_used"] == 4.0


def test_right_at_first_attempt_is_the_plain_episode():
    env = make("arithmetic", attempts=3, attempt_discount=0.9)
    env.reset(options={"task_index": 2})
    observations, reward, terminated, _, info = say(env, f"<answer>{env.task.answer}</answer>")
    assert (observations, reward, terminated, info["correct"]) == ([], 1.0, True, True)
    assert env.episode_metrics() == {
        "reflection/attempts_used": 1.0,
        "reflection/correct_at_1": 1.0,
        "reflection/correct_at_final": 1.0,
    }


def test_exhausted_attempts_end_the_episode_with_the_last_answer():
    env = make("arithmetic", attempts=3, max_turns=10)
    env.reset(options={"task_index": 3})
    steps = [say(env, f"<answer>{guess}</answer>") for guess in ("a", "b", "c")]
    assert [s[2] for s in steps] == [False, False, True]  # terminated only after the third
    assert [len(s[0]) for s in steps] == [1, 1, 0]  # feedback twice, nothing after the last
    assert steps[-1][1] == 0.0 and steps[-1][4]["answer"] == "c" and steps[-1][4]["correct"] is False
    assert env.episode_metrics() == {
        "reflection/attempts_used": 3.0,
        "reflection/correct_at_1": 0.0,
        "reflection/correct_at_final": 0.0,
    }
    env.reset(options={"task_index": 3})  # counters are per episode
    assert env.episode_metrics()["reflection/attempts_used"] == 0.0


def test_no_retry_when_the_turns_run_out():
    env = make("arithmetic", attempts=5, max_turns=2)
    env.reset(options={"task_index": 0})
    assert say(env, "<answer>1</answer>")[2] is False
    observations, reward, terminated, truncated, _ = say(env, "<answer>2</answer>")  # turn 2 of 2
    assert (observations, reward, terminated, truncated) == ([], 0.0, True, False)


def test_a_missing_answer_is_a_failed_attempt_and_tool_turns_go_on_between_attempts():
    env = make("arithmetic", attempts=2, max_turns=6)
    env.reset(options={"task_index": 0})
    observations, reward, terminated, _, info = say(env, "I think it is big.")
    assert observations == [
        {"role": "user", "content": "You did not give a final answer inside <answer></answer>. Try again."}
    ]
    assert (reward, terminated, info["answer"]) == (0.0, False, None)
    call = (
        "<tool_call>\n"
        + json.dumps({"name": "calculator", "arguments": {"expression": env.task.metadata["expression"]}})
        + "\n</tool_call>"
    )
    observations, *_ = say(env, call)
    assert observations[0]["role"] == "tool" and env.task.answer in observations[0]["content"]
    assert say(env, f"<answer>{env.task.answer}</answer>")[1:3] == (1.0, True)  # discount 1 by default


def test_self_critique_asks_for_a_critique_first():
    env = make("arithmetic", attempts=2, self_critique=True)
    env.reset(options={"task_index": 0})
    [feedback] = say(env, "<answer>7</answer>")[0]
    assert (
        feedback["content"]
        == "Your answer 7 is incorrect. First write a short critique of what went wrong, then try again."
    )


def test_long_or_multiline_answers_are_not_quoted():
    env = make("arithmetic", attempts=3)
    env.reset(options={"task_index": 0})
    assert say(env, "<answer>" + "9" * 101 + "</answer>")[0][0]["content"] == "Your answer is incorrect. Try again."
    assert say(env, "<answer>1\n2</answer>")[0][0]["content"] == "Your answer is incorrect. Try again."


def test_feedback_never_contains_the_gold_answer_arithmetic():
    env = make("arithmetic", split="test", attempts=2)
    for index in range(300):
        env.reset(options={"task_index": index})
        gold = env.task.answer
        for reply in (
            f"<answer>{wrong_number(gold)}</answer>",
            "no answer here",
            "<answer></answer>",
            f"<answer>{env.task.prompt}</answer>",
        ):
            env.reset(options={"task_index": index})
            observations, reward, terminated, _, _ = say(env, reply)
            assert not terminated and reward == 0.0
            [feedback] = observations
            assert feedback["role"] == "user"
            # Nothing but the model's own answer is quoted: without it, no trace of the gold.
            answer = re.search(r"<answer>(.*)</answer>", reply)
            quoted = answer.group(1) if answer and answer.group(1) else ""
            assert (
                gold not in feedback["content"].replace(quoted, "", 1) if quoted else gold not in feedback["content"]
            ), (index, reply, feedback)
            assert re.fullmatch(
                r"(Your answer (.*) is incorrect|You did not give a final answer inside <answer></answer>)\. Try again\.",
                feedback["content"],
            )


def test_feedback_never_contains_the_gold_answer_search_qa():
    env = make("search-qa", split="test", attempts=2, reward="f1")
    for index in range(300):
        env.reset(options={"task_index": index})
        golds = env.task.metadata.get("answers") or [env.task.answer]
        # A wrong entity from the question itself (the likeliest wrong answer), or a word.
        words = re.findall(r"[A-Z][a-z]+", env.task.prompt)
        guess = next(
            (
                w
                for w in words
                if not any(
                    squad_normalize(w) in squad_normalize(g) or squad_normalize(g) in squad_normalize(w) for g in golds
                )
            ),
            "unknown",
        )
        observations, reward, terminated, _, info = say(env, f"<answer>{guess}</answer>")
        assert not terminated and reward == 0.0 and info["correct"] is False
        [feedback] = observations
        assert feedback["content"] == f"Your answer {guess} is incorrect. Try again."
        assert not any(squad_normalize(g) in squad_normalize(feedback["content"]) for g in golds), (index, feedback)


def test_search_qa_partial_f1_is_not_correct_and_metrics_merge():
    env = make("search-qa", split="test", hops=1, attempts=2, attempt_discount=0.8, reward="f1")
    env.reset(options={"task_index": 0})
    gold = env.task.answer
    observations, reward, terminated, _, info = say(env, f"<answer>{gold} and more words</answer>")
    assert not terminated and reward == 0.0 and 0.0 < info["f1"] < 1.0  # partly right is not correct: retry
    _, reward, terminated, _, info = say(env, f"<answer>{gold}</answer>")
    assert terminated and reward == pytest.approx(0.8) and info["em"] == 1.0
    metrics = env.episode_metrics()
    assert (
        metrics["search/em"] == 1.0
        and metrics["reflection/correct_at_1"] == 0.0
        and metrics["reflection/correct_at_final"] == 1.0
    )


def test_code_env_feedback_says_nothing_of_the_tests():
    env = make_code_env(num_tasks=2, attempts=2, tools=())
    env.reset(options={"task_index": 0})
    env.score_answer = lambda answer: (0.0, False, {"tests_passed": 1, "tests_total": 3})  # no sandbox needed here
    observations, reward, terminated, _, info = say(env, "```python\ndef f():\n    return 1\n```")
    assert observations == [{"role": "user", "content": "Your code does not pass the tests. Try again."}]
    assert (reward, terminated, info["tests_total"]) == (0.0, False, 3)
    env.reset(options={"task_index": 0})
    assert say(env, "no code")[0][0]["content"] == "Your reply had no ```python code block. Try again."


def test_default_attempts_is_the_plain_episode():
    env = make("arithmetic")
    assert env.attempts == 1 and env.episode_metrics() == {}
    env.reset(options={"task_index": 0})
    assert say(env, "<answer>5</answer>") == (
        [],
        0.0,
        True,
        False,
        {"answer": "5", "correct": False, "tool_results": []},
    )
    env.reset(options={"task_index": 0})
    assert say(env, "nothing") == ([], 0.0, True, False, {"answer": None, "correct": False, "tool_results": []})
    assert env.episode_metrics() == {}


def test_check_env_with_reflection():
    for name in ("arithmetic", "search-qa"):
        check_env(make(name, attempts=3, attempt_discount=0.9, self_critique=True, memory="episode"))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attempts": 0}, "attempts: expected a positive int, got 0"),
        ({"attempts": "2"}, "attempts: expected a positive int, got '2'"),
        ({"attempts": True}, "attempts: expected a positive int, got True"),
        ({"attempt_discount": 0}, r"attempt_discount: expected a number in \(0, 1\], got 0"),
        ({"attempt_discount": 1.5}, r"attempt_discount: expected a number in \(0, 1\], got 1.5"),
        ({"attempt_discount": "0.9"}, r"attempt_discount: expected a number in \(0, 1\], got '0.9'"),
        ({"self_critique": "yes"}, "self_critique: expected true or false, got 'yes'"),
    ],
)
@pytest.mark.parametrize("env_name", ["arithmetic", "search-qa", "code"])
def test_bad_reflection_options_fail_in_one_line(env_name, options, message):
    with pytest.raises(ValueError, match="^" + message + "$"):
        make(env_name, **options)
    with pytest.raises(ConfigError, match="^env: " + message + "$"):
        env_factory(env_name, options)


def test_math_envs_take_the_options(tmp_path):
    path = tmp_path / "math.jsonl"
    path.write_text(json.dumps({"question": "What is 6 times 7?", "answer": "#### 42"}) + "\n")
    for name in ("math-python", "gsm8k"):
        env = make(name, path=str(path), tools=["calculator"], attempts=2, attempt_discount=0.5)
        env.reset(options={"task_index": 0})
        assert say(env, "<answer>41</answer>")[0][0]["content"] == "Your answer 41 is incorrect. Try again."
        assert say(env, "<answer>42</answer>")[1:3] == (0.5, True)


# --------------------------------------------------------------------------- through the engine


def template_ids(tokenizer, messages):
    return tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=True, return_dict=False)


def test_engine_trajectory_is_token_exact_with_masked_feedback(tokenizer):
    env = make("arithmetic", attempts=3, attempt_discount=0.9)
    task = env.tasks[0]
    call = (
        "<tool_call>\n"
        + json.dumps({"name": "calculator", "arguments": {"expression": task.metadata["expression"]}})
        + "\n</tool_call>"
    )
    replies = ["<answer>12</answer>", call, f"<answer>{task.answer}</answer>"]
    backend = ScriptedBackend(tokenizer, replies)
    [group] = rollout(
        backend,
        lambda: make("arithmetic", attempts=3, attempt_discount=0.9),
        [0],
        config=RolloutConfig(max_total_tokens=4096),
    )
    [trajectory] = group.trajectories
    assert trajectory.termination_reason == "answered" and trajectory.correct is True
    assert trajectory.reward == pytest.approx(0.9) and trajectory.answer == task.answer
    assert [turn.reward for turn in trajectory.turns] == [0.0, 0.0, pytest.approx(0.9)]
    assert [m["role"] for m in trajectory.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert trajectory.messages[3] == {"role": "user", "content": "Your answer 12 is incorrect. Try again."}
    # The feedback is observation: loss_mask 0, exactly the template's user turn.
    first = trajectory.turns[0]
    feedback = trajectory.token_ids[first.response_end : first.observation_end]
    assert trajectory.loss_mask[first.response_end : first.observation_end] == [0] * len(feedback)
    assert (
        tokenizer.decode(feedback)
        == f"\n<|im_start|>user\nYour answer 12 is incorrect. Try again.{IM_END}\n<|im_start|>assistant\n"
    )
    for turn, reply in zip(trajectory.turns, replies):
        sampled = trajectory.token_ids[turn.response_start : turn.response_end]
        assert trajectory.loss_mask[turn.response_start : turn.response_end] == [1] * len(sampled)
        assert tokenizer.decode(sampled) == reply + IM_END
    # Each call saw exactly the trajectory so far, and the whole trajectory is the chat
    # template's rendering of its messages, token for token.
    assert backend.prompts == [trajectory.token_ids[: turn.response_start] for turn in trajectory.turns]
    assert trajectory.token_ids + tokenizer("\n", add_special_tokens=False)["input_ids"] == template_ids(
        tokenizer, trajectory.messages
    )
    assert trajectory.info["episode_metrics"] == {
        "reflection/attempts_used": 2.0,
        "reflection/correct_at_1": 0.0,
        "reflection/correct_at_final": 1.0,
    }


def test_engine_eval_shows_attempt_one_and_final_accuracy(tokenizer):
    """Four tasks: two right at once, one right at the second attempt, one never."""
    tasks = make("arithmetic").tasks
    plan = {
        tasks[0].prompt: ["right"],
        tasks[1].prompt: ["right"],
        tasks[2].prompt: ["wrong", "right"],
        tasks[3].prompt: ["wrong", "wrong"],
    }

    def script(prompt_ids, call_index):
        text = tokenizer.decode(prompt_ids)
        task = next(t for t in tasks[:4] if t.prompt in text)
        attempt = text.count("is incorrect. Try again.")
        return f"<answer>{task.answer}</answer>" if plan[task.prompt][attempt] == "right" else "<answer>-5</answer>"

    make_env = lambda: make("arithmetic", attempts=2, attempt_discount=0.5)  # noqa: E731
    groups = rollout(
        ScriptedBackend(tokenizer, script), make_env, range(4), config=RolloutConfig(max_total_tokens=4096)
    )
    trajectories = [t for g in groups for t in g.trajectories]
    assert [t.reward for t in trajectories] == [1.0, 1.0, 0.5, 0.0]
    assert [t.correct for t in trajectories] == [True, True, True, False]
    assert [t.termination_reason for t in trajectories] == ["answered"] * 4
    metrics = aggregate_metrics([g.trajectories for g in groups], k=1)
    assert (
        metrics["reflection/correct_at_1"] == 0.5 and metrics["reflection/correct_at_final"] == 0.75 == metrics["avg@1"]
    )
    assert metrics["reflection/attempts_used"] == pytest.approx(1.5)
    # An RL step logs the same env metrics, so attempt 1 vs the final attempt is a training curve too.
    step = rollout_metrics(groups, torch.tensor([t.reward for t in trajectories]), excluded=0)
    assert step["reflection/correct_at_1"] == 0.5 and step["reflection/correct_at_final"] == 0.75 == step["accuracy"]
