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
from agentic_rl.config.algorithm import TRAINER_SUPPLIED, function_params


@pytest.mark.parametrize(
    "field, typo, message",
    [
        (
            "advantage",
            "grpoo",
            "algorithm.advantage.name: unknown advantage estimator 'grpoo' (did you mean 'grpo'?); known: gae, gigpo, grpo, grpo-passk, mt-grpo, opo, ",
        ),
        (
            "policy_loss",
            "ppo_clip",
            "algorithm.policy_loss.name: unknown policy loss 'ppo_clip' (did you mean 'ppo-clip'?); known: cispo, clip-cov, gpg, gspo, gspo-token, kl-cov, ppo-clip, reinforce, sapo",
        ),
        (
            "policy_loss",
            "gspo_token",
            "algorithm.policy_loss.name: unknown policy loss 'gspo_token' (did you mean 'gspo-token'?); known: ",
        ),
        (
            "group_filter",
            "top",
            "algorithm.group_filter.name: unknown group filter 'top' (did you mean 'top-std'?); known: none, top-std, zero-variance",
        ),
        (
            "aggregation",
            "token_mean",
            "algorithm.aggregation: unknown aggregation 'token_mean' (did you mean 'token-mean'?); known: ",
        ),
        (
            "kl",
            {"estimator": "k33"},
            "algorithm.kl.estimator: unknown KL estimator 'k33' (did you mean 'k3'?); known: k1, k2, k3",
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
        match=r"^algorithm.advantage.name: unknown advantage estimator 'zzz'; known: gae, gigpo, grpo, grpo-passk, mt-grpo, opo, reinforce\+\+, reinforce\+\+-baseline, remax, rloo$",
    ):
        build(TrainConfig, {"algorithm": {"advantage": "zzz"}})


def test_cli_prints_a_bad_name_in_one_line(capsys) -> None:
    assert main(["train", "smoke", "--set", "algorithm.advantage=grpoo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "agentic-rl: error: algorithm.advantage.name: unknown advantage estimator 'grpoo' (did you mean 'grpo'?); known: "
    )
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "data, message",
    [
        (
            {"algorithm": {"preset": "ppo", "critic": "none"}},
            "algorithm.critic: the gae advantage needs a critic (kind 'shared' or 'separate')",
        ),
        (
            {"algorithm": {"preset": "gigpo"}, "rl": {"group_size": 1}},
            "rl.group_size: the gigpo advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "opo"}, "rl": {"group_size": 1}},
            "rl.group_size: the opo advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "grpo-passk"}, "rl": {"group_size": 1}},
            "rl.group_size: the grpo-passk advantage needs at least 2 samples per task",
        ),
        (
            {"algorithm": {"advantage": "remax"}, "distributed": {"engine": "ray"}},
            "algorithm.advantage.name: remax runs with local rollouts for now (distributed.engine: local, no max_staleness)",
        ),
        (
            {"algorithm": {"advantage": "remax"}, "rl": {"sampling": "arpo"}},
            "algorithm.advantage.name: remax samples a greedy baseline beside each group; use rl.sampling: group",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "clip-cov", "cov_lb": 2.0, "cov_ub": 2.0}}},
            "algorithm.policy_loss: cov_ub must be above cov_lb (2.0), got 2.0",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "gspo", "clip_low": 1.0}}},
            "algorithm.policy_loss.clip_low: input should be less than 1 (got 1.0)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "gspo", "clip_high": -1e-4}}},
            "algorithm.policy_loss.clip_high: input should be greater than or equal to 0 (got -0.0001)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "cispo", "clip_low": -0.1}}},
            "algorithm.policy_loss.clip_low: input should be greater than or equal to 0 (got -0.1)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "sapo", "tau_neg": 0.0}}},
            "algorithm.policy_loss.tau_neg: input should be greater than 0 (got 0.0)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "clip-cov", "cov_ratio": 0.0}}},
            "algorithm.policy_loss.cov_ratio: input should be greater than 0 (got 0.0)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "kl-cov", "cov_ratio": 1.5}}},
            "algorithm.policy_loss.cov_ratio: input should be less than or equal to 1 (got 1.5)",
        ),
        (
            {"algorithm": {"policy_loss": {"name": "kl-cov", "kl_coef": -1}}},
            "algorithm.policy_loss.kl_coef: input should be greater than or equal to 0 (got -1)",
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
            {"distributed": {"engine": "ray"}, "rl": {"sampling": "arpo"}},
            "rl.sampling: distributed.engine ray: ARPO's branching runs in the trainer process only",
        ),
        (
            {"distributed": {"engine": "ray", "max_staleness": 1}, "algorithm": {"correction": "none"}},
            "algorithm.correction.kind: distributed.engine ray: async mode samples from older weights: it needs a correction (auto, tis, mis, seq-tis, seq-mis or decoupled)",
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
    """Each slot's ``params`` are exactly its function's own keyword parameters (in signature
    order, defaults filled in), never the ones the trainer supplies (aggregation, ...)."""
    config = AlgorithmConfig(preset=preset)
    for spec, registry in (
        (config.advantage, ADVANTAGES),
        (config.policy_loss, POLICY_LOSSES),
        (config.group_filter, GROUP_FILTERS),
    ):
        own = [key for key in registry.params(spec.name) if key not in TRAINER_SUPPLIED]
        assert list(spec.params) == own
        assert list(spec.params) == list(function_params(spec.kind, spec.name))
        assert "aggregation" not in spec.params
        # what the preset names for the slot is what the function gets
        named = (
            PRESETS[preset]
            .get("algorithm", {})
            .get(
                {"advantage estimator": "advantage", "policy loss": "policy_loss", "group filter": "group_filter"}[
                    registry.kind
                ],
                {},
            )
        )
        named = {"name": named} if isinstance(named, str) else named
        assert spec.name == named.get("name", spec.name)
        assert all(spec.params[key] == value for key, value in named.items() if key != "name")


def test_parameter_mapping_by_hand() -> None:
    ppo = AlgorithmConfig(preset="ppo", advantage={"gamma": 0.9, "whiten": False})
    assert ppo.advantage.name == "gae"
    assert ppo.advantage.params == {"gamma": 0.9, "lam": 0.95, "whiten": False}
    assert ppo.return_params() == {"gamma": 0.9, "lam": 0.95}
    assert AlgorithmConfig(preset="grpo").return_params() == {"gamma": 1.0, "lam": 0.95}
    assert AlgorithmConfig(preset="grpo").advantage.params == {"epsilon": 1e-6, "normalize_by_std": True}
    assert AlgorithmConfig(preset="dr-grpo").advantage.params == {"epsilon": 1e-6, "normalize_by_std": False}
    assert AlgorithmConfig(preset="rloo").advantage.params == {}
    assert AlgorithmConfig(preset="gigpo").advantage.params == {
        "gamma": 0.95,
        "step_advantage_weight": 1.0,
        "epsilon": 1e-6,
        "normalize_by_std": True,
    }
    assert AlgorithmConfig(preset="starpo-s").group_filter.params == {"keep_fraction": 0.25}
    starpo = AlgorithmConfig(preset="starpo-s", group_filter={"keep_fraction": 0.5})
    assert (starpo.group_filter.name, starpo.group_filter.params) == ("top-std", {"keep_fraction": 0.5})
    dapo = AlgorithmConfig(preset="dapo")
    assert (dapo.group_filter.name, dapo.group_filter.params) == ("zero-variance", {})
    default = AlgorithmConfig()
    assert default.preset == "grpo-tcr" and default.policy_loss.name == "ppo-clip"
    assert default.policy_loss.params == {"clip_low": 0.2, "clip_high": 0.315, "clip_ratio_c": None}
    assert default.aggregation == "token-mean"
    gspo = AlgorithmConfig(preset="gspo")
    assert (gspo.policy_loss.name, gspo.aggregation) == ("gspo", "seq-mean-token-mean")
    assert gspo.policy_loss.params == {"clip_low": 3e-4, "clip_high": 4e-4}
    assert AlgorithmConfig(preset="cispo").policy_loss.params == {"clip_low": None, "clip_high": 0.2}
    # a policy loss other than the preset's runs at its own defaults (GRPO-TCR's clip_high is ppo-clip's)
    assert AlgorithmConfig(policy_loss="sapo").policy_loss.params == {"tau_pos": 1.0, "tau_neg": 1.05}
    assert AlgorithmConfig(policy_loss="clip-cov").policy_loss.params == {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "cov_ratio": 2e-4,
        "cov_lb": 1.0,
        "cov_ub": 5.0,
    }
    assert AlgorithmConfig(policy_loss="kl-cov").policy_loss.params == {"cov_ratio": 2e-4, "kl_coef": 0.1}
    assert AlgorithmConfig(policy_loss="gpg").policy_loss.params == {}
    assert AlgorithmConfig(policy_loss="reinforce").policy_loss.params == {}
    assert AlgorithmConfig(policy_loss="gspo-token").policy_loss.params == {"clip_low": 3e-4, "clip_high": 4e-4}
    assert AlgorithmConfig(advantage="grpo-passk").advantage.params == {"epsilon": 1e-6, "normalize_by_std": True}
    assert (
        AlgorithmConfig(advantage="opo").advantage.params == AlgorithmConfig(advantage="remax").advantage.params == {}
    )
    assert AlgorithmConfig(preset="reinforce++").advantage.params == {"gamma": 1.0}


def test_explicit_none_means_from_the_preset() -> None:
    config = AlgorithmConfig(preset="grpo", kl={"coef": None}, policy_loss={"clip_ratio_c": None})
    assert (config.kl.coef, config.policy_loss.params["clip_ratio_c"]) == (0.04, None)
    tcr = AlgorithmConfig(preset="grpo-tcr", policy_loss={"clip_high": None}, advantage=None)
    assert (tcr.policy_loss.params["clip_high"], tcr.advantage.name) == (0.315, "grpo")
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
        "TrainConfig.model_validate({'tracking': {'sinks': ['jsonl']}, 'rl': {'sampling': 'arpo'}}); "
        "bad = [m for m in sys.modules if m.startswith(('agentic_rl.tracking', 'agentic_rl.rollout.arpo'))]; assert not bad, bad"
    )
    result = _import_in_subprocess(code)
    assert result.returncode == 0, result.stderr
