import math

import pytest
import torch

from agentic_rl.algorithms import (
    AGGREGATIONS,
    POLICY_LOSSES,
    PolicyLossOutput,
    aggregate,
    compute_policy_loss,
    masked_mean,
    policy_loss,
    register_policy_loss,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])


def test_aggregation_hand_values():
    # masked sums: row0 = 3 (2 tokens), row1 = 26 (4 tokens)
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx(29 / 6)
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx((1.5 + 6.5) / 2)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx(29 / 2)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx(29 / (2 * 4))
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", norm_length=10).item() == pytest.approx(29 / 20)


def _loop_aggregate(loss, mask, mode):
    B, T = loss.shape
    rows = [[(loss[b, t].item(), mask[b, t].item()) for t in range(T)] for b in range(B)]
    if mode == "token-mean":
        return sum(x * m for row in rows for x, m in row) / sum(m for row in rows for _, m in row)
    if mode == "seq-mean-token-mean":
        return sum(sum(x * m for x, m in row) / max(sum(m for _, m in row), 1) for row in rows) / B
    total = sum(x * m for row in rows for x, m in row)
    return total / B if mode == "seq-mean-token-sum" else total / (B * T)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_aggregation_matches_loop(mode):
    gen = torch.Generator().manual_seed(1)
    loss = torch.randn(5, 7, generator=gen)
    mask = (torch.rand(5, 7, generator=gen) > 0.4).float()
    mask[2] = 0  # a row with no sampled token
    assert aggregate(loss, mask, mode).item() == pytest.approx(_loop_aggregate(loss, mask, mode), rel=1e-5)


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_micro_batches_add_up_to_mini_batch(mode):
    gen = torch.Generator().manual_seed(2)
    loss = torch.randn(6, 5, generator=gen)
    mask = (torch.rand(6, 5, generator=gen) > 0.3).float()
    whole = aggregate(loss, mask, mode)
    norms = {"num_tokens": float(mask.sum()), "num_sequences": 6.0, "norm_length": 5.0}
    parts = sum(aggregate(loss[s], mask[s], mode, **norms) for s in (slice(0, 2), slice(2, 6)))
    assert torch.allclose(parts, whole, atol=1e-6)


def test_masked_positions_ignored_even_if_nan():
    loss = LOSS.clone()
    loss[0, 3] = float("nan")
    for mode in AGGREGATIONS:
        assert torch.isfinite(aggregate(loss, MASK, mode))


def test_unknown_aggregation():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "bogus")


def test_masked_mean():
    assert masked_mean(LOSS, MASK).item() == pytest.approx(29 / 6)
    assert torch.allclose(masked_mean(LOSS, MASK, dim=-1), torch.tensor([1.5, 6.5]))
    assert masked_mean(LOSS, torch.zeros_like(MASK)).item() == 0.0


def _one_token(ratio, advantage, **kwargs):
    old = torch.zeros(1, 1)
    new = torch.full((1, 1), math.log(ratio))
    return policy_loss(new, old, torch.full((1, 1), float(advantage)), torch.ones(1, 1), **kwargs)


@pytest.mark.parametrize(
    "ratio,advantage,expected",
    [
        (1.1, 1.0, -1.1),  # inside the range: plain surrogate
        (1.5, 1.0, -1.2),  # A > 0, ratio above 1 + clip_high: clipped
        (0.5, 1.0, -0.5),  # A > 0, ratio below 1 - clip_low: pessimistic unclipped
        (0.9, -1.0, 0.9),  # inside
        (0.5, -1.0, 0.8),  # A < 0, ratio below 1 - clip_low: clipped
        (1.5, -1.0, 1.5),  # A < 0, ratio above the range: unclipped (no dual clip)
        (5.0, -2.0, 10.0),
    ],
)
def test_clipped_surrogate_hand_values(ratio, advantage, expected):
    assert _one_token(ratio, advantage).loss.item() == pytest.approx(expected, rel=1e-5)


def test_clip_higher_is_asymmetric():
    assert _one_token(1.5, 1.0, clip_high=0.28).loss.item() == pytest.approx(-1.28, rel=1e-5)
    assert _one_token(0.5, -1.0, clip_low=0.1, clip_high=0.28).loss.item() == pytest.approx(0.9, rel=1e-5)
    assert _one_token(1.25, 1.0, clip_high=0.28).loss.item() == pytest.approx(-1.25, rel=1e-5)


def test_dual_clip_bounds_negative_advantages():
    assert _one_token(5.0, -2.0, clip_ratio_c=3.0).loss.item() == pytest.approx(6.0, rel=1e-5)
    assert _one_token(2.0, -2.0, clip_ratio_c=3.0).loss.item() == pytest.approx(4.0, rel=1e-5)
    assert _one_token(5.0, 2.0, clip_ratio_c=3.0).loss.item() == pytest.approx(-2.4, rel=1e-5)
    assert _one_token(5.0, -2.0, clip_ratio_c=3.0).metrics["clip_frac_dual"] == 1.0


def test_clip_fractions_and_metrics():
    ratios = torch.tensor([[0.5, 0.5, 1.5, 1.5, 1.0, 4.0]])
    advantages = torch.tensor([[-1.0, 1.0, 1.0, -1.0, 1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 0.0]])  # the last token is not the policy's
    out = policy_loss(ratios.log(), torch.zeros_like(ratios), advantages, mask, clip_ratio_c=3.0)
    m = out.metrics
    assert m["clip_frac_low"] == pytest.approx(1 / 5)
    assert m["clip_frac_high"] == pytest.approx(1 / 5)
    assert m["clip_frac_dual"] == 0.0
    assert m["ratio_mean"] == pytest.approx(5.0 / 5)
    assert m["ratio_max"] == pytest.approx(1.5)
    k3 = [r - math.log(r) - 1 for r in (0.5, 0.5, 1.5, 1.5, 1.0)]
    assert m["approx_kl"] == pytest.approx(sum(k3) / 5, rel=1e-5)
    assert all(isinstance(v, float) for v in m.values())


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_gradient_at_ratio_one_equals_policy_gradient(mode):
    gen = torch.Generator().manual_seed(3)
    base = torch.randn(3, 5, generator=gen) - 2.0
    advantages = torch.randn(3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]], dtype=torch.float32)

    logprobs = base.clone().requires_grad_(True)
    policy_loss(
        logprobs, base.clone(), advantages, mask, clip_high=0.28, clip_ratio_c=3.0, aggregation=mode
    ).loss.backward()

    reference = base.clone().requires_grad_(True)
    aggregate(-(advantages * reference), mask, mode).backward()

    assert torch.allclose(logprobs.grad, reference.grad, atol=1e-6)
    assert torch.all(logprobs.grad[mask == 0] == 0)
    assert logprobs.grad[mask == 1].abs().sum() > 0


def test_policy_loss_registry_runs_the_registered_function() -> None:
    gen = torch.Generator().manual_seed(5)
    old = torch.randn(2, 4, generator=gen)
    new, advantages = old + 0.3 * torch.randn(2, 4, generator=gen), torch.randn(2, 4, generator=gen)
    params = dict(
        clip_low=0.2,
        clip_high=0.28,
        clip_ratio_c=3.0,
        aggregation="seq-mean-token-mean",
        num_tokens=6.0,
        num_sequences=2.0,
        norm_length=4.0,
    )
    assert POLICY_LOSSES["ppo-clip"] is policy_loss
    via_registry = compute_policy_loss("ppo-clip", new, old, advantages, MASK, **params)
    direct = policy_loss(new, old, advantages, MASK, **params)
    assert torch.equal(via_registry.loss, direct.loss) and via_registry.metrics == direct.metrics
    assert POLICY_LOSSES.params("ppo-clip") == (
        "clip_low",
        "clip_high",
        "clip_ratio_c",
        "aggregation",
        "num_tokens",
        "num_sequences",
        "norm_length",
    )


def test_policy_loss_registry_errors_are_one_line() -> None:
    ones = torch.ones(1, 2)
    with pytest.raises(
        KeyError, match=r"unknown policy loss 'ppo-clp' \(did you mean 'ppo-clip'\?\); known: .*ppo-clip"
    ):
        compute_policy_loss("ppo-clp", ones, ones, ones, ones)
    with pytest.raises(
        TypeError,
        match=r"policy loss 'ppo-clip' takes no parameter 'clip_hi'; its parameters: clip_low, clip_high, clip_ratio_c, aggregation",
    ):
        compute_policy_loss("ppo-clip", ones, ones, ones, ones, clip_hi=0.3)
    with pytest.raises(ValueError, match="already registered"):
        register_policy_loss("ppo-clip")(policy_loss)


def test_register_a_policy_loss() -> None:
    name = "_test_vanilla_pg"
    try:

        @register_policy_loss(name)
        def vanilla(
            logprobs,
            old_logprobs,
            advantages,
            mask,
            *,
            aggregation="token-mean",
            num_tokens=None,
            num_sequences=None,
            norm_length=None,
        ):
            loss = aggregate(
                -advantages * logprobs,
                mask,
                aggregation,
                num_tokens=num_tokens,
                num_sequences=num_sequences,
                norm_length=norm_length,
            )
            return PolicyLossOutput(loss=loss)

        logprobs = torch.full((2, 4), -1.0)
        out = compute_policy_loss(name, logprobs, logprobs, torch.ones(2, 4), MASK)
        assert out.loss.item() == pytest.approx(1.0)
    finally:
        POLICY_LOSSES.pop(name, None)


def test_grpo_tcr_clip_bounds_act_after_a_first_mini_batch_update() -> None:
    """Two mini-batches of one rollout batch, as the GRPO-TCR recipes run: the first update
    sees ratio 1 (nothing clipped); it moves the policy, so on the second mini-batch the
    ratios against the pre-update log-probs leave [1 - 0.2, 1 + 0.315] and both bounds act
    (and the clipped tokens get no gradient)."""
    from agentic_rl.config import AlgorithmConfig

    config = AlgorithmConfig(preset="grpo-tcr")
    params = {**config.policy_loss.params, "aggregation": config.aggregation}
    assert params == {"clip_low": 0.2, "clip_high": 0.315, "clip_ratio_c": None, "aggregation": "token-mean"}
    # A categorical policy per position (3 positions, 4 tokens), uniform at first. Two good
    # answers (tokens 0, 1, 2; A = +1) and two bad ones (token 3 throughout; A = -1).
    logits = torch.zeros(3, 4, requires_grad=True)
    tokens = torch.tensor([[0, 1, 2], [0, 1, 2], [3, 3, 3], [3, 3, 3]])
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])[:, None].expand(4, 3)
    mask = torch.ones(4, 3)

    def logprobs_of(rows: list[int]) -> torch.Tensor:
        return torch.log_softmax(logits, -1).gather(1, tokens[rows].T).T

    old = logprobs_of([0, 1, 2, 3]).detach()
    minis = [[0, 1, 2, 3][i::2] for i in range(2)]  # the trainer's split: one good and one bad answer each
    assert minis == [[0, 2], [1, 3]]
    first = policy_loss(logprobs_of(minis[0]), old[minis[0]], advantages[minis[0]], mask[minis[0]], **params)
    assert (first.metrics["clip_frac_low"], first.metrics["clip_frac_high"], first.metrics["ratio_mean"]) == (
        0.0,
        0.0,
        1.0,
    )
    first.loss.backward()
    with torch.no_grad():
        logits -= 6.0 * logits.grad  # SGD: logits +1 for the good token, -1 for token 3
        logits.grad = None
    second = policy_loss(logprobs_of(minis[1]), old[minis[1]], advantages[minis[1]], mask[minis[1]], **params)
    good = math.e / (math.e + math.exp(-1) + 2) / 0.25  # the good tokens' ratio, 2.14
    bad = math.exp(-1) / (math.e + math.exp(-1) + 2) / 0.25  # token 3's, 0.29
    assert good > 1.315 and bad < 0.8
    assert second.metrics["clip_frac_high"] == pytest.approx(0.5) and second.metrics["clip_frac_low"] == pytest.approx(
        0.5
    )
    assert second.metrics["ratio_max"] == pytest.approx(good, rel=1e-5)
    assert second.loss.item() == pytest.approx((3 * -1.315 + 3 * 0.8) / 6, rel=1e-6)
    second.loss.backward()
    assert logits.grad.abs().max() == 0.0
