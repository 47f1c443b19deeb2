"""The ``search-qa`` env: generated data, oracle / no-search acceptance, loss masking,
malformed calls, custom QA files and the engine's episode-metrics hook."""

from __future__ import annotations

import json
import re

import pytest

from agentic_rl.config import RolloutConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import check_env, make
from agentic_rl.envs.search_data import QUESTION_TYPES, SearchQATasks, _worlds, generate_corpus, oracle_action
from agentic_rl.envs.search_qa import oracle_reply
from agentic_rl.envs.terms import weighted
from agentic_rl.evaluation.metrics import aggregate_metrics
from agentic_rl.parsers import get_parser
from agentic_rl.retrieval import Document, write_corpus
from agentic_rl.rollout import rollout


def run_episode(env, policy, index):
    """Drive one episode with ``policy(task, observations) -> assistant text``."""
    env.reset(options={"task_index": index})
    observations: list[str] = []
    while True:
        reply = policy(env.task, observations)
        messages, reward, terminated, truncated, info = env.step({"role": "assistant", "content": reply})
        if terminated or truncated:
            return reward, info
        observations.append(info["tool_results"][0].content)


def oracle_policy(parser_name):
    parser = get_parser(parser_name)
    return lambda task, observations: oracle_reply(task, observations, parser)


# --------------------------------------------------------------------------- data


def test_tasks_are_deterministic_and_cover_types_and_hops():
    tasks = SearchQATasks(split="test")
    again = SearchQATasks(split="test")
    assert [t.prompt for t in tasks[:50]] == [t.prompt for t in again[:50]]
    sample = tasks[:200]
    assert {t.metadata["template"] for t in sample} == set(QUESTION_TYPES)
    assert {t.metadata["hops"] for t in sample} == {1, 2, 3}
    assert {t.metadata["question_type"] for t in sample} == {"lookup", "bridge", "comparison"}
    for task in sample:  # the answer is never given away by the question
        assert task.answer.lower() not in task.prompt.lower()


def test_hops_filter_one_hop_lookups_and_lists():
    one = SearchQATasks(split="test", hops=1)[:60]
    assert {t.metadata["hops"] for t in one} == {1} and {t.metadata["question_type"] for t in one} == {"lookup"}
    assert {t.metadata["template"] for t in one} == {"founder", "hq_city", "birth_city", "designer", "city_country"}
    assert {t.metadata["hops"] for t in SearchQATasks(split="test", hops=[1, 2])[:60]} == {1, 2}
    # Appending the lookup types left the tasks of the existing filters as they were.
    assert SearchQATasks(split="test", hops=2)[0].prompt == "In which city was the founder of Thugend Holdings born?"
    for bad in (4, [], [1, 5], True, "2"):
        with pytest.raises(ValueError, match="hops"):
            SearchQATasks(hops=bad)


def test_question_weights_draw_question_types_in_proportion():
    """hops [1, 2] keeps 5 lookup, 3 bridge and 2 comparison templates: {bridge: 3,
    comparison: 2} gives them weights 5 : 9 : 4 (uniform draws: 5 : 3 : 2)."""
    from collections import Counter

    def shares(**options):
        counts = Counter(
            t.metadata["question_type"] for t in SearchQATasks(split="train", hops=[1, 2], num_tasks=2000, **options)
        )
        return {kind: counts[kind] / 2000 for kind in ("lookup", "bridge", "comparison")}

    weighted = shares(question_weights={"bridge": 3, "comparison": 2})
    for kind, expected in {"lookup": 5 / 18, "bridge": 9 / 18, "comparison": 4 / 18}.items():
        assert weighted[kind] == pytest.approx(expected, abs=0.035)
    assert shares(question_weights={"lookup": 0})["lookup"] == 0.0
    # Unweighted splits keep their tasks; weights of 1 give the same proportions, other draws.
    assert (
        SearchQATasks(split="test", hops=2)[0].prompt
        == SearchQATasks(split="test", hops=2, question_weights=None)[0].prompt
    )
    assert shares(question_weights={}) == pytest.approx({"lookup": 0.5, "bridge": 0.3, "comparison": 0.2}, abs=0.035)
    for bad, message in (
        ({"bridges": 2}, "unknown question type 'bridges'; known: bridge, comparison, lookup"),
        ({"bridge": -1}, "question_weights.bridge: expected a non-negative number"),
        ({"bridge": "3"}, "question_weights.bridge: expected a non-negative number"),
        ({"lookup": 0}, "every question type left by types and hops has weight 0"),
        ([2, 1], "expected a mapping"),
    ):
        with pytest.raises(ValueError, match=message):
            SearchQATasks(hops=1, question_weights=bad)
    with pytest.raises(ValueError, match="question_weights: weighs the built-in question types"):
        make("search-qa", qa_path="qa.jsonl", question_weights={"bridge": 2})


def test_oracle_answers_every_one_hop_lookup():
    env = make("search-qa", split="test", hops=1)
    for index in range(60):
        reward, _ = run_episode(env, oracle_policy("hermes"), index)
        assert reward == 1.0 and len(env.queries) == 1
        assert env.episode_metrics()["search/em_1hop"] == env.episode_metrics()["search/em_lookup"] == 1.0


def test_train_and_test_worlds_are_disjoint():
    worlds = _worlds(0)
    train_text = " ".join(d.text for d in worlds["train"].documents())
    test_names = [
        e["name"] for kind in ("people", "companies", "inventions", "cities") for e in getattr(worlds["test"], kind)
    ]
    assert not any(re.search(rf"\b{re.escape(name)}\b", train_text) for name in test_names[:300])
    train_prompts = {t.prompt for t in SearchQATasks(split="train")[:500]}
    assert not train_prompts & {t.prompt for t in SearchQATasks(split="test")[:500]}


def test_generate_corpus_size_and_unique_ids():
    docs = generate_corpus(3000, seed=1)
    assert len(docs) == 3000 and len({d.id for d in docs}) == 3000


# --------------------------------------------------------------------------- acceptance


@pytest.mark.parametrize("parser", ["hermes", "search_r1"])
def test_oracle_scores_em_at_least_095_on_test(parser):
    env = make("search-qa", split="test", parser=parser)
    policy = oracle_policy(parser)
    rewards = [run_episode(env, policy, i)[0] for i in range(300 if parser == "hermes" else 100)]
    assert sum(rewards) / len(rewards) >= 0.95


def test_policy_without_search_scores_at_most_005():
    env = make("search-qa", split="test")

    def guess(task, observations):  # the best a searchless policy can do: an entity of the question
        names = re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+)*", task.prompt)
        return f"<answer>{names[-1] if names else 'unknown'}</answer>"

    rewards = [run_episode(env, guess, i)[0] for i in range(300)]
    assert sum(rewards) / len(rewards) <= 0.05
    # A constant guess of the most frequent training answer does no better.
    answers = [t.answer for t in SearchQATasks(split="train")[:2000]]
    common = max(set(answers), key=answers.count)
    rewards = [run_episode(env, lambda t, o: f"<answer>{common}</answer>", i)[0] for i in range(300)]
    assert sum(rewards) / len(rewards) <= 0.05


def test_oracle_uses_only_retrieved_text():
    task = SearchQATasks(split="test")[0]
    action, query = oracle_action(task, [])
    assert action == "search"
    assert oracle_action(task, ["nothing useful"]) == ("answer", "unknown")


# --------------------------------------------------------------------------- env behaviour


def test_check_env_and_options():
    check_env(make("search-qa", split="test", num_tasks=5))
    env = make("search-qa", split="test", top_k=1, max_doc_chars=20)
    env.reset(options={"task_index": 0})
    call = oracle_reply(env.task, [], env.parser)
    _, _, _, _, info = env.step({"role": "assistant", "content": call})
    content = info["tool_results"][0].content
    assert content.count("Doc ") == 1 and content.endswith("...")
    with pytest.raises(ValueError):
        make("search-qa", top_k=0)
    with pytest.raises(ValueError):
        make("search-qa", reward="bleu")


def shaped(reward: float, info: dict, *, format_weight: float = 0.0, terms: dict | None = None) -> float:
    """An episode's reward as the trainer shapes it from its final step (search-qa reports
    ``format_ok`` and its episode terms there): the outcome, plus ``reward.format_weight``
    for a followed format, plus the episode terms times ``reward.terms``."""
    return (
        reward
        + format_weight * float(info.get("format_ok", False))
        + weighted(info.get("reward_terms", {}), terms or {})
    )


def test_f1_and_format_rewards():
    env = make("search-qa", split="test", reward="f1")
    env.reset(options={"task_index": 0})
    gold = env.task.answer
    env.step({"role": "assistant", "content": oracle_reply(env.task, [], env.parser)})  # the format term needs a search
    _, reward, terminated, _, info = env.step({"role": "assistant", "content": f"<answer>{gold} and more</answer>"})
    # F1 of (gold + 2 extra tokens) vs gold with a 1-token gold: P=1/3, R=1 -> 0.5
    assert terminated and info["em"] == 0.0 and info["f1"] == pytest.approx(0.5)
    assert reward == pytest.approx(0.5) and info["format_ok"] is True  # the outcome is the plain F1
    assert shaped(reward, info, format_weight=0.2) == pytest.approx(0.5 + 0.2)  # reward.format_weight: additive
    assert not info["correct"]
    env.reset(options={"task_index": 0})
    _, reward, _, _, info = env.step({"role": "assistant", "content": "no answer tag"})
    assert reward == 0.0 and info["answer"] is None and info["format_ok"] is False
    assert shaped(reward, info, format_weight=0.2) == 0.0
    with pytest.raises(TypeError, match=r"^env 'search-qa' option format_reward: moved to reward\.format_weight"):
        make("search-qa", format_reward=0.2)


def test_answering_without_a_search_never_pays_more_than_searching():
    """The shortcut GRPO found: with the format term paid for any well-formed answer, a
    policy that skips the search earned reward for nothing. Pinned on the shipped recipe."""
    from agentic_rl.recipes import load_recipe

    _, recipe = load_recipe("search-qa")
    options = {k: v for k, v in recipe["env"].items() if k != "name"}
    format_weight = recipe["reward"]["format_weight"]
    terms = recipe["reward"].get("terms", {})
    assert format_weight > 0
    env = make("search-qa", split="test", **options)
    searcher = oracle_policy(options.get("parser", "hermes"))
    for index in range(40):
        env.reset(options={"task_index": index})
        gold = env.task.answer

        def paid(policy):
            return shaped(*run_episode(env, policy, index), format_weight=format_weight, terms=terms)

        skip_wrong = paid(lambda t, o: "<answer>unknown</answer>")
        skip_right = paid(lambda t, o: f"<answer>{gold}</answer>")  # a lucky guess
        search_wrong = paid(lambda t, o: searcher(t, o) if not o else "<answer>unknown</answer>")
        search_right = paid(searcher)
        assert skip_wrong == 0.0
        assert search_wrong == pytest.approx(format_weight)
        # A lucky guess without searching: no format term, and no answer term either once
        # the answer needs its evidence retrieved (the shipped recipe's require_evidence).
        assert search_right == pytest.approx(1.0 + format_weight) and skip_right == pytest.approx(
            0.0 if options.get("require_evidence") else 1.0
        )
        assert max(skip_wrong, skip_right) < search_right


def test_require_evidence_pays_the_answer_only_after_every_supporting_document():
    """The shortcut RL found on 2-hop questions: answer after the first search (a comparison
    is right half the time by luck). With ``require_evidence`` a right answer without the
    second document earns only the format term; the oracle's full search earns 1 (+ format)."""
    env = make("search-qa", split="test", hops=2, types=["older_person_birth_city"], require_evidence=True, top_k=2)
    searcher = oracle_policy("hermes")
    for index in range(10):
        env.reset(options={"task_index": index})
        gold = env.task.answer
        first_then_gold = lambda t, o: searcher(t, o) if not o else f"<answer>{gold}</answer>"  # noqa: E731
        reward, info = run_episode(env, first_then_gold, index)
        assert info["em"] == 1.0 and info["correct"]  # the answer itself is right: held-out EM counts it
        assert reward == 0.0 and shaped(reward, info, format_weight=0.1) == pytest.approx(0.1)
        assert env.episode_metrics()["search/gold_recall"] == 0.5
        reward, info = run_episode(env, searcher, index)
        assert reward == 1.0 and info["correct"] and env.has_evidence()
        assert shaped(reward, info, format_weight=0.1) == pytest.approx(1.1)
    # Without the option the lucky guess is paid in full.
    plain = make("search-qa", split="test", hops=2, types=["older_person_birth_city"], top_k=2)
    plain.reset(options={"task_index": 0})
    gold = plain.task.answer
    assert run_episode(plain, lambda t, o: searcher(t, o) if not o else f"<answer>{gold}</answer>", 0)[0] == 1.0


def test_evidence_reward_pays_the_share_of_supporting_documents_retrieved():
    """The ``evidence`` episode term (``reward.terms.evidence``): the share of a 2-hop
    question's two documents retrieved, with a well-formed answer. A wrong answer after one
    of them earns format + evidence/2, after both format + evidence; the oracle earns 1 +
    format + evidence; answering without a search earns nothing, and no answer (the
    evidence alone) earns nothing."""
    env = make("search-qa", split="test", hops=2, types=["older_person_birth_city"], require_evidence=True, top_k=2)
    assert env.reward_terms["evidence"].per == "episode"
    searcher = oracle_policy("hermes")
    weights = {"format_weight": 0.1, "terms": {"evidence": 0.2}}
    for index in range(10):
        env.reset(options={"task_index": index})
        gold = env.task.answer
        one_search = lambda t, o: searcher(t, o) if not o else "<answer>unknown</answer>"  # noqa: E731
        both_searches = lambda t, o: searcher(t, o) if len(o) < 2 else "<answer>unknown</answer>"  # noqa: E731
        reward, info = run_episode(env, one_search, index)
        assert (reward, info["reward_terms"]) == (0.0, {"evidence": 0.5})
        assert shaped(reward, info, **weights) == pytest.approx(0.1 + 0.2 * 0.5)
        reward, info = run_episode(env, both_searches, index)
        assert (reward, info["reward_terms"]) == (0.0, {"evidence": 1.0})
        assert shaped(reward, info, **weights) == pytest.approx(0.1 + 0.2)
        right_after_one = run_episode(env, lambda t, o: searcher(t, o) if not o else f"<answer>{gold}</answer>", index)
        # require_evidence: the answer's score needs both documents
        assert shaped(*right_after_one, **weights) == pytest.approx(0.1 + 0.1)
        assert shaped(*run_episode(env, searcher, index), **weights) == pytest.approx(1.0 + 0.1 + 0.2)
        reward, info = run_episode(env, lambda t, o: f"<answer>{gold}</answer>", index)
        assert info["reward_terms"] == {"evidence": 0.0} and shaped(reward, info, **weights) == 0.0
        reward, info = run_episode(env, lambda t, o: searcher(t, o) if len(o) < 2 else "no answer", index)
        assert info["reward_terms"] == {"evidence": 0.0} and shaped(reward, info, **weights) == 0.0
    with pytest.raises(TypeError, match=r"^env 'search-qa' option evidence_reward: moved to reward\.terms\.evidence"):
        make("search-qa", evidence_reward=0.2)


def test_gold_documents_follow_the_question_not_the_task_position():
    """Task ids number positions: with other hops filters, position 0 is another question,
    and each env must get that question's own supporting documents (they share a cache)."""
    lookups = make("search-qa", split="test", hops=1, require_evidence=True)
    bridges = make("search-qa", split="test", hops=2, types=["older_person_birth_city"], require_evidence=True)
    lookups.reset(options={"task_index": 0})
    bridges.reset(options={"task_index": 0})
    assert lookups.task.id == bridges.task.id and lookups.task.prompt != bridges.task.prompt
    assert len(lookups.gold) == 1 and len(bridges.gold) == 2 and not lookups.gold & bridges.gold


def test_require_evidence_needs_gold_documents(tmp_path):
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "q?", "answers": ["a"]}) + "\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "title": f"T{i}", "text": f"Alpha Corp fact number {i}."}) + "\n"
            for i in range(3)
        )
    )
    with pytest.raises(ValueError, match="require_evidence: task qa-0 of .* has no supporting_docs"):
        make("search-qa", qa_path=str(qa), corpus_path=str(corpus), require_evidence=True)
    with pytest.raises(ValueError, match="require_evidence: expected true or false, got 'yes'"):
        make("search-qa", require_evidence="yes")


def test_expert_reply_plays_the_oracle_and_refuses_custom_questions(tmp_path):
    env = make("search-qa", split="test", hops=[1, 2])
    for index in range(10):
        env.reset(options={"task_index": index})
        while True:
            _, reward, terminated, truncated, info = env.step({"role": "assistant", "content": env.expert_reply()})
            if terminated or truncated:
                break
        assert terminated and info["correct"] and len(env.queries) == env.task.metadata["hops"]
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "Who?", "answers": ["x"]}) + "\n")
    custom = make("search-qa", qa_path=str(qa))
    custom.reset(options={"task_index": 0})
    with pytest.raises(ValueError, match="built-in questions"):
        custom.expert_reply()


def test_malformed_search_calls_hermes():
    env = make("search-qa", split="test")
    env.reset(options={"task_index": 0})
    bad = [
        '<tool_call>{"name": "search", "arguments": {"query": </tool_call>',  # bad JSON
        '<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',  # wrong argument
        '<tool_call>{"name": "search", "arguments": {"query": "   "}}</tool_call>',  # empty query
        '<tool_call>{"name": "lookup", "arguments": {"query": "x"}}</tool_call>',  # unknown tool
    ]
    for text in bad:
        observations, reward, terminated, truncated, info = env.step({"role": "assistant", "content": text})
        assert not terminated and reward == 0.0
        (result,) = info["tool_results"]
        assert not result.ok and result.content.startswith("Error")
        assert observations[0]["content"].startswith("<tool_response>")
    assert env.episode_metrics()["search/searches"] == 0.0
    assert env.malformed_calls == 3  # the empty query is well-formed; the tool refused it


def test_malformed_search_calls_search_r1():
    env = make("search-qa", split="test", parser="search_r1")
    env.reset(options={"task_index": 0})
    for text, message in [
        ("<search> unclosed", "unclosed"),
        ("<search>   </search>", "empty query"),
        ("</search> stray", "without a matching"),
    ]:
        observations, _, terminated, _, info = env.step({"role": "assistant", "content": text})
        assert not terminated and message in info["tool_results"][0].content
        assert observations[0]["content"].startswith("<information>Error")
    observations, _, _, _, info = env.step({"role": "assistant", "content": "<search> a </search><search> b </search>"})
    assert [r.ok for r in info["tool_results"]] == [False, True]  # second search refused, first runs


def test_search_r1_parser_round_trip():
    parser = get_parser("search_r1")
    from agentic_rl.types import ToolCall

    text = "I need the founder. " + parser.format_call(ToolCall("search", {"query": "Vexora founded"}))
    parsed = parser.parse(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("search", {"query": "Vexora founded"})]
    assert parsed.content == "I need the founder." and not parsed.errors
    assert not parser.parse("<answer> x </answer>").has_calls


def test_episode_metrics_recall_and_repeats():
    env = make("search-qa", split="test")
    env.reset(options={"task_index": 0})
    first = oracle_reply(env.task, [], env.parser)
    env.step({"role": "assistant", "content": first})
    env.step({"role": "assistant", "content": first})  # the same query again
    metrics = env.episode_metrics()
    assert metrics["search/searches"] == 2.0 and metrics["search/repeated_queries"] == 1.0
    assert metrics["search/answer_recall"] == 0.0  # one hop is not enough to see the answer
    env.reset(options={"task_index": 0})
    assert run_episode(env, oracle_policy("hermes"), 0)[0] == 1.0
    metrics = env.episode_metrics()
    assert (
        metrics["search/answer_recall"] == 1.0
        and metrics["search/em"] == 1.0
        and metrics["search/repeated_queries"] == 0.0
    )


def test_custom_qa_file_and_corpus(tmp_path):
    corpus = write_corpus(
        [
            Document("1", "Zorbu", "Zorbu is the capital of Quandia."),
            Document("2", "Mirel", "Mirel is a river in Sonta."),
        ],
        tmp_path / "corpus.jsonl",
    )
    qa = tmp_path / "test.jsonl"
    qa.write_text(
        json.dumps({"question": "What is the capital of Quandia?", "answers": ["Zorbu", "Zorbu City"]}) + "\n"
    )
    env = make("search-qa", split="test", qa_path=str(tmp_path / "{split}.jsonl"), corpus_path=str(corpus))
    assert env.num_tasks == 1
    env.reset(options={"task_index": 0})
    _, _, _, _, info = env.step(
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "search", "arguments": {"query": "capital Quandia"}}</tool_call>',
        }
    )
    assert info["tool_results"][0].content.startswith("Doc 1(Title: Zorbu)")
    _, reward, _, _, _ = env.step({"role": "assistant", "content": "<answer>the Zorbu city</answer>"})
    assert reward == 1.0
    assert env.episode_metrics()["search/answer_recall"] == 1.0


# --------------------------------------------------------------------------- engine


def _scripted_oracle(tokenizer, env):
    tasks = {env.tasks[i].prompt: env.tasks[i] for i in range(env.num_tasks)}
    parser = env.parser

    def script(prompt_ids, call_index):
        text = tokenizer.decode(prompt_ids)
        question = next(
            q for q in tasks if q in text.split("<|im_start|>user")[-1] or q in text[text.rfind("<|im_start|>user") :]
        )
        after = text[text.rfind(question) :]
        observations = [
            o.strip() for o in re.findall(r"<tool_response>\n(.*?)\n</tool_response>", after, flags=re.DOTALL)
        ]
        return oracle_reply(tasks[question], observations, parser)

    return script


def test_engine_oracle_masks_information_and_reports_search_metrics(tokenizer):
    make_env = lambda: make("search-qa", split="test", num_tasks=6, hops=[2, 3])  # noqa: E731
    backend = ScriptedBackend(tokenizer, _scripted_oracle(tokenizer, make_env()))
    groups = rollout(backend, make_env, range(6), group_size=1, config=RolloutConfig(max_total_tokens=4096))
    trajectories = [t for g in groups for t in g.trajectories]
    assert all(t.correct and t.termination_reason == "answered" for t in trajectories)
    question_types = {task.id: task.metadata["question_type"] for task in SearchQATasks(split="test", hops=[2, 3])[:6]}
    assert set(question_types.values()) >= {"bridge", "comparison"}
    for trajectory in trajectories:
        assert trajectory.num_turns >= 3  # at least two searches, then the answer
        for turn in trajectory.turns[:-1]:
            observation = trajectory.token_ids[turn.response_end : turn.observation_end]
            assert trajectory.loss_mask[turn.response_end : turn.observation_end] == [0] * len(observation)
            assert "Doc 1(Title:" in tokenizer.decode(observation)
            assert trajectory.loss_mask[turn.response_start : turn.response_end] == [1] * (
                turn.response_end - turn.response_start
            )
        by_kind = trajectory.info["episode_metrics"].keys() - {
            "search/searches",
            "search/answer_recall",
            "search/repeated_queries",
            "search/em",
            "search/f1",
            "search/gold_recall",  # the built-in questions know their gold documents
        }
        assert trajectory.info["episode_metrics"]["search/gold_recall"] == 1.0
        hops = {key for key in by_kind if key.endswith("hop")}
        assert len(hops) == 1 and hops <= {"search/em_1hop", "search/em_2hop", "search/em_3hop"}
        assert by_kind - hops == {"search/em_" + question_types[trajectory.task_id]}
    metrics = aggregate_metrics([g.trajectories for g in groups], k=1)
    assert metrics["avg@1"] == 1.0
    assert metrics["search/answer_recall"] == 1.0 and metrics["search/em"] == 1.0
    assert metrics["search/searches"] == pytest.approx(metrics["tool/search/calls"] / 6)
    assert metrics["search/repeated_queries"] == 0.0
