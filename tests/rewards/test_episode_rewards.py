"""Episode-level reward terms (format, tool costs, R1-Searcher's two stages) by hand values,
and the ``reward`` config section through the trainer's shaped rewards."""

from __future__ import annotations

import pytest

from agentic_rl.config import ConfigError, RewardConfig, TrainConfig, build
from agentic_rl.rewards.episode import format_ok, retrieval_calls, tool_cost, two_stage_reward
from agentic_rl.training.scoring import shaped_rewards
from agentic_rl.types import ToolResult, Trajectory, Turn


def episode(
    reward: float,
    *calls: tuple[str, bool, bool],
    answer: str | None = "x",
    reason: str = "answered",
    info: dict | None = None,
) -> Trajectory:
    """A trajectory whose one turn made ``calls`` ((name, ok, malformed) each)."""
    results = [ToolResult(name=name, content="", ok=ok, malformed=malformed) for name, ok, malformed in calls]
    return Trajectory(
        task_id="t",
        group_id="g",
        turns=[Turn(assistant_text="", tool_results=results)],
        reward=reward,
        answer=answer,
        termination_reason=reason,
        info=dict(info or {}),
    )


def test_format_ok_uses_the_envs_verdict_else_answered_without_malformed_calls():
    assert format_ok(episode(0.0, ("search", True, False)))
    assert not format_ok(episode(0.0, ("search", False, True)))  # a malformed call
    assert not format_ok(episode(0.0, answer=None))  # no answer read
    assert not format_ok(episode(0.0, reason="max_turns"))
    assert not format_ok(episode(1.0, info={"format_ok": False}))  # the env said no
    assert format_ok(
        episode(0.0, answer=None, reason="max_turns", info={"format_ok": True})
    )  # e.g. a text game's valid moves


def test_tool_cost_per_call_by_name_with_a_default():
    trajectory = episode(
        0.0, ("search", True, False), ("search", False, False), ("python", True, False), ("invalid_call", False, True)
    )
    assert tool_cost(trajectory, {}) == 0.0
    assert tool_cost(trajectory, {"search": 0.1}) == pytest.approx(0.2)
    assert tool_cost(trajectory, {"search": 0.1, "*": 0.05}) == pytest.approx(
        0.3
    )  # python and the malformed call at the default
    assert retrieval_calls(trajectory, "search") == 1  # only the call that ran


def test_two_stage_switches_at_the_configured_step():
    kwargs = dict(switch_step=3, retrieval_reward=0.5, format_reward=0.5, format_penalty=2.0)
    assert two_stage_reward(0.8, step=0, formatted=True, retrieved=True, **kwargs) == 1.0
    assert two_stage_reward(0.8, step=2, formatted=True, retrieved=False, **kwargs) == 0.5
    assert two_stage_reward(0.0, step=2, formatted=False, retrieved=False, **kwargs) == 0.0
    assert two_stage_reward(0.8, step=3, formatted=True, retrieved=False, **kwargs) == 0.8
    assert two_stage_reward(0.8, step=3, formatted=False, retrieved=True, **kwargs) == pytest.approx(-1.2)


def test_shaped_rewards_apply_the_reward_section():
    good = episode(1.0, ("search", True, False), ("search", True, False))
    lazy = episode(0.0)  # answered without searching
    broken = episode(0.6, ("search", False, True), answer=None, reason="max_turns")
    batch = [good, lazy, broken]
    assert shaped_rewards(batch, max_total_tokens=512).tolist() == pytest.approx([1.0, 0.0, 0.6])
    reward = RewardConfig(format_weight=0.2, tool_costs={"search": 0.05})  # no overlong shaping
    assert reward.overlong_buffer == 0
    assert shaped_rewards(batch, max_total_tokens=512, reward=reward).tolist() == pytest.approx([1.1, 0.2, 0.6 - 0.05])
    staged = RewardConfig(two_stage={"switch_step": 2})
    assert shaped_rewards(batch, max_total_tokens=512, reward=staged, step=1).tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert shaped_rewards(batch, max_total_tokens=512, reward=staged, step=2).tolist() == pytest.approx(
        [1.0, 0.0, 0.6 - 2.0]
    )


def test_reward_section_in_the_training_config():
    config = build(
        TrainConfig,
        {"reward": {"format_weight": 0.1, "tool_costs": {"search": 0.05}, "two_stage": {"switch_step": 10}}},
    )
    assert config.reward.tool_costs == {"search": 0.05} and config.reward.two_stage.switch_step == 10
    # off by default; the default preset (grpo-tcr) adds only its overlong shaping
    assert build(TrainConfig, {"algorithm": {"preset": "grpo"}}).reward == RewardConfig()
    assert TrainConfig().reward == RewardConfig(overlong_buffer=64)
    with pytest.raises(ConfigError, match="reward.two_stage.switch_step"):
        build(TrainConfig, {"reward": {"two_stage": {"switch_step": -1}}})
    with pytest.raises(ConfigError, match="reward.tool_costs: the value of .search. must be a finite number"):
        build(TrainConfig, {"reward": {"tool_costs": {"search": float("inf")}}})
