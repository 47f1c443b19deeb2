"""``check_env`` accepts the built-in env and rejects broken ones with a clear message."""

from __future__ import annotations

import random

import pytest

from agentic_rl.envs import EnvCheckError, check_env, make


class GoodEnv:
    """A minimal correct env: one question, any reply ends the episode."""

    num_tasks = 3

    def reset(self, *, seed=None, options=None):
        index = random.Random(seed).randrange(self.num_tasks)
        return [{"role": "system", "content": "Answer."}, {"role": "user", "content": f"Question {index}"}], {
            "task_id": str(index)
        }

    def step(self, assistant_message):
        return [], 1.0, True, False, {}


class NonDeterministicReset(GoodEnv):
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": f"Question {random.random()}"}], {}


class ResetEndsWithAssistant(GoodEnv):
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}], {}


class EmptyReset(GoodEnv):
    def reset(self, *, seed=None, options=None):
        return [], {}


class ResetWithoutInfo(GoodEnv):
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": "Hi"}]


class ResetBadMessage(GoodEnv):
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": None}], {}


class FourTupleStep(GoodEnv):
    def step(self, assistant_message):  # the old Gym API: done instead of terminated/truncated
        return [], 1.0, True, {}


class IntTerminated(GoodEnv):
    def step(self, assistant_message):
        return [], 1.0, 1, False, {}


class NoneTruncated(GoodEnv):
    def step(self, assistant_message):
        return [], 1.0, True, None, {}


class NaNReward(GoodEnv):
    def step(self, assistant_message):
        return [], float("nan"), True, False, {}


class InfReward(GoodEnv):
    def step(self, assistant_message):
        return [], float("-inf"), True, False, {}


class BoolReward(GoodEnv):
    def step(self, assistant_message):
        return [], True, True, False, {}


class StringObservation(GoodEnv):
    def step(self, assistant_message):
        return "a tool result", 0.0, False, False, {}


class StepInfoNotDict(GoodEnv):
    def step(self, assistant_message):
        return [], 0.0, True, False, None


class MissingNumTasks:
    def reset(self, *, seed=None, options=None):
        return [{"role": "user", "content": "Hi"}], {}

    def step(self, assistant_message):
        return [], 0.0, True, False, {}


class ZeroTasks(GoodEnv):
    num_tasks = 0


def test_arithmetic_passes() -> None:
    check_env(make("arithmetic"))
    check_env(make("arithmetic", tools=[], few_shot=2), seed=7)
    check_env(make("arithmetic", split="test", few_shot=1, digits=2))


def test_good_env_passes() -> None:
    check_env(GoodEnv())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (NonDeterministicReset(), r"reset\(seed=s\) must be deterministic"),
        (ResetEndsWithAssistant(), r"must end with a user message"),
        (EmptyReset(), r"must end with a user message"),
        (ResetWithoutInfo(), r"reset\(\) must return \(messages, info\)"),
        (ResetBadMessage(), r"reset\(\) messages\[0\]: expected a dict with str 'role' and 'content'"),
        (FourTupleStep(), r"step\(\) must return \(observations, reward, terminated, truncated, info\)"),
        (IntTerminated(), r"terminated and truncated must both be bools"),
        (NoneTruncated(), r"terminated and truncated must both be bools"),
        (NaNReward(), r"reward must be a finite number, got nan"),
        (InfReward(), r"reward must be a finite number, got -inf"),
        (BoolReward(), r"reward must be a finite number, got True"),
        (StringObservation(), r"step\(\) observations: expected a list of messages, got str"),
        (StepInfoNotDict(), r"step\(\) info must be a dict"),
        (MissingNumTasks(), r"num_tasks must be a positive int"),
        (ZeroTasks(), r"num_tasks must be a positive int"),
    ],
    ids=lambda value: type(value).__name__ if not isinstance(value, str) else "",
)
def test_broken_env_fails_clearly(env, message: str) -> None:
    with pytest.raises(EnvCheckError, match=message):
        check_env(env)


def test_env_check_error_is_an_assertion_error() -> None:
    # so that check_env can sit inside a plain test and read as a failed assertion
    with pytest.raises(AssertionError):
        check_env(NaNReward())
