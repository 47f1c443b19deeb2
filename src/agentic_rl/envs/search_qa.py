"""``search-qa``: answer multi-hop questions by searching a document collection.

The model calls a ``search(query)`` tool (hermes format) or writes Search-R1 tags
(``<search> q </search>``, results in ``<information>``), then answers inside
``<answer></answer>``. Retrieved text is observation (loss_mask 0). The reward is
exact match (SQuAD normalization), token F1 against the gold answers or an LLM judge's
score (``reward: judge``), optionally mixed with a format reward. Per-episode search
metrics (searches, answer recall, repeated queries, EM, F1) come from
:meth:`SearchQAEnv.episode_metrics`.

Process rewards (StepSearch), per search turn in ``info["turn_reward"]``:
``info_gain_reward`` times the fraction of the question's gold-supporting documents that
the turn's searches retrieved for the first time in the episode, minus ``repeat_penalty``
per query the episode had already searched (after lower-casing and collapsing spaces).
The built-in questions know their supporting documents; a QA JSONL gives them as
``supporting_docs`` (document ids or titles).

``evidence_reward``: a share of the reward paid for the fraction of the question's
gold-supporting documents the episode's searches retrieved, together with a well-formed
answer (R1-Searcher's / StepSearch's retrieval credit as part of the outcome, so GRPO's
episode-level advantage sees it): a group whose samples all answer a 2-hop question wrong
still ranks the one that found the second document above the ones that searched once.
The answer's own share shrinks by as much, so a right answer with its evidence still
earns 1.

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

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from agentic_rl.data.conversations import read_jsonl
from agentic_rl.envs.base import Task
from agentic_rl.envs.search_data import (
    DEFAULT_NUM_TASKS,
    SearchQATasks,
    demo_corpus,
    oracle_action,
    supporting_documents,
)
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, ToolCallParser, get_parser
from agentic_rl.retrieval.base import Retriever, format_documents
from agentic_rl.retrieval.cache import CachedRetriever
from agentic_rl.retrieval.simulated import SimulatedSearch, SimulatedSearchEngine, SimulationConfig, simulated_engine
from agentic_rl.rewards.judge import LLMJudge, make_judge
from agentic_rl.rewards.qa import answer_in_text, best_exact_match, best_f1
from agentic_rl.tools import Tool, ToolRegistry, tool
from agentic_rl.types import Message, ToolCall, ToolResult

__all__ = ["QATasks", "SearchQAEnv", "make_search_qa_env", "make_search_tool", "get_retriever"]

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


# --------------------------------------------------------------------------- retrievers

_RETRIEVERS: dict[tuple, CachedRetriever] = {}
_RETRIEVERS_LOCK = threading.Lock()


def get_retriever(
    *, seed: int = 0, corpus_path: str | None = None, index_path: str | None = None, server_url: str | None = None
) -> CachedRetriever:
    """A cached retriever per source, shared by every env of this process (envs are rebuilt
    per episode; the index is built or opened once)."""
    given = [x for x in (corpus_path, index_path, server_url) if x]
    if len(given) > 1:
        raise ValueError("give at most one of corpus_path, index_path, server_url")
    key: tuple
    if server_url:
        key = ("server", server_url)
    elif index_path:
        key = ("index", str(Path(index_path).resolve()))
    elif corpus_path:
        path = Path(corpus_path)
        if not path.is_file():
            raise ValueError(f"corpus_path: {corpus_path} does not exist")
        key = ("corpus", str(path.resolve()), path.stat().st_mtime_ns)
    else:
        key = ("builtin", seed)
    with _RETRIEVERS_LOCK:
        if key not in _RETRIEVERS:
            _RETRIEVERS[key] = CachedRetriever(_open(key))
        return _RETRIEVERS[key]


def _open(key: tuple) -> Retriever:
    from agentic_rl.retrieval.bm25 import BM25Retriever, load_index

    kind = key[0]
    if kind == "server":
        from agentic_rl.retrieval.http import HTTPRetriever

        return HTTPRetriever(key[1])
    if kind == "index":
        return load_index(key[1])
    if kind == "corpus":
        from agentic_rl.retrieval.base import read_corpus

        return BM25Retriever.from_documents(read_corpus(key[1]))
    return BM25Retriever.from_documents(demo_corpus(key[1]))


def make_search_tool(retriever: Retriever, *, top_k: int = 3, max_doc_chars: int | None = 300) -> Tool:
    """The ``search(query)`` tool: top-k documents as ``Doc i(Title: ...) text`` lines."""

    @tool(name="search")
    def search(query: str) -> str:
        """Search the document collection and return the best matching passages.

        Args:
            query: What to look for: an entity name and the fact you need, e.g. "Vexora Dynamics founded".
        """
        if not query.strip():
            raise ValueError("the query is empty; write what you are looking for")
        return format_documents(retriever.search(query, top_k), max_chars=max_doc_chars)

    return search


# --------------------------------------------------------------------------- tasks


class QATasks(Sequence[Task]):
    """Tasks from a QA JSONL file: ``{"question": str, "answers": [str, ...]}`` per line
    (``answers`` may be one string; ``answer`` is accepted too; ``id`` is optional;
    ``supporting_docs``, the ids or titles of the gold evidence, is optional)."""

    def __init__(self, path: str | Path, *, num_tasks: int | None = None) -> None:
        self.tasks: list[Task] = []
        for number, data in enumerate(read_jsonl(path), start=1):
            question = data.get("question")
            answers = data.get("answers", data.get("answer"))
            answers = [answers] if isinstance(answers, str) else list(answers or [])
            if not isinstance(question, str) or not answers:
                raise ValueError(f'{path}: row {number}: expected {{"question": str, "answers": [str, ...]}}')
            task_id = str(data.get("id", f"{Path(path).stem}-{len(self.tasks)}"))
            metadata: dict[str, Any] = {"answers": [str(a) for a in answers]}
            if data.get("supporting_docs") is not None:
                metadata["supporting_docs"] = [str(d) for d in data["supporting_docs"]]
            self.tasks.append(Task(id=task_id, prompt=question, answer=str(answers[0]), metadata=metadata))
        if num_tasks is not None:
            self.tasks = self.tasks[:num_tasks]
        if not self.tasks:
            raise ValueError(f"{path}: no questions")

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index):  # type: ignore[override]
        return self.tasks[index]


# --------------------------------------------------------------------------- env


def _golds(task: Task) -> list[str]:
    return list(task.metadata.get("answers") or [task.answer])


def _normalize_query(query: str) -> str:
    return " ".join(query.lower().split())


GoldDocuments = Callable[[Task], Sequence[str]]
"""A task's gold-supporting documents (ids or titles)."""


def task_supporting_docs(task: Task) -> Sequence[str]:
    """The ``supporting_docs`` a QA file gave the task (an error naming the task when it gave none)."""
    if "supporting_docs" not in task.metadata:
        raise ValueError(f"info_gain_reward: task {task.id} has no supporting_docs (add them to the QA file)")
    return task.metadata["supporting_docs"]


class SearchQAEnv(ToolEnv):
    """A ``ToolEnv`` scored by EM / F1 / an LLM judge, recording what was searched and
    retrieved; with ``info_gain_reward`` / ``repeat_penalty``, StepSearch's per-turn process
    rewards (``gold_documents`` and ``retriever`` + ``top_k``: what the search tool ranks,
    to see which documents a query returned)."""

    search_tool_name = "search"
    """The tool whose calls count as searches (queries, repeats, retrieved text)."""

    def __init__(
        self,
        tasks: Sequence[Task],
        tools: ToolRegistry,
        *,
        reward: Literal["em", "f1", "judge"] = "em",
        format_reward: float = 0.0,
        judge: LLMJudge | None = None,
        info_gain_reward: float = 0.0,
        repeat_penalty: float = 0.0,
        require_evidence: bool = False,
        evidence_reward: float = 0.0,
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
        if not 0.0 <= format_reward <= 1.0:
            raise ValueError(f"format_reward: expected a weight in [0, 1], got {format_reward}")
        if info_gain_reward < 0 or repeat_penalty < 0:
            raise ValueError(
                f"info_gain_reward, repeat_penalty: expected numbers >= 0, got {info_gain_reward}, {repeat_penalty}"
            )
        if not 0.0 <= evidence_reward <= 1.0 - format_reward:
            raise ValueError(
                f"evidence_reward: expected a weight in [0, 1 - format_reward] = [0, {1.0 - format_reward:g}], got {evidence_reward}"
            )
        for option, value in (
            ("info_gain_reward", info_gain_reward),
            ("require_evidence", require_evidence),
            ("evidence_reward", evidence_reward),
        ):
            if value and (gold_documents is None or retriever is None):
                raise ValueError(f"{option}: needs gold_documents and the retriever the search tool uses")
        super().__init__(tasks, tools, **kwargs)
        self.reward_kind = reward
        self.judge = judge
        self.format_weight = format_reward
        self.simulated_search = simulated_search
        """ZeroSearch's simulated engine behind the search tool, told each episode's question,
        answers and training step (``options["training_step"]``) at reset; None: a real corpus."""
        self.info_gain_reward, self.repeat_penalty = float(info_gain_reward), float(repeat_penalty)
        self.require_evidence = bool(require_evidence)
        self.evidence_weight = float(evidence_reward)
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
        self.turn_reward = 0.0

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
        if self.gold_documents is not None:  # given exactly when an option reads the gold documents
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
        formed = float(self.well_formed(answer))
        reward = (
            (1.0 - self.format_weight - self.evidence_weight) * base
            + self.format_weight * formed
            + self.evidence_weight * formed * self.evidence_share()
        )
        return reward, {"em": em, "f1": f1}

    def evidence_share(self) -> float:
        """The fraction of the question's gold-supporting documents this episode's searches retrieved."""
        return len(self.found_gold) / len(self.gold) if self.gold else 0.0

    def has_evidence(self) -> bool:
        """Whether this episode's searches retrieved every gold-supporting document."""
        return bool(self.gold) and self.found_gold >= self.gold

    def well_formed(self, answer: str | None) -> bool:
        """The format this env pays for (``format_reward``, and ``info["format_ok"]``): an
        answer after a search that ran, with no malformed call. Paid for any well-formed
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
        gain = new_gold / len(self.gold) if self.gold else 0.0
        self.turn_reward = self.info_gain_reward * gain - self.repeat_penalty * repeats

    def _newly_found(self, query: str) -> int:
        """Gold documents (by id or title) among the query's results not found before.
        The (cached) retriever ranks the query again, exactly as the tool did."""
        documents = self.retriever.search(query, self.top_k)  # type: ignore[union-attr]
        hits = {name for doc in documents for name in (doc.id, doc.title) if name in self.gold} - self.found_gold
        # A document counts once, whether the gold list names it by id or by title.
        fresh = {doc.id for doc in documents if (doc.id in hits or doc.title in hits)}
        self.found_gold |= hits
        return len(fresh)

    def process_reward(self, calls, call_results: list[ToolResult]) -> float:
        """StepSearch's process reward of the tool turn just recorded."""
        return self.turn_reward

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
    format_reward: float = 0.0,
    judge: dict | None = None,
    info_gain_reward: float = 0.0,
    repeat_penalty: float = 0.0,
    require_evidence: bool = False,
    evidence_reward: float = 0.0,
    few_shot: int = 0,
    system_prompt: str | None = None,
    max_calls_per_turn: int | None = None,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
    plan_first: bool = False,
    plan_reward: float = 0.0,
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
        info_gain_reward: Per search turn (StepSearch): this x the fraction of gold documents its searches found first.
        repeat_penalty: Per search turn: minus this per query the episode already searched (case and spacing ignored).
        require_evidence: The answer's score pays only once the searches retrieved every gold-supporting document.
        evidence_reward: Reward share (at most 1 - format_reward) paid, with a well-formed answer, for the fraction
            of gold documents found; the answer's share shrinks by as much."""
    if top_k < 1:
        raise ValueError(f"top_k: expected a positive int, got {top_k}")
    if max_doc_chars is not None and max_doc_chars < 1:
        raise ValueError(f"max_doc_chars: expected a positive int or None, got {max_doc_chars}")
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
    simulated = _simulated_search(retriever, split) if retriever is not None else None
    if simulated is not None and (corpus_path or index_path or server_url):
        raise ValueError(
            "retriever: a simulated search engine replaces the corpus; give it or corpus_path / index_path / server_url, not both"
        )
    if not isinstance(require_evidence, bool):
        raise ValueError(f"require_evidence: expected true or false, got {require_evidence!r}")
    if not isinstance(evidence_reward, (int, float)) or isinstance(evidence_reward, bool):
        raise ValueError(f"evidence_reward: expected a number in [0, 1], got {evidence_reward!r}")
    evidence_option = (
        "info_gain_reward" if info_gain_reward else "evidence_reward" if evidence_reward else "require_evidence"
    )
    if simulated is not None and (info_gain_reward or require_evidence or evidence_reward):
        raise ValueError(
            f"{evidence_option}: needs a document collection to find the gold documents in, not a simulated search engine"
        )
    if simulated is not None and few_shot:
        raise ValueError(
            "few_shot: the oracle demonstrations need a document collection, not a simulated search engine"
        )
    search = (
        simulated
        if simulated is not None
        else get_retriever(seed=seed, corpus_path=corpus_path, index_path=index_path, server_url=server_url)
    )
    search_tool = make_search_tool(search, top_k=top_k, max_doc_chars=max_doc_chars)
    limit = max_calls_per_turn if max_calls_per_turn is not None else (1 if parser == "search_r1" else 4)
    call_parser = get_parser(parser, max_calls_per_turn=limit, max_argument_chars=max_argument_chars)
    if not 0 <= few_shot <= DEFAULT_NUM_TASKS["demo"]:
        raise ValueError(f"few_shot: expected an int in [0, {DEFAULT_NUM_TASKS['demo']}], got {few_shot}")
    if few_shot and qa_path:
        raise ValueError("few_shot: demonstrations need the built-in questions (no qa_path)")
    demos = [
        _demonstration(task, call_parser, search_tool) for task in SearchQATasks(split="demo", seed=seed)[:few_shot]
    ]
    gold_documents: GoldDocuments | None = None
    if info_gain_reward or require_evidence or evidence_reward:
        if qa_path:
            missing = next((task for task in tasks if "supporting_docs" not in task.metadata), None)
            if missing is not None:
                raise ValueError(
                    f"{evidence_option}: task {missing.id} of {qa_path} has no supporting_docs (document ids or titles)"
                )
            gold_documents = task_supporting_docs
        else:
            gold_documents = _builtin_supporting_docs(seed)
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
        format_reward=format_reward,
        judge=make_judge(judge) if judge is not None else None,
        info_gain_reward=info_gain_reward,
        repeat_penalty=repeat_penalty,
        require_evidence=require_evidence,
        evidence_reward=evidence_reward,
        gold_documents=gold_documents,
        retriever=search,
        top_k=top_k,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
        plan_first=plan_first,
        plan_reward=plan_reward,
        simulated_search=simulated,
    )


def _simulated_search(spec: Any, split: str) -> SimulatedSearch:
    """This env's simulated search over the process-wide engine ``spec`` names; the gold
    answer goes to the simulator in the train split unless ``with_answer`` says otherwise."""
    if isinstance(spec, SimulatedSearchEngine):
        engine = spec
    elif isinstance(spec, dict):
        engine = simulated_engine(SimulationConfig.parse(spec))
    else:
        raise ValueError(
            f"retriever: expected a mapping like {{kind: simulated, model: ...}}, got {type(spec).__name__}"
        )
    with_answer = engine.config.with_answer
    return SimulatedSearch(engine, with_answer=split == "train" if with_answer is None else with_answer)


_SUPPORT: dict[tuple[int, str, str], tuple[str, ...]] = {}


def _builtin_supporting_docs(seed: int) -> GoldDocuments:
    """The built-in questions' gold documents, found once per question in the built-in corpus."""

    def gold(task: Task) -> Sequence[str]:
        # The question is part of the key: task ids number positions, and two envs of one
        # process with other ``hops`` / ``types`` filters (train vs eval) ask other questions there.
        key = (seed, task.id, task.prompt)
        if key not in _SUPPORT:
            _SUPPORT[key] = tuple(supporting_documents(task, demo_corpus(seed)))
        return _SUPPORT[key]

    return gold
