"""The policy losses beside ppo-clip (gspo, gspo-token, cispo, sapo, clip-cov, kl-cov, gpg,
reinforce): hand-computed values on one [2, 3] batch, equality with plain Python loops on
random masked batches under every aggregation, and the gradient property each is about."""

from __future__ import annotations

import math

import pytest
import torch

from agentic_rl.algorithms import (
    AGGREGATIONS,
    POLICY_LOSSES,
    ROW_LOCAL_LOSSES,
    aggregate,
    compute_policy_loss,
    policy_loss,
    token_covariance,
)
from agentic_rl.config import AlgorithmConfig

NEW_LOSSES = ("gspo", "gspo-token", "cispo", "sapo", "clip-cov", "kl-cov", "gpg", "reinforce")
TRAINER_METRICS = ("clip_frac_low", "clip_frac_high", "clip_frac_dual", "ratio_mean", "ratio_max", "approx_kl")

# The hand batch: current probabilities P, ratios R = pi / pi_old, advantages A; the second
# row has two sampled tokens, and its padding holds nan log-probs that must not leak.
P = [[0.3, 0.2, 0.5], [0.4, 0.6, 1.0]]
R = [[1.5, 0.5, 1.0], [1.1, 0.9, 1.0]]
A = [[1.0, -1.0, 2.0], [-2.0, 0.5, 7.0]]
M = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
TOKENS = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]


def _hand_batch(requires_grad: bool = False):
    logprobs = torch.tensor(P, dtype=torch.float64).log()
    old = logprobs - torch.tensor(R, dtype=torch.float64).log()
    logprobs[1, 2], old[1, 2] = float("nan"), float("nan")
    logprobs.requires_grad_(requires_grad)
    return logprobs, old, torch.tensor(A, dtype=torch.float64), torch.tensor(M, dtype=torch.float64)


def _seq_mean(row0: list[float], row1: list[float]) -> float:
    return (sum(row0) / len(row0) + sum(row1) / len(row1)) / 2


def _token_mean(row0: list[float], row1: list[float]) -> float:
    return (sum(row0) + sum(row1)) / 5


def _run(name: str, requires_grad: bool = False, **params):
    logprobs, old, advantages, mask = _hand_batch(requires_grad)
    return logprobs, compute_policy_loss(name, logprobs, old, advantages, mask, **params)


# ---------------------------------------------------------------- (a) hand-computed values


def test_gspo_hand_values_with_the_paper_ranges() -> None:
    s0, s1 = (1.5 * 0.5 * 1.0) ** (1 / 3), (1.1 * 0.9) ** (1 / 2)  # geometric-mean ratios
    a0, a1 = (1.0 - 1.0 + 2.0) / 3, (-2.0 + 0.5) / 2  # mean advantages
    # row 0: A > 0, s below the range -> the unclipped (pessimistic) term; row 1: A < 0,
    # s below 1 - 3e-4 -> clipped to 1 - 3e-4.
    loss0, loss1 = -a0 * s0, -a1 * (1 - 3e-4)
    _, out = _run("gspo")
    assert out.loss.item() == pytest.approx((loss0 + loss1) / 2, rel=1e-12)
    _, out = _run("gspo", aggregation="token-mean")
    assert out.loss.item() == pytest.approx((3 * loss0 + 2 * loss1) / 5, rel=1e-12)
    m = out.metrics
    assert (m["clip_frac_low"], m["clip_frac_high"], m["clip_frac_dual"]) == (pytest.approx(2 / 5), 0.0, 0.0)
    assert m["ratio_mean"] == pytest.approx((3 * s0 + 2 * s1) / 5) and m["ratio_max"] == pytest.approx(s1)
    assert m["approx_kl"] == pytest.approx(sum(r - math.log(r) - 1 for r in (1.5, 0.5, 1.0, 1.1, 0.9)) / 5)


def test_gspo_hand_values_with_wide_ranges() -> None:
    s0, s1 = 0.75 ** (1 / 3), 0.99**0.5
    _, out = _run("gspo", clip_low=0.05, clip_high=0.05)
    # row 0: s0 = 0.9086 < 0.95 with A > 0: unclipped; row 1: s1 = 0.995 inside.
    assert out.loss.item() == pytest.approx((-(2 / 3) * s0 + 0.75 * s1) / 2, rel=1e-12)
    assert out.metrics["clip_frac_low"] == 0.0


def test_gspo_token_hand_values() -> None:
    s0, s1 = 0.75 ** (1 / 3), 0.99**0.5
    low = 1 - 3e-4
    # Each token's own advantage against its sequence's ratio: A > 0 below the range keeps
    # -A s, A < 0 below it is clipped to -A (1 - 3e-4).
    row0 = [-1.0 * s0, 1.0 * low, -2.0 * s0]
    row1 = [2.0 * low, -0.5 * s1]
    _, out = _run("gspo-token")
    assert out.loss.item() == pytest.approx(_seq_mean(row0, row1), rel=1e-12)
    assert out.metrics["clip_frac_low"] == pytest.approx(2 / 5)
    _, out = _run("gspo-token", aggregation="seq-mean-token-sum")
    assert out.loss.item() == pytest.approx((sum(row0) + sum(row1)) / 2, rel=1e-12)


def test_cispo_hand_values() -> None:
    w = [[1.2, 0.5, 1.0], [1.1, 0.9]]  # min(r, 1 + 0.2); no lower bound by default
    log = [[math.log(p) for p in P[0]], [math.log(p) for p in P[1][:2]]]
    rows = [[-w[b][t] * A[b][t] * log[b][t] for t in range(len(w[b]))] for b in range(2)]
    _, out = _run("cispo")
    assert out.loss.item() == pytest.approx(_token_mean(*rows), rel=1e-12)
    assert (out.metrics["clip_frac_low"], out.metrics["clip_frac_high"]) == (0.0, pytest.approx(1 / 5))
    # with a lower bound 0.4 the 0.5 ratio becomes 0.6
    rows[0][1] = -0.6 * A[0][1] * log[0][1]
    _, out = _run("cispo", clip_low=0.4)
    assert out.loss.item() == pytest.approx(_token_mean(*rows), rel=1e-12)
    assert out.metrics["clip_frac_low"] == pytest.approx(1 / 5)


def test_sapo_hand_values() -> None:
    def gate(r: float, tau: float) -> float:
        return 1 / (1 + math.exp(-tau * (r - 1))) * 4 / tau

    # tau 1.0 for A > 0, 1.05 otherwise
    row0 = [-gate(1.5, 1.0) * 1.0, -gate(0.5, 1.05) * -1.0, -gate(1.0, 1.0) * 2.0]
    row1 = [-gate(1.1, 1.05) * -2.0, -gate(0.9, 1.0) * 0.5]
    assert row0[2] == pytest.approx(-4.0)  # f(1) = 2 / tau
    _, out = _run("sapo")
    assert out.loss.item() == pytest.approx(_seq_mean(row0, row1), rel=1e-12)
    assert (out.metrics["clip_frac_low"], out.metrics["clip_frac_high"]) == (0.0, 0.0)
    _, out = _run("sapo", tau_pos=2.0, tau_neg=3.0, aggregation="token-mean")
    row0 = [-gate(1.5, 2.0) * 1.0, -gate(0.5, 3.0) * -1.0, -gate(1.0, 2.0) * 2.0]
    row1 = [-gate(1.1, 3.0) * -2.0, -gate(0.9, 2.0) * 0.5]
    assert out.loss.item() == pytest.approx(_token_mean(row0, row1), rel=1e-12)


def _hand_covariance() -> dict[tuple[int, int], float]:
    mean_a = sum(A[b][t] for b, t in TOKENS) / 5
    mean_log = sum(math.log(P[b][t]) for b, t in TOKENS) / 5
    return {(b, t): (A[b][t] - mean_a) * (math.log(P[b][t]) - mean_log) for b, t in TOKENS}


def test_token_covariance_hand_values() -> None:
    logprobs, _, advantages, mask = _hand_batch()
    covariance = token_covariance(advantages, logprobs, mask)
    for (b, t), value in _hand_covariance().items():
        assert covariance[b, t].item() == pytest.approx(value, rel=1e-12)


def test_clip_cov_hand_values_and_selection() -> None:
    cov = _hand_covariance()
    # PPO with 0.2 / 0.28 clips (0, 0) (high) and (0, 1) (low); of the others only (0, 2)
    # has a covariance in (0.3, 5), so it is the one token whose gradient goes.
    assert max(cov, key=cov.get) == (0, 1) and cov[(0, 2)] > 0.3 > max(cov[(1, 0)], cov[(1, 1)])
    ppo = [[-1.28, 0.8, -2.0], [2.2, -0.45]]
    logprobs, out = _run("clip-cov", True, clip_low=0.2, clip_high=0.28, cov_lb=0.3)
    assert out.loss.item() == pytest.approx(_token_mean(*ppo), rel=1e-12)  # detached, not removed
    assert (
        out.metrics["clip_frac_low"],
        out.metrics["clip_frac_high"],
        out.metrics["cov_selected_frac"],
    ) == pytest.approx((0.2, 0.2, 0.2))
    out.loss.backward()
    # d(-A r)/d log pi = -A r / 5 on unclipped tokens; clipped and selected tokens get 0.
    expected = torch.tensor([[0.0, 0.0, 0.0], [2.2 / 5, -0.45 / 5, 0.0]], dtype=torch.float64)
    assert torch.allclose(logprobs.grad, expected, rtol=1e-12, atol=0)
    logprobs, ppo_out = _run("ppo-clip", True, clip_low=0.2, clip_high=0.28)
    ppo_out.loss.backward()
    assert logprobs.grad[0, 2].item() == pytest.approx(-2.0 / 5)


def test_kl_cov_hand_values() -> None:
    cov = _hand_covariance()
    top = max(cov, key=cov.get)
    assert top == (0, 1)  # int(5 * 2e-4) rounds to 0: one token, the highest covariance
    plain = [[-1.0 * 1.5, 1.0 * 0.5, -2.0 * 1.0], [2.0 * 1.1, -0.5 * 0.9]]
    plain[0][1] += 0.1 * abs(math.log(0.5))
    _, out = _run("kl-cov")
    assert out.loss.item() == pytest.approx(_token_mean(*plain), rel=1e-12)
    assert out.metrics["cov_selected_frac"] == pytest.approx(1 / 5)
    # ratio 0.4 -> int(2.0) = 2 tokens: the next highest is (0, 2), whose |log r| is 0
    plain[0][1] += 0.9 * abs(math.log(0.5))
    _, out = _run("kl-cov", cov_ratio=0.4, kl_coef=1.0)
    assert out.loss.item() == pytest.approx(_token_mean(*plain), rel=1e-12)
    assert out.metrics["cov_selected_frac"] == pytest.approx(2 / 5)


def test_gpg_and_reinforce_hand_values() -> None:
    _, out = _run("gpg")
    assert out.loss.item() == pytest.approx(sum(-A[b][t] * math.log(P[b][t]) for b, t in TOKENS) / 5, rel=1e-12)
    assert out.metrics["ratio_max"] == pytest.approx(1.5)  # the ratio is reported, not used
    _, out = _run("reinforce")
    assert out.loss.item() == pytest.approx((-1.5 + 0.5 - 2.0 + 2.2 - 0.45) / 5, rel=1e-12)
    _, out = _run("reinforce", aggregation="seq-mean-token-sum-norm")
    assert out.loss.item() == pytest.approx((-1.5 + 0.5 - 2.0 + 2.2 - 0.45) / (2 * 3), rel=1e-12)


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_every_loss_reports_the_trainer_metrics_and_ignores_padding(name) -> None:
    logprobs, out = _run(name, True)
    assert set(TRAINER_METRICS) <= set(out.metrics) and all(isinstance(value, float) for value in out.metrics.values())
    assert all(math.isfinite(value) for value in out.metrics.values())
    out.loss.backward()
    assert math.isfinite(out.loss.item()) and torch.isfinite(logprobs.grad).all()
    assert logprobs.grad[1, 2].item() == 0.0  # the padding position holds nan


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_a_batch_without_sampled_tokens_loses_nothing(name) -> None:
    """The trainer's padding micro-batch (distributed lockstep): no token, loss 0, no nan."""
    logprobs = torch.full((2, 3), -1.0, dtype=torch.float64, requires_grad=True)
    out = compute_policy_loss(
        name,
        logprobs,
        logprobs.detach() + 0.5,
        torch.ones(2, 3, dtype=torch.float64),
        torch.zeros(2, 3),
        num_tokens=4.0,
        num_sequences=2.0,
        norm_length=3.0,
    )
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.all(logprobs.grad == 0)
    assert all(out.metrics[key] == 0.0 for key in TRAINER_METRICS)


# ---------------------------------------------------------------- (b) against plain loops


def _loop_aggregate(per_token: list[list[float | None]], mode: str) -> float:
    """per_token[b][t] is the loss of a sampled token, None elsewhere."""
    B, T = len(per_token), len(per_token[0])
    rows = [[x for x in row if x is not None] for row in per_token]
    if mode == "token-mean":
        return sum(map(sum, rows)) / max(sum(map(len, rows)), 1)
    if mode == "seq-mean-token-mean":
        return sum(sum(row) / max(len(row), 1) for row in rows) / B
    if mode == "seq-mean-token-sum":
        return sum(map(sum, rows)) / B
    return sum(map(sum, rows)) / (B * T)


def _random_batch(seed: int, B: int = 5, T: int = 7):
    gen = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 3.0 - 0.05
    logprobs = old + torch.randn(B, T, generator=gen, dtype=torch.float64) * 0.3
    advantages = torch.randn(B, T, generator=gen, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=gen) > 0.3).double()
    mask[2] = 0.0  # a row without sampled tokens
    mask[0, 0] = 1.0
    return logprobs, old, advantages, mask


def _lists(*tensors):
    return [t.tolist() for t in tensors]


def _loop_gspo(lp, old, adv, mask, low, high, token_level):
    out = []
    for b in range(len(lp)):
        sampled = [t for t in range(len(lp[b])) if mask[b][t]]
        if not sampled:
            out.append([None] * len(lp[b]))
            continue
        s = math.exp(sum(lp[b][t] - old[b][t] for t in sampled) / len(sampled))
        clipped = min(max(s, 1 - low), 1 + high)
        mean_adv = sum(adv[b][t] for t in sampled) / len(sampled)
        row = [None] * len(lp[b])
        for t in sampled:
            a = adv[b][t] if token_level else mean_adv
            row[t] = max(-a * s, -a * clipped)
        out.append(row)
    return out


def _loop_per_token(fn, lp, old, adv, mask):
    return [
        [fn(lp[b][t], old[b][t], adv[b][t]) if mask[b][t] else None for t in range(len(lp[b]))] for b in range(len(lp))
    ]


def _loop_cispo(low, high):
    def token(lp, old, a):
        r = math.exp(lp - old)
        w = min(r, 1 + high) if low is None else min(max(r, 1 - low), 1 + high)
        return -w * a * lp

    return token


def _loop_sapo(tau_pos, tau_neg):
    def token(lp, old, a):
        tau = tau_pos if a > 0 else tau_neg
        return -a * 4 / tau / (1 + math.exp(-tau * (math.exp(lp - old) - 1)))

    return token


def _loop_covariance(lp, adv, mask):
    tokens = [(b, t) for b in range(len(lp)) for t in range(len(lp[b])) if mask[b][t]]
    mean_a = sum(adv[b][t] for b, t in tokens) / len(tokens)
    mean_lp = sum(lp[b][t] for b, t in tokens) / len(tokens)
    return {(b, t): (adv[b][t] - mean_a) * (lp[b][t] - mean_lp) for b, t in tokens}


def _loop_kl_cov(lp, old, adv, mask, ratio, coef):
    cov = _loop_covariance(lp, adv, mask)
    top = set(sorted(cov, key=cov.get, reverse=True)[: max(int(ratio * len(cov)), 1)])
    out = _loop_per_token(lambda x, o, a: -a * math.exp(x - o), lp, old, adv, mask)
    for b, t in top:
        out[b][t] += coef * abs(lp[b][t] - old[b][t])
    return out


def _loop_ppo(lp, old, adv, mask, low, high):
    def token(x, o, a):
        r = math.exp(x - o)
        return max(-a * r, -a * min(max(r, 1 - low), 1 + high))

    return _loop_per_token(token, lp, old, adv, mask)


LOOPS = {
    "gspo": (
        dict(clip_low=0.03, clip_high=0.04),
        lambda lp, old, adv, mask: _loop_gspo(lp, old, adv, mask, 0.03, 0.04, False),
    ),
    "gspo-token": (
        dict(clip_low=0.03, clip_high=0.04),
        lambda lp, old, adv, mask: _loop_gspo(lp, old, adv, mask, 0.03, 0.04, True),
    ),
    "cispo": (dict(clip_high=0.1), lambda *x: _loop_per_token(_loop_cispo(None, 0.1), *x)),
    "cispo-lower": (
        dict(clip_low=0.1, clip_high=0.15),
        lambda *x: _loop_per_token(_loop_cispo(0.1, 0.15), *x),
    ),
    "sapo": (dict(tau_pos=1.0, tau_neg=1.05), lambda *x: _loop_per_token(_loop_sapo(1.0, 1.05), *x)),
    # clip-cov's value is PPO's whatever it selects (the selected tokens are detached)
    "clip-cov": (
        dict(clip_low=0.2, clip_high=0.28, cov_ratio=0.5, cov_lb=-1.0, cov_ub=1.0),
        lambda *x: _loop_ppo(*x, 0.2, 0.28),
    ),
    "kl-cov": (dict(cov_ratio=0.2, kl_coef=0.5), lambda *x: _loop_kl_cov(*x, 0.2, 0.5)),
    "gpg": ({}, lambda *x: _loop_per_token(lambda lp, old, a: -a * lp, *x)),
    "reinforce": ({}, lambda *x: _loop_per_token(lambda lp, old, a: -a * math.exp(lp - old), *x)),
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("case", list(LOOPS))
def test_matches_python_loop(case, aggregation, seed) -> None:
    params, loop = LOOPS[case]
    logprobs, old, advantages, mask = _random_batch(seed)
    if case == "kl-cov":
        logprobs = logprobs + 0.5 * advantages  # spread covariances apart: a clear top-k
    name = case.removesuffix("-lower")
    out = compute_policy_loss(name, logprobs, old, advantages, mask, aggregation=aggregation, **params)
    expected = _loop_aggregate(loop(*_lists(logprobs, old, advantages, mask)), aggregation)
    assert out.loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name", ["gspo", "gspo-token"])
def test_gspo_clip_fractions_match_loop(name) -> None:
    logprobs, old, advantages, mask = _random_batch(3)
    out = compute_policy_loss(name, logprobs, old, advantages, mask, clip_low=0.03, clip_high=0.04)
    lp, o, adv, m = _lists(logprobs, old, advantages, mask)
    low = high = tokens = 0
    for b in range(len(lp)):
        sampled = [t for t in range(len(lp[b])) if m[b][t]]
        if not sampled:
            continue
        s = math.exp(sum(lp[b][t] - o[b][t] for t in sampled) / len(sampled))
        mean_adv = sum(adv[b][t] for t in sampled) / len(sampled)
        for t in sampled:
            a = adv[b][t] if name == "gspo-token" else mean_adv
            low += a < 0 and s < 0.97
            high += a > 0 and s > 1.04
            tokens += 1
    assert (out.metrics["clip_frac_low"], out.metrics["clip_frac_high"]) == (
        pytest.approx(low / tokens),
        pytest.approx(high / tokens),
    )
    assert low + high > 0


@pytest.mark.parametrize("name", [n for n in NEW_LOSSES if not n.endswith("-cov")])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_add_up_to_the_mini_batch(name, aggregation) -> None:
    """The trainer's call: the config's parameters plus the mini-batch's normalisers; the
    cov losses are left out (their token selection is per call, as verl's)."""
    logprobs, old, advantages, mask = _random_batch(4)
    config = AlgorithmConfig(policy_loss=name, aggregation=aggregation)
    params = {**config.policy_loss.params, "aggregation": config.aggregation}
    whole = compute_policy_loss(name, logprobs, old, advantages, mask, **params).loss
    norms = {"num_tokens": float(mask.sum()), "num_sequences": 5.0, "norm_length": 7.0}
    parts = sum(
        compute_policy_loss(name, logprobs[s], old[s], advantages[s], mask[s], **params, **norms).loss
        for s in (slice(0, 2), slice(2, 5))
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-12)


# ---------------------------------------------------------------- (c) gradient properties


def test_cispo_gives_every_token_a_gradient_even_when_clipped() -> None:
    ratios = torch.tensor([[3.0, 0.2, 1.05, 1.5]], dtype=torch.float64)
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0]], dtype=torch.float64)
    advantages = torch.tensor([[1.0, -1.0, 1.0, -2.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.float64)
    logprobs = (old + ratios.log()).requires_grad_(True)
    out = compute_policy_loss("cispo", logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2)
    out.loss.backward()
    weights = torch.tensor([[1.2, 0.8, 1.05, 1.2]], dtype=torch.float64)  # clip(r, 0.8, 1.2)
    assert torch.allclose(logprobs.grad, -weights * advantages / 4, rtol=1e-12, atol=0)
    assert (logprobs.grad != 0).all()
    assert (out.metrics["clip_frac_low"], out.metrics["clip_frac_high"]) == (0.25, 0.5)
    # ppo-clip with the same bounds gives the first two (clipped) tokens no gradient at all
    ppo_logprobs = (old + ratios.log()).requires_grad_(True)
    policy_loss(ppo_logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2).loss.backward()
    assert ppo_logprobs.grad[0, :2].tolist() == [0.0, 0.0] and (ppo_logprobs.grad[0, 2:] != 0).all()


def test_clip_cov_detaches_exactly_the_drawn_tokens() -> None:
    logprobs, old, advantages, mask = _random_batch(5, B=6, T=10)
    params = dict(clip_low=0.2, clip_high=0.28, cov_lb=-0.5, cov_ub=0.5)
    ppo_logprobs = logprobs.clone().requires_grad_(True)
    policy_loss(ppo_logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.28).loss.backward()
    covariance = _loop_covariance(*_lists(logprobs, advantages, mask))
    ratio = (logprobs - old).exp()
    clipped = ((advantages < 0) & (ratio < 0.8)) | ((advantages > 0) & (ratio > 1.28))
    candidates = {k for k, c in covariance.items() if -0.5 < c < 0.5 and not clipped[k]}
    assert clipped[mask.bool()].any() and len(candidates) > 8
    count = int(0.2 * mask.sum())
    for seed in range(3):
        torch.manual_seed(seed)
        lp = logprobs.clone().requires_grad_(True)
        out = compute_policy_loss("clip-cov", lp, old, advantages, mask, cov_ratio=0.2, **params)
        out.loss.backward()
        gone = {(b, t) for b, t in covariance if lp.grad[b, t] == 0 and ppo_logprobs.grad[b, t] != 0}
        assert gone <= candidates and len(gone) == count
        assert out.metrics["cov_selected_frac"] == pytest.approx(count / float(mask.sum()))
        kept = ~torch.zeros_like(mask, dtype=torch.bool)
        for b, t in gone:
            kept[b, t] = False
        assert torch.allclose(lp.grad[kept], ppo_logprobs.grad[kept], rtol=1e-12, atol=0)
    # a ratio of 1 detaches every candidate
    lp = logprobs.clone().requires_grad_(True)
    compute_policy_loss("clip-cov", lp, old, advantages, mask, cov_ratio=1.0, **params).loss.backward()
    assert {k for k in covariance if lp.grad[k] == 0 and ppo_logprobs.grad[k] != 0} == candidates


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("bounds", [(3e-4, 4e-4), (0.02, 0.03), (1.0 - 1e-9, 10.0)])
def test_gspo_token_equals_gspo_when_each_sequence_has_one_advantage(aggregation, bounds) -> None:
    logprobs, old, advantages, mask = _random_batch(6)
    shared = advantages[:, :1].expand_as(advantages) * mask
    params = dict(clip_low=bounds[0], clip_high=bounds[1], aggregation=aggregation)
    results = []
    for name in ("gspo", "gspo-token"):
        lp = logprobs.clone().requires_grad_(True)
        out = compute_policy_loss(name, lp, old, shared, mask, **params)
        (grad,) = torch.autograd.grad(out.loss, lp)
        results.append((out.loss.item(), grad, out.metrics))
    (value, grad, metrics), (token_value, token_grad, token_metrics) = results
    assert token_value == pytest.approx(value, rel=1e-12, abs=1e-15)
    assert torch.allclose(token_grad, grad, rtol=1e-10, atol=1e-15)
    assert token_metrics == pytest.approx(metrics)
    assert grad.abs().sum() > 0


def test_gspo_gradient_spreads_the_sequence_ratio_over_its_tokens() -> None:
    """Unclipped: d loss_i / d log pi_t = -A_i s_i / |y_i| for each of its tokens."""
    logprobs, old, advantages, mask = _random_batch(7)
    lp = logprobs.clone().requires_grad_(True)
    compute_policy_loss(
        "gspo", lp, old, advantages, mask, clip_low=0.9, clip_high=10.0, aggregation="seq-mean-token-mean"
    ).loss.backward()
    lengths = mask.sum(-1).clamp(min=1)
    s = (((logprobs - old) * mask).sum(-1) / lengths).exp()
    mean_adv = (advantages * mask).sum(-1) / lengths
    expected = (-mean_adv * s / lengths / 5)[:, None] * mask
    assert torch.allclose(lp.grad, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ["sapo", "reinforce", "gpg", "cispo", "gspo-token"])
def test_first_update_gradient_is_the_policy_gradient(name) -> None:
    """With old = current (one update per batch) each of these has the gradient of
    -A log pi (for gspo-token with one advantage per sequence)."""
    logprobs, _, advantages, mask = _random_batch(8)
    advantages = advantages[:, :1].expand_as(advantages) * mask
    for aggregation in AGGREGATIONS:
        lp = logprobs.clone().requires_grad_(True)
        compute_policy_loss(name, lp, logprobs.clone(), advantages, mask, aggregation=aggregation).loss.backward()
        reference = logprobs.clone().requires_grad_(True)
        aggregate(-advantages * reference, mask, aggregation).backward()
        assert torch.allclose(lp.grad, reference.grad, rtol=1e-12, atol=1e-15), aggregation


@pytest.mark.parametrize("name", ["gspo-token", "cispo", "sapo", "gpg", "reinforce"])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_advantage_scaling_is_a_per_token_loss_weight(name, aggregation) -> None:
    """What the rollout correction relies on: loss(A * w) = aggregate(loss_t(A) * w)."""
    logprobs, old, advantages, mask = _random_batch(9)
    gen = torch.Generator().manual_seed(10)
    weights = torch.rand(advantages.shape, generator=gen, dtype=torch.float64) * 2
    weights[0, :3] = 0.0
    scaled = compute_policy_loss(name, logprobs, old, advantages * weights, mask, aggregation=aggregation).loss
    # one token's loss: the token sum with every other advantage set to 0 (those tokens
    # then lose 0; the mask stays whole, gspo-token's ratio reads the sequence)
    per_token = torch.zeros_like(advantages)
    for b, t in torch.nonzero(mask).tolist():
        one = torch.zeros_like(mask)
        one[b, t] = 1.0
        per_token[b, t] = compute_policy_loss(
            name, logprobs, old, advantages * one, mask, aggregation="seq-mean-token-sum", num_sequences=1.0
        ).loss
    assert scaled.item() == pytest.approx(
        aggregate(per_token * weights, mask, aggregation).item(), rel=1e-10, abs=1e-12
    )


def test_gspo_scaling_by_one_weight_per_sequence() -> None:
    """gspo reads the sequence's mean weighted advantage: a weight per sequence (seq-tis,
    seq-mis) scales its loss term exactly."""
    logprobs, old, advantages, mask = _random_batch(11)
    weights = torch.tensor([0.5, 1.5, 1.0, 0.0, 2.0], dtype=torch.float64)[:, None].expand_as(advantages)
    params = dict(clip_low=0.02, clip_high=0.02, aggregation="seq-mean-token-mean")
    scaled = compute_policy_loss("gspo", logprobs, old, advantages * weights, mask, **params).loss
    rows = [
        compute_policy_loss(
            "gspo", logprobs[b : b + 1], old[b : b + 1], advantages[b : b + 1], mask[b : b + 1], **params
        ).loss
        for b in range(5)
    ]
    assert scaled.item() == pytest.approx(
        sum(w * r.item() for w, r in zip(weights[:, 0].tolist(), rows)) / 5, rel=1e-12
    )


def test_registry_names_and_parameters() -> None:
    assert set(NEW_LOSSES) | {"ppo-clip"} == set(POLICY_LOSSES)
    tail = ("aggregation", "num_tokens", "num_sequences", "norm_length")
    assert POLICY_LOSSES.params("gspo") == POLICY_LOSSES.params("gspo-token") == ("clip_low", "clip_high", *tail)
    assert POLICY_LOSSES.params("cispo") == ("clip_low", "clip_high", *tail)
    assert POLICY_LOSSES.params("sapo") == ("tau_pos", "tau_neg", *tail)
    assert POLICY_LOSSES.params("clip-cov") == (
        "clip_low",
        "clip_high",
        "cov_ratio",
        "cov_lb",
        "cov_ub",
        *tail,
    )
    assert POLICY_LOSSES.params("kl-cov") == ("cov_ratio", "kl_coef", *tail)
    assert POLICY_LOSSES.params("gpg") == POLICY_LOSSES.params("reinforce") == tail
    with pytest.raises(
        TypeError,
        match="policy loss 'gspo' takes no parameter 'gspo_clip_low'; its parameters: clip_low, clip_high",
    ):
        compute_policy_loss("gspo", *_hand_batch(), gspo_clip_low=0.2)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_row_local_losses_ignore_zero_advantage_rows_exactly(name: str, aggregation: str) -> None:
    """What lets the trainer skip all-zero-advantage trajectories: for a row-local loss,
    dropping such rows (the normalisers kept the whole batch's) leaves the loss and every
    other row's gradient unchanged, and the dropped rows get a zero gradient. The
    covariance losses select tokens across rows, so they are not row-local."""
    assert (name in ROW_LOCAL_LOSSES) == (name not in ("clip-cov", "kl-cov"))
    if name not in ROW_LOCAL_LOSSES:
        return
    logprobs, old, advantages, mask = _random_batch(23)
    advantages[1] = 0.0
    advantages[3] = 0.0
    keep = [0, 2, 4]
    norms = dict(num_tokens=float(mask.sum()), num_sequences=5.0, norm_length=7.0, aggregation=aggregation)
    whole = logprobs.clone().requires_grad_(True)
    full = compute_policy_loss(name, whole, old, advantages, mask, **norms).loss
    full.backward()
    part = logprobs[keep].clone().requires_grad_(True)
    kept = compute_policy_loss(name, part, old[keep], advantages[keep], mask[keep], **norms).loss
    kept.backward()
    assert kept.item() == pytest.approx(full.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(whole.grad[keep], part.grad, rtol=1e-12, atol=1e-15)
    assert torch.count_nonzero(whole.grad[[1, 3]]) == 0
