"""ZeroSearch's simulated search engine (Sun et al., 2025): an LLM writes the documents a
search returns, useful or noisy, with the share of noisy searches rising over training (a
curriculum that makes retrieval harder as the policy improves). No search API, no corpus.

Each search draws once: with probability ``p(step)`` the LLM is asked for noisy documents
(plausible, about the query, but not answering the question), otherwise for useful ones.
Both prompts are ZeroSearch's (its ``simulate_sft`` prompts, which its fine-tuned simulators
expect); during training they name the question and its gold answer, so useful documents
contain it. The schedule is ZeroSearch's::

    p(step) = start + (base ** (step / total_steps) - 1) / (base - 1) * (end - start)

(``end`` from ``total_steps`` on). The LLM is any project backend: a token engine (HF in
process, vLLM, the scripted fake in tests), an OpenAI-compatible chat endpoint, or a
plain ``list[str] -> list[str]`` callable.

:class:`SimulatedSearchEngine` holds the LLM, prompts and schedule (shared by a process's
envs); :class:`SimulatedSearch` is one env's retriever (``search(query, k)``), told each
episode's question, gold answers and training step by :meth:`SimulatedSearch.begin_episode`.
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from agentic_rl.retrieval.base import Document

__all__ = [
    "NOISY_PROMPT",
    "USEFUL_PROMPT",
    "SimulatedSearch",
    "SimulatedSearchEngine",
    "SimulationConfig",
    "generate_texts",
    "noise_probability",
    "parse_documents",
    "simulation_prompt",
    "simulated_engine",
]

USEFUL_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate {count} useful documents for the query.\n\n"
    'The user is trying to answer the question: "{question}"{answer_clause}.\n'
    "Each document should contain about 30 words, and these documents should contain useful information.\n\n"
    "Query: {query}\n"
    "Useful Output:\n"
)
NOISY_PROMPT = (
    "You are the Google search engine.\n"
    "Given a query, you need to generate {count} noisy documents for the query.\n\n"
    'The user is trying to answer the question: "{question}"{answer_clause}.\n'
    "Each document should contain about 30 words, and these documents should contain noisy information.\n\n"
    "Query: {query}\n"
    "Noisy Output:\n"
)
_COUNT_WORDS = {
    1: "one",
    2: "two",
    3: "three",
    4: "four",
    5: "five",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    10: "ten",
}
_DOC_MARKER = re.compile(
    r"(?:^|\n)\s*(?:\*\*)?Doc(?:ument)?\s*(\d+)\s*(?:\*\*)?\s*[:.)\-]\s*(?:\*\*)?\s*", re.IGNORECASE
)


def noise_probability(step: int, *, start: float, end: float, total_steps: int, base: float = 4.0) -> float:
    """ZeroSearch's curriculum: the probability that a search at training ``step`` returns
    noisy documents, rising from ``start`` (step 0) to ``end`` (step ``total_steps`` and on)
    along an exponential curve with ``base`` (> 1; larger: later rise)."""
    if step >= total_steps:
        return end
    progress = max(step, 0) / total_steps
    return start + (math.pow(base, progress) - 1) / (base - 1) * (end - start)


def simulation_prompt(
    query: str, *, useful: bool, k: int, question: str | None = None, answer: str | None = None
) -> str:
    """The prompt asking for ``k`` useful or noisy documents for ``query``; ``question`` and
    ``answer`` (training only) tell the simulator what the user is after."""
    template = USEFUL_PROMPT if useful else NOISY_PROMPT
    if question is None:  # no episode context: the query alone
        template = template.replace('The user is trying to answer the question: "{question}"{answer_clause}.\n', "")
    answer_clause = f" whose answer is {answer}" if answer else ""
    return template.format(
        count=_COUNT_WORDS.get(k, str(k)), question=question or "", answer_clause=answer_clause, query=query
    )


def parse_documents(text: str, k: int) -> list[Document]:
    """The documents of a simulator's reply: ``Doc i: ...`` entries (ZeroSearch's format),
    else one per non-empty line; at most ``k``, empty ones dropped."""
    marks = list(_DOC_MARKER.finditer(text))
    if marks:
        pieces = [
            text[m.end() : (marks[i + 1].start() if i + 1 < len(marks) else len(text))] for i, m in enumerate(marks)
        ]
    else:
        pieces = text.splitlines()
    texts = [" ".join(piece.split()) for piece in pieces]
    return [Document(id=f"simulated-{i}", title="", text=body) for i, body in enumerate([t for t in texts if t][:k])]


# --------------------------------------------------------------------------- LLM calls

TextGenerator = Callable[[list[str]], list[str]]


def generate_texts(
    llm: Any,
    prompts: Sequence[str],
    *,
    temperature: float,
    max_new_tokens: int,
    seed: int | None = None,
    lock: threading.Lock | None = None,
) -> list[str]:
    """One reply per prompt (a single user message each) from any backend: a token engine
    (its tokenizer's chat template; the prompt's query is tokenized as plain text), a chat
    engine (``chat``), or a callable ``list[str] -> list[str]``. ``lock`` serializes calls
    to engines that are not thread-safe. RuntimeError when the engine reports a failure."""
    if callable(llm) and not hasattr(llm, "interface"):
        texts = list(llm(list(prompts)))
        if len(texts) != len(prompts) or not all(isinstance(t, str) for t in texts):
            raise RuntimeError(f"the simulator callable must return {len(prompts)} strings")
        return texts
    interface = getattr(llm, "interface", None)
    if interface == "chat":
        replies = llm.chat(
            [[{"role": "user", "content": p}] for p in prompts],
            temperature=temperature,
            top_p=1.0,
            max_tokens=max_new_tokens,
            seed=seed,
        )
        return [reply.text for reply in replies]
    if interface != "tokens":
        raise TypeError(
            f"the simulator LLM must be a backend (interface 'tokens' or 'chat') or a callable, got {type(llm).__name__}"
        )
    from agentic_rl.chat import ChatRenderer
    from agentic_rl.engines.base import SamplingParams

    renderer = ChatRenderer(llm.tokenizer)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    # The prompt holds the policy's query: its chat markup stays text (ChatRenderer.prompt_ids).
    prompt_ids = [renderer.prompt_ids([{"role": "user", "content": prompt}]) for prompt in prompts]
    with lock or _NO_LOCK:
        completions = llm.generate(prompt_ids, sampling, stop_token_ids=renderer.stop_token_ids)
    failed = next((c.error for c in completions if c.error), None)
    if failed:
        raise RuntimeError(f"the simulator LLM failed: {failed}")
    return [renderer.response_text(c.token_ids) for c in completions]


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


# --------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class SimulationConfig:
    """The ``retriever: {kind: simulated, ...}`` option of ``search-qa``."""

    kind: str = "simulated"
    """Retriever kind; ``simulated`` is ZeroSearch's engine."""
    model: str | None = None
    """The simulator: a model for an in-process engine (name, local folder or hub id), or the model name an OpenAI-compatible server at ``base_url`` serves."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint serving the simulator (e.g. a vLLM server: http://127.0.0.1:8001/v1); its key, if any, from OPENAI_API_KEY."""
    start_noise: float = 0.25
    """Probability of noisy documents at step 0 (ZeroSearch: 0.25)."""
    end_noise: float = 0.5
    """Probability of noisy documents from ``total_steps`` on (ZeroSearch: 0.5)."""
    total_steps: int | None = None
    """Training steps over which the probability rises (required when start_noise != end_noise)."""
    base: float = 4.0
    """The curve's exponential base (ZeroSearch: 4); > 1."""
    temperature: float = 0.8
    """The simulator's sampling temperature (ZeroSearch: 0.8)."""
    max_new_tokens: int = 600
    """Most tokens of one simulated result page (ZeroSearch: 600)."""
    with_answer: bool | None = None
    """Tell the simulator the gold answer (useful documents then hold it); None: in the train split only."""

    def __post_init__(self) -> None:
        if self.kind != "simulated":
            raise ValueError(f"retriever.kind: expected 'simulated', got {self.kind!r}")
        if not self.model:
            raise ValueError("retriever.model: required (the simulator model, or the model a base_url server serves)")
        for name in ("start_noise", "end_noise"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
                raise ValueError(f"retriever.{name}: expected a probability in [0, 1], got {value!r}")
        if self.total_steps is not None and (
            not isinstance(self.total_steps, int) or isinstance(self.total_steps, bool) or self.total_steps < 1
        ):
            raise ValueError(f"retriever.total_steps: expected a positive int, got {self.total_steps!r}")
        if self.total_steps is None and self.start_noise != self.end_noise:
            raise ValueError(
                "retriever.total_steps: required when start_noise != end_noise (the training steps over which the noise rises)"
            )
        if not isinstance(self.base, (int, float)) or isinstance(self.base, bool) or self.base <= 1.0:
            raise ValueError(f"retriever.base: expected a number > 1, got {self.base!r}")
        if not isinstance(self.temperature, (int, float)) or isinstance(self.temperature, bool) or self.temperature < 0:
            raise ValueError(f"retriever.temperature: expected a number >= 0, got {self.temperature!r}")
        if not isinstance(self.max_new_tokens, int) or isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 1:
            raise ValueError(f"retriever.max_new_tokens: expected a positive int, got {self.max_new_tokens!r}")
        if self.with_answer is not None and not isinstance(self.with_answer, bool):
            raise ValueError(f"retriever.with_answer: expected true, false or null, got {self.with_answer!r}")

    @classmethod
    def parse(cls, spec: Mapping[str, Any]) -> SimulationConfig:
        known = [item.name for item in fields(cls)]
        unknown = sorted(set(map(str, spec)) - set(known))
        if unknown:
            raise ValueError(f"retriever: unknown key {unknown[0]!r}; expected keys: {', '.join(known)}")
        return cls(**{str(key): value for key, value in spec.items()})

    def noise(self, step: int) -> float:
        """The probability of noisy documents at training ``step``."""
        return noise_probability(
            step, start=self.start_noise, end=self.end_noise, total_steps=self.total_steps or 1, base=self.base
        )


class SimulatedSearchEngine:
    """The LLM, its sampling settings and the noise schedule, shared by a process's envs.

    ``llm``: a backend or callable (see :func:`generate_texts`). ``step`` is the training
    step used when an episode does not give one (``set_step``)."""

    def __init__(self, llm: Any, config: SimulationConfig) -> None:
        self.llm, self.config = llm, config
        self.step = 0
        self._lock = threading.Lock()  # in-process engines decode one batch at a time

    def set_step(self, step: int) -> None:
        self.step = int(step)

    def documents(
        self,
        queries: Sequence[str],
        *,
        useful: Sequence[bool],
        k: int,
        question: str | None = None,
        answer: str | None = None,
        seed: int | None = None,
    ) -> list[list[Document]]:
        """Simulated results, one list per query."""
        prompts = [
            simulation_prompt(q, useful=u, k=k, question=question, answer=answer)
            for q, u in zip(queries, useful, strict=True)
        ]
        texts = generate_texts(
            self.llm,
            prompts,
            temperature=self.config.temperature,
            max_new_tokens=self.config.max_new_tokens,
            seed=seed,
            lock=self._lock,
        )
        return [parse_documents(text, k) for text in texts]


class SimulatedSearch:
    """One env's retriever over a :class:`SimulatedSearchEngine`: ``search(query, k)``, each
    search useful or noisy by the schedule at this episode's step (counted in ``searches`` /
    ``noisy_searches``; ``noise`` is the probability used)."""

    def __init__(self, engine: SimulatedSearchEngine, *, with_answer: bool = True) -> None:
        self.engine, self.with_answer = engine, with_answer
        self.question: str | None = None
        self.answer: str | None = None
        self.step = engine.step
        self._rng = random.Random()
        self.searches = self.noisy_searches = 0

    @property
    def noise(self) -> float:
        return self.engine.config.noise(self.step)

    def begin_episode(
        self, *, question: str, answers: Sequence[str], step: int | None = None, seed: int | None = None
    ) -> None:
        """A new episode: its question, gold answers (shown to the simulator when
        ``with_answer``), training step (None: the engine's) and random seed (None: fresh)."""
        self.question = question
        self.answer = answers[0] if answers and self.with_answer else None
        self.step = self.engine.step if step is None else int(step)
        self._rng = random.Random(seed)
        self.searches = self.noisy_searches = 0

    def search(self, query: str, k: int = 3) -> list[Document]:
        return self.search_batch([query], k)[0]

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]:
        if k < 1:
            raise ValueError(f"k must be a positive int, got {k}")
        noise = self.noise
        useful = [self._rng.random() >= noise for _ in queries]
        self.searches += len(queries)
        self.noisy_searches += useful.count(False)
        return self.engine.documents(
            queries, useful=useful, k=k, question=self.question, answer=self.answer, seed=self._rng.getrandbits(31)
        )


_ENGINES: dict[SimulationConfig, SimulatedSearchEngine] = {}
_LLMS: dict[tuple[str, str | None], Any] = {}
_ENGINES_LOCK = threading.Lock()


def simulated_engine(config: SimulationConfig) -> SimulatedSearchEngine:
    """The process-wide engine for a config; engines naming the same simulator share it
    (the model is loaded once per process)."""
    with _ENGINES_LOCK:
        if config not in _ENGINES:
            key = (str(config.model), config.base_url)
            if key not in _LLMS:
                _LLMS[key] = _load_llm(*key)
            _ENGINES[config] = SimulatedSearchEngine(_LLMS[key], config)
        return _ENGINES[config]


def _load_llm(model: str, base_url: str | None) -> Any:
    from agentic_rl.config import BackendConfig, ModelConfig
    from agentic_rl.engines.factory import build_backend

    if base_url:
        return build_backend(BackendConfig(kind="openai", base_url=base_url), ModelConfig(name=model))
    return build_backend(BackendConfig(kind="hf"), ModelConfig(name=model))
