"""Turn-level credit (per-turn returns, MT-GRPO, GiGPO) and group filters: hand values and plain loops."""

import math
import random

import pytest
import torch

from agentic_rl.algorithms import (
    AdvantageInputs,
    compute_advantages,
    discounted_turn_returns,
    drop_zero_variance,
    filter_groups,
    keep_top_std,
    step_rewards,
)

S = 1 / math.sqrt(2)  # the GRPO advantage of a two-member group with different values


def _loop_normalize(values, labels, eps=1e-6):
    out = []
    for v, g in zip(values, labels):
        members = [values[j] for j in range(len(values)) if labels[j] == g]
        if len(members) == 1:
            out.append(0.0)
            continue
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - 1))
        out.append((v - mean) / (std + eps))
    return out


def test_step_rewards_and_discounted_turn_returns_hand_values():
    turn_mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    turn_rewards = torch.tensor([[0.2, 0.0, 0.1], [0.3, 9.0, 9.0]])  # values past the last turn are ignored
    rewards = step_rewards(torch.tensor([1.0, -1.0]), turn_rewards, turn_mask)
    assert torch.allclose(rewards, torch.tensor([[0.2, 0.0, 1.1], [-0.7, 0.0, 0.0]]))
    returns = discounted_turn_returns(rewards, turn_mask, gamma=0.5)
    assert torch.allclose(returns, torch.tensor([[0.2 + 0.5 * 0.55, 0.55, 1.1], [-0.7, 0.0, 0.0]]))


def _turn_inputs(rewards, groups, turn_rewards, first_tool_turn=None, anchors=None, tokens_per_turn=2, observation=1):
    """Build padded token/turn tensors: a prompt token, then per turn `tokens_per_turn`
    sampled tokens followed by `observation` observation tokens."""
    K = max(len(r) for r in turn_rewards)
    T = 1 + K * (tokens_per_turn + observation)
    mask = torch.zeros(len(rewards), T)
    turn_index = torch.full((len(rewards), T), -1)
    for b, turns in enumerate(turn_rewards):
        for k in range(len(turns)):
            start = 1 + k * (tokens_per_turn + observation)
            mask[b, start : start + tokens_per_turn] = 1
            turn_index[b, start : start + tokens_per_turn + observation] = k
    turn_mask = torch.tensor([[1.0] * len(r) + [0.0] * (K - len(r)) for r in turn_rewards])
    padded = torch.tensor([list(r) + [0.0] * (K - len(r)) for r in turn_rewards])
    anchor_tensor = None if anchors is None else torch.tensor([list(a) + [-1] * (K - len(a)) for a in anchors])
    return AdvantageInputs(
        rewards=torch.tensor(rewards),
        response_mask=mask,
        group_index=torch.tensor(groups),
        turn_index=turn_index,
        turn_rewards=padded,
        turn_mask=turn_mask,
        anchor_index=anchor_tensor,
        first_tool_turn=None if first_tool_turn is None else torch.tensor(first_tool_turn),
    )


def test_mt_grpo_hand_values():
    # A: tool call in turn 0 (turn reward .5), answers right in turn 1; B: answers wrong at once.
    inputs = _turn_inputs([1.0, 0.0], [0, 0], [[0.5, 0.0], [0.0]], first_tool_turn=[0, -1])
    adv = compute_advantages("mt-grpo", inputs)
    # A^O = +-S; turn-level R^T = [.5, 0] -> A^T = +-S; A's turn-0 tokens get both, turn-1 tokens A^O only.
    expected = torch.tensor([[0, 2 * S, 2 * S, 0, S, S, 0], [0, -2 * S, -2 * S, 0, 0, 0, 0]])
    assert torch.allclose(adv, expected, atol=1e-5)


def test_gigpo_hand_values():
    inputs = _turn_inputs([1.0, 0.0, 1.0], [0, 0, 0], [[0.0, 0.0], [0.0, 0.0], [0.0]], anchors=[[0, 1], [0, 1], [0]])
    adv = compute_advantages("gigpo", inputs, gamma=0.5)
    # step returns: [.5, 1], [0, 0], [1]; anchor 0 {.5, 0, 1} -> A^S 0, -1, 1; anchor 1 {1, 0} -> +-S
    # episode: rewards [1, 0, 1], mean 2/3, std sqrt(1/3) -> A^E [1/sqrt3, -2/sqrt3, 1/sqrt3]
    e = 1 / math.sqrt(3)
    per_turn = [[e + 0, e + S], [-2 * e - 1, -2 * e - S], [e + 1]]
    for b, turns in enumerate(per_turn):
        for k, value in enumerate(turns):
            start = 1 + 3 * k
            assert adv[b, start : start + 2].tolist() == pytest.approx([value, value], abs=1e-4)
    assert adv[2, 4:].abs().sum() == 0  # no second turn


def _loop_mt_grpo(rewards, groups, turn_rewards, first_tool_turn):
    turn_level = []
    for turns, f in zip(turn_rewards, first_tool_turn):
        boundary = f if f >= 0 else len(turns) - 1
        turn_level.append(sum(turns[: boundary + 1]))
    outcome, turn = _loop_normalize(rewards, groups), _loop_normalize(turn_level, groups)
    out = []
    for b, turns in enumerate(turn_rewards):
        boundary = first_tool_turn[b] if first_tool_turn[b] >= 0 else len(turns) - 1
        out.append([outcome[b] + (turn[b] if k <= boundary else 0.0) for k in range(len(turns))])
    return out


def _loop_gigpo(rewards, groups, turn_rewards, anchors, gamma, weight):
    returns = []
    for b, turns in enumerate(turn_rewards):
        step = list(turns)
        step[-1] += rewards[b]
        row, running = [0.0] * len(step), 0.0
        for k in reversed(range(len(step))):
            running = step[k] + gamma * running
            row[k] = running
        returns.append(row)
    flat_returns = [r for row in returns for r in row]
    flat_anchors = [a for row in anchors for a in row]
    flat_step = _loop_normalize(flat_returns, flat_anchors)
    episode = _loop_normalize(rewards, groups)
    out, i = [], 0
    for b, row in enumerate(returns):
        out.append([episode[b] + weight * flat_step[i + k] for k in range(len(row))])
        i += len(row)
    return out


def _per_turn_of(adv, inputs, b, k):
    tokens = adv[b][(inputs.turn_index[b] == k) & inputs.response_mask[b].bool()]
    assert torch.allclose(tokens, tokens[0].expand_as(tokens))
    return float(tokens[0])


def test_turn_estimators_match_plain_loops_on_random_episodes():
    rng = random.Random(1)
    for _ in range(5):
        B = 8
        groups = [b // 4 for b in range(B)]
        lengths = [rng.randint(1, 3) for _ in range(B)]
        turn_rewards = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(n)] for n in lengths]
        rewards = [float(rng.random() > 0.5) for _ in range(B)]
        first_tool = [rng.choice([-1] + list(range(n))) for n in lengths]
        # anchors: few distinct observations per task group, so anchor groups repeat
        anchors = [[groups[b] * 10 + rng.randint(0, 2) for _ in range(n)] for b, n in enumerate(lengths)]
        inputs = _turn_inputs(rewards, groups, turn_rewards, first_tool_turn=first_tool, anchors=anchors)
        mt = compute_advantages("mt-grpo", inputs)
        gi = compute_advantages("gigpo", inputs, gamma=0.9, step_advantage_weight=0.7)
        mt_loop = _loop_mt_grpo(rewards, groups, turn_rewards, first_tool)
        gi_loop = _loop_gigpo(rewards, groups, turn_rewards, anchors, 0.9, 0.7)
        for b, n in enumerate(lengths):
            for k in range(n):
                assert _per_turn_of(mt, inputs, b, k) == pytest.approx(mt_loop[b][k], abs=1e-4)
                assert _per_turn_of(gi, inputs, b, k) == pytest.approx(gi_loop[b][k], abs=1e-4)
        assert (mt[inputs.response_mask == 0] == 0).all() and (gi[inputs.response_mask == 0] == 0).all()


def test_turn_estimators_need_turn_data():
    inputs = AdvantageInputs(rewards=torch.ones(2), response_mask=torch.ones(2, 3), group_index=torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="turn_index"):
        compute_advantages("gigpo", inputs)


def test_drop_zero_variance_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 5.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert drop_zero_variance(rewards, groups).tolist() == [False, False, True, True, False, False, False]
    assert filter_groups("zero-variance", rewards, groups).tolist() == [False, False, True, True, False, False, False]
    assert filter_groups("none", rewards, groups).all()
    with pytest.raises(
        TypeError, match=r"group filter 'zero-variance' takes no parameter 'keep_fraction'; its parameters: none"
    ):
        filter_groups("zero-variance", rewards, groups, keep_fraction=0.5)
    with pytest.raises(
        TypeError, match=r"group filter 'top-std' takes no parameter 'keep_frac'; its parameters: keep_fraction"
    ):
        filter_groups("top-std", rewards, groups, keep_frac=0.5)
    with pytest.raises(KeyError, match=r"unknown group filter 'top' \(did you mean 'top-std'\?\)"):
        filter_groups("top", rewards, groups)


def test_keep_top_std_groups_hand_and_loop():
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.1, 5.0, 5.0, 0.0, 2.0])
    groups = torch.tensor([3, 3, 1, 1, 2, 2, 0, 0])
    # group stds: 3 -> .707, 1 -> .0707, 2 -> 0, 0 -> 1.414: top half is groups 0 and 3
    assert keep_top_std(rewards, groups, keep_fraction=0.5).tolist() == [
        True,
        True,
        False,
        False,
        False,
        False,
        True,
        True,
    ]
    # ceil(.25 * 4) = 1 group
    assert keep_top_std(rewards, groups, keep_fraction=0.25).tolist() == [False] * 6 + [True, True]
    rng = random.Random(0)
    for _ in range(10):
        labels = [rng.randint(0, 5) for _ in range(20)]
        values = [rng.choice([0.0, 1.0, 2.0]) for _ in range(20)]
        fraction = rng.choice([0.2, 0.5, 1.0])
        stds = {}
        for g in dict.fromkeys(labels):
            members = [v for v, h in zip(values, labels) if h == g]
            mean = sum(members) / len(members)
            stds[g] = math.sqrt(sum((x - mean) ** 2 for x in members) / max(len(members) - 1, 1))
        chosen = sorted(stds, key=lambda g: (-stds[g], labels.index(g)))[: math.ceil(fraction * len(stds))]
        expected = [h in chosen for h in labels]
        assert keep_top_std(torch.tensor(values), torch.tensor(labels), keep_fraction=fraction).tolist() == expected
