import math

import pytest
import torch

from agentic_rl.algorithms import PRESET_DESCRIPTIONS, PRESETS, kl_penalty, overlong_penalty
from agentic_rl.config import AlgorithmConfig, RewardConfig, RLConfig, TrainConfig


def test_kl_hand_values():
    logp = torch.tensor([math.log(0.5)])
    logref = torch.tensor([math.log(0.25)])
    assert kl_penalty(logp, logref, "k1").item() == pytest.approx(math.log(2))
    assert kl_penalty(logp, logref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_penalty(logp, logref, "k3").item() == pytest.approx(0.5 + math.log(2) - 1)


def test_kl_zero_when_equal_and_k3_nonnegative():
    gen = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 8, generator=gen)
    for estimator in ("k1", "k2", "k3"):
        assert torch.all(kl_penalty(logp, logp, estimator) == 0)
    logref = torch.randn(4, 8, generator=gen) * 30  # includes log-ratios beyond the clamp
    k3 = kl_penalty(logp, logref, "k3")
    assert torch.all(k3 >= 0) and torch.all(torch.isfinite(k3))


def test_k3_estimates_true_kl():
    torch.manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.3, 0.5])
    true_kl = float((p * (p / q).log()).sum())
    samples = torch.multinomial(p, 20000, replacement=True)
    estimate = kl_penalty(p.log()[samples], q.log()[samples], "k3").mean().item()
    assert estimate == pytest.approx(true_kl, rel=0.05)


def test_kl_unknown_estimator():
    with pytest.raises(ValueError, match="k3"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")


def test_overlong_penalty_boundaries():
    # max 15, buffer 4: the ramp starts after L = 11 (max - buffer)
    lengths = torch.tensor([10, 11, 12, 13, 14, 15, 16])
    out = overlong_penalty(lengths, max_length=15, buffer=4)
    assert torch.allclose(out, torch.tensor([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]))
    assert torch.all(overlong_penalty(lengths, max_length=15, buffer=0) == 0)
    with pytest.raises(ValueError):
        overlong_penalty(lengths, max_length=15, buffer=16)


def _holds(actual, expected) -> bool:
    """``expected`` (a preset's sparse overlay) is in ``actual`` (a dumped section); a plain
    string stands for a ``{name, ...}`` slot's name or a section's kind (``critic: shared``)."""
    if isinstance(expected, dict):
        return all(_holds(actual[key], value) for key, value in expected.items())
    if isinstance(actual, dict):
        return expected in (actual.get("name"), actual.get("kind"))
    return actual == expected


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_validates(name):
    config = AlgorithmConfig(preset=name)
    assert _holds(config.model_dump(), PRESETS[name].get("algorithm", {}))
    train = TrainConfig(algorithm={"preset": name})  # the reward and rl parts: the training config
    for section in ("reward", "rl"):
        assert _holds(getattr(train, section).model_dump(), PRESETS[name].get(section, {}))
    assert PRESET_DESCRIPTIONS[name]


def test_preset_keys_and_named_values():
    # every field has a default (presets are sparse overlays), so none is ever missing
    assert not {name for name, field in AlgorithmConfig.model_fields.items() if field.is_required()}
    for preset in PRESETS.values():
        assert set(preset) <= {"algorithm", "reward", "rl"}
        assert set(preset.get("algorithm", {})) <= set(AlgorithmConfig.model_fields)
        assert set(preset.get("reward", {})) <= set(RewardConfig.model_fields)
        assert set(preset.get("rl", {})) <= set(RLConfig.model_fields)
    assert set(PRESET_DESCRIPTIONS) == set(PRESETS)
    default = AlgorithmConfig()
    assert (
        default.preset,
        default.aggregation,
        default.policy_loss.params["clip_low"],
        default.policy_loss.params["clip_high"],
        TrainConfig().reward.overlong_buffer,
        default.kl.coef,
    ) == ("grpo-tcr", "token-mean", 0.2, 0.315, 64, 0.0)
    # DAPO and StarPO-S keep the 0.28 of their papers; the GRPO-TCR variants follow GRPO-TCR.
    assert [
        PRESETS[name]["algorithm"]["policy_loss"]["clip_high"] for name in ("dapo", "starpo-s", "mt-grpo", "gigpo")
    ] == [
        0.28,
        0.28,
        0.315,
        0.315,
    ]
    assert PRESETS["grpo"]["algorithm"]["kl"]["coef"] == 0.04
    assert PRESETS["dr-grpo"]["algorithm"]["advantage"]["normalize_by_std"] is False


def test_explicit_fields_override_preset():
    config = AlgorithmConfig(
        preset="grpo", kl={"coef": 0.1}, aggregation="token-mean", advantage={"normalize_by_std": False}
    )
    assert (config.kl.coef, config.aggregation, config.advantage.params["normalize_by_std"]) == (
        0.1,
        "token-mean",
        False,
    )
    assert config.advantage.name == "grpo" and config.kl.estimator == "k3"
    assert config.policy_loss.params["clip_high"] == 0.2
