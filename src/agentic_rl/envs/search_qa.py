"""``search-qa``: answer multi-hop questions by searching a document collection.

The model calls a ``search(query)`` tool (hermes format) or writes Search-R1 tags
(``<search> q </search>``, results in ``<information>``), then answers inside
``<answer></answer>``. Retrieved text is observation (loss_mask 0). The reward is
exact match (SQuAD normalization), token F1 against the gold answers or an LLM judge's
score (``reward: judge``). Per-episode search
metrics (searches, answer recall, repeated queries, EM, F1) come from
:meth:`SearchQAEnv.episode_metrics`.

Reward terms (``envs.terms``; ``reward.terms`` weighs them; see the factory): StepSearch's
``info_gain`` and ``repeat`` per search turn, and ``evidence`` per episode, R1-Searcher's /
StepSearch's retrieval credit in the outcome (so GRPO's episode-level advantage sees it: a
group whose samples all answer a 2-hop question wrong still ranks the one that found the
second document above the ones that searched once). ``info["format_ok"]``: an answer after
a search that ran, with no malformed call (``reward.format_weight`` pays it).

``require_evidence``: the answer earns its reward (EM / F1 / judge) only once the episode's
searches have retrieved every gold-supporting document. Without it a comparison question
("the older of A and B") answered after one search is right half the time by luck, and a
bridge's first document often names a plausible wrong answer: RL found that shortcut and
dropped the second search. The ``em`` / ``f1`` metrics and ``correct`` stay the plain
answer scores, so held-out accuracy means the same with and without it.

By default the questions and corpus are the built-in generated ones
(:mod:`agentic_rl.envs.search_data`); ``few_shot`` oracle demonstrations need the built-in
questions and a real corpus. ``qa_path`` replaces the questions, ``corpus_path`` /
``index_path`` / ``server_url`` the corpus, and ``retriever`` (fields of
:class:`~agentic_rl.retrieval.simulated.SimulationConfig`) replaces it with ZeroSearch's
LLM-simulated search engine (:mod:`agentic_rl.retrieval.simulated`) and its noise curriculum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from agentic_rl.envs.base import Task
from agentic_rl.envs.search_data import DEFAULT_NUM_TASKS, SearchQATasks, oracle_action
from agentic_rl.envs.search_sources import (
    GoldDocuments,
    QATasks,
    gold_documents_of,
    make_search_tool,
    open_search,
)
from agentic_rl.envs.terms import RewardTerm
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, ToolCallParser, get_parser
from agentic_rl.retrieval.base import Retriever
from agentic_rl.retrieval.simulated import SimulatedSearch, SimulatedSearchEngine
from agentic_rl.rewards.judge import LLMJudge, make_judge
from agentic_rl.rewards.qa import answer_in_text, best_exact_match, best_f1
from agentic_rl.tools import Tool, ToolRegistry
from agentic_rl.types import Message, ToolCall, ToolResult

__all__ = ["SearchQAEnv", "make_search_qa_env"]

HERMES_PROMPT = (
    "You answer questions using a document collection. Use the search tool to look up each fact "
    "you need, one entity per search, then give the final answer as <answer>ANSWER</answer>, "
    "a short span with no explanation."
)
SEARCH_R1_PROMPT = (
    "Answer the given question. Reason step by step. When you lack knowledge, call the search "
    "engine with <search> query </search>; it returns the top results between <information> and "
    "</information>. Search as many times as you want. When you know the answer, give it inside "
    "<answer> and </answer> without explanation, for example <answer> Beijing </answer>."
)


# --------------------------------------------------------------------------- env


def _golds(task: Task) -> list[str]:
    return list(task.metadata.get("answers") or [task.answer])


def _normalize_query(query: str) -> str:
    return " ".join(query.lower().split())


EVIDENCE_TERMS = {
    "info_gain": RewardTerm("turn", "fraction of the gold documents the turn's searches found first"),
    "evidence": RewardTerm("episode", "fraction of the gold documents found, with a well-formed answer"),
}
"""The terms that need the question's gold-supporting documents."""
REPEAT_TERM = RewardTerm("turn", "queries of the turn the episode had already searched")


class SearchQAEnv(ToolEnv):
    """A ``ToolEnv`` scored by EM / F1 / an LLM judge, recording what was searched and
    retrieved; with ``gold_documents`` and ``retriever`` + ``top_k`` (what the search tool
    ranks, to see which documents a query returned), the evidence terms and
    ``require_evidence``."""

    search_tool_name = "search"
    """The tool whose calls count as searches (queries, repeats, retrieved text)."""

    def __init__(
        self,
        tasks: Sequence[Task],
        tools: ToolRegistry,
        *,
        reward: Literal["em", "f1", "judge"] = "em",
        judge: LLMJudge | None = None,
        require_evidence: bool = False,
        gold_documents: GoldDocuments | None = None,
        retriever: Retriever | None = None,
        top_k: int = 3,
        simulated_search: SimulatedSearch | None = None,
        **kwargs: Any,
    ) -> None:
        if reward not in ("em", "f1", "judge"):
            raise ValueError(f"reward: expected 'em', 'f1' or 'judge', got {reward!r}")
        if (reward == "judge") != (judge is not None):
            raise ValueError("judge: reward 'judge' needs judge options, and judge options need reward 'judge'")
        if require_evidence and (gold_documents is None or retriever is None):
            raise ValueError("require_evidence: needs gold_documents and the retriever the search tool uses")
        super().__init__(tasks, tools, **kwargs)
        self.reward_kind = reward
        self.judge = judge
        self.reward_terms["repeat"] = REPEAT_TERM
        if gold_documents is not None and retriever is not None:
            self.reward_terms.update(EVIDENCE_TERMS)
        self.simulated_search = simulated_search
        """ZeroSearch's simulated engine behind the search tool, told each episode's question,
        answers and training step (``options["training_step"]``) at reset; None: a real corpus."""
        self.require_evidence = bool(require_evidence)
        self.gold_documents, self.retriever, self.top_k = gold_documents, retriever, top_k
        self._reset_episode()

    def _reset_episode(self) -> None:
        self.queries: list[str] = []
        self.retrieved: list[str] = []
        self.repeated_queries = 0
        self.malformed_calls = 0
        self.final: dict[str, float] = {"em": 0.0, "f1": 0.0}
        self.gold: frozenset[str] = frozenset()
        self.found_gold: set[str] = set()
        self.last_turn_terms: dict[str, float] = {}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self._reset_episode()
        messages, info = super().reset(seed=seed, options=options)
        if self.simulated_search is not None:
            step = (options or {}).get("training_step")
            self.simulated_search.begin_episode(
                question=self.task.prompt, answers=_golds(self.task), step=step, seed=seed
            )  # type: ignore[union-attr]
        if self.gold_documents is not None and self.retriever is not None:  # the evidence terms
            self.gold = frozenset(self.gold_documents(self.task))  # type: ignore[misc, arg-type]
        return messages, info

    def score(self, answer: str | None) -> tuple[float, dict[str, float]]:
        """(reward, {"em", "f1"}) of a final answer for the current task."""
        golds = _golds(self.task)  # type: ignore[arg-type]
        em, f1 = best_exact_match(answer, golds), best_f1(answer, golds)
        if self.reward_kind == "judge":
            base = self.judge(answer, self.task)  # type: ignore[misc]  # a failing judge raises: an infrastructure error
        else:
            base = em if self.reward_kind == "em" else f1
        if self.require_evidence and not self.has_evidence():
            base = 0.0
        return base, {"em": em, "f1": f1}

    def episode_terms(self, answer: str | None) -> dict[str, float]:
        """ToolEnv's terms and, with gold documents, ``evidence``: the fraction found with a well-formed answer."""
        terms = super().episode_terms(answer)
        if "evidence" in self.reward_terms:
            terms["evidence"] = float(self.well_formed(answer)) * self.evidence_share()
        return terms

    def evidence_share(self) -> float:
        """The fraction of the question's gold-supporting documents this episode's searches retrieved."""
        return len(self.found_gold) / len(self.gold) if self.gold else 0.0

    def has_evidence(self) -> bool:
        """Whether this episode's searches retrieved every gold-supporting document."""
        return bool(self.gold) and self.found_gold >= self.gold

    def well_formed(self, answer: str | None) -> bool:
        """The format this env reports (``info["format_ok"]``, paid by ``reward.format_weight``):
        an answer after a search that ran, with no malformed call. Paid for any well-formed
        answer, it is the cheapest reward there is, and GRPO learns to answer without
        searching (measured: searches per episode fell from 0.31 to 0 in 8 steps)."""
        return answer is not None and self.malformed_calls == 0 and bool(self.queries)

    def score_answer(self, answer: str | None) -> tuple[float, bool, dict[str, Any]]:
        reward, scores = self.score(answer)
        self.final = scores
        return reward, scores["em"] == 1.0, {**scores, "format_ok": self.well_formed(answer)}

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        new_gold, repeats = 0, 0
        for call, result in zip(calls, call_results):
            if call.name == self.search_tool_name and result.ok and isinstance(call.arguments, dict):
                raw = str(call.arguments.get("query", ""))
                query = _normalize_query(raw)
                if query in self.queries:
                    self.repeated_queries += 1
                    repeats += 1
                self.queries.append(query)
                self.retrieved.append(result.content)
                if self.gold:
                    new_gold += self._newly_found(raw)
        self.malformed_calls += sum(r.malformed for r in results)
        self.last_turn_terms = {"repeat": float(repeats)}
        if "info_gain" in self.reward_terms:
            self.last_turn_terms["info_gain"] = new_gold / len(self.gold) if self.gold else 0.0

    def _newly_found(self, query: str) -> int:
        """Gold documents (by id or title) among the query's results not found before.
        The (cached) retriever ranks the query again, exactly as the tool did."""
        documents = self.retriever.search(query, self.top_k)  # type: ignore[union-attr]
        hits = {name for doc in documents for name in (doc.id, doc.title) if name in self.gold} - self.found_gold
        # A document counts once, whether the gold list names it by id or by title.
        fresh = {doc.id for doc in documents if (doc.id in hits or doc.title in hits)}
        self.found_gold |= hits
        return len(fresh)

    def turn_terms(self, calls, call_results: list[ToolResult]) -> dict[str, float]:
        """StepSearch's terms of the tool turn just recorded (``repeat``, and ``info_gain`` with gold documents)."""
        return self.last_turn_terms

    def expert_reply(self) -> str:
        """The scripted expert's next message for this episode: the oracle's next search or
        answer, from what this episode's searches returned (cold-start data, ``sft.collect.source: expert``)."""
        if self.task is None or "plan" not in self.task.metadata:
            raise ValueError("expert_reply: the expert needs the built-in questions (no qa_path)")
        return oracle_reply(self.task, self.retrieved, self.parser)

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """Per-episode search metrics (averaged over episodes by ``aggregate_metrics``), and
        ToolEnv's reflection and memory metrics when those are on."""
        golds = _golds(self.task) if self.task is not None else []
        metrics = {
            "search/searches": float(len(self.queries)),
            "search/answer_recall": float(any(answer_in_text(golds, text) for text in self.retrieved)),
            "search/repeated_queries": float(self.repeated_queries),
            "search/em": self.final["em"],
            "search/f1": self.final["f1"],
        }
        if self.simulated_search is not None:  # ZeroSearch: the noise level and how many searches got noise
            metrics["search/noise_probability"] = self.simulated_search.noise
            metrics["search/noisy_searches"] = float(self.simulated_search.noisy_searches)
        if self.gold:
            metrics["search/gold_recall"] = self.evidence_share()
        hops = self.task.metadata.get("hops") if self.task is not None else None
        if hops:  # per hop count (averaged over the episodes that have it): 1-hop and 2-hop EM apart
            metrics[f"search/em_{hops}hop"] = self.final["em"]
        question_type = self.task.metadata.get("question_type") if self.task is not None else None
        if question_type:  # lookup / bridge / comparison apart: 2-hop EM mixes bridges with comparisons
            metrics[f"search/em_{question_type}"] = self.final["em"]
        metrics.update(super().episode_metrics(trajectory))  # reflection/*, memory/*
        return metrics


# --------------------------------------------------------------------------- oracle & factory


def oracle_reply(task: Task, observations: Sequence[str], parser: ToolCallParser) -> str:
    """The oracle's next assistant message (a search call or the answer) in ``parser``'s format."""
    action, value = oracle_action(task, observations)
    if action == "search":
        return parser.format_call(ToolCall(name="search", arguments={"query": value}, id="call_0"))
    return f"<answer>{value}</answer>"


def _demonstration(task: Task, parser: ToolCallParser, search_tool: Tool) -> list[Message]:
    messages: list[Message] = [{"role": "user", "content": task.prompt}]
    observations: list[str] = []
    while True:
        reply = oracle_reply(task, observations, parser)
        messages.append({"role": "assistant", "content": reply})
        if reply.startswith("<answer>"):
            return messages
        call = parser.parse(reply).calls[0]
        result = search_tool.invoke(call)
        observations.append(result.content)
        messages.append(parser.format_result(result))


def _demonstrations(
    few_shot: int, qa_path: str | None, seed: int, parser: ToolCallParser, search_tool: Tool
) -> list[list[Message]]:
    """``few_shot`` oracle episodes on the built-in demo questions, shown before the question."""
    if not 0 <= few_shot <= DEFAULT_NUM_TASKS["demo"]:
        raise ValueError(f"few_shot: expected an int in [0, {DEFAULT_NUM_TASKS['demo']}], got {few_shot}")
    if few_shot and qa_path:
        raise ValueError("few_shot: demonstrations need the built-in questions (no qa_path)")
    return [_demonstration(task, parser, search_tool) for task in SearchQATasks(split="demo", seed=seed)[:few_shot]]


def _needs(require_evidence: bool, few_shot: int) -> str | None:
    """The option that needs a document collection (not a simulated search engine), or None."""
    return "require_evidence" if require_evidence else "few_shot" if few_shot else None


def make_search_qa_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    types: Sequence[str] | None = None,
    hops: int | Sequence[int] | None = None,
    question_weights: Mapping[str, float] | None = None,
    qa_path: str | None = None,
    corpus_path: str | None = None,
    index_path: str | None = None,
    server_url: str | None = None,
    retriever: dict | SimulatedSearchEngine | None = None,
    top_k: int = 3,
    max_doc_chars: int | None = 300,
    max_turns: int = 5,
    parser: str = "hermes",
    reward: Literal["em", "f1", "judge"] = "em",
    judge: dict | None = None,
    require_evidence: bool = False,
    few_shot: int = 0,
    system_prompt: str | None = None,
    max_calls_per_turn: int | None = None,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
    plan_first: bool = False,
) -> SearchQAEnv:
    """Multi-hop QA with a search tool (hermes ``search(query)`` or Search-R1 ``<search>`` tags).

    Args:
        types: The built-in question templates to draw from (names in ``search_data.QUESTION_TYPES``).
        hops: Only built-in questions of 1 (lookup), 2 or 3 hops (bridge, comparison), or of a list of them.
        question_weights: Question type (lookup, bridge, comparison) -> draw weight, e.g. ``{bridge: 3}``; others 1.
        qa_path: QA JSONL (``question``, ``answers``) replacing the built-in questions; ``{split}`` becomes the split.
        corpus_path: A JSONL corpus (``id``, ``title``, ``text``) replacing the built-in one, indexed (BM25) in memory.
        index_path: An ``agentic-rl index build`` folder replacing the built-in corpus.
        server_url: A retrieval server's URL replacing the built-in corpus; give at most one of these three sources.
        retriever: {kind: simulated, model, ...} or a SimulatedSearchEngine: ZeroSearch's simulated search, no corpus.
        reward: ``em`` (exact match) or ``f1`` (token F1) against the gold answers, or ``judge`` (an LLM judge's score).
        judge: LLM judge options (``model``, ``base_url``, ``rubric``, ...: see ``make_judge``) for ``reward: judge``.
        require_evidence: The answer's score pays only once the searches retrieved every gold-supporting document.

    Reward terms (``reward.terms`` weighs them): ``repeat`` (per search turn: queries the episode
    had already searched); with gold-supporting documents (the built-in questions', or a QA file's
    ``supporting_docs``; not with a simulated search engine) ``info_gain`` (per search turn: the
    fraction of gold documents its searches found first) and ``evidence`` (per episode: the
    fraction found, with a well-formed answer)."""
    if qa_path:
        if question_weights is not None:
            raise ValueError(
                "question_weights: weighs the built-in question types; a qa_path file has none (leave it out)"
            )
        tasks: Sequence[Task] = QATasks(qa_path.replace("{split}", split), num_tasks=num_tasks)
    else:
        tasks = SearchQATasks(
            split=split, seed=seed, num_tasks=num_tasks, types=types, hops=hops, question_weights=question_weights
        )
    if not isinstance(require_evidence, bool):
        raise ValueError(f"require_evidence: expected true or false, got {require_evidence!r}")
    search, simulated = open_search(
        retriever,
        corpus_path,
        index_path,
        server_url,
        seed=seed,
        split=split,
        needs_documents=_needs(require_evidence, few_shot),
    )
    search_tool = make_search_tool(search, top_k=top_k, max_doc_chars=max_doc_chars)
    limit = max_calls_per_turn if max_calls_per_turn is not None else (1 if parser == "search_r1" else 4)
    call_parser = get_parser(parser, max_calls_per_turn=limit, max_argument_chars=max_argument_chars)
    demos = _demonstrations(few_shot, qa_path, seed, call_parser, search_tool)
    gold_documents = None if simulated is not None else gold_documents_of(tasks, qa_path, seed, require_evidence)
    if system_prompt is None:
        system_prompt = SEARCH_R1_PROMPT if parser == "search_r1" else HERMES_PROMPT
    return SearchQAEnv(
        tasks,
        ToolRegistry([search_tool]),
        parser=call_parser,
        max_turns=max_turns,
        system_prompt=system_prompt,
        demonstrations=demos,
        reward=reward,
        judge=make_judge(judge) if judge is not None else None,
        require_evidence=require_evidence,
        gold_documents=gold_documents,
        retriever=search,
        top_k=top_k,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
        plan_first=plan_first,
        simulated_search=simulated,
    )
