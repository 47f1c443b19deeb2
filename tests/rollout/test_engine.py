"""The rollout engine with a scripted backend, the real SmolLM2 tokenizer and chat template."""

from __future__ import annotations

import json
import time

import pytest

from agentic_rl.config import RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import make
from agentic_rl.rollout import rollout
from agentic_rl.types import TERMINATION_REASONS

IM_END = "<|im_end|>"


def call(expression: str) -> str:
    return (
        "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"
    )


def arithmetic(**kwargs):
    return lambda: make("arithmetic", **kwargs)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def template_ids(tokenizer, messages, *, add_generation_prompt: bool) -> list[int]:
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=True, return_dict=False
    )


def template_text(tokenizer, messages, *, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)


def spans(mask: list[int]) -> list[tuple[int, int, int]]:
    """Runs of equal mask values as (value, start, end)."""
    runs: list[tuple[int, int, int]] = []
    for i, value in enumerate(mask):
        if runs and runs[-1][0] == value:
            runs[-1] = (value, runs[-1][1], i + 1)
        else:
            runs.append((value, i, i + 1))
    return runs


def assert_token_invariants(trajectory) -> None:
    assert len(trajectory.token_ids) == len(trajectory.loss_mask) == len(trajectory.sampler_logprobs)
    assert set(trajectory.loss_mask) <= {0, 1}
    assert trajectory.loss_mask[: trajectory.prompt_length] == [0] * trajectory.prompt_length
    for i, mask in enumerate(trajectory.loss_mask):
        if mask == 0:
            assert trajectory.sampler_logprobs[i] == 0.0
    # turn spans tile the sequence: response (mask 1), then observation (mask 0)
    position = trajectory.prompt_length
    for turn in trajectory.turns:
        assert turn.response_start == position
        assert turn.response_end >= turn.response_start
        assert set(trajectory.loss_mask[turn.response_start : turn.response_end]) <= {1}
        position = turn.response_end
        if turn.observation_end:
            assert set(trajectory.loss_mask[turn.response_end : turn.observation_end]) == {0}
            position = turn.observation_end
    assert position == len(trajectory.token_ids)


# ----------------------------------------------------------------- one correct episode


@pytest.fixture
def correct_episode(tokenizer):
    env = make("arithmetic")
    task = env.tasks[0]
    replies = [f"Let me compute.\n{call(task.metadata['expression'])}", f"<answer>{task.answer}</answer>"]
    backend = ScriptedBackend(tokenizer, replies)
    [group] = rollout(backend, arithmetic(), [0])
    [trajectory] = group.trajectories
    return task, replies, backend, trajectory


def test_correct_episode_is_scored(correct_episode) -> None:
    task, replies, backend, trajectory = correct_episode
    assert trajectory.task_id == task.id
    assert trajectory.reward == 1.0 and trajectory.correct is True
    assert trajectory.termination_reason == "answered"
    assert trajectory.answer == task.answer
    assert trajectory.infra_error is None
    assert trajectory.num_turns == 2 and backend.calls == 2
    first, second = trajectory.turns
    assert [t.assistant_text for t in trajectory.turns] == replies
    assert [t.reward for t in trajectory.turns] == [0.0, 1.0]
    assert [t.finish_reason for t in trajectory.turns] == ["stop", "stop"]
    [result] = first.tool_results
    assert (result.name, result.content, result.ok, result.malformed) == ("calculator", task.answer, True, False)
    assert second.tool_results == []
    assert trajectory.tool_results == [result]
    roles = [m["role"] for m in trajectory.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert trajectory.messages[2:] == [
        {"role": "assistant", "content": replies[0]},
        {"role": "tool", "name": "calculator", "content": f"<tool_response>\n{task.answer}\n</tool_response>"},
        {"role": "assistant", "content": replies[1]},
    ]
    assert trajectory.wall_time_s > 0
    summary = trajectory.to_dict()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["tool_calls"] == [
        {"name": "calculator", "ok": True, "malformed": False, "unknown_tool": False, "latency_s": result.latency_s}
    ]


def test_correct_episode_tokens(correct_episode, tokenizer) -> None:
    task, replies, backend, trajectory = correct_episode
    assert_token_invariants(trajectory)
    opening = trajectory.messages[:2]
    # The prompt is the chat template's own tokenization of the opening messages ...
    prompt = template_ids(tokenizer, opening, add_generation_prompt=True)
    assert trajectory.prompt_length == len(prompt)
    assert trajectory.token_ids[: len(prompt)] == prompt
    assert backend.prompts[0] == prompt
    # ... which the backend saw; the second call saw everything so far.
    assert backend.prompts[1] == trajectory.token_ids[: trajectory.turns[1].response_start]

    runs = spans(trajectory.loss_mask)
    assert [value for value, _, _ in runs] == [0, 1, 0, 1]
    _, (_, r1_start, r1_end), (_, o_start, o_end), (_, r2_start, r2_end) = runs
    # Sampled tokens decode exactly to the replies plus the stop token.
    for reply, (start, end), turn in zip(replies, [(r1_start, r1_end), (r2_start, r2_end)], trajectory.turns):
        assert tokenizer.decode(trajectory.token_ids[start:end]) == reply + IM_END
        assert trajectory.token_ids[start:end] == encode(tokenizer, reply) + [tokenizer.convert_tokens_to_ids(IM_END)]
        assert (turn.response_start, turn.response_end) == (start, end)
    assert trajectory.turns[0].observation_end == o_end
    # The observation is what the template puts between the first reply's stop token and
    # the next assistant turn: the rest of the end of turn, the tool message, the next prompt.
    observation = tokenizer.decode(trajectory.token_ids[o_start:o_end])
    assert (
        observation
        == f"\n<|im_start|>tool\n<tool_response>\n{task.answer}\n</tool_response>{IM_END}\n<|im_start|>assistant\n"
    )
    before = template_text(tokenizer, trajectory.messages[:3], add_generation_prompt=False)
    after = template_text(tokenizer, trajectory.messages[:4], add_generation_prompt=True)
    assert before.endswith(IM_END + "\n") and after.startswith(before)
    assert observation == "\n" + after[len(before) :]
    # No drift: the token path equals the message path, token for token (the template
    # closes the last turn with "<|im_end|>\n"; the sampled turn ends at the stop token).
    full = template_ids(tokenizer, trajectory.messages, add_generation_prompt=False)
    assert trajectory.token_ids + encode(tokenizer, "\n") == full


def test_turn_cut_mid_tool_call_gets_the_end_of_turn_in_the_observation(tokenizer) -> None:
    env = make("arithmetic")
    task = env.tasks[1]
    first = call(task.metadata["expression"])
    backend = ScriptedBackend(tokenizer, [first, f"<answer>{task.answer}</answer>"])
    limits = RolloutConfig(max_new_tokens=len(encode(tokenizer, first)))  # room for the call, not its stop token
    [group] = rollout(backend, arithmetic(), [1], config=limits)
    [trajectory] = group.trajectories
    assert_token_invariants(trajectory)
    assert trajectory.termination_reason == "answered" and trajectory.reward == 1.0
    assert [t.finish_reason for t in trajectory.turns] == ["length", "stop"]
    turn = trajectory.turns[0]
    assert trajectory.token_ids[turn.response_start : turn.response_end] == encode(tokenizer, first)
    observation = tokenizer.decode(trajectory.token_ids[turn.response_end : turn.observation_end])
    assert observation.startswith(IM_END + "\n<|im_start|>tool\n")  # the end of turn the model did not sample
    full = template_ids(tokenizer, trajectory.messages, add_generation_prompt=False)
    assert trajectory.token_ids + encode(tokenizer, "\n") == full


def test_few_shot_prompt_matches_the_template(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, ["<answer>0</answer>"])
    [group] = rollout(backend, arithmetic(few_shot=2), [4])
    [trajectory] = group.trajectories
    opening = make("arithmetic", few_shot=2).reset(options={"task_index": 4})[0]
    assert trajectory.messages[: len(opening)] == opening
    assert trajectory.token_ids[: trajectory.prompt_length] == template_ids(
        tokenizer, opening, add_generation_prompt=True
    )
    assert trajectory.termination_reason == "answered" and trajectory.reward == 0.0 and not trajectory.correct


# ----------------------------------------------------------------- termination reasons


def test_max_turns_from_the_env(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, [call("1 + 1")])  # always calls the tool
    [group] = rollout(backend, arithmetic(max_turns=2), [0], group_size=2)
    for trajectory in group.trajectories:
        assert trajectory.termination_reason == "max_turns"
        assert trajectory.num_turns == 2 and trajectory.reward == 0.0 and trajectory.answer is None
        assert [r.content for r in trajectory.tool_results] == ["2", "2"]
        assert_token_invariants(trajectory)
        # the last turn's observation is not appended: nothing follows a truncation
        assert trajectory.loss_mask[-1] == 1 and trajectory.messages[-1]["role"] == "assistant"
    assert backend.calls == 2


def test_max_tokens_when_the_observation_would_overflow(tokenizer) -> None:
    probe = ScriptedBackend(tokenizer, ["<answer>1</answer>"])
    [group] = rollout(probe, arithmetic(), [0])
    prompt_length = group.trajectories[0].prompt_length
    reply_length = len(encode(tokenizer, call("1 + 1"))) + 1
    limits = RolloutConfig(max_total_tokens=prompt_length + reply_length + 5)  # the tool observation does not fit
    [group] = rollout(ScriptedBackend(tokenizer, [call("1 + 1")]), arithmetic(), [0], config=limits)
    [trajectory] = group.trajectories
    assert trajectory.termination_reason == "max_tokens"
    assert trajectory.num_turns == 1
    assert len(trajectory.token_ids) == prompt_length + reply_length <= limits.max_total_tokens
    assert_token_invariants(trajectory)


def test_max_tokens_cuts_the_response_at_the_total_budget(tokenizer) -> None:
    probe = ScriptedBackend(tokenizer, ["<answer>1</answer>"])
    prompt_length = rollout(probe, arithmetic(), [0])[0].trajectories[0].prompt_length
    limits = RolloutConfig(max_total_tokens=prompt_length + 6)
    backend = ScriptedBackend(tokenizer, [call("123 + 456")])
    [group] = rollout(backend, arithmetic(), [0], config=limits)
    [trajectory] = group.trajectories
    assert trajectory.termination_reason == "max_tokens"
    assert len(trajectory.token_ids) == limits.max_total_tokens
    assert trajectory.response_tokens == 6
    assert trajectory.turns[0].finish_reason == "length"
    assert trajectory.token_ids[prompt_length:] == encode(tokenizer, call("123 + 456"))[:6]


def test_max_tokens_when_a_turn_hits_max_new_tokens(tokenizer) -> None:
    reply = "Let me think about this very carefully before I answer. <answer>7</answer>"
    backend = ScriptedBackend(tokenizer, [reply])
    [group] = rollout(backend, arithmetic(), [0], config=RolloutConfig(max_new_tokens=5))
    [trajectory] = group.trajectories
    assert trajectory.termination_reason == "max_tokens"
    assert trajectory.num_turns == 1 and trajectory.turns[0].finish_reason == "length"
    assert trajectory.response_tokens == 5
    assert trajectory.token_ids[trajectory.prompt_length :] == encode(tokenizer, reply)[:5]
    assert trajectory.reward == 0.0
    assert_token_invariants(trajectory)


def test_timeout_from_a_slow_backend(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, [call("1 + 1")], delay_s=0.2)
    groups = rollout(backend, arithmetic(max_turns=10), [0, 1], config=RolloutConfig(timeout_s=0.1))
    assert len(groups) == 2
    for group in groups:
        [trajectory] = group.trajectories
        assert trajectory.termination_reason == "timeout"
        assert trajectory.num_turns == 1 and trajectory.reward == 0.0
        assert trajectory.wall_time_s >= 0.1
    assert backend.calls == 1


class TasksEnv:
    """A small custom env: "Say N." tasks; ``step`` can sleep, raise or call back."""

    num_tasks = 8

    def __init__(
        self, *, sleep_s: float = 0.0, fail_on: tuple[int, ...] = (), turns: int = 1, long_on: tuple[int, ...] = ()
    ) -> None:
        self.sleep_s, self.fail_on, self.turns, self.long_on = sleep_s, fail_on, turns, long_on
        self.index = -1
        self.turn = 0

    def reset(self, *, seed=None, options=None):
        self.index = (options or {}).get("task_index", 0)
        self.turn = 0
        padding = "Please listen. " * 100 if self.index in self.long_on else ""
        return [{"role": "user", "content": f"{padding}Say {self.index}."}], {"task_id": f"say-{self.index}"}

    def step(self, assistant_message):
        self.turn += 1
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if self.index in self.fail_on:
            raise RuntimeError(f"env crashed on task {self.index}")
        if self.turn < self.turns:
            return [{"role": "user", "content": "Again."}], 0.0, False, False, {}
        answer = assistant_message["content"]
        return (
            [],
            float(answer == str(self.index)),
            True,
            False,
            {"answer": answer, "correct": answer == str(self.index)},
        )


def say_index(prompt: list[int], call_index: int, tokenizer) -> str:
    text = tokenizer.decode(prompt)
    return text[text.rindex("Say ") + 4 : text.rindex(".<|im_end|>")]


def test_timeout_from_a_slow_env_step(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, ["3"])
    started = time.monotonic()
    [group] = rollout(backend, lambda: TasksEnv(sleep_s=1.0), [3], config=RolloutConfig(timeout_s=0.2))
    elapsed = time.monotonic() - started
    [trajectory] = group.trajectories
    assert trajectory.termination_reason == "timeout"
    assert elapsed < 0.9  # the engine stopped waiting; it did not sit out the step
    assert trajectory.num_turns == 1 and trajectory.reward == 0.0


def test_env_crash_is_an_infra_error_and_isolated(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, lambda prompt, i: say_index(prompt, i, tokenizer))
    finished = []
    groups = rollout(backend, lambda: TasksEnv(fail_on=(1,)), [0, 1, 2], group_size=2, on_finish=finished.append)
    assert len(groups) == 3 and len(finished) == 6
    for group in groups:
        for trajectory in group.trajectories:
            assert_token_invariants(trajectory)
            if group.task_id == "say-1":
                assert trajectory.termination_reason == "error"
                assert trajectory.infra_error == "RuntimeError: env crashed on task 1"
                assert trajectory.reward == 0.0 and trajectory.num_turns == 1
            else:
                assert trajectory.termination_reason == "answered"
                assert trajectory.infra_error is None
                assert trajectory.reward == 1.0 and trajectory.correct


def test_prompt_longer_than_the_token_budget_ends_before_sampling(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, lambda prompt, i: say_index(prompt, i, tokenizer))
    finished = []
    groups = rollout(
        backend,
        lambda: TasksEnv(long_on=(1,)),
        [0, 1, 2],
        config=RolloutConfig(max_total_tokens=100),
        on_finish=finished.append,
    )
    short0, long1, short2 = (g.trajectories[0] for g in groups)
    assert long1.prompt_length > 100
    assert long1.termination_reason == "max_tokens" and long1.num_turns == 0 and long1.response_tokens == 0
    assert long1.token_ids == template_ids(tokenizer, long1.messages, add_generation_prompt=True)
    for trajectory in (short0, short2):
        assert trajectory.termination_reason == "answered" and trajectory.reward == 1.0
    assert len(finished) == 3 and backend.calls == 1 and len(backend.prompts) == 2


def test_every_termination_reason_is_known() -> None:
    assert set(TERMINATION_REASONS) == {"answered", "max_turns", "max_tokens", "timeout", "error"}


# ----------------------------------------------------------------- groups and concurrency


def test_groups(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, ["<answer>0</answer>"])
    env = make("arithmetic")
    finished = []
    groups = rollout(backend, arithmetic(), [5, 9, 5], group_size=3, on_finish=finished.append)
    assert len(groups) == 3
    assert [g.task_id for g in groups] == [env.tasks[5].id, env.tasks[9].id, env.tasks[5].id]
    assert len({g.group_id for g in groups}) == 3  # a repeated task is a new group
    for group in groups:
        assert len(group.trajectories) == 3
        assert {t.group_id for t in group.trajectories} == {group.group_id}
        assert {t.task_id for t in group.trajectories} == {group.task_id}
        assert len({id(t) for t in group.trajectories}) == 3
        assert group.rewards == [0.0, 0.0, 0.0]
    assert sorted(map(id, finished)) == sorted(id(t) for g in groups for t in g.trajectories)
    # All 9 trajectories generated in one batched call.
    assert backend.calls == 1 and len(backend.prompts) == 9


def test_multi_turn_trajectories_drop_out_independently(tokenizer) -> None:
    env = make("arithmetic", max_turns=3)
    first, second = env.tasks[0], env.tasks[1]

    def script(prompt, call_index):
        # task 0 answers at once; task 1 keeps calling the tool until the env stops it
        return f"<answer>{first.answer}</answer>" if first.prompt in tokenizer.decode(prompt) else call("2 * 3")

    backend = ScriptedBackend(tokenizer, script)
    groups = rollout(backend, arithmetic(max_turns=3), [0, 1])
    answered, truncated = (g.trajectories[0] for g in groups)
    assert (answered.termination_reason, answered.num_turns, answered.reward) == ("answered", 1, 1.0)
    assert (truncated.termination_reason, truncated.num_turns, truncated.reward) == ("max_turns", 3, 0.0)
    assert second.prompt in tokenizer.decode(truncated.token_ids)
    # turn 1 generated both; turns 2 and 3 only the one still running
    assert backend.calls == 3 and len(backend.prompts) == 4


def test_env_steps_run_concurrently(tokenizer) -> None:
    backend = ScriptedBackend(tokenizer, lambda prompt, i: say_index(prompt, i, tokenizer))
    started = time.monotonic()
    groups = rollout(backend, lambda: TasksEnv(sleep_s=0.3), list(range(8)))
    elapsed = time.monotonic() - started
    assert elapsed < 1.5  # 8 sequential steps would take 2.4 s
    assert [g.trajectories[0].reward for g in groups] == [1.0] * 8
    assert all(g.trajectories[0].termination_reason == "answered" for g in groups)


def test_training_step_reaches_every_env_reset(tokenizer) -> None:
    """Envs with schedules (ZeroSearch's noise) read the step from their reset options;
    outside training (evaluation) no step is given."""
    seen: list[dict] = []

    def make_env():
        env = make("arithmetic", num_tasks=4)
        reset = env.reset

        def recording_reset(*, seed=None, options=None):
            seen.append(dict(options or {}))
            return reset(seed=seed, options=options)

        env.reset = recording_reset
        return env

    backend = ScriptedBackend(tokenizer, ["<answer>0</answer>"])
    rollout(backend, make_env, [0, 3], group_size=2, config=RolloutConfig(max_new_tokens=16), training_step=7)
    assert [(o["task_index"], o["training_step"]) for o in seen] == [(0, 7), (0, 7), (3, 7), (3, 7)]
    seen.clear()
    rollout(backend, make_env, [1], config=RolloutConfig(max_new_tokens=16))
    assert seen == [{"task_index": 1}]
