"""Tests of agentic_rl.algorithms.correction: the rollout-correction importance weights
(tis, mis, seq-tis, seq-mis, none), the mismatch metrics, and resolve_rollout_correction."""

import math

import pytest
import torch

from agentic_rl.algorithms import (
    AGGREGATIONS,
    ROLLOUT_CORRECTIONS,
    CorrectionOutput,
    aggregate,
    compute_policy_loss,
    mismatch_metrics,
    resolve_rollout_correction,
    rollout_correction,
)

METRIC_KEYS = (
    "rollout_logprob_diff_mean",
    "rollout_logprob_diff_max",
    "rollout_kl_k3",
    "rollout_is_weight_mean",
    "rollout_is_truncated_frac",
    "rollout_is_masked_frac",
)

# ---------------------------------------------------------------------------------------
# A hand-made batch: B = 4 sequences x T = 4 positions, float64 so the checks are tight.
# Log-probs are logs of real probabilities; the ratio r = p_old / p_sampler per token:
#   row 0: r = 0.6/0.2 = 3,  0.6/0.4 = 1.5,  0.2/0.8 = 0.25,  [pad]
#   row 1: r = 0.5/0.5 = 1,  0.9/0.1 = 9,    [pad],           [pad]
#   row 2: r = 0.05/0.5 = 0.1, 0.9/1.0 = 0.9, [pad],           [pad]
#   row 3: [pad] x 4 (a sequence with no loss token)
# Padding carries garbage log-ratios (+-30, +8.9, ...) that must not leak into anything.
# 7 loss tokens in all.
# ---------------------------------------------------------------------------------------
L = math.log
OLD = torch.tensor(
    [
        [L(0.6), L(0.6), L(0.2), -30.0],
        [L(0.5), L(0.9), -0.1, -0.2],
        [L(0.05), L(0.9), 0.0, -5.0],
        [0.0, -1.0, -2.0, -3.0],
    ],
    dtype=torch.float64,
)
SAMPLER = torch.tensor(
    [
        [L(0.2), L(0.4), L(0.8), -0.01],
        [L(0.5), L(0.1), -9.0, -0.2],
        [L(0.5), L(1.0), -30.0, -0.5],
        [-25.0, 0.0, -2.0, -40.0],
    ],
    dtype=torch.float64,
)
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.float64)
TOKENS = 7

# Geometric-mean ratios of the rows (exp of the mean log-ratio over the row's loss tokens):
G0 = 1.040041911525952  # (3 * 1.5 * 0.25) ** (1/3) = 1.125 ** (1/3)
G1 = 3.0  # (1 * 9) ** (1/2)
G2 = 0.3  # (0.1 * 0.9) ** (1/2) = 0.09 ** 0.5

# The mismatch metrics, identical for every mode:
DIFF_MEAN = 1.0707917062691794  # (log 3 + log 1.5 + log 4 + 0 + log 9 + log 10 + log(10/9)) / 7 = log(1800) / 7
DIFF_MAX = 2.302585092994046  # max |log r| = |log 0.1| = log 10
KL_K3 = 1.2632768565227528  # sum(r - 1) = 15.75 - 7 = 8.75; sum(log r) = log(3*1.5*0.25*1*9*0.1*0.9) = log 0.91125
#                             k3 = (8.75 - log 0.91125) / 7 = (8.75 + 0.09293799565926915) / 7

HAND = {
    # mode: (weights [B, T], weight_mean, truncated_frac, masked_frac) with cap=2, low=0.5, high=2
    "none": (
        MASK.tolist(),
        1.0,  # 7 / 7
        0.0,
        0.0,
    ),
    "tis": (
        [
            [2.0, 1.5, 0.25, 0.0],  # min(3, 2) = 2, min(1.5, 2), min(0.25, 2)
            [1.0, 2.0, 0.0, 0.0],  # min(1, 2), min(9, 2) = 2
            [0.1, 0.9, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
        ],
        1.1071428571428572,  # (2 + 1.5 + 0.25 + 1 + 2 + 0.1 + 0.9) / 7 = 7.75 / 7
        2 / 7,  # r = 3 and r = 9 were capped
        0.0,
    ),
    "mis": (
        [
            [0.0, 1.0, 0.0, 0.0],  # 3 > 2 dropped, 1.5 kept, 0.25 < 0.5 dropped
            [1.0, 0.0, 0.0, 0.0],  # 1 kept, 9 > 2 dropped
            [0.0, 1.0, 0.0, 0.0],  # 0.1 < 0.5 dropped, 0.9 kept
            [0.0, 0.0, 0.0, 0.0],
        ],
        3 / 7,
        0.0,
        4 / 7,
    ),
    "seq-tis": (
        [
            [G0, G0, G0, 0.0],  # min(1.04, 2) = 1.04
            [2.0, 2.0, 0.0, 0.0],  # min(3, 2) = 2
            [0.3, 0.3, 0.0, 0.0],  # min(0.3, 2) = 0.3
            [0.0, 0.0, 0.0, 0.0],
        ],
        1.1028751049396937,  # (3 * 1.040041911525952 + 2 * 2 + 2 * 0.3) / 7 = (3 G0 + 4.6) / 7
        2 / 7,  # row 1's two tokens
        0.0,
    ),
    "decoupled": (
        [
            [0.0, 1.5, 0.25, 0.0],  # 3 > 2 dropped; 1.5 and 0.25 kept as they are
            [1.0, 0.0, 0.0, 0.0],  # 1 kept, 9 > 2 dropped
            [0.1, 0.9, 0.0, 0.0],  # no lower bound: 0.1 kept
            [0.0, 0.0, 0.0, 0.0],
        ],
        3.75 / 7,  # 1.5 + 0.25 + 1 + 0.1 + 0.9
        0.0,
        2 / 7,  # r = 3 and r = 9
    ),
    "seq-mis": (
        [
            [1.0, 1.0, 1.0, 0.0],  # 1.04 in [0.5, 2]
            [0.0, 0.0, 0.0, 0.0],  # 3 > 2: the whole sequence is dropped
            [0.0, 0.0, 0.0, 0.0],  # 0.3 < 0.5: dropped
            [0.0, 0.0, 0.0, 0.0],
        ],
        3 / 7,
        0.0,
        4 / 7,  # row 1's and row 2's tokens
    ),
}


def _assert_weights(got, expected, rel=1e-12):
    assert got.shape == (len(expected), len(expected[0]))
    for b, row in enumerate(expected):
        for t, value in enumerate(row):
            assert got[b, t].item() == pytest.approx(value, rel=rel, abs=1e-12), (b, t)


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_hand_values_weights_and_metrics(mode):
    """Each mode's weights and all six metrics on the hand-made batch equal the hand numbers."""
    weights, weight_mean, truncated, masked = HAND[mode]
    out = rollout_correction(OLD, SAMPLER, MASK, mode=mode)
    assert isinstance(out, CorrectionOutput)
    _assert_weights(out.weights, weights)
    assert set(out.metrics) == set(METRIC_KEYS)
    assert all(type(value) is float for value in out.metrics.values())
    assert out.metrics["rollout_logprob_diff_mean"] == pytest.approx(DIFF_MEAN, rel=1e-12)
    assert out.metrics["rollout_logprob_diff_max"] == pytest.approx(DIFF_MAX, rel=1e-12)
    assert out.metrics["rollout_kl_k3"] == pytest.approx(KL_K3, rel=1e-12)
    assert out.metrics["rollout_is_weight_mean"] == pytest.approx(weight_mean, rel=1e-12)
    # The fractions are count / count, computed in torch's default float32.
    assert out.metrics["rollout_is_truncated_frac"] == pytest.approx(truncated, rel=1e-6)
    assert out.metrics["rollout_is_masked_frac"] == pytest.approx(masked, rel=1e-6)


def test_mismatch_metrics_alone_hand_values():
    """mismatch_metrics returns the three mismatch numbers, ignoring the padding's garbage."""
    metrics = mismatch_metrics(OLD, SAMPLER, MASK)
    assert metrics == {
        "rollout_logprob_diff_mean": pytest.approx(DIFF_MEAN, rel=1e-12),
        "rollout_logprob_diff_max": pytest.approx(DIFF_MAX, rel=1e-12),
        "rollout_kl_k3": pytest.approx(KL_K3, rel=1e-12),
    }


def test_hand_values_other_bounds():
    """Non-default bounds: tis with C = 5 and mis with [0.2, 5] on the hand-made batch."""
    tis = rollout_correction(OLD, SAMPLER, MASK, mode="tis", cap=5.0)
    _assert_weights(
        tis.weights,
        [
            [3.0, 1.5, 0.25, 0.0],  # 3 < 5 is kept as is
            [1.0, 5.0, 0.0, 0.0],  # min(9, 5) = 5
            [0.1, 0.9, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
        ],
    )
    assert tis.metrics["rollout_is_weight_mean"] == pytest.approx(11.75 / 7)  # 3 + 1.5 + 0.25 + 1 + 5 + 0.1 + 0.9
    assert tis.metrics["rollout_is_truncated_frac"] == pytest.approx(1 / 7)
    mis = rollout_correction(OLD, SAMPLER, MASK, mode="mis", low=0.2, high=5.0)
    _assert_weights(
        mis.weights,
        [
            [1.0, 1.0, 1.0, 0.0],  # 3, 1.5, 0.25 all in [0.2, 5]
            [1.0, 0.0, 0.0, 0.0],  # 9 > 5
            [0.0, 1.0, 0.0, 0.0],  # 0.1 < 0.2
            [0.0, 0.0, 0.0, 0.0],
        ],
    )
    assert mis.metrics["rollout_is_masked_frac"] == pytest.approx(2 / 7)
    seq_tis = rollout_correction(OLD, SAMPLER, MASK, mode="seq-tis", cap=5.0)
    _assert_weights(seq_tis.weights, [[G0, G0, G0, 0.0], [G1, G1, 0.0, 0.0], [G2, G2, 0.0, 0.0], [0.0] * 4])
    assert seq_tis.metrics["rollout_is_truncated_frac"] == 0.0
    seq_mis = rollout_correction(OLD, SAMPLER, MASK, mode="seq-mis", low=0.2, high=5.0)
    _assert_weights(seq_mis.weights, [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0] * 4])
    assert seq_mis.metrics["rollout_is_masked_frac"] == 0.0


# ---------------------------------------------------------------------------------------
# Plain-Python reference: per row, per token, math.exp / math.log.
# ---------------------------------------------------------------------------------------


def _clamp(x, bound=20.0):
    return max(-bound, min(bound, x))


def _reference(old, sampler, mask, mode, cap=2.0, low=0.5, high=2.0):
    """-> (weights as nested lists, metrics dict), one token at a time."""
    B, T = len(old), len(old[0])
    weights = [[0.0] * T for _ in range(B)]
    truncated = dropped = tokens = 0
    diffs = []
    for b in range(B):
        positions = [t for t in range(T) if mask[b][t] != 0]
        logs = {t: _clamp(old[b][t] - sampler[b][t]) for t in positions}
        if mode.startswith("seq-") and positions:
            seq_ratio = math.exp(sum(logs.values()) / len(positions))
        for t in positions:
            tokens += 1
            diffs.append(logs[t])
            ratio = seq_ratio if mode.startswith("seq-") else math.exp(logs[t])
            if mode == "none":
                w = 1.0
            elif mode in ("tis", "seq-tis"):
                w = min(ratio, cap)
                truncated += ratio > cap
            elif mode == "decoupled":  # AReaL: behav_imp_weight, masked above its cap
                w = ratio if ratio <= cap else 0.0
                dropped += ratio > cap
            else:
                keep = low <= ratio <= high
                w = 1.0 if keep else 0.0
                dropped += not keep
            weights[b][t] = w
    n = max(tokens, 1)
    metrics = {
        "rollout_logprob_diff_mean": sum(abs(d) for d in diffs) / n,
        "rollout_logprob_diff_max": max((abs(d) for d in diffs), default=0.0),
        "rollout_kl_k3": sum(math.exp(d) - 1.0 - d for d in diffs) / n,
        "rollout_is_weight_mean": sum(map(sum, weights)) / n,
        "rollout_is_truncated_frac": truncated / n,
        "rollout_is_masked_frac": dropped / n,
    }
    return weights, metrics


def _random_batch(seed, B=6, T=9, dtype=torch.float32, spread=0.8):
    gen = torch.Generator().manual_seed(seed)
    sampler = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 4.0
    row_shift = torch.randn(B, 1, generator=gen, dtype=torch.float64) * spread  # so sequence means leave the bounds too
    old = sampler + row_shift + torch.randn(B, T, generator=gen, dtype=torch.float64) * spread
    mask = (torch.rand(B, T, generator=gen) > 0.35).to(dtype)
    mask[1] = 0  # a row with no loss token
    mask[4] = 0
    mask[4, 0] = 1  # a row with exactly one loss token
    mask[B - 1] = 1  # a row that is all loss tokens
    return old.to(dtype), sampler.to(dtype), mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_matches_python_loop(mode, seed, dtype):
    """The vectorised weights and metrics equal the per-token loop on random inputs
    (ratios both sides of every bound; rows with no, one and all loss tokens)."""
    old, sampler, mask = _random_batch(seed, dtype=dtype)
    kwargs = ({"cap": 1.5, "low": 0.6, "high": 1.7}, {}, {"cap": 1.2, "low": 0.3, "high": 1.95})[
        seed
    ]  # seed 1: the defaults
    out = rollout_correction(old, sampler, mask, mode=mode, **kwargs)
    weights, metrics = _reference(old.double().tolist(), sampler.double().tolist(), mask.tolist(), mode, **kwargs)
    rel = 1e-5 if dtype == torch.float32 else 1e-12
    assert out.weights.dtype == dtype
    _assert_weights(out.weights, weights, rel=rel)
    assert out.weights[1].eq(0).all()
    for key in METRIC_KEYS:
        # The fractions are count / count, computed in torch's default float32.
        assert out.metrics[key] == pytest.approx(metrics[key], rel=1e-6 if key.endswith("frac") else rel, abs=1e-9), key
    if mode in ("tis", "seq-tis"):
        assert 0 < metrics["rollout_is_truncated_frac"] < 1  # the random batch exercises the cap
    if mode in ("mis", "seq-mis", "decoupled"):
        assert 0 < metrics["rollout_is_masked_frac"] < 1  # ... and the bounds


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_extreme_log_ratios_match_loop_and_stay_finite(mode):
    """Log-ratios far beyond the +-20 clamp give finite weights equal to the loop's (which
    clamps the same way)."""
    old, sampler, mask = _random_batch(3, dtype=torch.float64, spread=40.0)
    out = rollout_correction(old, sampler, mask, mode=mode, cap=1e12, high=1e12)
    weights, metrics = _reference(old.tolist(), sampler.tolist(), mask.tolist(), mode, cap=1e12, high=1e12)
    assert torch.isfinite(out.weights).all()
    _assert_weights(out.weights, weights)
    for key in METRIC_KEYS:
        assert out.metrics[key] == pytest.approx(metrics[key], rel=1e-6 if key.endswith("frac") else 1e-12), key


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_all_padding_batch(mode):
    """A batch with no loss token: weights all 0, every metric 0."""
    old, sampler, _ = _random_batch(4)
    out = rollout_correction(old, sampler, torch.zeros_like(old), mode=mode)
    assert out.weights.eq(0).all()
    assert out.metrics == dict.fromkeys(METRIC_KEYS, 0.0)


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_non_finite_padding_is_ignored(mode):
    """-inf / nan log-probs at padded positions (e.g. a sampler that reports nothing there)
    leave the weights 0 outside the mask and the loss tokens' weights unchanged."""
    old, sampler, mask = _random_batch(5)
    clean = rollout_correction(old, sampler, mask, mode=mode)
    dirty_old, dirty_sampler = old.clone(), sampler.clone()
    padding = mask == 0
    dirty_sampler[padding] = float("-inf")
    dirty_old[padding & (torch.arange(old.shape[1]) % 2 == 0)] = float("nan")
    dirty = rollout_correction(dirty_old, dirty_sampler, mask, mode=mode)
    assert torch.equal(dirty.weights, clean.weights)
    assert dirty.metrics == clean.metrics


# ---------------------------------------------------------------------------------------
# The published formulas.
# ---------------------------------------------------------------------------------------


def test_tis_is_truncated_ratio_with_default_cap_2():
    """tis = min(exp(lp_old - lp_sampler), C) per loss token, C = 2 by default (slime; Yao et al.)."""
    old, sampler, mask = _random_batch(6, dtype=torch.float64)
    formula = torch.minimum(torch.exp(old - sampler), torch.tensor(2.0, dtype=torch.float64)) * mask
    assert torch.allclose(rollout_correction(old, sampler, mask, mode="tis").weights, formula, rtol=1e-12, atol=0)
    formula = torch.minimum(torch.exp(old - sampler), torch.tensor(3.0, dtype=torch.float64)) * mask
    assert torch.allclose(
        rollout_correction(old, sampler, mask, mode="tis", cap=3.0).weights, formula, rtol=1e-12, atol=0
    )


def test_mis_masks_ratios_outside_bounds_inclusive():
    """mis (IcePop) = 1 where low <= ratio <= high, else 0; the bounds themselves are kept."""
    old, sampler, mask = _random_batch(7, dtype=torch.float64)
    ratio = torch.exp(old - sampler)
    formula = ((ratio >= 0.5) & (ratio <= 2.0)).double() * mask
    assert torch.equal(rollout_correction(old, sampler, mask, mode="mis").weights, formula)
    # Exactly representable bounds: ratio 1 (equal log-probs) survives low = high = 1, nothing else does.
    old = torch.tensor([[-1.0, -1.0, -2.0, -0.5]])
    sampler = torch.tensor([[-1.0, -1.5, -2.0, -0.25]])
    mask = torch.ones_like(old)
    out = rollout_correction(old, sampler, mask, mode="mis", low=1.0, high=1.0)
    assert out.weights.tolist() == [[1.0, 0.0, 1.0, 0.0]]
    # ... and tis with C = 1 is min(ratio, 1): exp(0.5) capped, exp(-0.25) kept.
    out = rollout_correction(old, sampler, mask, mode="tis", cap=1.0)
    assert out.weights[0].tolist() == pytest.approx([1.0, 1.0, 1.0, math.exp(-0.25)])


def test_seq_modes_use_geometric_mean_over_masked_tokens():
    """seq-tis / seq-mis weigh every loss token of a row by exp(mean over the row's loss
    tokens of the log-ratio), truncated / masked like the token modes."""
    old, sampler, mask = _random_batch(8, dtype=torch.float64)
    log_ratio = torch.where(mask.bool(), old - sampler, torch.zeros_like(old))
    geometric = torch.exp(log_ratio.sum(-1) / mask.sum(-1).clamp(min=1))[:, None]
    seq_tis = rollout_correction(old, sampler, mask, mode="seq-tis", cap=1.3).weights
    assert torch.allclose(seq_tis, geometric.clamp(max=1.3) * mask, rtol=1e-12, atol=0)
    seq_mis = rollout_correction(old, sampler, mask, mode="seq-mis", low=0.8, high=1.25).weights
    assert torch.equal(seq_mis, ((geometric >= 0.8) & (geometric <= 1.25)).double() * mask)
    # The geometric mean is not the arithmetic one: ratios 4 and 1/4 give 1, not 2.125.
    two = rollout_correction(
        torch.tensor([[L(0.8), L(0.1)]]), torch.tensor([[L(0.2), L(0.4)]]), torch.ones(1, 2), mode="seq-tis", cap=10.0
    )
    assert two.weights[0].tolist() == pytest.approx([1.0, 1.0])


def test_seq_weight_ignores_padding_length():
    """Adding padding (any values) to a sequence does not change its sequence weight."""
    old = torch.tensor([[L(0.6), L(0.3)]], dtype=torch.float64)
    sampler = torch.tensor([[L(0.2), L(0.2)]], dtype=torch.float64)  # ratios 3 and 1.5: geometric mean sqrt(4.5)
    padded_old = torch.cat([old, torch.tensor([[-7.0, 0.0, -3.0]], dtype=torch.float64)], -1)
    padded_sampler = torch.cat([sampler, torch.tensor([[-1.0, -9.0, -3.0]], dtype=torch.float64)], -1)
    padded_mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    for mode, expected in (("seq-tis", min(math.sqrt(4.5), 5.0)), ("seq-mis", 0.0)):  # sqrt(4.5) = 2.12 > high = 2
        short = rollout_correction(old, sampler, torch.ones_like(old), mode=mode, cap=5.0)
        long = rollout_correction(padded_old, padded_sampler, padded_mask, mode=mode, cap=5.0)
        assert short.weights[0].tolist() == pytest.approx([expected, expected])
        assert long.weights[0].tolist() == pytest.approx([expected, expected, 0.0, 0.0, 0.0])


# ---------------------------------------------------------------------------------------
# On-policy, gradients, errors.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_identical_logprobs_give_unit_weights_and_zero_metrics(mode, dtype):
    """Sampler == trainer: weights are exactly the mask (1 on loss tokens, 0 elsewhere), all
    mismatch metrics exactly 0, nothing truncated or masked."""
    old, _, mask = _random_batch(9, dtype=dtype)
    out = rollout_correction(old, old.clone(), mask, mode=mode, cap=1.0, low=1.0, high=1.0)
    assert torch.equal(out.weights, mask)
    out = rollout_correction(old, old.clone(), mask, mode=mode)
    assert torch.equal(out.weights, mask)
    assert out.metrics == {
        "rollout_logprob_diff_mean": 0.0,
        "rollout_logprob_diff_max": 0.0,
        "rollout_kl_k3": 0.0,
        "rollout_is_weight_mean": 1.0,
        "rollout_is_truncated_frac": 0.0,
        "rollout_is_masked_frac": 0.0,
    }


def test_bool_and_int_masks_equal_float_mask():
    """The mask may be bool, int or float; weights come in the log-probs' dtype."""
    old, sampler, mask = _random_batch(10)
    for mode in ROLLOUT_CORRECTIONS:
        reference = rollout_correction(old, sampler, mask, mode=mode)
        for other in (mask.bool(), mask.long()):
            out = rollout_correction(old, sampler, other, mode=mode)
            assert out.weights.dtype == old.dtype
            assert torch.equal(out.weights, reference.weights)
            assert out.metrics == reference.metrics


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_weights_carry_no_gradient(mode):
    """Inputs that require grad give weights with no grad_fn, and a loss built on the
    weights sends no gradient back to the log-probs."""
    old, sampler, mask = _random_batch(11)
    old.requires_grad_(True)
    sampler.requires_grad_(True)
    out = rollout_correction(old, sampler, mask, mode=mode)
    assert not out.weights.requires_grad and out.weights.grad_fn is None
    loss = (out.weights * old).sum() + (out.weights * sampler).sum()  # grads flow only via the plain factors
    loss.backward()
    assert torch.equal(old.grad, out.weights) and torch.equal(sampler.grad, out.weights)


@pytest.mark.parametrize("mode", ["TIS", "is", "auto", "", "seq_tis"])
def test_unknown_mode_raises(mode):
    """An unknown mode (auto included: it must be resolved first) is a ValueError naming rollout_correction."""
    with pytest.raises(ValueError, match="rollout_correction") as info:
        rollout_correction(OLD, SAMPLER, MASK, mode=mode)
    assert repr(mode) in str(info.value)


@pytest.mark.parametrize(
    "bounds",
    [
        {"cap": 0.99},
        {"cap": 0.0},
        {"low": 1.01},
        {"low": -0.1},
        {"high": 0.99},
        {"low": 0.9, "high": 0.95},
        {"cap": -2.0, "high": 0.5},
    ],
)
@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_bad_bounds_raise(mode, bounds):
    """cap < 1, low > 1 (or < 0), high < 1 are ValueErrors naming rollout_correction, whatever the mode."""
    with pytest.raises(ValueError, match="rollout_correction"):
        rollout_correction(OLD, SAMPLER, MASK, mode=mode, **bounds)


def test_boundary_bounds_are_accepted():
    """cap = 1, low = 0, low = 1, high = 1 are valid."""
    for bounds in ({"cap": 1.0}, {"low": 0.0}, {"low": 1.0}, {"high": 1.0}, {"low": 1.0, "high": 1.0}):
        rollout_correction(OLD, SAMPLER, MASK, mode="mis", **bounds)
    # low = 0 keeps every ratio below high: 0.1 and 0.25 survive.
    out = rollout_correction(OLD, SAMPLER, MASK, mode="mis", low=0.0)
    _assert_weights(out.weights, [[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0] * 4])


# ---------------------------------------------------------------------------------------
# resolve_rollout_correction
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "separate_sampler", "expected"),
    [
        ("bf16-mixed", False, "tis"),
        ("bf16-mixed", True, "tis"),
        ("fp32", True, "tis"),
        ("fp32", False, "none"),
    ],
)
def test_resolve_auto(precision, separate_sampler, expected):
    """auto -> tis when the precision is bf16-mixed or the sampler is separate, else none."""
    assert resolve_rollout_correction("auto", precision=precision, separate_sampler=separate_sampler) == expected


@pytest.mark.parametrize("setting", ROLLOUT_CORRECTIONS)
def test_resolve_explicit_passes_through(setting):
    """An explicit setting is returned as is, whatever the precision and sampler."""
    for precision in ("fp32", "bf16-mixed"):
        for separate in (False, True):
            assert resolve_rollout_correction(setting, precision=precision, separate_sampler=separate) == setting


@pytest.mark.parametrize("setting", ["tis2", "TIS", "Auto", ""])
def test_resolve_unknown_raises(setting):
    """An unknown setting is a ValueError naming the config key and the setting."""
    with pytest.raises(ValueError, match=r"^algorithm\.correction\.kind") as info:
        resolve_rollout_correction(setting, precision="fp32", separate_sampler=False)
    assert repr(setting) in str(info.value)


# ---------------------------------------------------------------------------------------
# The module docstring's claim: scaling the advantages by the weights = weighting the
# per-token loss (ppo-clip is positively homogeneous in the advantage).
# ---------------------------------------------------------------------------------------


def _ppo_inputs(seed):
    gen = torch.Generator().manual_seed(seed)
    B, T = 5, 12
    old = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3.0
    logprobs = (old + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.4).requires_grad_(True)
    advantages = torch.randn(B, T, generator=gen, dtype=torch.float64)
    sampler = old + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.6
    mask = (torch.rand(B, T, generator=gen) > 0.25).double()
    mask[2] = 0
    return logprobs, old, advantages, sampler, mask


def _hand_ppo_per_token(logprobs, old, advantages, clip_low=0.2, clip_high=0.28):
    """PPO-clip per token, written out: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))."""
    ratio = torch.exp(logprobs - old)
    return torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", ROLLOUT_CORRECTIONS)
def test_scaled_advantages_equal_weighted_token_loss(mode, seed):
    """ppo-clip (token-mean) with advantages * w equals sum(loss_t * w_t * mask) / mask.sum(),
    computed by hand, and so do the gradients w.r.t. the log-probs."""
    logprobs, old, advantages, sampler, mask = _ppo_inputs(seed)
    ratio = torch.exp(logprobs.detach() - old)
    inside = (ratio > 0.8) & (ratio < 1.28) & mask.bool()
    assert (
        inside.any()
        and (~inside & mask.bool() & (advantages > 0)).any()
        and (~inside & mask.bool() & (advantages < 0)).any()
    )
    weights = rollout_correction(old, sampler, mask, mode=mode).weights

    scaled = compute_policy_loss(
        "ppo-clip", logprobs, old, advantages * weights, mask, clip_low=0.2, clip_high=0.28, aggregation="token-mean"
    ).loss
    (grad_scaled,) = torch.autograd.grad(scaled, logprobs)

    per_token = _hand_ppo_per_token(logprobs, old, advantages)
    hand = (per_token * weights * mask).sum() / mask.sum()
    (grad_hand,) = torch.autograd.grad(hand, logprobs)

    assert scaled.item() == pytest.approx(hand.item(), rel=1e-12, abs=1e-15)
    assert torch.allclose(grad_scaled, grad_hand, rtol=1e-12, atol=1e-15)
    assert grad_hand.abs().sum() > 0


@pytest.mark.parametrize("clip_ratio_c", [None, 3.0])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_scaled_advantages_equal_weighted_loss_every_aggregation(aggregation, clip_ratio_c):
    """The same identity under every aggregation and with the dual clip: ppo-clip's
    per-token loss times a non-negative w is its loss with A * w."""
    logprobs, old, advantages, sampler, mask = _ppo_inputs(5)
    advantages = advantages * 3.0  # so the dual clip bound is active somewhere
    weights = rollout_correction(old, sampler, mask, mode="tis").weights
    params = {"clip_low": 0.2, "clip_high": 0.28, "clip_ratio_c": clip_ratio_c, "aggregation": aggregation}
    scaled = compute_policy_loss("ppo-clip", logprobs, old, advantages * weights, mask, **params).loss
    (grad_scaled,) = torch.autograd.grad(scaled, logprobs)
    per_token = _hand_ppo_per_token(logprobs, old, advantages)
    if clip_ratio_c is not None:
        per_token = torch.where(advantages < 0, torch.minimum(per_token, -advantages * clip_ratio_c), per_token)
    hand = aggregate(per_token * weights, mask, aggregation)
    (grad_hand,) = torch.autograd.grad(hand, logprobs)
    assert scaled.item() == pytest.approx(hand.item(), rel=1e-12, abs=1e-15)
    assert torch.allclose(grad_scaled, grad_hand, rtol=1e-12, atol=1e-15)
