"""Named reward terms (``agentic_rl.envs.terms``): an env reports what it measured
(``info["reward_terms"]`` / ``info["turn_terms"]``), the rollout records it on each turn,
the trainer weighs it with ``reward.terms``, preflight rejects a weight on a term the env
does not report, and the env options that were reward shaping name their new home."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest
import torch

from agentic_rl.config import AlgorithmConfig, ConfigError, RewardConfig, RolloutConfig, TrainConfig, build
from agentic_rl.config.renamed import ENV_OPTIONS_MOVED
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import env_factory, make
from agentic_rl.envs.sokoban import solve
from agentic_rl.envs.terms import RewardTerm, declared_terms, reported_terms, unknown_weight, weighted
from agentic_rl.rollout import rollout
from agentic_rl.training.credit import build_advantage_inputs, turn_process_reward
from agentic_rl.training.preflight import check_reward_terms, preflight
from agentic_rl.training.scoring import episode_rewards, score, usable_trajectories
from agentic_rl.types import ToolResult, Trajectory, Turn

RAGEN = {"step": -0.01, "box": 0.1, "invalid": -0.1}
"""RAGEN's sokoban shaping (gym-sokoban's, scaled by 1/10) as ``reward.terms`` weights."""


# --------------------------------------------------------------------------- the helpers


def test_reported_terms_reads_both_keys_as_floats():
    assert reported_terms({}) == ({}, {})
    assert reported_terms({"reward_terms": None, "turn_terms": None}) == ({}, {})
    episode, turn = reported_terms({"reward_terms": {"evidence": 1, "plan": 0.5}, "turn_terms": {"repeat": -2}})
    assert (episode, turn) == ({"evidence": 1.0, "plan": 0.5}, {"repeat": -2.0})
    assert all(type(value) is float for value in (*episode.values(), *turn.values()))


@pytest.mark.parametrize(
    ("info", "message"),
    [
        (
            {"reward_terms": [("plan", 1.0)]},
            "info['reward_terms']: expected a mapping of term names to numbers, got [('plan', 1.0)]",
        ),
        ({"turn_terms": 1.0}, "info['turn_terms']: expected a mapping of term names to numbers, got 1.0"),
        (
            {"turn_terms": {"invalid": True}},
            "info['turn_terms']: expected a finite number for each term name, got 'invalid': True",
        ),
        (
            {"reward_terms": {"evidence": math.nan}},
            "info['reward_terms']: expected a finite number for each term name, got 'evidence': nan",
        ),
        (
            {"turn_terms": {"step": -math.inf}},
            "info['turn_terms']: expected a finite number for each term name, got 'step': -inf",
        ),
        (
            {"reward_terms": {"plan": "1"}},
            "info['reward_terms']: expected a finite number for each term name, got 'plan': '1'",
        ),
        ({"turn_terms": {1: 1.0}}, "info['turn_terms']: expected a finite number for each term name, got 1: 1.0"),
    ],
)
def test_reported_terms_rejects_malformed_terms_naming_the_key(info, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        reported_terms(info)


def test_weighted_sums_each_term_times_its_weight():
    assert weighted({"step": 3.0, "box": 1.0, "invalid": 2.0}, RAGEN) == pytest.approx(-0.03 + 0.1 - 0.2)
    assert weighted({"step": 2.0, "unweighted": 5.0}, {"step": 0.5, "absent": 9.0}) == 1.0  # no weight: 0
    assert weighted({}, RAGEN) == 0.0 and weighted({"step": 4.0}, {}) == 0.0


def test_declared_terms_and_unknown_weight():
    term = RewardTerm("turn", "what one unit measures")
    assert declared_terms(SimpleNamespace()) == {} and declared_terms(SimpleNamespace(reward_terms=None)) == {}
    assert declared_terms(SimpleNamespace(reward_terms={"x": term})) == {"x": term}
    with pytest.raises(ValueError, match="^env.reward_terms: expected a mapping of names to RewardTerm"):
        declared_terms(SimpleNamespace(reward_terms={"x": "a term"}))
    assert unknown_weight(["x"], {"x": term}, "game") is None and unknown_weight([], {}, "game") is None
    assert unknown_weight(["x", "y"], {"x": term}, "game") == (
        "reward.terms.y: env game reports no such term; the terms it reports: x (per turn: what one unit measures)"
    )
    assert (
        unknown_weight(["y"], {}, "game") == "reward.terms.y: env game reports no such term; the terms it reports: none"
    )


# --------------------------------------------------------------------------- the trainer


def test_episode_rewards_add_episode_terms_times_weights_summed_over_turns():
    first = Trajectory(
        "0",
        "g",
        reward=1.0,
        turns=[
            Turn("a", reward_terms={"evidence": 0.5}),
            Turn("b", reward_terms={"evidence": 0.25, "plan": 1.0}, turn_terms={"repeat": 3.0}),
        ],
    )
    second = Trajectory("1", "g", reward=0.5, turns=[Turn("c", reward_terms={"unweighted": 7.0})])
    weights = {"evidence": 0.2, "plan": -0.5, "repeat": 100.0}
    # 1 + 0.2 x (0.5 + 0.25) - 0.5 x 1; turn terms (repeat) stay out of the episode's reward.
    assert episode_rewards([first, second], RewardConfig(terms=weights)).tolist() == pytest.approx([0.65, 0.5])
    # With the format term: + format_weight where the env said the format held.
    first.info["format_ok"], second.info["format_ok"] = True, False
    shaped = episode_rewards([first, second], RewardConfig(terms=weights, format_weight=0.1))
    assert shaped.tolist() == pytest.approx([0.75, 0.5])
    # No weights (the default), or no reward section: the outcome alone.
    assert episode_rewards([first, second], RewardConfig()).tolist() == [1.0, 0.5]
    assert episode_rewards([first, second], None).tolist() == [1.0, 0.5]


def test_episode_terms_of_every_segment_count():
    """A context policy cuts an episode into segments: a term reported before the cut still counts."""
    earlier = Trajectory("0", "g", turns=[Turn("a", reward_terms={"plan": 1.0})])
    episode = Trajectory("0", "g", reward=1.0, turns=[Turn("b", reward_terms={"evidence": 0.5})], segments=[earlier])
    assert episode_rewards([episode], RewardConfig(terms={"plan": 0.5, "evidence": 0.2})).tolist() == pytest.approx(
        [1.6]
    )


def test_numpy_numbers_are_terms_too():
    np = pytest.importorskip("numpy")
    assert reported_terms({"turn_terms": {"x": np.float32(0.5), "y": np.int64(2)}}) == ({}, {"x": 0.5, "y": 2.0})
    with pytest.raises(ValueError, match="turn_terms"):
        reported_terms({"turn_terms": {"x": np.bool_(True)}})


def test_build_advantage_inputs_puts_weighted_turn_terms_into_turn_rewards():
    # prompt [1, 2] | turn 0: response [3, 4], observation [5] | turn 1: response [6, 7]
    trajectory = Trajectory(
        "0",
        "g",
        prompt_length=2,
        token_ids=[1, 2, 3, 4, 5, 6, 7],
        loss_mask=[0, 0, 1, 1, 0, 1, 1],
        reward=1.0,
        turns=[
            Turn(
                "push",
                2,
                4,
                5,
                tool_results=[ToolResult("search", "found")],
                turn_reward=0.1,
                turn_terms={"step": 1.0, "box": 1.0},
            ),
            Turn("??", 5, 7, 7, turn_terms={"invalid": 1.0}, reward_terms={"evidence": 1.0}),
        ],
    )
    weights = {**RAGEN, "invalid": -0.5, "evidence": 9.0}
    inputs = build_advantage_inputs(
        [trajectory], torch.tensor([1.0]), torch.tensor([0]), tool_turn_reward=0.05, term_weights=weights
    )
    # turn 0: 0.1 (the env's) + 0.05 (its tool calls ran) - 0.01 (step) + 0.1 (box); turn 1: -0.5 (invalid)
    # (the episode term ``evidence`` is not a turn's: episode_rewards adds it to the outcome).
    assert inputs.turn_rewards.tolist() == [pytest.approx([0.24, -0.5])]
    assert inputs.token_rewards[0].tolist() == pytest.approx([0.0, 0.0, 0.0, 0.24, 0.0, 0.0, 1.0 - 0.5])
    assert turn_process_reward(trajectory.turns[0], 0.0, weights) == pytest.approx(0.19)
    assert turn_process_reward(trajectory.turns[0], 0.0) == pytest.approx(0.1)  # no weights: the env's own
    plain = build_advantage_inputs([trajectory], torch.tensor([1.0]), torch.tensor([0]))
    assert plain.turn_rewards.tolist() == [pytest.approx([0.1, 0.0])]


# --------------------------------------------------------------------------- the rollout


def test_sokoban_rollout_records_turn_terms_that_reach_the_credit_inputs(tokenizer):
    """A scripted episode: an invalid reply, then the solver's shortest plan."""
    make_env = lambda: make("sokoban", split="test")  # noqa: E731
    plan = solve(make_env().tasks[0].metadata["level"])
    replies = ["<answer>Jump</answer>", *(f"<answer>{action}</answer>" for action in plan)]
    groups = rollout(ScriptedBackend(tokenizer, replies), make_env, [0], config=RolloutConfig(max_total_tokens=4096))
    trajectory = groups[0].trajectories[0]
    assert trajectory.infra_error is None and trajectory.correct and trajectory.reward == 1.0
    # One box: it reaches its target on the last move, never earlier (the episode ends there).
    moves = [{"step": 1.0, "box": 0.0}] * (len(plan) - 1) + [{"step": 1.0, "box": 1.0}]
    assert [turn.turn_terms for turn in trajectory.turns] == [{"invalid": 1.0}, *moves]
    assert [turn.reward_terms for turn in trajectory.turns] == [{}] * (len(plan) + 1)
    assert [turn.turn_reward for turn in trajectory.turns] == [0.0] * (len(plan) + 1)
    inputs = build_advantage_inputs([trajectory], torch.tensor([1.0]), torch.tensor([0]), term_weights=RAGEN)
    expected = [-0.1] + [-0.01] * (len(plan) - 1) + [-0.01 + 0.1]
    assert inputs.turn_rewards.tolist() == [pytest.approx(expected)]


def test_search_qa_rollout_records_episode_and_turn_terms_and_the_trainer_weighs_them(tokenizer):
    """The scripted expert on a 2-hop question: each search finds one of the two gold
    documents (info_gain 0.5 each), the answer reports ``evidence`` 1."""
    make_env = lambda: make("search-qa", hops=2)  # noqa: E731
    env = make_env()
    env.reset(options={"task_index": 0})
    replies = []
    while True:  # the expert's replies, replayed by the scripted backend
        replies.append(env.expert_reply())
        *_, terminated, truncated, _ = env.step({"role": "assistant", "content": replies[-1]})
        if terminated or truncated:
            break
    assert len(replies) == 3
    groups = rollout(ScriptedBackend(tokenizer, replies), make_env, [0], config=RolloutConfig(max_total_tokens=4096))
    trajectory = groups[0].trajectories[0]
    assert trajectory.infra_error is None and trajectory.correct and trajectory.reward == 1.0
    assert [turn.turn_terms for turn in trajectory.turns] == [
        {"repeat": 0.0, "info_gain": 0.5},
        {"repeat": 0.0, "info_gain": 0.5},
        {},
    ]
    assert [turn.reward_terms for turn in trajectory.turns] == [{}, {}, {"evidence": 1.0}]
    reward = RewardConfig(format_weight=0.1, terms={"evidence": 0.2, "info_gain": 1.0, "repeat": -0.5})
    scored = score(groups, AlgorithmConfig(), max_total_tokens=4096, reward=reward)
    assert scored.rewards.tolist() == pytest.approx([1.0 + 0.1 + 0.2])  # outcome + format + evidence
    inputs = build_advantage_inputs([trajectory], scored.rewards, torch.tensor([0]), term_weights=reward.terms)
    assert inputs.turn_rewards.tolist() == [[0.5, 0.5, 0.0]]


@pytest.mark.parametrize(
    ("key", "value", "error"),
    [
        (
            "turn_terms",
            {"step": math.nan},
            "info['turn_terms']: expected a finite number for each term name, got 'step': nan",
        ),
        ("reward_terms", ["plan"], "info['reward_terms']: expected a mapping of term names to numbers, got ['plan']"),
    ],
)
def test_malformed_terms_make_the_episode_an_infrastructure_error(tokenizer, key, value, error):
    def make_env():
        env = make("sokoban", split="test")
        step = env.step

        def bad_step(message):
            observations, reward, terminated, truncated, info = step(message)
            return observations, reward, terminated, truncated, {**info, key: value}

        env.step = bad_step
        return env

    groups = rollout(
        ScriptedBackend(tokenizer, ["<answer>Up</answer>"]), make_env, [0], config=RolloutConfig(max_total_tokens=4096)
    )
    trajectory = groups[0].trajectories[0]
    assert trajectory.infra_error == f"ValueError: {error}"
    assert trajectory.termination_reason == "error" and len(trajectory.turns) == 1
    assert usable_trajectories(groups) == []  # it leaves the batch


# --------------------------------------------------------------------------- preflight


def config_with(env: dict, terms: dict) -> TrainConfig:
    return build(TrainConfig, {"env": env, "sft": {"enabled": False}, "reward": {"terms": terms}})


def test_check_reward_terms_accepts_declared_terms_and_names_an_unknown_one():
    env = make("sokoban")
    check_reward_terms(config_with({"name": "sokoban"}, RAGEN), env)
    check_reward_terms(config_with({"name": "sokoban"}, {}), env)
    with pytest.raises(ConfigError) as raised:
        check_reward_terms(config_with({"name": "sokoban"}, {"step": -0.01, "steps": -0.01}), env)
    message = str(raised.value)
    assert "\n" not in message
    assert re.fullmatch(
        r"reward\.terms\.steps: env sokoban reports no such term; the terms it reports: "
        r"box \(per turn: .+\), invalid \(per turn: .+\), step \(per turn: .+\)",
        message,
    )
    # plan is a term only with plan_first; search-qa without gold documents reports repeat alone.
    with pytest.raises(ConfigError, match=r"^reward\.terms\.plan: env arithmetic reports no such term"):
        check_reward_terms(config_with({"name": "arithmetic"}, {"plan": 0.2}), make("arithmetic"))
    check_reward_terms(
        config_with({"name": "arithmetic", "plan_first": True}, {"plan": 0.2}), make("arithmetic", plan_first=True)
    )
    with pytest.raises(ConfigError, match="^env.reward_terms: expected a mapping of names to RewardTerm"):
        check_reward_terms(config_with({"name": "sokoban"}, {}), SimpleNamespace(reward_terms={"step": -0.01}))


def test_check_reward_terms_on_a_mix_takes_every_entrys_terms():
    mix = [{"name": "sokoban", "weight": 1}, {"name": "arithmetic", "weight": 1, "plan_first": True}]
    config = config_with({"mix": mix}, {"box": 0.1, "plan": 0.2})
    env = make(config.env.name, **config.env.options)
    assert config.env.name == "mix" and sorted(env.reward_terms) == ["box", "invalid", "plan", "step"]
    check_reward_terms(config, env)
    with pytest.raises(
        ConfigError, match=r"^reward\.terms\.evidence: env mix reports no such term; the terms it reports: box "
    ):
        check_reward_terms(config_with({"mix": mix}, {"evidence": 0.2}), env)


def test_preflight_checks_the_reward_terms():
    assert preflight(config_with({"name": "sokoban"}, RAGEN), check_model=False).task_indices[:2] == [0, 1]
    with pytest.raises(ConfigError, match=r"^reward\.terms\.box: env frozenlake reports no such term"):
        preflight(config_with({"name": "frozenlake"}, {"box": 0.1}), check_model=False)


def test_reward_config_terms_are_finite_weights():
    assert RewardConfig().terms == {} and TrainConfig().reward.terms == {}
    assert build(TrainConfig, {"reward": {"terms": {"step": -1}}}).reward.terms == {"step": -1.0}
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ConfigError, match=f"^reward.terms: the value of 'step' must be a finite number, got {bad}"):
            build(TrainConfig, {"reward": {"terms": {"step": bad}}})
    with pytest.raises(ValueError, match="the value of 'box' must be a finite number, got inf"):
        RewardConfig(terms={"box": math.inf})


# --------------------------------------------------------------------------- the moved options

MOVED = [
    ("search-qa", "format_reward", "reward.format_weight"),
    ("multi-search-qa", "format_reward", "reward.format_weight"),
    ("arithmetic", "plan_reward", "reward.terms.plan"),
    ("search-qa", "plan_reward", "reward.terms.plan"),
    ("search-qa", "evidence_reward", "reward.terms.evidence"),
    ("search-qa", "info_gain_reward", "reward.terms.info_gain"),
    ("search-qa", "repeat_penalty", "reward.terms.repeat"),
    ("sokoban", "step_penalty", "reward.terms.step"),
    ("frozenlake", "step_penalty", "reward.terms.step"),
    ("sokoban", "box_reward", "reward.terms.box"),
    ("sokoban", "invalid_penalty", "reward.terms.invalid"),
    ("frozenlake", "invalid_penalty", "reward.terms.invalid"),
    ("code", "test_progress_reward", "reward.terms.test_progress"),
]


def test_every_moved_option_is_listed():
    assert {option for _, option, _ in MOVED} == set(ENV_OPTIONS_MOVED) and len(ENV_OPTIONS_MOVED) == 9


@pytest.mark.parametrize(("name", "option", "home"), MOVED)
def test_a_moved_option_names_its_new_home(name, option, home):
    with pytest.raises(TypeError) as raised:
        make(name, **{option: 0.1})
    assert str(raised.value) == f"env {name!r} option {option}: moved to {ENV_OPTIONS_MOVED[option]}"
    assert re.match(rf"{re.escape(home)}[ ,]", ENV_OPTIONS_MOVED[option])  # the key, then why
    # Through the config path: one ConfigError line, before any env is built.
    with pytest.raises(ConfigError) as raised:
        env_factory(name, {option: 0.1})
    assert str(raised.value) == f"env: env {name!r} option {option}: moved to {ENV_OPTIONS_MOVED[option]}"


def test_a_moved_option_in_a_mix_entry_names_the_entry_and_its_new_home():
    with pytest.raises(
        ConfigError, match=r"^env: mix\[1\] \(sokoban\): env 'sokoban' option box_reward: moved to reward\.terms\.box "
    ):
        env_factory(
            "mix", {"mix": [{"name": "frozenlake", "weight": 1}, {"name": "sokoban", "weight": 1, "box_reward": 0.1}]}
        )
