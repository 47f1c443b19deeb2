"""One home per knob: each default is written once (a config field, or a registered
function's signature), presets name only values that differ from those defaults, and a
knob's name repeats across sections only where each stage has its own."""

from __future__ import annotations

from collections import defaultdict

import pytest

from agentic_rl.algorithms import PRESETS
from agentic_rl.config import MOVED, AlgorithmConfig, RewardConfig, RLConfig, TrainConfig
from agentic_rl.config.algorithm import SLOTS, FunctionSpec, function_names, function_params

# Leaf names several sections have, each the knob of its own stage or object.
PER_STAGE = {
    "batch_size": "the engine's batch vs the SFT and DPO batches",
    "data": "SFT's and DPO's data files",
    "enabled": "each optional stage or feature",
    "epochs": "RL's passes per batch vs SFT's and DPO's passes over their data",
    "few_shot": "collection's demonstrations vs the eval env's",
    "kind": "each section's variant",
    "lr": "RL, critic, SFT and DPO optimizers",
    "max_grad_norm": "RL, SFT and DPO optimizers",
    "max_length": "SFT's and DPO's sequence limits",
    "micro_batch_tokens": "RL, SFT and DPO passes",
    "name": "model, env and each registered function",
    "num_tasks": "each stage's task count",
    "samples_per_task": "each stage's samples",
    "seed": "the run's seed vs SFT's and DPO's shuffles",
    "task_offset": "each stage's first task",
    "temperature": "each stage's sampling",
    "timeout_s": "an episode's vs a collective's",
    "warmup_steps": "RL, SFT and DPO schedules",
}
OPEN_MAPPINGS = ("tool_costs", "thresholds", "worker_resources")  # user-named keys, not knobs


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict) and value and key not in OPEN_MAPPINGS:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_a_knob_name_repeats_only_across_stages() -> None:
    homes = defaultdict(list)
    for dotted, _ in _leaves(TrainConfig().model_dump()):
        homes[dotted.rsplit(".", 1)[-1]].append(dotted)
    repeated = {leaf: keys for leaf, keys in homes.items() if len(keys) > 1}
    assert set(repeated) <= set(PER_STAGE), {leaf: repeated[leaf] for leaf in set(repeated) - set(PER_STAGE)}


def test_function_parameters_are_not_config_fields() -> None:
    """A registered function's parameters have no field (and no default) in the config:
    its signature is their only home."""
    for spec in FunctionSpec.__subclasses__():
        assert set(spec.model_fields) == {"name"}, spec
    for kind in SLOTS:
        for name in function_names(kind):
            params = function_params(kind, name)
            assert all(p.default is not p.empty for p in params.values()), (kind, name)


def _default_of(section: str, path: list[str], preset_slot: dict | None):
    """The default (a field's, or the named function's) that a preset's value at
    ``section.path`` would restate; without any preset applied."""
    if section == "algorithm" and path[0] in SLOTS:
        name = (preset_slot or {}).get("name") or AlgorithmConfig.model_fields[path[0]].default_factory().name
        return function_params(path[0], name)[path[1]].default
    cls = {"algorithm": AlgorithmConfig, "reward": RewardConfig, "rl": RLConfig}[section]
    value = cls.model_fields[path[0]].get_default(call_default_factory=True)
    for part in path[1:]:
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_name_only_values_that_differ_from_defaults(preset) -> None:
    for section, values in PRESETS[preset].items():
        assert section in ("algorithm", "reward", "rl"), section
        for dotted, value in _leaves(values):
            path = dotted.split(".")
            if path[-1] == "name" or dotted == "critic":
                continue  # which function (or critic) the preset uses is what it is, not a default
            slot = values.get(path[0]) if section == "algorithm" and path[0] in SLOTS else None
            assert value != _default_of(section, path, slot), f"{preset}: {section}.{dotted} restates its default"


def test_every_moved_key_fails_naming_its_new_home() -> None:
    from agentic_rl.config import ConfigError, build

    for old, new in MOVED.items():
        *parents, leaf = old.split(".")
        data: dict = {}
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = {} if old == "arpo" else 1
        with pytest.raises(ConfigError) as error:
            build(TrainConfig, data)
        message = str(error.value)
        assert message.startswith(f"{old}: moved to {new.split(' ')[0]}") and "\n" not in message, message


def test_a_presets_reward_and_rl_parts_apply_whether_the_algorithm_comes_as_dict_or_object() -> None:
    for algorithm in ({"preset": "dapo"}, AlgorithmConfig(preset="dapo")):
        config = TrainConfig(algorithm=algorithm)
        assert config.rl.max_generation_rounds == 10 and config.reward.overlong_buffer == 64
    assert TrainConfig(algorithm=AlgorithmConfig(preset="grpo")).reward.overlong_buffer == 0
    # An explicit value wins over the preset's.
    assert TrainConfig(algorithm={"preset": "dapo"}, rl={"max_generation_rounds": 3}).rl.max_generation_rounds == 3


def test_a_shorthand_value_and_its_sections_fields_merge_instead_of_replacing() -> None:
    from agentic_rl.config import apply_assignments, build
    from agentic_rl.recipes import deep_merge

    data = apply_assignments({}, ["algorithm.policy_loss=gspo", "algorithm.policy_loss.clip_high=5e-4"])
    assert build(TrainConfig, data).algorithm.policy_loss.params["clip_high"] == 5e-4
    # A base recipe's `policy_loss: gspo` under a child's parameters stays gspo.
    merged = deep_merge({"algorithm": {"policy_loss": "gspo"}}, {"algorithm": {"policy_loss": {"clip_high": 1e-3}}})
    assert build(TrainConfig, merged).algorithm.policy_loss.name == "gspo"
    # --set critic=separate over a recipe's critic section sets its kind only; a new
    # function name drops the old function's parameters.
    critic = apply_assignments({"algorithm": {"critic": {"kind": "shared", "lr": 1e-4}}}, ["algorithm.critic=separate"])
    assert critic["algorithm"]["critic"] == {"kind": "separate", "lr": 1e-4}
    loss = apply_assignments(
        {"algorithm": {"policy_loss": {"name": "ppo-clip", "clip_high": 0.3}}}, ["algorithm.policy_loss=gspo"]
    )
    assert loss["algorithm"]["policy_loss"] == {"name": "gspo"}
