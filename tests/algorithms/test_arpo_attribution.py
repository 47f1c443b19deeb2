"""ARPO's pure functions: branch probability, normalized entropy, hard attribution on a
hand-built branched group (hand values and a plain loop over token identity)."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algorithms.arpo import branch_probability, common_prefix_lengths, hard_attribution, normalized_entropy


def test_branch_probability_values() -> None:
    assert branch_probability(0.0) == pytest.approx(0.5)
    assert branch_probability(0.5) == pytest.approx(0.6)  # 0.5 + 0.2 * 0.5
    assert branch_probability(-1.0) == pytest.approx(0.3)
    assert branch_probability(1.0, base_probability=0.9, entropy_weight=0.2) == 1.0  # clipped above
    assert branch_probability(-1.0, base_probability=0.1, entropy_weight=0.2) == 0.0  # clipped below
    assert branch_probability(0.25, base_probability=0.0, entropy_weight=1.0) == pytest.approx(0.25)


def test_normalized_entropy_uses_first_k_tokens_and_log_vocab() -> None:
    log_v = math.log(100)
    assert normalized_entropy([log_v, 0.0, 9.0], k=2, vocab_size=100) == pytest.approx(0.5)
    assert normalized_entropy([log_v], k=20, vocab_size=100) == pytest.approx(1.0)
    assert normalized_entropy([], k=5, vocab_size=100) is None
    with pytest.raises(ValueError, match="vocab_size"):
        normalized_entropy([1.0], k=1, vocab_size=1)


# A branched group of one task (tokens after a 2-token prompt; mask 0 on the prompt and
# on observation tokens 90..99):
#   t0 (global):         p p  1 2 90 3 4
#   t1 branch of t0 @5:  p p  1 2 90 5 6 7
#   t2 branch of t1 @6:  p p  1 2 90 5 8
#   t3 (global):         p p  11 12
TOKENS = [
    [0, 0, 1, 2, 90, 3, 4],
    [0, 0, 1, 2, 90, 5, 6, 7],
    [0, 0, 1, 2, 90, 5, 8],
    [0, 0, 11, 12],
]
MASKS = [[0, 0, 1, 1, 0, 1, 1], [0, 0, 1, 1, 0, 1, 1, 1], [0, 0, 1, 1, 0, 1, 1], [0, 0, 1, 1]]
IDS = ["t0", "t1", "t2", "t3"]
LINEAGES = [[], [("t0", 5)], [("t1", 6), ("t0", 5)], []]
SCALAR = torch.tensor([1.0, -1.0, 2.0, 0.5])


def padded(rows: list[list[float]], width: int = 8) -> torch.Tensor:
    return torch.tensor([row + [0.0] * (width - len(row)) for row in rows])


def test_common_prefix_lengths_from_lineages() -> None:
    shared = common_prefix_lengths(LINEAGES, IDS, [len(t) for t in TOKENS])
    expected = torch.tensor(
        [
            [7, 5, 5, 0],
            [5, 8, 6, 0],
            [5, 6, 7, 0],
            [0, 0, 0, 4],
        ]
    )
    assert torch.equal(shared, expected)


def test_hard_attribution_hand_values() -> None:
    mask = padded(MASKS)
    advantages = SCALAR[:, None] * mask  # GRPO-style: one scalar per trajectory on its sampled tokens
    shared = common_prefix_lengths(LINEAGES, IDS, [len(t) for t in TOKENS])
    out = hard_attribution(advantages, shared)
    # Tokens 2, 3 shared by t0, t1, t2: mean(1, -1, 2) = 2/3; token 5 of t1/t2 shared by
    # those two: mean(-1, 2) = 0.5; the rest are their own.
    third = 2.0 / 3.0
    expected = padded(
        [
            [0, 0, third, third, 0, 1.0, 1.0],
            [0, 0, third, third, 0, 0.5, -1.0, -1.0],
            [0, 0, third, third, 0, 0.5, 2.0],
            [0, 0, 0.5, 0.5],
        ]
    )
    assert torch.allclose(out, expected)


def test_hard_attribution_matches_a_plain_loop_over_token_identity() -> None:
    torch.manual_seed(0)
    mask = padded(MASKS)
    advantages = torch.randn(4, 8) * mask  # token-level advantages work the same way
    shared = common_prefix_lengths(LINEAGES, IDS, [len(t) for t in TOKENS])
    out = hard_attribution(advantages, shared)
    # Plain loop: token t of b is shared with every trajectory of the same tree whose
    # first t+1 tokens are identical (in this group, the branches' continuations differ).
    tree = {0: "a", 1: "a", 2: "a", 3: "b"}
    for b, tokens in enumerate(TOKENS):
        for t in range(len(tokens)):
            sharers = [a for a in range(4) if tree[a] == tree[b] and TOKENS[a][: t + 1] == tokens[: t + 1]]
            expected = sum(float(advantages[a, t]) for a in sharers) / len(sharers)
            assert float(out[b, t]) == pytest.approx(expected, abs=1e-6), (b, t)


def test_hard_attribution_without_branches_is_identity() -> None:
    advantages = torch.randn(3, 5)
    diagonal = torch.diag(torch.tensor([5, 4, 3]))
    out = hard_attribution(advantages, diagonal)
    assert torch.equal(out, advantages)


def test_hard_attribution_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match="common_prefix"):
        hard_attribution(torch.zeros(2, 4), torch.zeros(3, 3, dtype=torch.long))
