"""The textworld env: games generated in the test (tiny worlds, quests of 1-2 commands) are
won by their walkthrough and by the scripted expert, empty and random play earn little,
the Env contract holds, games are cached by options and seed, splits have disjoint seeds,
and the observation cleaning, invalid commands and bad options behave as documented."""

from __future__ import annotations

import builtins
import random

import pytest

from agentic_rl.envs import check_env, make
from agentic_rl.envs.textworld_env import clean_feedback
from agentic_rl.envs.textworld_games import GenerationOptions, game_seed

# TextWorld silences jericho's note that it (not jericho) tracks the score; pytest resets that filter.
pytestmark = pytest.mark.filterwarnings("ignore:Game .* is not fully supported")

BANNER_FEEDBACK = (
    "\n\n\n                    ________  ________  __    __  ________        \n"
    "                   |        \\|        \\|  \\  |  \\|        \\       \n"
    "                    \\$$$$$$$$| $$$$$$$$| $$  | $$ \\$$$$$$$$       \n"
    "              \\$$      \\$$  \\$$$$$$  \\$$   \\$$ \\$$$$$$$$ \\$$$$$$$ \n\n"
    "Your task is to open the chest.\n\n-= Attic =-\nYou are in an attic.\n\n\n\n"
    "There is a key on the floor.\n\n>                                  -= Attic =-0/1"
)


def test_clean_feedback_drops_banner_prompt_and_status_line() -> None:
    assert clean_feedback(BANNER_FEEDBACK) == (
        "Your task is to open the chest.\n\n-= Attic =-\nYou are in an attic.\n\nThere is a key on the floor."
    )
    assert clean_feedback("\nYou pick up the key.\n\n\n\n>      -= Attic =-0/2") == "You pick up the key."
    assert clean_feedback("You see a $5 bill | and a door.\n>") == "You see a $5 bill | and a door."


def test_game_seeds_of_the_splits_are_disjoint_and_stable() -> None:
    train = {game_seed("train", 0, i) for i in range(2000)}
    test = {game_seed("test", 0, i) for i in range(2000)}
    assert len(train) == len(test) == 2000 and not train & test
    assert all(s % 2 == 0 for s in train) and all(s % 2 == 1 for s in test) and max(train | test) < 2**31
    assert game_seed("train", 0, 5) == game_seed("train", 0, 5) != game_seed("train", 1, 5)
    # The cache key changes with every generation option and with TextWorld's version.
    keys = {
        GenerationOptions(*values).key(version)
        for values in [(1, 3, 1), (2, 3, 1), (1, 4, 1), (1, 3, 2)]
        for version in ["1.7.0", "1.8.0"]
    }
    assert len(keys) == 8


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"world_size": 0}, "world_size"),
        ({"num_objects": -1}, "num_objects"),
        ({"quest_length": 0}, "quest_length"),
        ({"win_reward": -1.0}, "win_reward"),
        ({"score_reward": -0.5}, "score_reward"),
        ({"max_turns": 0}, "max_turns"),
        ({"split": "dev"}, "split"),
        ({"num_tasks": 0}, "num_tasks"),
    ],
)
def test_bad_options_raise_value_error_naming_the_option(options, field, tmp_path) -> None:
    pytest.importorskip("textworld", reason="textworld is not installed: pip install 'agentic-rl[textworld]'")
    with pytest.raises(ValueError, match=f"^{field}:"):
        make("textworld", cache_dir=str(tmp_path), **options)


def test_missing_textworld_names_the_install(monkeypatch, tmp_path) -> None:
    real_import = builtins.__import__

    def no_textworld(name, *args, **kwargs):
        if name == "textworld" or name.startswith("textworld."):
            raise ImportError("No module named 'textworld'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_textworld)
    with pytest.raises(ImportError, match=r"pip install 'agentic-rl\[textworld\]'"):
        make("textworld", cache_dir=str(tmp_path))


# --------------------------------------------------------------------------- games made here


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory):
    pytest.importorskip("textworld", reason="textworld is not installed: pip install 'agentic-rl[textworld]'")
    return str(tmp_path_factory.mktemp("textworld-games"))


TINY = {"world_size": 1, "num_objects": 3, "quest_length": 1}
SMALL = {"world_size": 2, "num_objects": 4, "quest_length": 2}


def command(text: str) -> dict:
    return {"role": "assistant", "content": f"I will do this. <answer>{text}</answer>"}


def play(env, index: int, policy) -> tuple[float, dict, bool, bool]:
    """One episode; (outcome return, last info, terminated, truncated)."""
    env.reset(options={"task_index": index})
    total = 0.0
    for turn in range(env.max_turns):
        _, reward, terminated, truncated, info = env.step(policy(env, turn))
        total += reward
        if terminated or truncated:
            return total, info, terminated, truncated
    raise AssertionError("the episode outlived max_turns")


def test_a_generated_game_is_won_by_its_walkthrough(games_dir) -> None:
    env = make("textworld", cache_dir=games_dir, **SMALL)
    for index in range(2):
        walkthrough = env.games[index].metadata["walkthrough"]
        assert len(walkthrough) == 2
        total, info, terminated, truncated = play(env, index, lambda env, turn: command(walkthrough[turn].upper()))
        assert (total, terminated, truncated, info["correct"]) == (1.0, True, False, True)
        metrics = env.episode_metrics()
        assert metrics == {
            "textworld/success": 1.0,
            "textworld/invalid_action_rate": 0.0,
            "textworld/steps": 2.0,
            "textworld/score": 1.0,
        }


def test_the_expert_wins_after_a_detour_and_the_win_pays_score_and_bonus(games_dir) -> None:
    env = make("textworld", cache_dir=games_dir, score_reward=0.25, win_reward=2.0, max_turns=8, **SMALL)
    messages, _ = env.reset(options={"task_index": 1})
    rewards = []
    for reply in ["<answer>look</answer>", "<answer>inventory</answer>"]:
        observations, reward, terminated, _, info = env.step({"role": "assistant", "content": reply})
        assert (reward, terminated, info["turn_reward"]) == (0.0, False, 0.0)
    while True:
        _, reward, terminated, truncated, info = env.step({"role": "assistant", "content": env.expert_reply()})
        rewards.append(reward)
        if terminated or truncated:
            break
    assert info["correct"] and terminated and rewards[-1] == 2.25 and sum(rewards) == 2.25


def test_empty_and_random_play_earn_little(games_dir) -> None:
    env = make("textworld", cache_dir=games_dir, max_turns=6, **SMALL)
    for index in range(2):
        total, info, terminated, truncated = play(env, index, lambda env, turn: {"role": "assistant", "content": ""})
        assert (total, terminated, truncated, info["correct"]) == (0.0, False, True, False)
        assert env.episode_metrics()["textworld/invalid_action_rate"] == 1.0
    rng = random.Random(0)
    returns = [play(env, index, lambda env, turn: command(rng.choice(env.actions)))[0] for index in range(2)]
    assert sum(returns) / len(returns) <= 0.5  # below the walkthrough's 1.0 (measured 0.05 over 20 games)


def test_check_env_passes_and_the_opening_is_the_cleaned_game_text(games_dir) -> None:
    env = make("textworld", cache_dir=games_dir, **TINY)
    check_env(env)
    messages, info = env.reset(options={"task_index": 0})
    text = messages[-1]["content"]
    assert messages[0]["role"] == "system" and info["task_id"] == "textworld-train-0-0"
    assert "$$$$" not in text and "-= " in text and env.games[0].prompt in text  # the objective, no banner
    assert "Admissible commands: " in text and all(c in text for c in env.actions) and "look" in env.actions
    assert (
        make("textworld", cache_dir=games_dir, show_commands=False, **TINY)
        .reset(options={"task_index": 0})[0][-1]["content"]
        .endswith("Reply with one command, e.g. <answer>look</answer>.")
    )


def test_invalid_command_is_penalised_and_the_game_does_not_see_it(games_dir) -> None:
    env = make("textworld", cache_dir=games_dir, max_turns=2, **TINY)
    env.reset(options={"task_index": 0})
    sent, step = [], env.game.step
    env.game.step = lambda text: sent.append(text) or step(text)
    observations, reward, terminated, truncated, info = env.step(command("dance wildly"))
    assert (reward, terminated, truncated, info["turn_reward"], info["turn_terms"], info["invalid_action"]) == (
        0.0,
        False,
        False,
        0.0,
        {"invalid": 1.0},  # the ``invalid`` turn term, which reward.terms weighs
        True,
    )
    assert observations[0]["content"].startswith("Invalid action: nothing happened.") and sent == []
    # It does not repeat the game's last reply (here the whole intro), already in the conversation.
    assert env.games[0].prompt not in observations[0]["content"]
    assert observations[0]["content"] == "Invalid action: nothing happened.\n\n" + env.action_hint()
    _, reward, terminated, truncated, info = env.step(command("LOOK"))
    assert sent == ["look"] and (reward, terminated, truncated, info["answer"]) == (0.0, False, True, "look")
    assert info["turn_terms"] == {} and set(env.reward_terms) == {"invalid"}
    with pytest.raises(TypeError, match=r"^env 'textworld' option invalid_penalty: moved to reward\.terms\.invalid"):
        make("textworld", cache_dir=games_dir, invalid_penalty=0.1, **TINY)


def test_games_are_cached_by_options_and_seed_and_test_games_differ(games_dir, monkeypatch) -> None:
    env = make("textworld", cache_dir=games_dir, **TINY)
    first = env.games[0]
    import textworld.generator

    def no_generation(*args, **kwargs):
        raise AssertionError("a cached game was generated again")

    monkeypatch.setattr(textworld.generator, "make_game", no_generation)
    again = make("textworld", cache_dir=games_dir, **TINY)
    assert again.games[0] == first and again.reset(options={"task_index": 0}) == env.reset(options={"task_index": 0})
    monkeypatch.undo()
    test = make("textworld", cache_dir=games_dir, split="test", **TINY).games[0]
    assert (
        test.metadata["seed"] % 2 == 1
        and first.metadata["seed"] % 2 == 0
        and test.metadata["path"] != first.metadata["path"]
    )
