"""long-qa and multi-search-qa: seeded tasks, the scripted oracle scores 1 and an empty
policy 0, check_env passes, the reward is the fraction of questions right, and long-qa's
document does not fit in the context budget of its recipe."""

from __future__ import annotations

import statistics

import pytest

from agentic_rl.envs import check_env, make
from agentic_rl.envs.long_qa import questions_message
from agentic_rl.envs.long_qa_tasks import FACT_PATTERN
from agentic_rl.envs.terms import weighted


def _play(env, index: int, reply) -> tuple[float, dict]:
    env.reset(options={"task_index": index})
    total = 0.0
    while True:
        _, reward, terminated, truncated, info = env.step({"role": "assistant", "content": reply(env)})
        total += reward
        if terminated or truncated:
            return total, env.episode_metrics()


@pytest.mark.parametrize(
    "name,options",
    [
        ("long-qa", {}),
        ("long-qa", {"split": "test", "num_chunks": 10, "num_facts": 8, "num_questions": 4}),
        ("multi-search-qa", {}),
        ("multi-search-qa", {"split": "test", "num_questions": 2, "hops": [1, 2]}),
    ],
)
def test_oracle_scores_one_and_an_empty_policy_zero(name, options) -> None:
    env = make(name, **options)
    check_env(env)
    assert statistics.mean(_play(env, i, lambda e: e.expert_reply())[0] for i in range(40)) == 1.0
    assert statistics.mean(_play(env, i, lambda e: "")[0] for i in range(40)) == 0.0


def test_long_qa_streams_the_document_and_asks_at_the_end() -> None:
    env = make("long-qa", num_chunks=4, chunk_sentences=5, num_facts=3, num_questions=2)
    messages, _ = env.reset(options={"task_index": 3})
    task = env.task
    assert messages[-1]["content"].endswith(task.metadata["chunks"][0]) and not FACT_PATTERN.search(
        task.metadata["chunks"][0]
    )  # chunk 1 (kept by every policy) holds no fact
    assert sum(len(FACT_PATTERN.findall(chunk)) for chunk in task.metadata["chunks"]) == 3
    for k in (2, 3, 4):  # any reply that is not an answer gets the next chunk
        observations, reward, terminated, truncated, _ = env.step({"role": "assistant", "content": "ok"})
        assert observations == [{"role": "user", "content": f"Chunk {k} of 4:\n{task.metadata['chunks'][k - 1]}"}] and (
            reward,
            terminated,
            truncated,
        ) == (0.0, False, False)
    observations, *_ = env.step({"role": "assistant", "content": "ok"})
    assert observations[-1]["content"] == questions_message(task.metadata["questions"])
    first, second = task.metadata["answers"]
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": f"<answer>{first}; wrong</answer>"})
    assert (reward, terminated, info["correct"], info["per_question"]) == (0.5, True, False, [1.0, 0.0])
    assert env.episode_metrics()["long_qa/accuracy"] == 0.5 and env.episode_metrics()["long_qa/chunks_read"] == 1.0
    assert (
        make("long-qa", seed=1).tasks[0] != make("long-qa").tasks[0]
        and make("long-qa").tasks[5] == make("long-qa").tasks[5]
    )


def test_long_qa_oracle_answers_from_its_notes_within_the_memory_caps() -> None:
    """The oracle's facts live only in the bounded store: with a store too small for them
    (one note), it forgets and scores below 1; the memory counters say so."""
    env = make("long-qa", num_facts=4, num_questions=2)
    _, metrics = _play(env, 0, lambda e: e.expert_reply())
    assert metrics["memory/writes"] == 4 and metrics["memory/hits"] == 2 and metrics["memory/notes"] == 4
    small = make("long-qa", num_facts=4, num_questions=2, memory={"mode": "episode", "max_notes": 1})
    assert statistics.mean(_play(small, i, lambda e: e.expert_reply())[0] for i in range(20)) < 0.75
    with pytest.raises(ValueError, match="num_facts"):
        make("long-qa", num_chunks=2, num_facts=3)
    with pytest.raises(ValueError, match="num_questions"):
        make("long-qa", num_facts=2, num_questions=3)
    assert len(make("long-qa", memory="none").tools) == 0


def test_long_qa_expert_summary_carries_what_leaves_the_context() -> None:
    """The oracle's summary (``summarize`` replaces the history with it) names the notes
    saved, copies the newest chunk's unsaved facts, and once asked, the questions and the
    notes read; the answer is never in it before a note was read."""
    env = make("long-qa", num_chunks=4, chunk_sentences=5, num_facts=3, num_questions=2)
    env.reset(options={"task_index": 3})
    chunks, saved = env.task.metadata["chunks"], []
    while not env.asked:
        env.step({"role": "assistant", "content": env.expert_reply()})
        summary = env.expert_summary()
        newest = chunks[env.shown_chunks - 1]
        assert f"Read chunks 1-{env.shown_chunks} of 4." in summary and all(f"{a} of {p}" in summary for a, p in saved)
        if env.asked:
            break
        for match in FACT_PATTERN.finditer(newest):
            assert "Not saved yet: " in summary and match.group(0) in summary
        saved += [(a, p) for a, p, _ in FACT_PATTERN.findall(newest)]
    assert all(question in summary for question in env.task.metadata["questions"]) and "memory_read" in summary
    assert not any(answer in summary.split("Questions:")[1] for answer in env.task.metadata["answers"])
    env.step({"role": "assistant", "content": env.expert_reply()})  # the reads
    summary = env.expert_summary()
    assert "Notes read: " in summary and all(answer in summary for answer in env.task.metadata["answers"])


def test_long_qa_document_does_not_fit_the_recipe_budget(tokenizer) -> None:
    """MemAgent's setting: the document does not fit in the context beside the opening."""
    from pathlib import Path

    from agentic_rl.config import TrainConfig, build
    from agentic_rl.recipes import load_recipe

    recipe = Path(__file__).parents[2] / "examples" / "configs" / "long-qa.yaml"
    config = build(TrainConfig, load_recipe(str(recipe))[1])
    env = make(config.env.name, **config.env.model_extra)
    assert config.rollout.context == "summarize" and env.memory is not None
    for index in range(5):
        # The room the context leaves beside the opening (instructions, memory tools, chunk 1),
        # which every segment keeps: the rest of the document must be well over that.
        messages, _ = env.reset(options={"task_index": index})
        opening_tokens = len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=False))
        room = config.rollout.context_tokens - opening_tokens
        chunks = env.tasks[index].metadata["chunks"][1:]
        document_tokens = len(tokenizer(" ".join(chunks), add_special_tokens=False)["input_ids"])
        # The recipe's: a ~560-token opening leaves ~335 tokens; chunks 2-6 are ~580 (1.7x).
        assert 0 < room and document_tokens >= 1.5 * room, (opening_tokens, room, document_tokens)


def test_multi_search_reward_is_the_fraction_right() -> None:
    env = make("multi-search-qa", num_questions=3)
    env.reset(options={"task_index": 2})
    golds = env.task.metadata["answers"]
    _, reward, terminated, _, info = env.step(
        {"role": "assistant", "content": f"<answer>{golds[0]}; no; {golds[2]}</answer>"}
    )
    assert reward == pytest.approx(2 / 3) and terminated and not info["correct"]
    assert env.task.prompt.count("\n") == 3  # the three questions, numbered, under one line
    with pytest.raises(ValueError, match="num_questions"):
        make("multi-search-qa", num_questions=1)


def test_plan_first_format_reward_and_adherence() -> None:
    """The ``plan`` episode term (weighed by ``reward.terms.plan``, no longer mixed into the
    outcome): 1 when the first turn held a plan, reported with the final answer."""
    env = make("search-qa", plan_first=True)
    assert "<plan></plan>" in env.system_prompt and "plan" in env.reward_terms
    env.reset(options={"task_index": 0})
    plan = "1. search the company\n2. search its founder\n3. answer"
    observations, reward, terminated, _, info = env.step({"role": "assistant", "content": f"<plan>{plan}</plan>"})
    assert observations == [{"role": "user", "content": "Plan noted. Now carry it out."}] and (reward, terminated) == (
        0.0,
        False,
    )
    assert "reward_terms" not in info  # the term comes with the final answer
    env.step({"role": "assistant", "content": env.expert_reply()})  # one search of the two planned
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": "<answer>nobody</answer>"})
    metrics = env.episode_metrics()
    # The outcome is the answer's score alone; one of the 2-hop question's two gold documents found.
    assert terminated and reward == 0.0 and info["reward_terms"] == {"plan": 1.0, "evidence": 0.5}
    assert reward + weighted(info["reward_terms"], {"plan": 0.2}) == pytest.approx(0.2)  # 0 + 0.2 x [a plan]
    assert (metrics["plan/made"], metrics["plan/steps"], metrics["plan/adherence"]) == (1.0, 3.0, 0.5)
    env.reset(options={"task_index": 0})  # no plan: the first turn is an ordinary turn, no plan term
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": f"<answer>{env.task.answer}</answer>"})
    assert (
        terminated
        and reward == 1.0
        and info["reward_terms"] == {"plan": 0.0, "evidence": 0.0}
        and env.episode_metrics()["plan/made"] == 0.0
        and "plan/adherence" not in env.episode_metrics()
    )
    assert reward + weighted(info["reward_terms"], {"plan": 0.2}) == 1.0  # additive: the answer keeps its 1
    # Without plan_first there is no plan term (preflight rejects a weight on it).
    assert "plan" not in make("arithmetic").reward_terms
    with pytest.raises(TypeError, match=r"^env 'arithmetic' option plan_reward: moved to reward\.terms\.plan"):
        make("arithmetic", plan_reward=0.1)
    with pytest.raises(ValueError, match="plan_first: expected true or false"):
        make("arithmetic", plan_first="yes")


def test_plan_helpers_by_hand() -> None:
    from collections import Counter

    from agentic_rl.envs.planning import plan_adherence, planned_calls

    plan = "1. memory_read the notes\n\n2. search: Vexora founded\n3. think\n4. search again, then memory_write"
    assert planned_calls(plan, ["search", "memory_read", "memory_write"]) == ["memory_read", "search", "search"]
    assert plan_adherence(["memory_read", "search", "search"], Counter({"search": 5})) == pytest.approx(2 / 3)
    assert plan_adherence([], Counter({"search": 1})) is None
    assert planned_calls("researching", ["search"]) == []  # whole words only
