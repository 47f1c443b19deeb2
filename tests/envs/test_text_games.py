"""frozenlake and sokoban: the Env contract, seeded disjoint levels, solvability, an oracle
that solves them, a random policy that does not, invalid actions and option errors."""

from __future__ import annotations

import dataclasses
import random

import pytest

from agentic_rl.envs import check_env, make
from agentic_rl.envs.frozenlake import FrozenLakeEnv, shortest_path
from agentic_rl.envs.sokoban import push, solve
from agentic_rl.envs.terms import weighted
from agentic_rl.envs.text_game import parse_action

GAMES = ("frozenlake", "sokoban")
SOLVERS = {"frozenlake": shortest_path, "sokoban": solve}
RAGEN_WEIGHTS = {"step": -0.01, "box": 0.1, "invalid": -0.1}
"""RAGEN's shaping as ``reward.terms`` weights (gym-sokoban's, scaled by 1/10)."""


def reply(action: str) -> dict:
    return {"role": "assistant", "content": f"Thinking... <answer>{action}</answer>"}


def play(env, index: int, policy) -> tuple[float, float, bool, dict]:
    """Run one episode; (outcome return, process return under RAGEN_WEIGHTS, solved, last info)."""
    env.reset(options={"task_index": index})
    outcome = process = 0.0
    for turn in range(env.max_turns):
        _, reward, terminated, truncated, info = env.step(reply(policy(turn)))
        process += info["turn_reward"] + weighted(info["turn_terms"], RAGEN_WEIGHTS)
        outcome += reward
        if terminated or truncated:
            return outcome, process, info["correct"], info
    raise AssertionError("the episode outlived max_turns")


@pytest.mark.parametrize("name", GAMES)
def test_check_env_passes(name) -> None:
    check_env(make(name))
    check_env(make(name, split="test"))


@pytest.mark.parametrize("name", GAMES)
def test_same_index_same_level_and_splits_are_disjoint(name) -> None:
    first, second = make(name), make(name)
    assert all(first.reset(options={"task_index": i}) == second.reset(options={"task_index": i}) for i in range(20))
    train = {task.prompt for task in make(name).tasks[:2000]}
    test = {task.prompt for task in make(name, split="test").tasks[:500]}
    assert len(train) > 1000 and len(test) > 250  # levels vary
    assert not train & test
    assert {task.prompt for task in make(name, seed=1).tasks[:50]} != {task.prompt for task in first.tasks[:50]}


@pytest.mark.parametrize("name", GAMES)
def test_oracle_solves_every_level_and_random_policy_does_not(name) -> None:
    env = make(name, split="test")
    oracle, rand = [], []
    for index in range(100):
        plan = SOLVERS[name](env.tasks[index].metadata["level"])
        outcome, process, solved, _ = play(env, index, plan.__getitem__)
        oracle.append(outcome)
        # Each move costs 0.01; sokoban's one box ends on its target (+0.1); no invalid reply.
        assert solved and outcome == 1.0
        assert process == pytest.approx(-0.01 * len(plan) + (0.1 if name == "sokoban" else 0.0))
        assert env.episode_metrics() == {
            f"{name}/success": 1.0,
            f"{name}/invalid_action_rate": 0.0,
            f"{name}/steps": float(len(plan)),
        }
        moves = random.Random(index).choices(["Up", "Down", "Left", "Right"], k=env.max_turns)
        rand.append(play(env, index, moves.__getitem__)[0])
    assert sum(oracle) / len(oracle) == 1.0
    assert sum(rand) / len(rand) < 0.15


def remaining_plan(name: str, env) -> list[str] | None:
    """The solver's shortest plan from the env's current state."""
    if name == "frozenlake":
        return shortest_path(dataclasses.replace(env.lake, start=env.player))
    return solve(dataclasses.replace(env.room, player=env.player, boxes=env.boxes))


@pytest.mark.parametrize("name", GAMES)
def test_expert_recovers_from_a_detour_in_the_fewest_moves_left(name) -> None:
    env = make(name, split="test")
    recovered = 0
    for index in range(40):
        env.reset(options={"task_index": index})
        # A detour first (a move the shortest plan does not start with), then the expert,
        # which plans again from where the player stands.
        first = SOLVERS[name](env.tasks[index].metadata["level"])[0]
        _, _, terminated, _, _ = env.step(reply(next(a for a in ("Up", "Down", "Left", "Right") if a != first)))
        left = None if terminated else remaining_plan(name, env)
        if left is None:  # fell into a hole, or pushed a box into a corner: nothing to recover
            continue
        for _turn in range(len(left)):
            _, reward, terminated, truncated, info = env.step({"role": "assistant", "content": env.expert_reply()})
        assert terminated and info["correct"] and reward == 1.0
        recovered += 1
    assert recovered >= 20
    with pytest.raises(ValueError, match="expert_reply: no level"):
        make(name).expert_reply()


def test_sokoban_levels_are_solvable_within_the_cap_and_need_pushes() -> None:
    env = make("sokoban", num_boxes=2)
    for index in range(50):
        room = env.tasks[index].metadata["level"]
        plan = solve(room)
        assert plan is not None and 4 <= len(plan) <= 8
        assert not room.boxes <= room.targets
        player, boxes = room.player, room.boxes
        for action in plan:
            player, boxes = push(room.walls, player, boxes, action)
        assert boxes == room.targets


@pytest.mark.parametrize("size", [3, 4, 8])
def test_frozenlake_paths_exist_and_are_not_one_move_guesses(size) -> None:
    env = make("frozenlake", size=size, num_holes=size * size // 4)
    for index in range(50):
        lake = env.tasks[index].metadata["level"]
        assert len(lake.holes) == size * size // 4 and len(shortest_path(lake)) >= size - 1


def test_sokoban_push_rules() -> None:
    walls = frozenset({(0, 3)})
    assert push(walls, (0, 0), frozenset({(0, 1)}), "Right") == ((0, 1), frozenset({(0, 2)}))
    assert push(walls, (0, 1), frozenset({(0, 2)}), "Right") == ((0, 1), frozenset({(0, 2)}))  # box against a wall
    assert push(walls, (0, 0), frozenset({(0, 1), (0, 2)}), "Right") == (
        (0, 0),
        frozenset({(0, 1), (0, 2)}),
    )  # two boxes


def test_frozenlake_hole_ends_the_episode_with_reward_zero() -> None:
    env = make("frozenlake", num_holes=6)
    for index in range(200):
        lake = env.tasks[index].metadata["level"]
        for action, (dr, dc) in {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}.items():
            if (lake.start[0] + dr, lake.start[1] + dc) in lake.holes:
                env.reset(options={"task_index": index})
                observations, reward, terminated, truncated, info = env.step(reply(action))
                assert (observations, reward, terminated, truncated, info["correct"]) == ([], 0.0, True, False, False)
                return
    raise AssertionError("no level with a hole next to the start")


@pytest.mark.parametrize("name", GAMES)
def test_invalid_actions_are_penalised_and_the_episode_goes_on(name) -> None:
    env = make(name, max_turns=3)
    env.reset(options={"task_index": 0})
    for turn in range(3):
        observations, reward, terminated, truncated, info = env.step(
            {"role": "assistant", "content": "I go north-west"}
        )
        assert reward == 0.0 and info["invalid_action"] and not terminated
        # The ``invalid`` turn term (reward.terms weighs it), no process reward of the game's own.
        assert info["turn_reward"] == 0.0 and info["turn_terms"] == {"invalid": 1.0}
        assert truncated == (turn == 2)
        if not truncated:
            assert "Invalid action" in observations[0]["content"]
    assert env.episode_metrics()[f"{name}/invalid_action_rate"] == 1.0
    with pytest.raises(RuntimeError):
        env.step(reply("Up"))


def test_parse_action() -> None:
    names = ["Up", "Down", "Left", "Right"]
    assert parse_action("<answer>left</answer>", names) == 2
    assert parse_action("<answer>Up</answer> then <answer> RIGHT </answer>", names) == 3
    assert parse_action("Down", names) == 1
    assert parse_action("<answer>Left Left</answer>", names) is None
    assert parse_action("go Left", names) is None


@pytest.mark.parametrize(
    ("name", "options", "field"),
    [
        ("frozenlake", {"size": 1}, "size"),
        ("frozenlake", {"num_holes": 9}, "num_holes"),
        ("frozenlake", {"split": "valid"}, "split"),
        ("frozenlake", {"max_turns": 0}, "max_turns"),
        ("sokoban", {"width": 4}, "width"),
        ("sokoban", {"num_boxes": 0}, "num_boxes"),
        ("sokoban", {"num_tasks": 0}, "num_tasks"),
        ("sokoban", {"max_solution_steps": 0}, "max_solution_steps"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(name, options, field) -> None:
    with pytest.raises(ValueError, match=f"^{field}:"):
        make(name, **options)


@pytest.mark.parametrize(
    ("name", "option", "term"),
    [
        ("frozenlake", "step_penalty", "step"),
        ("frozenlake", "invalid_penalty", "invalid"),
        ("sokoban", "step_penalty", "step"),
        ("sokoban", "box_reward", "box"),
        ("sokoban", "invalid_penalty", "invalid"),
    ],
)
def test_shaping_options_moved_to_reward_terms(name, option, term) -> None:
    with pytest.raises(TypeError, match=rf"^env '{name}' option {option}: moved to reward\.terms\.{term}"):
        make(name, **{option: 0.1})
    assert term in make(name).reward_terms


def test_sokoban_turn_terms_count_moves_and_boxes_on_and_off_targets() -> None:
    """A hand-made room: the push onto the target is box +1, the push off it box -1, a
    push against the other box still a move (step 1, box 0), an invalid reply invalid 1."""
    from agentic_rl.envs.sokoban import Room

    #  # # # # # # #
    #  # P X T _ X #   (two boxes, one target: never solved)
    #  # # # # # # #
    walls = frozenset({(0, c) for c in range(7)} | {(2, c) for c in range(7)} | {(1, 0), (1, 6)})
    room = Room(3, 7, walls=walls, targets=frozenset({(1, 3)}), boxes=frozenset({(1, 2), (1, 5)}), player=(1, 1))
    env = make("sokoban")
    env.reset(options={"task_index": 0})
    env.room, env.player, env.boxes = room, room.player, room.boxes
    terms = []
    for action in ("Right", "Right", "Right", "Jump"):
        _, reward, terminated, _, info = env.step(reply(action))
        terms.append(info["turn_terms"])
        assert (reward, terminated, info["turn_reward"]) == (0.0, False, 0.0)
    assert terms == [{"step": 1.0, "box": 1.0}, {"step": 1.0, "box": -1.0}, {"step": 1.0, "box": 0.0}, {"invalid": 1.0}]
    assert env.player == (1, 3) and env.boxes == frozenset({(1, 4), (1, 5)})


def test_frozenlake_relative_view_states_the_offsets_of_a_hand_made_lake() -> None:
    from agentic_rl.envs.frozenlake import Lake, render_relative

    #  _ _ O
    #  _ _ G
    #  _ P O
    lake = Lake(3, start=(2, 1), goal=(1, 2), holes=frozenset({(0, 2), (2, 2)}))
    assert render_relative(lake) == (
        "Goal: 1 up, 1 right.\nHoles: 1 right; 2 up, 1 right.\nNext to you: Up ice, Down edge, Left ice, Right hole."
    )
    assert render_relative(lake, (1, 1)) == (
        "Goal: 1 right.\nHoles: 1 up, 1 right; 1 down, 1 right.\nNext to you: Up ice, Down ice, Left ice, Right goal."
    )
    assert render_relative(Lake(2, (0, 0), (1, 1), frozenset())).startswith("Goal: 1 down, 1 right.\nHoles: none.\n")


def test_frozenlake_views_play_the_same_levels() -> None:
    grid, relative = make("frozenlake", split="test"), make("frozenlake", split="test", view="relative")
    check_env(relative)
    assert [t.prompt for t in grid.tasks[:50]] == [t.prompt for t in relative.tasks[:50]]
    assert "Symbols: P you" in grid.reset(options={"task_index": 0})[0][0]["content"]
    for index in range(30):
        messages, _ = relative.reset(options={"task_index": index})
        assert (
            messages[0]["content"].startswith("You are solving the FrozenLake puzzle")
            and "Symbols" not in messages[0]["content"]
        )
        assert messages[1]["content"].startswith("Goal: ")
        # The expert does not depend on the view: it solves every level shown relatively.
        for _ in range(relative.max_turns):
            observations, reward, terminated, truncated, info = relative.step(
                {"role": "assistant", "content": relative.expert_reply()}
            )
            if terminated or truncated:
                break
            assert observations[0]["content"].startswith("Goal: ")
        assert (reward, info["correct"]) == (1.0, True)
    with pytest.raises(ValueError, match="^view: expected one of grid, relative, got 'map'"):
        make("frozenlake", view="map")
    with pytest.raises(ValueError, match="^view: expected one of grid, relative, got 'map'"):
        FrozenLakeEnv(grid.tasks, success_reward=1.0, view="map")  # built directly, not through make
