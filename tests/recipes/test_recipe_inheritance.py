"""Recipe inheritance (``base:``) and the shipped recipes resolving exactly as before they
inherited: ``resolved_recipes.json`` is every shipped recipe's resolved config, generated
with the code before ``base:`` existed; recipes added since are added whole, and a
deliberate change of a shipped value (GRPO-TCR's clip_high 0.315, two mini-batches in the
default recipe) is written into it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from agentic_rl.cli import main
from agentic_rl.config import ConfigError, TrainConfig, build
from agentic_rl.recipes import deep_merge, load_recipe, recipe_names

SNAPSHOT = json.loads((Path(__file__).parent / "resolved_recipes.json").read_text())


def _walk(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _walk(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("name", recipe_names())
def test_shipped_recipe_resolves_as_before_inheritance(name) -> None:
    assert name in SNAPSHOT, f"new recipe {name!r}: add its resolved config to resolved_recipes.json"
    resolved = dict(_walk(build(TrainConfig, load_recipe(name)[1]).model_dump(mode="json")))
    before = dict(_walk(SNAPSHOT[name]))
    assert {key: value for key, value in resolved.items() if key in before} == before
    # Fields added since the snapshot (e.g. algorithm.policy_loss) hold their defaults.
    defaults = dict(_walk(TrainConfig().model_dump(mode="json")))
    assert set(before) <= set(resolved)
    assert {key: value for key, value in resolved.items() if key not in before} == {
        key: defaults[key] for key in resolved if key not in before
    }


def test_shipped_recipes_inherit_from_default() -> None:
    for name in (
        "arpo",
        "cispo",
        "dapo",
        "dpo",
        "gigpo",
        "gspo",
        "mt-grpo",
        "ppo",
        "reinforce++",
        "rloo",
        "search-qa",
        "starpo-s",
    ):
        text = (resources.files("agentic_rl.recipes") / f"{name}.yaml").read_text()
        assert "\nbase: default\n" in text, name
        assert load_recipe(name)[1]["description"] != load_recipe("default")[1]["description"]
        assert "base" not in load_recipe(name)[1]


def test_recipes_with_clip_bounds_take_more_than_one_update_per_batch() -> None:
    """With one update per batch the ratio is exactly 1 and no clip bound can act: the
    GRPO-TCR recipes (and the others inheriting the default) take two mini-batches, GSPO
    the paper's four. ``smoke`` checks wiring on a random model whose advantages are 0."""
    for name in recipe_names():
        config = build(TrainConfig, load_recipe(name)[1])
        updates = config.rl.epochs * config.rl.mini_batches
        if name == "smoke":
            assert updates == 1
        elif name == "gspo":
            assert (config.algorithm.policy_loss.name, config.rl.mini_batches) == ("gspo", 4)
        else:
            assert updates >= 2, name
    default = build(TrainConfig, load_recipe("default")[1])
    tcr, loss = default.algorithm, default.algorithm.policy_loss.params
    assert (
        tcr.preset,
        loss["clip_low"],
        loss["clip_high"],
        tcr.aggregation,
        tcr.kl.coef,
        default.reward.overlong_buffer,
    ) == (
        "grpo-tcr",
        0.2,
        0.315,
        "token-mean",
        0.0,
        64,
    )
    assert build(TrainConfig, load_recipe("cispo")[1]).algorithm.policy_loss.name == "cispo"


def test_deep_merge_merges_sections_and_replaces_lists() -> None:
    base = {
        "a": 1,
        "rollout": {"temperature": 1.0, "max_new_tokens": 96},
        "tracking": {"sinks": ["tensorboard", "wandb"]},
    }
    child = {"rollout": {"max_new_tokens": 64}, "tracking": {"sinks": ["jsonl"]}, "b": None}
    assert deep_merge(base, child) == {
        "a": 1,
        "rollout": {"temperature": 1.0, "max_new_tokens": 64},
        "tracking": {"sinks": ["jsonl"]},
        "b": None,
    }
    assert base["rollout"]["max_new_tokens"] == 96  # inputs untouched


def test_base_path_is_relative_to_the_file_and_chains(tmp_path, monkeypatch) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "common.yaml").write_text(
        "description: common\nbase: smoke\nrollout:\n  max_new_tokens: 8\ntracking:\n  sinks: [jsonl]\n"
    )
    (tmp_path / "child.yaml").write_text(
        "description: my run\nbase: shared/common.yaml\nrl:\n  steps: 5\nrollout:\n  temperature: 0.5\n"
    )
    monkeypatch.chdir(tmp_path / "shared")  # relative to the file, not to the working directory
    name, data = load_recipe(str(tmp_path / "child.yaml"))
    smoke = load_recipe("smoke")[1]
    assert name == "child" and data["description"] == "my run" and "base" not in data
    assert data["rl"] == {**smoke["rl"], "steps": 5} and data["model"] == smoke["model"]
    assert data["rl"]["group_size"] == smoke["rl"]["group_size"]
    assert data["rollout"] == {
        "max_new_tokens": 8,
        "max_total_tokens": smoke["rollout"]["max_total_tokens"],
        "temperature": 0.5,
    }
    assert data["tracking"] == {"sinks": ["jsonl"]}
    assert build(TrainConfig, data).rollout.temperature == 0.5


def test_env_options_are_inherited_only_for_the_same_env(tmp_path) -> None:
    """A child on the base's env merges its options over the base's; a child on another env
    starts from its own options (arithmetic's phrasing means nothing to search-qa)."""
    (tmp_path / "same.yaml").write_text("base: default\nenv:\n  digits: 2\n")
    (tmp_path / "other.yaml").write_text("base: default\nenv:\n  name: frozenlake\n")
    assert load_recipe(str(tmp_path / "same.yaml"))[1]["env"] == {**load_recipe("default")[1]["env"], "digits": 2}
    assert load_recipe(str(tmp_path / "other.yaml"))[1]["env"] == {"name": "frozenlake"}
    assert build(TrainConfig, load_recipe(str(tmp_path / "other.yaml"))[1]).env.options == {}
    # nor the base's stage overrides of its env's options (the default's sft.env.operators)
    assert load_recipe("default")[1]["sft"]["env"] == {"operators": "*"}
    other = build(TrainConfig, load_recipe(str(tmp_path / "other.yaml"))[1])
    assert (other.sft.env, other.eval.env, other.sft.collect.source) == ({}, {"few_shot": 0}, "expert")
    assert load_recipe(str(tmp_path / "same.yaml"))[1]["sft"]["env"] == {"operators": "*"}


def test_description_is_not_inherited(tmp_path) -> None:
    (tmp_path / "child.yaml").write_text("base: default\nrl:\n  steps: 1\n")
    assert "description" not in load_recipe(str(tmp_path / "child.yaml"))[1]


@pytest.mark.parametrize(
    "files, entry, message",
    [
        ({"a.yaml": "base: b.yaml\n", "b.yaml": "base: a.yaml\n"}, "a.yaml", "a.yaml -> b.yaml -> a.yaml"),
        ({"self.yaml": "base: self.yaml\nrl:\n  steps: 1\n"}, "self.yaml", "self.yaml -> self.yaml"),
        ({"a.yaml": "base: defualt\n"}, "a.yaml", "unknown recipe 'defualt' (did you mean 'default'?)"),
        ({"a.yaml": "base: missing.yaml\n"}, "a.yaml", "missing.yaml' does not exist"),
        ({"a.yaml": "base: [default]\n"}, "a.yaml", "base must be a recipe name or a YAML path"),
    ],
)
def test_bad_bases_are_one_line_config_errors(tmp_path, files, entry, message) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_recipe(str(tmp_path / entry))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_cli_reports_a_cycle_and_a_bad_inherited_key_in_one_line(tmp_path, capsys) -> None:
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    assert main(["train", str(tmp_path / "a.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "base cycle" in err and len(err.splitlines()) == 1
    (tmp_path / "c.yaml").write_text("base: smoke\noptim:\n  lrr: 1\n")
    assert main(["train", str(tmp_path / "c.yaml"), "--set", "rl.steps=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "did you mean 'optim.lr'" in err and len(err.splitlines()) == 1
