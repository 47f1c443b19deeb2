"""The nested training config (agentic-rl 0.2): every old flat key is a one-line error naming
its new home; ``{name, ...parameters}`` slots are checked against the registered function's
signature; shorthand strings; presets' parameters per slot and their reward / rl parts."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agentic_rl import envs
from agentic_rl.algorithms import ADVANTAGES, GROUP_FILTERS, POLICY_LOSSES
from agentic_rl.cli import main
from agentic_rl.config import MOVED, RESUMABLE_KEYS, AlgorithmConfig, ConfigError, TrainConfig, build, resume_config
from agentic_rl.config.algorithm import function_params
from agentic_rl.config.base import apply_assignments
from agentic_rl.config.renamed import RETIRED


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    """``"algorithm.kl_coef", 1`` -> ``{"algorithm": {"kl_coef": 1}}``."""
    data: Any = value
    for part in reversed(dotted.split(".")):
        data = {part: data}
    return data


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        build(TrainConfig, data)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ---------------------------------------------------------------- old keys


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_key_is_a_one_line_error_naming_its_new_home(old) -> None:
    value = {} if old == "arpo" else 1
    why = RETIRED[old][1] if old in RETIRED else "the config is nested since agentic-rl 0.2"
    assert _error(_nested(old, value)) == f"{old}: moved to {MOVED[old]} ({why})"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_key_beside_valid_new_ones_is_still_an_error(old) -> None:
    data = {"rl": {"steps": 3}, "algorithm": {"preset": "grpo", "kl": {"coef": 0.1}}}
    old_data = _nested(old, {} if old == "arpo" else 1)
    for key, value in old_data.items():
        data[key] = {**data[key], **value} if key in data and isinstance(value, dict) else value
    assert _error(data).startswith(f"{old}: moved to {MOVED[old]}")


def test_moved_homes_exist_in_the_new_config() -> None:
    """Each new home is a key of the nested config, or a parameter of a registered function
    (of the one its "(with policy_loss.name ...)" note names)."""
    registries = {"advantage": ADVANTAGES, "policy_loss": POLICY_LOSSES, "group_filter": GROUP_FILTERS}
    for old, new in MOVED.items():
        key, _, note = new.partition(" (with policy_loss.name ")
        parts = key.split(".")
        if parts[0] == "algorithm" and len(parts) == 3 and parts[1] in registries and parts[2] != "name":
            kind, param = parts[1], parts[2]
            names = [note.rstrip(")")] if note else sorted(registries[kind])
            assert any(param in function_params(kind, name) for name in names), (old, new)
            continue
        assert not note, (old, new)
        if parts[0] == "env":  # an env option: a parameter of the env factories
            assert all(envs.accepts_option(name, parts[1]) for name in ("arithmetic", "search-qa", "frozenlake"))
            continue
        model: Any = TrainConfig
        for part in parts:
            assert part in model.model_fields, (old, new)
            model = model.model_fields[part].annotation


def test_old_keys_from_set_and_yaml_are_one_line_cli_errors(tmp_path, capsys) -> None:
    assert main(["train", "smoke", "--set", "group_size=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "agentic-rl: error: group_size: moved to rl.group_size (the config is nested since agentic-rl 0.2)"
    assert main(["train", "smoke", "--set", "algorithm.kl_coef=0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "agentic-rl: error: algorithm.kl_coef: moved to algorithm.kl.coef (the config is nested since agentic-rl 0.2)"
    )
    (tmp_path / "old.yaml").write_text("base: smoke\nppo_epochs: 2\n")
    assert main(["train", str(tmp_path / "old.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "agentic-rl: error: ppo_epochs: moved to rl.epochs (the config is nested since agentic-rl 0.2)"


def test_keys_that_did_not_move_are_not_flagged() -> None:
    """sft.* / dpo.* have their own task_offset and micro_batch_tokens; they stay."""
    config = build(
        TrainConfig,
        {
            "sft": {"collect": {"task_offset": 7}, "train": {"micro_batch_tokens": 1024}},
            "dpo": {"train": {"micro_batch_tokens": 2048}},
            "rl": {"task_offset": 3, "micro_batch_tokens": 4096, "epochs": 2},
            "algorithm": {"kl": {"reference": "cpu"}},
        },
    )
    assert (config.sft.collect.task_offset, config.sft.train.micro_batch_tokens) == (7, 1024)
    assert config.dpo.train.micro_batch_tokens == 2048
    assert (config.rl.task_offset, config.rl.micro_batch_tokens, config.rl.epochs) == (3, 4096, 2)
    assert config.algorithm.kl.reference == "cpu"


def test_resume_of_a_flat_run_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        resume_config({"steps": 4, "group_size": 2}, {"rl": {"steps": 8}})
    message = str(info.value)
    assert message.startswith(
        "--resume: the run was written with the flat config of agentic-rl 0.1 (steps: moved to rl.steps)"
    )
    assert "\n" not in message
    assert "rl.steps" in RESUMABLE_KEYS and "steps" not in RESUMABLE_KEYS
    saved = build(TrainConfig, {"rl": {"steps": 4}}).model_dump(mode="json")
    config, changed = resume_config(saved, {"rl": {"steps": 8}})
    assert config.rl.steps == 8 and changed == ["rl.steps: 4 -> 8"]
    with pytest.raises(ConfigError, match=r"^--set on --resume: rl.group_size cannot change mid-run"):
        resume_config(saved, {"rl": {"group_size": 4}})


def test_the_env_is_the_one_turn_limit_and_old_runs_resume() -> None:
    """rollout.max_turns (an engine-side cap beside the env's) is gone: a config naming it is
    an error; a run saved with it at its old default resumes without it (one line says so),
    one that set it is refused in one line."""
    assert _error({"rollout": {"max_turns": 3}}) == (
        "rollout.max_turns: moved to env.max_turns (the env's max_turns is the one turn limit of an episode)"
    )
    saved = build(TrainConfig, {"rl": {"steps": 4}}).model_dump(mode="json")
    assert "max_turns" not in saved["rollout"]
    saved["rollout"]["max_turns"] = 16  # what every run written by 0.2 saved
    config, changed = resume_config(saved, {"rl": {"steps": 8}})
    assert config.rl.steps == 8
    assert changed == [
        "rollout.max_turns: 16 -> removed (the env's max_turns is the one turn limit of an episode)",
        "rl.steps: 4 -> 8",
    ]
    saved["rollout"]["max_turns"] = 3
    with pytest.raises(ConfigError) as info:
        resume_config(saved, None)
    assert str(info.value) == (
        "--resume: the run set rollout.max_turns to 3 (the env's max_turns is the one turn limit of an episode now: "
        "env.max_turns); this version cannot continue it: start a new run with env.max_turns"
    )


# ---------------------------------------------------------------- function parameters


@pytest.mark.parametrize(
    "algorithm, message",
    [
        (
            {"policy_loss": {"name": "gspo", "clip_hgh": 1e-3}},
            "algorithm.policy_loss: policy loss 'gspo' takes no parameter 'clip_hgh' (did you mean 'clip_high'?); its parameters: clip_low, clip_high",
        ),
        (
            # the old prefixed spelling is a parameter gspo no longer takes
            {"policy_loss": {"name": "gspo", "gspo_clip_low": 1e-3}},
            "algorithm.policy_loss: policy loss 'gspo' takes no parameter 'gspo_clip_low' (did you mean 'clip_low'?); its parameters: clip_low, clip_high",
        ),
        (
            # the trainer supplies the aggregation: it is algorithm.aggregation, not a parameter
            {"policy_loss": {"name": "ppo-clip", "aggregation": "token-mean"}},
            "algorithm.policy_loss: policy loss 'ppo-clip' takes no parameter 'aggregation'; its parameters: clip_low, clip_high, clip_ratio_c",
        ),
        (
            {"advantage": {"name": "rloo", "gamma": 0.9}},
            "algorithm.advantage: advantage estimator 'rloo' takes no parameter 'gamma'; its parameters: none",
        ),
        (
            {"advantage": {"name": "grpo", "whiten": True}},
            "algorithm.advantage: advantage estimator 'grpo' takes no parameter 'whiten'; its parameters: epsilon, normalize_by_std",
        ),
        (
            {"group_filter": {"name": "zero-variance", "keep_fraction": 0.5}},
            "algorithm.group_filter: group filter 'zero-variance' takes no parameter 'keep_fraction'; its parameters: none",
        ),
        (
            # a parameter of the preset's function is not one of the function the user names
            {"preset": "gspo", "policy_loss": {"name": "sapo", "clip_low": 0.1}},
            "algorithm.policy_loss: policy loss 'sapo' takes no parameter 'clip_low'; its parameters: tau_pos, tau_neg",
        ),
    ],
)
def test_a_parameter_the_function_does_not_take_is_named(algorithm, message) -> None:
    assert _error({"algorithm": algorithm}) == message


@pytest.mark.parametrize(
    "algorithm, message",
    [
        (
            {"policy_loss": {"name": "ppo-clip", "clip_low": 1.5}},
            "algorithm.policy_loss.clip_low: input should be less than 1 (got 1.5)",
        ),
        (
            {"policy_loss": {"clip_high": -0.1}},
            "algorithm.policy_loss.clip_high: input should be greater than or equal to 0 (got -0.1)",
        ),
        (
            {"policy_loss": {"clip_ratio_c": 1.0}},
            "algorithm.policy_loss.clip_ratio_c: input should be greater than 1 (got 1.0)",
        ),
        (
            {"policy_loss": {"clip_low": "wide"}},
            "algorithm.policy_loss.clip_low: input should be a valid number, unable to parse string as a number (got 'wide')",
        ),
        (
            {"advantage": {"name": "grpo", "normalize_by_std": "maybe"}},
            "algorithm.advantage.normalize_by_std: input should be a valid boolean, unable to interpret input (got 'maybe')",
        ),
        (
            {"preset": "starpo-s", "group_filter": {"keep_fraction": 0.0}},
            "algorithm.group_filter.keep_fraction: input should be greater than 0 (got 0.0)",
        ),
        ({"kl": {"coef": -0.1}}, "algorithm.kl.coef: input should be greater than or equal to 0 (got -0.1)"),
        (
            {"correction": {"kind": "tis", "cap": 0.5}},
            "algorithm.correction.cap: input should be greater than or equal to 1 (got 0.5)",
        ),
        (
            {"critic": "bogus"},
            "algorithm.critic.kind: input should be 'none', 'shared' or 'separate' (got 'bogus')",
        ),
    ],
)
def test_a_bad_parameter_value_names_the_nested_key(algorithm, message) -> None:
    assert _error({"algorithm": algorithm}) == message


def test_parameters_are_converted_and_complete_in_signature_order() -> None:
    config = build(
        TrainConfig, {"algorithm": {"policy_loss": {"clip_ratio_c": "3", "clip_high": 0.3, "name": "ppo-clip"}}}
    )
    assert list(config.algorithm.policy_loss.params.items()) == [
        ("clip_low", 0.2),
        ("clip_high", 0.3),
        ("clip_ratio_c", 3.0),
    ]
    # a saved config shows every parameter and builds back to the same config
    dumped = config.model_dump(mode="json")
    assert dumped["algorithm"]["policy_loss"] == {
        "name": "ppo-clip",
        "clip_low": 0.2,
        "clip_high": 0.3,
        "clip_ratio_c": 3.0,
    }
    assert build(TrainConfig, dumped) == config


@pytest.mark.parametrize("preset", ["grpo", "dapo", "mt-grpo", "gspo", "ppo", "starpo-s"])
def test_a_saved_config_builds_back_unchanged(preset) -> None:
    config = build(TrainConfig, {"algorithm": {"preset": preset}})
    assert build(TrainConfig, config.model_dump(mode="json")) == config


# ---------------------------------------------------------------- shorthand


def test_string_shorthand_names_the_function_or_kind() -> None:
    text = """
algorithm:
  advantage: rloo
  policy_loss: gspo
  group_filter: zero-variance
  critic: shared
  correction: tis
  kl: 0.05
"""
    algorithm = build(TrainConfig, yaml.safe_load(text)).algorithm
    assert (algorithm.advantage.name, algorithm.advantage.params) == ("rloo", {})
    assert (algorithm.policy_loss.name, algorithm.policy_loss.params) == ("gspo", {"clip_low": 3e-4, "clip_high": 4e-4})
    assert algorithm.group_filter.name == "zero-variance"
    assert (algorithm.critic.kind, algorithm.critic.value_loss_coef, algorithm.critic.lr) == ("shared", 0.5, 1e-5)
    assert (algorithm.correction.kind, algorithm.correction.cap) == ("tis", 2.0)
    assert (algorithm.kl.coef, algorithm.kl.estimator) == (0.05, "k3")
    assert (
        algorithm
        == build(
            TrainConfig,
            {
                "algorithm": {
                    "advantage": {"name": "rloo"},
                    "policy_loss": {"name": "gspo"},
                    "group_filter": {"name": "zero-variance"},
                    "critic": {"kind": "shared"},
                    "correction": {"kind": "tis"},
                    "kl": {"coef": 0.05},
                }
            },
        ).algorithm
    )


def test_set_assignments_take_the_shorthand_and_nested_keys() -> None:
    data = apply_assignments(
        {},
        [
            "algorithm.advantage=rloo",
            "algorithm.policy_loss=gspo",
            "algorithm.critic=separate",
            "algorithm.correction=seq-tis",
            "rl.epochs=2",
            "rl.sampling=group",
            "reward.overlong_buffer=32",
        ],
    )
    config = build(TrainConfig, data)
    algorithm = config.algorithm
    assert (algorithm.advantage.name, algorithm.policy_loss.name, algorithm.critic.kind, algorithm.correction.kind) == (
        "rloo",
        "gspo",
        "separate",
        "seq-tis",
    )
    assert algorithm.policy_loss.params == {"clip_low": 3e-4, "clip_high": 4e-4}
    assert config.rl.epochs == 2 and config.reward.overlong_buffer == 32
    data = apply_assignments({}, ["algorithm.policy_loss.name=gspo", "algorithm.policy_loss.clip_high=5e-4"])
    loss = build(TrainConfig, data).algorithm.policy_loss
    assert (loss.name, loss.params) == ("gspo", {"clip_low": 3e-4, "clip_high": 5e-4})


def test_shorthand_over_a_preset_slot() -> None:
    """``critic: separate`` over PPO's shared critic keeps the critic's other fields; a plain
    name equal to the preset's keeps the preset's parameters."""
    ppo = AlgorithmConfig(preset="ppo", critic="separate")
    assert (ppo.critic.kind, ppo.advantage.name) == ("separate", "gae")
    tcr = AlgorithmConfig(preset="grpo-tcr", policy_loss="ppo-clip")
    assert tcr.policy_loss.params["clip_high"] == 0.315


# ---------------------------------------------------------------- presets


@pytest.mark.parametrize(
    "preset, given, name, params",
    [
        ("grpo-tcr", "gspo", "gspo", {"clip_low": 3e-4, "clip_high": 4e-4}),
        ("grpo-tcr", {"name": "gspo", "clip_high": 1e-3}, "gspo", {"clip_low": 3e-4, "clip_high": 1e-3}),
        (
            "grpo-tcr",
            "clip-cov",
            "clip-cov",
            {"clip_low": 0.2, "clip_high": 0.2, "cov_ratio": 2e-4, "cov_lb": 1.0, "cov_ub": 5.0},
        ),
        ("gspo", "ppo-clip", "ppo-clip", {"clip_low": 0.2, "clip_high": 0.2, "clip_ratio_c": None}),
        (
            "dapo",
            {"name": "ppo-clip", "clip_low": 0.1},
            "ppo-clip",
            {"clip_low": 0.1, "clip_high": 0.28, "clip_ratio_c": None},
        ),
    ],
)
def test_a_differently_named_policy_loss_drops_the_presets_parameters(preset, given, name, params) -> None:
    loss = build(TrainConfig, {"algorithm": {"preset": preset, "policy_loss": given}}).algorithm.policy_loss
    assert (loss.name, loss.params) == (name, params)


def test_a_differently_named_advantage_or_group_filter_drops_the_presets_parameters() -> None:
    gigpo = AlgorithmConfig(preset="gigpo", advantage="grpo")
    assert (gigpo.advantage.name, gigpo.advantage.params) == ("grpo", {"epsilon": 1e-6, "normalize_by_std": True})
    dr = AlgorithmConfig(preset="dr-grpo", advantage="mt-grpo")
    assert dr.advantage.params == {"epsilon": 1e-6, "normalize_by_std": True}  # not dr-grpo's False
    assert AlgorithmConfig(preset="dr-grpo", advantage={"epsilon": 1e-4}).advantage.params == {
        "epsilon": 1e-4,
        "normalize_by_std": False,
    }
    starpo = AlgorithmConfig(preset="starpo-s", group_filter="zero-variance")
    assert (starpo.group_filter.name, starpo.group_filter.params) == ("zero-variance", {})
    # the preset's other slots and fields stay
    assert (starpo.advantage.name, starpo.critic.kind, starpo.policy_loss.params["clip_high"]) == (
        "gae",
        "shared",
        0.28,
    )


def test_presets_fill_the_reward_and_rl_sections() -> None:
    dapo = build(TrainConfig, {"algorithm": {"preset": "dapo"}})
    assert (dapo.rl.max_generation_rounds, dapo.reward.overlong_buffer) == (10, 64)
    mt = build(TrainConfig, {"algorithm": {"preset": "mt-grpo"}})
    assert (mt.reward.tool_turn_reward, mt.reward.overlong_buffer, mt.rl.max_generation_rounds) == (0.5, 64, 1)
    default = build(TrainConfig, {})
    assert (default.algorithm.preset, default.reward.overlong_buffer, default.reward.tool_turn_reward) == (
        "grpo-tcr",
        64,
        0.0,
    )
    assert (
        TrainConfig().reward.overlong_buffer == 64 == TrainConfig(algorithm={"preset": "gigpo"}).reward.overlong_buffer
    )
    grpo = build(TrainConfig, {"algorithm": {"preset": "grpo"}})
    assert (grpo.reward.overlong_buffer, grpo.rl.max_generation_rounds, grpo.reward.tool_turn_reward) == (0, 1, 0.0)


def test_an_explicit_value_wins_over_the_presets_reward_and_rl_parts() -> None:
    dapo = build(TrainConfig, {"algorithm": {"preset": "dapo"}, "rl": {"max_generation_rounds": 3, "group_size": 4}})
    assert (dapo.rl.max_generation_rounds, dapo.rl.group_size, dapo.reward.overlong_buffer) == (3, 4, 64)
    mt = build(
        TrainConfig, {"algorithm": {"preset": "mt-grpo"}, "reward": {"tool_turn_reward": 0.0, "format_weight": 0.1}}
    )
    assert (mt.reward.tool_turn_reward, mt.reward.overlong_buffer, mt.reward.format_weight) == (0.0, 64, 0.1)
    off = build(TrainConfig, {"reward": {"overlong_buffer": 0}})
    assert (off.algorithm.preset, off.reward.overlong_buffer) == ("grpo-tcr", 0)
    # through --set as well
    data = apply_assignments({}, ["algorithm.preset=dapo", "rl.max_generation_rounds=1", "reward.overlong_buffer=16"])
    config = build(TrainConfig, data)
    assert (config.rl.max_generation_rounds, config.reward.overlong_buffer) == (1, 16)


def test_an_explicit_value_wins_over_the_presets_algorithm_part() -> None:
    grpo = AlgorithmConfig(preset="grpo", kl={"coef": 0.0}, aggregation="token-mean")
    assert (grpo.kl.coef, grpo.kl.estimator, grpo.aggregation) == (0.0, "k3", "token-mean")
    rpp = AlgorithmConfig(preset="reinforce++", kl={"in_reward": False})
    assert (rpp.kl.coef, rpp.kl.estimator, rpp.kl.in_reward) == (0.01, "k1", False)
    ppo = AlgorithmConfig(preset="ppo", critic={"value_clip": 0.0})
    assert (ppo.critic.kind, ppo.critic.value_clip, ppo.critic.value_loss_coef) == ("shared", 0.0, 0.5)


def test_field_defaults() -> None:
    algorithm = AlgorithmConfig(preset="grpo-t")
    assert algorithm.aggregation == "token-mean"
    assert (algorithm.kl.coef, algorithm.kl.estimator, algorithm.kl.in_reward, algorithm.kl.reference) == (
        0.0,
        "k3",
        False,
        "auto",
    )
    assert (
        algorithm.critic.kind,
        algorithm.critic.value_loss_coef,
        algorithm.critic.value_clip,
        algorithm.critic.lr,
    ) == (
        "none",
        0.5,
        0.2,
        1e-5,
    )
    assert (
        algorithm.correction.kind,
        algorithm.correction.cap,
        algorithm.correction.low,
        algorithm.correction.high,
    ) == (
        "auto",
        2.0,
        0.5,
        2.0,
    )
    rl = TrainConfig().rl
    assert (rl.sampling, rl.epochs, rl.mini_batches, rl.max_generation_rounds) == ("group", 1, 1, 1)
