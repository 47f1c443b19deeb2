"""Config-time checks: registry names with close-match suggestions, one-line errors in the
CLI, each registered function handed exactly its own parameters, and a light import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import agentic_rl
from agentic_rl.algorithms import ADVANTAGES, GROUP_FILTERS, POLICY_LOSSES, PRESETS
from agentic_rl.cli import main
from agentic_rl.config import AlgorithmConfig, ConfigError, TrainConfig, build


@pytest.mark.parametrize(
    "field, typo, message",
    [
        (
            "advantage",
            "grpoo",
            "algorithm.advantage: unknown advantage estimator 'grpoo' (did you mean 'grpo'?); known: gae, gigpo, grpo, grpo-passk, mt-grpo, opo, ",
        ),
        (
            "policy_loss",
            "ppo_clip",
            "algorithm.policy_loss: unknown policy loss 'ppo_clip' (did you mean 'ppo-clip'?); known: cispo, clip-cov, gpg, gspo, gspo-token, kl-cov, ppo-clip, reinforce, sapo",
        ),
        (
            "policy_loss",
            "gspo_token",
            "algorithm.policy_loss: unknown policy loss 'gspo_token' (did you mean 'gspo-token'?); known: ",
        ),
        (
            "group_filter",
            "top",
            "algorithm.group_filter: unknown group filter 'top' (did you mean 'top-std'?); known: none, top-std, zero-variance",
        ),
        (
            "aggregation",
            "token_mean",
            "algorithm.aggregation: unknown aggregation 'token_mean' (did you mean 'token-mean'?); known: ",
        ),
        (
            "kl_estimator",
            "k33",
            "algorithm.kl_estimator: unknown KL estimator 'k33' (did you mean 'k3'?); known: k1, k2, k3",
        ),
        ("preset", "grpoo", "algorithm.preset: unknown preset 'grpoo' (did you mean 'grpo'?); known: grpo, dr-grpo, "),
    ],
)
def test_registry_names_are_checked_when_the_config_is_built(field, typo, message) -> None:
    with pytest.raises(ConfigError) as info:
        build(TrainConfig, {"algorithm": {field: typo}})
    assert str(info.value).startswith(message), str(info.value)


def test_a_name_without_a_close_match_lists_the_known_ones() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^algorithm.advantage: unknown advantage estimator 'zzz'; known: gae, gigpo, grpo, grpo-passk, mt-grpo, opo, reinforce\+\+, reinforce\+\+-baseline, remax, rloo$",
    ):
        build(TrainConfig, {"algorithm": {"advantage": "zzz"}})


def test_cli_prints_a_bad_name_in_one_line(capsys) -> None:
    assert main(["train", "smoke", "--set", "algorithm.advantage=grpoo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "agentic-rl: error: algorithm.advantage: unknown advantage estimator 'grpoo' (did you mean 'grpo'?); known: "
    )
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"algorithm": {"preset": "ppo", "critic": "none"}},
            "algorithm.critic: the gae advantage needs a critic ('shared' or 'separate')",
        ),
        (
            {"algorithm": {"preset": "gigpo"}, "group_size": 1},
            "group_size: the gigpo advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "opo"}, "group_size": 1},
            "group_size: the opo advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "grpo-passk"}, "group_size": 1},
            "group_size: the grpo-passk advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "remax"}, "distributed": {"engine": "ray"}},
            "algorithm.advantage: remax runs with local rollouts for now (distributed.engine: local, no max_staleness)",
        ),
        (
            {"algorithm": {"advantage": "remax", "rollout": "arpo"}},
            "algorithm.advantage: remax samples a greedy baseline beside each group; use algorithm.rollout: group",
        ),
        (
            {"algorithm": {"clip_cov_lb": 2.0, "clip_cov_ub": 2.0}},
            "algorithm.clip_cov_ub: must be above clip_cov_lb (2.0), got 2.0",
        ),
        ({"algorithm": {"gspo_clip_low": 1.0}}, "algorithm.gspo_clip_low: input should be less than 1 (got 1.0)"),
        (
            {"algorithm": {"gspo_clip_high": -1e-4}},
            "algorithm.gspo_clip_high: input should be greater than or equal to 0 (got -0.0001)",
        ),
        (
            {"algorithm": {"cispo_clip_low": -0.1}},
            "algorithm.cispo_clip_low: input should be greater than or equal to 0 (got -0.1)",
        ),
        ({"algorithm": {"sapo_tau_neg": 0.0}}, "algorithm.sapo_tau_neg: input should be greater than 0 (got 0.0)"),
        ({"algorithm": {"clip_cov_ratio": 0.0}}, "algorithm.clip_cov_ratio: input should be greater than 0 (got 0.0)"),
        (
            {"algorithm": {"kl_cov_ratio": 1.5}},
            "algorithm.kl_cov_ratio: input should be less than or equal to 1 (got 1.5)",
        ),
        (
            {"algorithm": {"kl_cov_coef": -1}},
            "algorithm.kl_cov_coef: input should be greater than or equal to 0 (got -1)",
        ),
        (
            {"tracking": {"sinks": ["tensorbored"]}},
            "tracking.sinks: unknown metric sink 'tensorbored'; choose from jsonl, tensorboard, wandb, mlflow",
        ),
        (
            {"dpo": {"train": {"loss_type": "ipo", "label_smoothing": 0.1}}},
            "dpo.train.label_smoothing: only the sigmoid (DPO) loss uses it",
        ),
        (
            {"distributed": {"max_staleness": 1}},
            "distributed.max_staleness: async mode needs distributed.engine ray (rollout workers beside the trainer)",
        ),
        (
            {"distributed": {"engine": "ray"}, "backend": {"kind": "sglang", "base_url": "http://127.0.0.1:30000"}},
            "backend.kind: distributed.engine ray: Ray rollout workers run the hf engine or a managed vLLM server each",
        ),
        (
            {"distributed": {"engine": "ray"}, "backend": {"kind": "vllm", "base_url": "http://127.0.0.1:8000"}},
            "backend.base_url: distributed.engine ray: each rollout worker starts and feeds its own vLLM server (drop base_url)",
        ),
        (
            {"distributed": {"engine": "ray"}, "algorithm": {"rollout": "arpo"}},
            "algorithm.rollout: distributed.engine ray: ARPO's branching runs in the trainer process only",
        ),
        (
            {"distributed": {"engine": "ray", "max_staleness": 1}, "algorithm": {"rollout_correction": "none"}},
            "algorithm.rollout_correction: distributed.engine ray: async mode samples from older weights: it needs a correction (auto, tis, mis, seq-tis, seq-mis or decoupled)",
        ),
        (
            {"distributed": {"engine": "ray", "max_staleness": -1}},
            "distributed.max_staleness: input should be greater than or equal to 0 (got -1)",
        ),
        (
            {"distributed": {"engine": "ray", "worker_cpus": 0}},
            "distributed.worker_cpus: input should be greater than 0 (got 0)",
        ),
    ],
)
def test_validator_errors_name_the_dotted_key(data, message) -> None:
    with pytest.raises(ConfigError) as info:
        build(TrainConfig, data)
    assert str(info.value) == message


@pytest.mark.parametrize("preset", list(PRESETS))
def test_each_function_gets_exactly_its_own_parameters(preset) -> None:
    config = AlgorithmConfig(preset=preset)
    knobs = config.knobs()
    for params, registry, name in (
        (config.advantage_params(), ADVANTAGES, config.advantage),
        (config.policy_loss_params(), POLICY_LOSSES, config.policy_loss),
        (config.group_filter_params(), GROUP_FILTERS, config.group_filter),
    ):
        assert set(params) == set(registry.params(name)) & set(knobs)
        assert all(params[key] == knobs[key] for key in params)


def test_parameter_mapping_by_hand() -> None:
    ppo = AlgorithmConfig(preset="ppo", gamma=0.9, whiten_advantages=False)
    assert ppo.advantage_params() == {"gamma": 0.9, "lam": 0.95, "whiten": False}
    assert AlgorithmConfig(preset="grpo").advantage_params() == {"normalize_by_std": True}
    assert AlgorithmConfig(preset="rloo").advantage_params() == {}
    assert AlgorithmConfig(preset="gigpo").advantage_params() == {
        "gamma": 0.95,
        "step_advantage_weight": 1.0,
        "normalize_by_std": True,
    }
    assert AlgorithmConfig(preset="starpo-s", keep_fraction=0.5).group_filter_params() == {"keep_fraction": 0.5}
    assert AlgorithmConfig(preset="dapo").group_filter_params() == {}
    default = AlgorithmConfig()
    assert default.policy_loss == "ppo-clip"
    assert default.policy_loss_params() == {
        "clip_low": 0.2,
        "clip_high": 0.315,
        "clip_ratio_c": None,
        "aggregation": "token-mean",
    }
    assert AlgorithmConfig(preset="gspo").policy_loss_params() == {
        "gspo_clip_low": 3e-4,
        "gspo_clip_high": 4e-4,
        "aggregation": "seq-mean-token-mean",
    }
    assert AlgorithmConfig(preset="cispo").policy_loss_params() == {
        "cispo_clip_low": None,
        "cispo_clip_high": 0.2,
        "aggregation": "token-mean",
    }
    assert AlgorithmConfig(policy_loss="sapo").policy_loss_params() == {
        "sapo_tau_pos": 1.0,
        "sapo_tau_neg": 1.05,
        "aggregation": "token-mean",
    }
    assert AlgorithmConfig(policy_loss="clip-cov").policy_loss_params() == {
        "clip_low": 0.2,
        "clip_high": 0.315,
        "clip_cov_ratio": 2e-4,
        "clip_cov_lb": 1.0,
        "clip_cov_ub": 5.0,
        "aggregation": "token-mean",
    }
    assert AlgorithmConfig(policy_loss="kl-cov").policy_loss_params() == {
        "kl_cov_ratio": 2e-4,
        "kl_cov_coef": 0.1,
        "aggregation": "token-mean",
    }
    assert (
        AlgorithmConfig(policy_loss="gpg").policy_loss_params()
        == AlgorithmConfig(policy_loss="reinforce").policy_loss_params()
        == {"aggregation": "token-mean"}
    )
    assert AlgorithmConfig(advantage="grpo-passk").advantage_params() == {"normalize_by_std": True}
    assert (
        AlgorithmConfig(advantage="opo").advantage_params()
        == AlgorithmConfig(advantage="remax").advantage_params()
        == {}
    )


def test_explicit_none_means_from_the_preset() -> None:
    config = AlgorithmConfig(preset="grpo", kl_coef=None, clip_ratio_c=None)
    assert (config.kl_coef, config.clip_ratio_c) == (0.04, None)
    with pytest.raises(ValueError, match="preset"):
        AlgorithmConfig(preset=None)


def _import_in_subprocess(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(agentic_rl.__file__).parents[1])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_importing_the_config_does_not_import_torch() -> None:
    result = _import_in_subprocess("import agentic_rl.config, sys; assert 'torch' not in sys.modules")
    assert result.returncode == 0, result.stderr


def test_building_a_config_imports_nothing_from_tracking_or_rollout_arpo() -> None:
    code = (
        "import sys; from agentic_rl.config import TrainConfig; "
        "TrainConfig.model_validate({'tracking': {'sinks': ['jsonl']}, 'algorithm': {'rollout': 'arpo'}}); "
        "bad = [m for m in sys.modules if m.startswith(('agentic_rl.tracking', 'agentic_rl.rollout.arpo'))]; assert not bad, bad"
    )
    result = _import_in_subprocess(code)
    assert result.returncode == 0, result.stderr
