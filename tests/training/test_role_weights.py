"""``algorithm.role_weights``: each role's share of the policy loss in episodes with several
roles, hand-computed, against the per-role token-mean written as a plain loop, and the
names checked against the env's roles."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.algorithms import policy_loss
from agentic_rl.config import AlgorithmConfig, ConfigError, TrainConfig, build
from agentic_rl.training.preflight import check_roles
from agentic_rl.training.scoring import role_weights, score
from agentic_rl.types import Trajectory, TrajectoryGroup


def sample(role: str | None, sampled: int, reward: float, group: str) -> Trajectory:
    """A role's sample: a 2-token prompt, then ``sampled`` sampled tokens."""
    tokens = 2 + sampled
    return Trajectory(
        task_id="t",
        group_id=group,
        token_ids=list(range(1, tokens + 1)),
        loss_mask=[0, 0] + [1] * sampled,
        sampler_logprobs=[0.0] * tokens,
        reward=reward,
        info={} if role is None else {"role": role},
    )


def team() -> list[TrajectoryGroup]:
    """A planner group (short replies: 10 tokens) and a solver group (60 tokens), rewards 1 and 0 in each."""
    return [
        TrajectoryGroup("t", "g-planner", [sample("planner", 10, r, "g-planner") for r in (1.0, 0.0)]),
        TrajectoryGroup("t", "g-solver", [sample("solver", 60, r, "g-solver") for r in (1.0, 0.0)]),
    ]


def test_weights_hand_computed() -> None:
    batch = [t for g in team() for t in g.trajectories] + [sample(None, 5, 1.0, "g-none")]
    # balanced, token-mean: counts 20 and 120, mean 70 -> 70/20 and 70/120; the total (140) is unchanged
    weights = role_weights(batch, "balanced", "token-mean")
    assert weights == pytest.approx({"planner": 3.5, "solver": 70 / 120})
    assert 20 * weights["planner"] + 120 * weights["solver"] == pytest.approx(140)
    assert role_weights(batch, "balanced", "seq-mean-token-mean") == {"planner": 1.0, "solver": 1.0}  # 2 rows each
    assert role_weights(batch, {"planner": 2.0}, "token-mean") == {"planner": 2.0, "solver": 1.0}


def test_balanced_token_mean_is_the_mean_of_each_roles_own_token_mean() -> None:
    algorithm = AlgorithmConfig(preset="grpo", aggregation="token-mean", role_weights="balanced")
    scored = score(team(), algorithm, max_total_tokens=1024)
    assert scored.role_weights == pytest.approx({"planner": 3.5, "solver": 70 / 120})
    width = max(len(t.token_ids) for t in scored.trajectories)
    mask = torch.tensor([t.loss_mask + [0] * (width - len(t.loss_mask)) for t in scored.trajectories]).float()
    advantages = torch.tensor([row + [0.0] * (width - len(row)) for row in scored.advantages])
    generator = torch.Generator().manual_seed(0)
    old = torch.randn(mask.shape, generator=generator) * 0.1
    new = old + torch.randn(mask.shape, generator=generator) * 0.1  # ratios off 1: some tokens clip
    loss = policy_loss(new, old, advantages, mask, aggregation="token-mean").loss

    unweighted = score(team(), AlgorithmConfig(preset="grpo", aggregation="token-mean"), max_total_tokens=1024)
    plain = torch.tensor([row + [0.0] * (width - len(row)) for row in unweighted.advantages])
    per_role = []
    for role in ("planner", "solver"):
        rows = [i for i, t in enumerate(scored.trajectories) if t.info["role"] == role]
        per_role.append(policy_loss(new[rows], old[rows], plain[rows], mask[rows], aggregation="token-mean").loss)
    torch.testing.assert_close(loss, sum(per_role) / 2)


def test_named_weights_scale_only_that_roles_advantages() -> None:
    plain = score(team(), AlgorithmConfig(preset="grpo"), max_total_tokens=1024)
    weighted = score(team(), AlgorithmConfig(preset="grpo", role_weights={"planner": 3.0}), max_total_tokens=1024)
    for t, before, after in zip(plain.trajectories, plain.advantages, weighted.advantages, strict=True):
        factor = 3.0 if t.info["role"] == "planner" else 1.0
        assert after == pytest.approx([factor * a for a in before])
    assert plain.role_weights == {} and weighted.role_weights == {"planner": 3.0, "solver": 1.0}


def test_bad_settings_stop_with_one_line() -> None:
    with pytest.raises(ConfigError, match=r"algorithm.role_weights"):
        build(TrainConfig, {"algorithm": {"role_weights": {"planner": -1}}})
    with pytest.raises(ConfigError, match=r"algorithm.role_weights"):
        build(TrainConfig, {"algorithm": {"role_weights": "even"}})
    team_config = build(TrainConfig, {"env": {"name": "arithmetic-team"}, "algorithm": {"role_weights": {"judge": 2}}})
    with pytest.raises(
        ConfigError,
        match=r"^algorithm.role_weights.judge: not a role of env arithmetic-team \(its roles: planner, solver\)$",
    ):
        check_roles(team_config, ("planner", "solver"))
    one = build(TrainConfig, {"algorithm": {"role_weights": "balanced"}})
    with pytest.raises(
        ConfigError, match=r"^algorithm.role_weights: for envs with roles; env arithmetic has one role$"
    ):
        check_roles(one, ())
    check_roles(build(TrainConfig, {"algorithm": {"role_weights": "balanced"}}), ("planner", "solver"))
