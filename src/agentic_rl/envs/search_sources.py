"""Where ``search-qa``'s questions, documents and gold evidence come from: the retrievers
(one cached per source, shared by every env of the process), the ``search`` tool over one,
ZeroSearch's simulated engine in its place, QA files, and each task's gold-supporting
documents (the built-in questions' own, or a QA file's ``supporting_docs``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.data.conversations import read_jsonl
from agentic_rl.envs.search_data import demo_corpus, supporting_documents
from agentic_rl.retrieval.base import Retriever, format_documents
from agentic_rl.retrieval.cache import CachedRetriever
from agentic_rl.retrieval.simulated import SimulatedSearch, SimulatedSearchEngine, SimulationConfig, simulated_engine
from agentic_rl.tools import Tool, tool
from agentic_rl.types import Task

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
    if top_k < 1:
        raise ValueError(f"top_k: expected a positive int, got {top_k}")
    if max_doc_chars is not None and max_doc_chars < 1:
        raise ValueError(f"max_doc_chars: expected a positive int or None, got {max_doc_chars}")

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


GoldDocuments = Callable[[Task], Sequence[str]]
"""A task's gold-supporting documents (ids or titles)."""


def task_supporting_docs(task: Task) -> Sequence[str]:
    """The ``supporting_docs`` a QA file gave the task (an error naming the task when it gave none)."""
    if "supporting_docs" not in task.metadata:
        raise ValueError(f"require_evidence: task {task.id} has no supporting_docs (add them to the QA file)")
    return task.metadata["supporting_docs"]


NEEDS_DOCUMENTS = {
    "require_evidence": "needs a document collection to find the gold documents in",
    "few_shot": "the oracle demonstrations need a document collection",
}
"""The options that need a document collection, and why."""


def open_search(
    spec: Any,
    corpus_path: str | None,
    index_path: str | None,
    server_url: str | None,
    *,
    seed: int,
    split: str,
    needs_documents: str | None,
) -> tuple[Retriever | SimulatedSearch, SimulatedSearch | None]:
    """(what the search tool ranks with, the simulated engine or None): ``spec`` (the
    ``retriever`` option) a simulated engine, else the cached retriever of the one corpus
    source given. ``needs_documents``: the option that needs a document collection, refused
    with a simulated engine."""
    simulated = _simulated_search(spec, split) if spec is not None else None
    if simulated is None:
        return get_retriever(seed=seed, corpus_path=corpus_path, index_path=index_path, server_url=server_url), None
    if corpus_path or index_path or server_url:
        raise ValueError(
            "retriever: a simulated search engine replaces the corpus; give it or corpus_path / index_path / server_url, not both"
        )
    if needs_documents:
        raise ValueError(f"{needs_documents}: {NEEDS_DOCUMENTS[needs_documents]}, not a simulated search engine")
    return simulated, simulated


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


def gold_documents_of(tasks: Sequence[Task], qa_path: str | None, seed: int, required: bool) -> GoldDocuments | None:
    """Where the tasks' gold-supporting documents come from: the built-in questions' own, a QA
    file's ``supporting_docs`` when every task has them, else None (an error when
    ``require_evidence`` needs them)."""
    if not qa_path:
        return _builtin_supporting_docs(seed)
    missing = next((task.id for task in tasks if "supporting_docs" not in task.metadata), None)
    if missing is None:
        return task_supporting_docs
    if required:
        raise ValueError(
            f"require_evidence: task {missing} of {qa_path} has no supporting_docs (document ids or titles)"
        )
    return None


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
