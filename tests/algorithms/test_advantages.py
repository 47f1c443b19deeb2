import math

import pytest
import torch

from agentic_rl.algorithms import (
    ADVANTAGES,
    AdvantageInputs,
    compute_advantages,
    group_stats,
    grpo,
    register_advantage,
    rloo,
    zero_std_group_fraction,
)


def _inputs(rewards, groups, T=3, mask=None):
    rewards = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(len(rewards), T) if mask is None else mask
    return AdvantageInputs(rewards=rewards, response_mask=mask, group_index=torch.tensor(groups))


def _loop_reference(rewards, groups, kind, normalize_by_std=True, epsilon=1e-6):
    out = []
    for _i, (r, g) in enumerate(zip(rewards, groups)):
        members = [rewards[j] for j in range(len(rewards)) if groups[j] == g]
        n = len(members)
        if n == 1:
            out.append(0.0)
            continue
        mean = sum(members) / n
        if kind == "grpo":
            std = math.sqrt(sum((x - mean) ** 2 for x in members) / (n - 1))
            out.append((r - mean) / (std + epsilon) if normalize_by_std else r - mean)
        else:
            out.append(r - (sum(members) - r) / (n - 1))
    return out


def test_grpo_hand_values_one_group():
    adv = grpo(_inputs([1, 0, 1, 1], [0, 0, 0, 0]))
    # mean 0.75, unbiased std 0.5 (= torch.std), deviations [0.25, -0.75, 0.25, 0.25]
    assert torch.tensor([1.0, 0.0, 1.0, 1.0]).std().item() == pytest.approx(0.5)
    expected = torch.tensor([0.25, -0.75, 0.25, 0.25]) / (0.5 + 1e-6)
    assert torch.allclose(adv, expected[:, None].expand(4, 3))
    assert torch.allclose(adv[:, 0], torch.tensor([0.5, -1.5, 0.5, 0.5]), atol=1e-5)


def test_dr_grpo_is_mean_centered_only():
    adv = compute_advantages("grpo", _inputs([1, 0, 1, 1], [0, 0, 0, 0]), normalize_by_std=False)
    assert torch.allclose(adv[:, 0], torch.tensor([0.25, -0.75, 0.25, 0.25]))


def test_rloo_hand_values():
    adv = rloo(_inputs([1, 0, 1, 1], [7, 7, 7, 7]))
    # leave-one-out means: 2/3, 1, 2/3, 2/3
    assert torch.allclose(adv[:, 0], torch.tensor([1 / 3, -1.0, 1 / 3, 1 / 3]))


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_size_one_group_gets_zero(name):
    adv = compute_advantages(name, _inputs([5.0, 1.0, 0.0], [3, 9, 9]))
    assert torch.all(adv[0] == 0)
    assert torch.all(adv[1] != 0)


@pytest.mark.parametrize("name,normalize", [("grpo", True), ("grpo", False), ("rloo", True)])
def test_matches_loop_reference_on_random_groups(name, normalize):
    gen = torch.Generator().manual_seed(0)
    groups = [4, 4, 4, 1, 1, 9, 9, 9, 9, 9, 2, 0, 0, 0, 4]  # sizes 4, 2, 5, 1, 3, unordered
    rewards = torch.rand(len(groups), generator=gen).tolist()
    mask = (torch.rand(len(groups), 6, generator=gen) > 0.3).float()
    adv = compute_advantages(
        name, _inputs(rewards, groups, mask=mask), **ADVANTAGES.params_for(name, {"normalize_by_std": normalize})
    )
    expected = torch.tensor(_loop_reference(rewards, groups, name, normalize))
    assert adv.shape == (len(groups), 6)
    assert torch.allclose(adv, expected[:, None] * mask, atol=1e-5)


def test_mask_respected_and_bool_mask():
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 0]], dtype=torch.bool)
    adv = grpo(_inputs([1, 0], [0, 0], mask=mask))
    assert torch.all(adv[~mask] == 0)
    assert torch.all(adv[0, :2] > 0) and torch.all(adv[1, 1:3] < 0)


def test_equal_rewards_give_zero_advantage():
    adv = grpo(_inputs([1, 1, 1], [0, 0, 0]))
    assert torch.all(adv == 0)


@pytest.mark.parametrize("value", [0.1, 0.35, 0.6, 1.1])
def test_equal_rewards_inexact_in_float_give_exactly_zero(value):
    """Eight rewards of 0.6 sum to a float32 mean of 0.59999994; the old sum-then-divide
    gave that group GRPO advantages of 0.056. Every group estimator gives exactly 0, the
    std is exactly 0, and DAPO's zero-variance filter drops the group."""
    from agentic_rl.algorithms import drop_zero_variance

    groups = [0] * 8 + [1] * 2
    inputs = _inputs([value] * 8 + [0.0, 1.0], groups)
    for name in ("grpo", "rloo", "reinforce++-baseline"):
        adv = compute_advantages(name, inputs)
        assert torch.count_nonzero(adv[:8]) == 0, name
        assert torch.count_nonzero(adv[8:]) == 6, name
    mean, std, _ = group_stats(inputs.rewards, inputs.group_index)
    assert torch.equal(mean[:8], inputs.rewards[:8]) and torch.count_nonzero(std[:8]) == 0
    assert drop_zero_variance(inputs.rewards, inputs.group_index).tolist() == [False] * 8 + [True] * 2


def test_group_stats_and_zero_std_fraction():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    mean, std, sizes = group_stats(rewards, groups)
    assert torch.allclose(mean, torch.tensor([0.75] * 4 + [2.0, 2.0, 3.0]))
    assert torch.allclose(std, torch.tensor([0.5] * 4 + [0.0, 0.0, 0.0]))
    assert sizes.tolist() == [4, 4, 4, 4, 2, 2, 1]
    # group 1 (all 2.0) and group 2 (size 1) have zero spread
    assert zero_std_group_fraction(rewards, groups) == pytest.approx(2 / 3)
    assert zero_std_group_fraction(torch.tensor([1, 0]), torch.tensor([0, 0])) == 0.0


def test_compute_advantages_rejects_unknown_params_and_names():
    inputs = _inputs([1, 0], [0, 0])
    # a parameter the estimator does not take is an error, never silently dropped
    with pytest.raises(
        TypeError, match=r"advantage estimator 'rloo' takes no parameter 'epsilon'; its parameters: none"
    ):
        compute_advantages("rloo", inputs, epsilon=1.0)
    with pytest.raises(
        TypeError, match=r"'grpo' takes no parameter 'normalise_by_std'; its parameters: epsilon, normalize_by_std"
    ):
        compute_advantages("grpo", inputs, normalise_by_std=False)
    # one flat set of knobs still drives every estimator, through params_for
    knobs = {"epsilon": 1.0, "normalize_by_std": False, "gamma": 0.5}
    assert ADVANTAGES.params_for("rloo", knobs) == {}
    assert ADVANTAGES.params_for("grpo", knobs) == {"epsilon": 1.0, "normalize_by_std": False}
    assert torch.allclose(compute_advantages("rloo", inputs, **ADVANTAGES.params_for("rloo", knobs)), rloo(inputs))
    with pytest.raises(KeyError, match=r"unknown advantage estimator 'grpoo' \(did you mean 'grpo'\?\); known: .*rloo"):
        compute_advantages("grpoo", inputs)
    with pytest.raises(KeyError, match="grpo"):
        compute_advantages("nope", inputs)


def test_register_advantage_and_duplicate():
    name = "_test_constant"
    try:

        @register_advantage(name)
        def constant(inputs, *, value=2.0, **extra):
            return torch.full_like(inputs.response_mask, value)

        out = compute_advantages(name, _inputs([1, 0], [0, 0]), value=3.0, unrelated=1)
        assert torch.all(out == 3.0)
        with pytest.raises(ValueError):
            register_advantage(name)(constant)
    finally:
        ADVANTAGES.pop(name, None)
