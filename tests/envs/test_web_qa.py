"""The web-qa env on a fake web (127.0.0.1): contract, scripted episodes, metrics."""

from __future__ import annotations

import json

import pytest
from fake_web import KEY, FakeWeb

from agentic_rl import envs
from agentic_rl.config import RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import check_env
from agentic_rl.parsers import get_parser
from agentic_rl.rollout import rollout
from agentic_rl.types import ToolCall


@pytest.fixture(scope="module")
def web():
    server = FakeWeb().start()
    yield server
    server.close()


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("BRAVE_API_KEY", KEY)


@pytest.fixture
def qa_path(tmp_path):
    path = tmp_path / "qa.jsonl"
    rows = [
        {"id": "q1", "question": "Who founded Vexora Dynamics?", "answers": ["Ilsa Marrow"]},
        {"id": "q2", "question": "In which year was Vexora Dynamics founded?", "answers": "1987"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def options(web, qa_path, **extra):
    return {
        "qa_path": qa_path,
        "web": {"base_url": web.url, "allow_private_addresses": True, "deny_domains": ["denied.test"]},
        **extra,
    }


def calls(*pairs) -> str:
    parser = get_parser("hermes")
    return "\n".join(
        parser.format_call(ToolCall(name=name, arguments=arguments, id=f"call_{i}"))
        for i, (name, arguments) in enumerate(pairs)
    )


def test_registered_and_passes_check_env(web, qa_path):
    assert "web-qa" in {entry.name for entry in envs.registered()}
    env = envs.make("web-qa", **options(web, qa_path))
    check_env(env)
    messages, info = env.reset(options={"task_index": 0})
    assert messages[-1] == {"role": "user", "content": "Who founded Vexora Dynamics?"}
    assert [schema["function"]["name"] for schema in info["tools"]] == ["web_search", "browse"]


@pytest.mark.parametrize(("answer", "reward"), [("Ilsa Marrow", 1.0), ("Quenport", 0.0), (None, 0.0)])
def test_scripted_episode_scores_the_answer(web, qa_path, answer, reward):
    env = envs.make("web-qa", **options(web, qa_path))
    env.reset(options={"task_index": 0})
    observations, step_reward, terminated, truncated, info = env.step(
        {"role": "assistant", "content": calls(("web_search", {"query": "Vexora Dynamics founder"}))}
    )
    assert not terminated and step_reward == 0.0
    assert f"URL: {web.url}/article" in observations[0]["content"] and "denied.test" not in observations[0]["content"]
    observations, _, terminated, _, _ = env.step(
        {"role": "assistant", "content": calls(("browse", {"url": f"{web.url}/article"}))}
    )
    assert not terminated and "founded in 1987 by Ilsa Marrow" in observations[0]["content"]
    final = f"It is <answer>{answer}</answer>" if answer else "I could not find it."
    _, step_reward, terminated, truncated, info = env.step({"role": "assistant", "content": final})
    assert (step_reward, terminated, truncated) == (reward, True, False)
    metrics = env.episode_metrics()
    assert metrics["search/searches"] == 1.0 and metrics["web/browses"] == 1.0 and metrics["web/tool_errors"] == 0.0
    assert metrics["search/answer_recall"] == 1.0 and metrics["search/em"] == reward


def test_refused_and_failed_calls_are_observations(web, qa_path):
    env = envs.make("web-qa", **options(web, qa_path))
    env.reset(options={"task_index": 1})
    observations, _, terminated, _, info = env.step(
        {
            "role": "assistant",
            "content": calls(
                ("browse", {"url": "https://answers.denied.test/vexora"}), ("browse", {"url": f"{web.url}/file.pdf"})
            ),
        }
    )
    assert not terminated
    assert [result.ok for result in info["tool_results"]] == [False, False]
    assert "blocked here (deny list: denied.test)" in observations[0]["content"]
    assert env.episode_metrics()["web/tool_errors"] == 2.0


def test_f1_reward_and_bad_options(web, qa_path):
    env = envs.make("web-qa", **options(web, qa_path, reward="f1"))
    env.reset(options={"task_index": 0})
    _, reward, *_ = env.step({"role": "assistant", "content": "<answer>Marrow</answer>"})
    assert reward == pytest.approx(2 / 3)  # precision 1, recall 1/2
    with pytest.raises(ValueError, match="web: unknown key 'api_key'"):
        envs.make("web-qa", qa_path=qa_path, web={"api_key": "sk-x"})


def test_rollout_with_a_scripted_policy(web, qa_path, tokenizer):
    """The whole engine path: a scripted model searches, reads, answers; reward 1."""
    script = [
        calls(("web_search", {"query": "Vexora Dynamics founder"})),
        calls(("browse", {"url": f"{web.url}/article"})),
        "<answer>Ilsa Marrow</answer>",
    ]
    backend = ScriptedBackend(tokenizer, script)
    make_env = envs.env_factory("web-qa", options(web, qa_path))
    [group] = rollout(backend, make_env, [0], config=RolloutConfig(max_new_tokens=128, max_total_tokens=4096), seed=0)
    trajectory = group.trajectories[0]
    assert trajectory.reward == 1.0 and trajectory.termination_reason == "answered"
    assert [result.name for turn in trajectory.turns for result in turn.tool_results] == ["web_search", "browse"]
