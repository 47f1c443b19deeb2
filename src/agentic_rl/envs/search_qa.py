"""``search-qa``: answer multi-hop questions by searching a document collection.

The model calls a ``search(query)`` tool (hermes format) or writes Search-R1 tags
(``<search> q </search>``, results in ``<information>``), then answers inside
``<answer></answer>``. Retrieved text is observation (loss_mask 0). The reward is
exact match (SQuAD normalization) or token F1 against the gold answers, optionally
mixed with a format reward. Per-episode search metrics (searches, answer recall,
repeated queries, EM, F1) come from :meth:`SearchQAEnv.episode_metrics`.

By default the questions and corpus are the built-in generated ones
(:mod:`agentic_rl.envs.search_data`); any QA JSONL (``question``, ``answers``) plugs in
with ``qa_path`` and any corpus with ``corpus_path`` (JSONL, indexed in memory),
``index_path`` (an ``agentic-rl index build`` folder) or ``server_url`` (a retrieval
server).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from agentic_rl.data.conversations import read_jsonl
from agentic_rl.envs.base import Task
from agentic_rl.envs.search_data import DEFAULT_NUM_TASKS, SearchQATasks, demo_corpus, oracle_action
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, ToolCallParser, get_parser
from agentic_rl.retrieval.base import Retriever, format_documents
from agentic_rl.retrieval.cache import CachedRetriever
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


def get_retriever(*, seed: int = 0, corpus_path: str | None = None, index_path: str | None = None, server_url: str | None = None) -> CachedRetriever:
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
    (``answers`` may be one string; ``answer`` is accepted too; ``id`` is optional)."""

    def __init__(self, path: str | Path, *, num_tasks: int | None = None) -> None:
        self.tasks: list[Task] = []
        for number, data in enumerate(read_jsonl(path), start=1):
            question = data.get("question")
            answers = data.get("answers", data.get("answer"))
            answers = [answers] if isinstance(answers, str) else list(answers or [])
            if not isinstance(question, str) or not answers:
                raise ValueError(f'{path}: row {number}: expected {{"question": str, "answers": [str, ...]}}')
            task_id = str(data.get("id", f"{Path(path).stem}-{len(self.tasks)}"))
            self.tasks.append(Task(id=task_id, prompt=question, answer=str(answers[0]), metadata={"answers": [str(a) for a in answers]}))
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


class SearchQAEnv(ToolEnv):
    """A ``ToolEnv`` scored by EM / F1, recording what was searched and retrieved."""

    def __init__(self, tasks: Sequence[Task], tools: ToolRegistry, *, reward: Literal["em", "f1"] = "em", format_reward: float = 0.0, **kwargs: Any) -> None:
        if reward not in ("em", "f1"):
            raise ValueError(f"reward: expected 'em' or 'f1', got {reward!r}")
        if not 0.0 <= format_reward <= 1.0:
            raise ValueError(f"format_reward: expected a weight in [0, 1], got {format_reward}")
        super().__init__(tasks, tools, **kwargs)
        self.reward_kind = reward
        self.format_weight = format_reward
        self._reset_episode()

    def _reset_episode(self) -> None:
        self.queries: list[str] = []
        self.retrieved: list[str] = []
        self.repeated_queries = 0
        self.malformed_calls = 0
        self.final: dict[str, float] = {"em": 0.0, "f1": 0.0}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        self._reset_episode()
        return super().reset(seed=seed, options=options)

    def score(self, answer: str | None) -> tuple[float, dict[str, float]]:
        """(reward, {"em", "f1"}) of a final answer for the current task."""
        golds = _golds(self.task)  # type: ignore[arg-type]
        em, f1 = best_exact_match(answer, golds), best_f1(answer, golds)
        base = em if self.reward_kind == "em" else f1
        # The format term pays only an answer that follows a search that ran: paid for any
        # well-formed answer, it is the cheapest reward there is, and GRPO learns to answer
        # without searching (measured: searches per episode fell from 0.31 to 0 in 8 steps).
        well_formed = answer is not None and self.malformed_calls == 0 and bool(self.queries)
        reward = (1.0 - self.format_weight) * base + self.format_weight * float(well_formed)
        return reward, {"em": em, "f1": f1}

    def score_answer(self, answer: str | None) -> tuple[float, bool, dict[str, Any]]:
        reward, scores = self.score(answer)
        self.final = scores
        return reward, scores["em"] == 1.0, scores

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        for call, result in zip(calls, call_results):
            if call.name == "search" and result.ok and isinstance(call.arguments, dict):
                query = _normalize_query(str(call.arguments.get("query", "")))
                if query in self.queries:
                    self.repeated_queries += 1
                self.queries.append(query)
                self.retrieved.append(result.content)
        self.malformed_calls += sum(r.malformed for r in results)

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
        hops = self.task.metadata.get("hops") if self.task is not None else None
        if hops:  # per hop count (averaged over the episodes that have it): 1-hop and 2-hop EM apart
            metrics[f"search/em_{hops}hop"] = self.final["em"]
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
    qa_path: str | None = None,
    corpus_path: str | None = None,
    index_path: str | None = None,
    server_url: str | None = None,
    top_k: int = 3,
    max_doc_chars: int | None = 300,
    max_turns: int = 5,
    parser: str = "hermes",
    reward: Literal["em", "f1"] = "em",
    format_reward: float = 0.0,
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

    ``qa_path`` (JSONL of ``question``/``answers``; ``{split}`` in the path is replaced by the
    split) replaces the built-in questions; ``corpus_path`` / ``index_path`` / ``server_url``
    replace the built-in corpus. ``top_k`` documents per search, each cut to
    ``max_doc_chars`` characters. ``few_shot`` oracle demonstrations (built-in questions only).
    ``attempts`` / ``attempt_discount`` / ``self_critique`` (reflection) and ``memory``
    (``episode`` or ``shared`` memory tools; hermes format only), ``plan_first`` /
    ``plan_reward`` (a plan as the first turn): see :class:`ToolEnv`.
    """
    if top_k < 1:
        raise ValueError(f"top_k: expected a positive int, got {top_k}")
    if max_doc_chars is not None and max_doc_chars < 1:
        raise ValueError(f"max_doc_chars: expected a positive int or None, got {max_doc_chars}")
    if qa_path:
        tasks: Sequence[Task] = QATasks(qa_path.replace("{split}", split), num_tasks=num_tasks)
    else:
        tasks = SearchQATasks(split=split, seed=seed, num_tasks=num_tasks, types=types, hops=hops)
    retriever = get_retriever(seed=seed, corpus_path=corpus_path, index_path=index_path, server_url=server_url)
    search_tool = make_search_tool(retriever, top_k=top_k, max_doc_chars=max_doc_chars)
    limit = max_calls_per_turn if max_calls_per_turn is not None else (1 if parser == "search_r1" else 4)
    call_parser = get_parser(parser, max_calls_per_turn=limit, max_argument_chars=max_argument_chars)
    if not 0 <= few_shot <= DEFAULT_NUM_TASKS["demo"]:
        raise ValueError(f"few_shot: expected an int in [0, {DEFAULT_NUM_TASKS['demo']}], got {few_shot}")
    if few_shot and qa_path:
        raise ValueError("few_shot: demonstrations need the built-in questions (no qa_path)")
    demos = [_demonstration(task, call_parser, search_tool) for task in SearchQATasks(split="demo", seed=seed)[:few_shot]]
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
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
        plan_first=plan_first,
        plan_reward=plan_reward,
    )
