"""``long-qa``: read a long generated document chunk by chunk, keep a bounded memory,
answer questions at the end (MemAgent style).

Each task is a document of invented places generated from a seed: chunks of filler sentences
about the same places, with fact sentences (``The vault code of Kelmore is 4821.``) in chunks
2..N. The opening message holds the instructions and chunk 1 (which every context policy
keeps, so it holds no fact); each later chunk is the observation after the agent's reply to
the one before, and after the last come questions about the facts (``What is the vault code
of Kelmore?``), answered in order in one ``<answer>A1; A2</answer>``; the reward is the
fraction answered right (exact match), ``correct`` means all of them.

The agent keeps what it needs with the memory tools (a bounded memory outside the context),
so the document may be many times longer than the context: with ``rollout.context`` window
or summarize the chunks leave the context, the notes stay. Why tools rather than a memory
block the env re-shows: the store already is bounded, evicts, is hostile-input safe and
counted (``memory/*`` metrics), and works unchanged under every context policy; a re-shown
block would be a second memory mechanism beside it and the ``summarize`` policy.

:meth:`LongQAEnv.expert_reply` is a scripted oracle: it saves each fact sentence it reads
(one ``memory_write`` per fact), reads the notes for the questions and answers from what
the reads returned; it scores 1 (a reply with nothing in it scores 0).

The tasks are generated in :mod:`agentic_rl.envs.long_qa_tasks`.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.envs.long_qa_tasks import FACT_PATTERN, QUESTION_PATTERN, LongQATasks
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, get_parser
from agentic_rl.rewards import extract_tag
from agentic_rl.rewards.qa import ANSWER_SEPARATOR, per_question_exact_match
from agentic_rl.tools import ToolRegistry
from agentic_rl.tools.memory import memory_tools
from agentic_rl.types import Message, ToolCall, ToolResult

__all__ = ["LongQAEnv", "make_long_qa_env"]

SYSTEM_PROMPT = (
    "You read a long document one chunk at a time; earlier chunks are not shown again. Questions about the document "
    "come after the last chunk. After each chunk, save every fact you may be asked about with memory_write (one short "
    "note per fact, keyed by what it is about), then reply to get the next chunk. When the questions come, look your "
    "notes up ({lookup}) and answer all questions in order inside one <answer></answer>, "
    "separated by semicolons, e.g. <answer>4821; amber</answer>."
)
"""With the memory tools; ``{lookup}`` names the lookup tools offered."""
SYSTEM_PROMPT_NO_MEMORY = (
    "You read a long document one chunk at a time; earlier chunks may leave your context. Questions about the document "
    "come after the last chunk. After each chunk, reply with the facts you may be asked about, since what you write is "
    "all you keep. When the questions come, answer all of them in order inside one <answer></answer>, separated by "
    "semicolons, e.g. <answer>4821; amber</answer>."
)


def numbered_questions(questions: list[str]) -> str:
    return "\n".join(f"{i}. {q}" for i, q in enumerate(questions, start=1))


def questions_message(questions: list[str]) -> str:
    numbered = numbered_questions(questions)
    return f"That was the last chunk. Questions:\n{numbered}\nAnswer all of them in order inside one <answer></answer>, separated by semicolons."


class LongQAEnv(ToolEnv):
    """A ``ToolEnv`` whose first ``num_chunks`` turns stream the document: any reply that is
    not an answer gets the next chunk (after the results of the tools it called), the last
    one the questions; from then on it is a plain tool-and-answer episode."""

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.shown_chunks = 1
        self.asked = False
        self.read_notes: dict[str, str] = {}
        self.accuracy = 0.0
        return super().reset(seed=seed, options=options)

    @property
    def chunks(self) -> list[str]:
        return self.task.metadata["chunks"]  # type: ignore[union-attr]

    def step(self, assistant_message: Message) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("step() called before reset()")
        text = assistant_message.get("content") or ""
        if self.asked or extract_tag(text, self.answer_tag) is not None:
            return super().step(assistant_message)
        self.turn += 1
        parsed = self.parser.parse(text) if len(self.tools) else None
        observations: list[Message] = []
        info: dict[str, Any] = {"answer": None, "correct": False, "tool_results": []}
        if parsed is not None and parsed.has_calls:
            observations, _, _, _, info = self.tool_turn(parsed)
        if self.shown_chunks < len(self.chunks):
            self.shown_chunks += 1
            content = f"Chunk {self.shown_chunks} of {len(self.chunks)}:\n{self.chunks[self.shown_chunks - 1]}"
        else:
            self.asked = True
            content = questions_message(self.task.metadata["questions"])
        observations.append({"role": "user", "content": content})
        return observations, 0.0, False, self.turn >= self.max_turns, info

    def score_answer(self, answer: str | None) -> tuple[float, bool, dict[str, Any]]:
        right = per_question_exact_match(answer, [[gold] for gold in self.task.metadata["answers"]])  # type: ignore[union-attr]
        self.accuracy = sum(right) / len(right)
        return self.accuracy, all(right), {"per_question": right}

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        for call, result in zip(calls, call_results):
            if call.name == "memory_read" and result.ok and isinstance(call.arguments, dict):
                self.read_notes[str(call.arguments.get("key", "")).strip()] = result.content

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """``long_qa/accuracy`` (fraction of questions answered right), ``long_qa/chunks_read``
        (fraction of the chunks shown), and ToolEnv's reflection and memory metrics."""
        metrics = {
            "long_qa/accuracy": self.accuracy,
            "long_qa/chunks_read": self.shown_chunks / len(self.chunks) if self.task is not None else 0.0,
        }
        metrics.update(super().episode_metrics(trajectory))
        return metrics

    def expert_reply(self) -> str:
        """The scripted oracle's next message: while reading, a ``memory_write`` per fact
        sentence of the chunk just shown (or ``Next.``); at the questions, ``memory_read`` of
        each question's note, then the answer from what the reads returned."""
        if self.memory is None:
            raise ValueError(
                "expert_reply: the oracle keeps its facts with the memory tools (memory: none gives it nothing to write with)"
            )
        if not self.asked:
            facts = FACT_PATTERN.findall(self.chunks[self.shown_chunks - 1])
            calls = [
                ToolCall("memory_write", {"text": f"The {a} of {p} is {v}.", "key": f"{a} of {p}"}, id=f"call_{i}")
                for i, (a, p, v) in enumerate(facts)
            ]
            return "\n".join(self.parser.format_call(call) for call in calls) if calls else "Next."
        keys = [f"{a} of {p}" for a, p in QUESTION_PATTERN.findall(questions_message(self.task.metadata["questions"]))]  # type: ignore[union-attr]
        missing = [key for key in keys if key not in self.read_notes]
        if missing:
            return "\n".join(
                self.parser.format_call(ToolCall("memory_read", {"key": key}, id=f"call_{i}"))
                for i, key in enumerate(missing)
            )
        values = []
        for key in keys:
            found = FACT_PATTERN.search(self.read_notes[key])
            values.append(found.group(3) if found else "unknown")
        return f"<answer>{f'{ANSWER_SEPARATOR} '.join(values)}</answer>"

    def expert_summary(self) -> str:
        """The scripted oracle's summary when its context is full (``rollout.context:
        summarize``; the summary replaces the history, the newest chunk included): how far
        it has read, the keys of the notes it saved, the facts of the newest chunk it has
        not saved yet (copied, since the chunk leaves the context), then the questions and
        the notes it has read, and what it does next."""
        total = len(self.chunks)
        # expert_reply saves a chunk's facts in the turn after it is shown; the turn that got
        # the questions saved the last chunk's.
        saved = [
            f"{a} of {p}"
            for chunk in self.chunks[: self.shown_chunks if self.asked else self.shown_chunks - 1]
            for a, p, _ in FACT_PATTERN.findall(chunk)
        ]
        lines = [
            f"Read chunks 1-{self.shown_chunks} of {total}.",
            f"Notes saved: {'; '.join(saved) if saved else 'none'}.",
        ]
        if not self.asked:
            pending = [match.group(0) for match in FACT_PATTERN.finditer(self.chunks[self.shown_chunks - 1])]
            lines.append(
                f"Not saved yet: {' '.join(pending)}" if pending else f"Chunk {self.shown_chunks} has no facts to save."
            )
            lines.append(
                "Next: save them with memory_write, then reply for the next chunk."
                if pending
                else "Next: reply for the next chunk."
            )
            return "\n".join(lines)
        lines.append("Questions:\n" + numbered_questions(self.task.metadata["questions"]))  # type: ignore[union-attr]
        if self.read_notes:
            lines.append("Notes read: " + " ".join(self.read_notes.values()))
        lines.append(
            "Next: answer inside <answer></answer>."
            if self.read_notes
            else "Next: read the notes with memory_read, then answer."
        )
        return "\n".join(lines)


def make_long_qa_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    num_chunks: int = 6,
    chunk_sentences: int = 10,
    num_facts: int = 4,
    num_questions: int = 2,
    memory: str | dict | bool | None = "episode",
    max_turns: int | None = None,
    parser: str = "hermes",
    system_prompt: str | None = None,
    max_calls_per_turn: int = 4,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
) -> LongQAEnv:
    """Long-document QA (MemAgent style): a generated document streamed chunk by chunk, questions at the end.

    Args:
        num_chunks: Chunks the document is streamed in, at least 2; the first holds no fact.
        chunk_sentences: Sentences per chunk, at least 3: filler, with a chunk's fact sentences in place of some.
        num_facts: Fact sentences in the document, at least 1 and at most 2 per chunk after the first.
        num_questions: Questions about the facts asked after the last chunk, from 1 to min(num_facts, 4).
        memory: The memory tools (``episode``: a scratch store per episode, ``shared``, or a mapping with the store's
            caps; they must offer ``memory_write`` and ``memory_read``), or ``none``: no tools, and the agent's
            context (its replies, or its summaries under ``summarize``) is its only memory.
        max_turns: Turn limit; None: num_chunks + 3 (a reply per chunk, a note lookup, the answer, one to spare)."""
    tasks = LongQATasks(
        split=split,
        seed=seed,
        num_tasks=num_tasks,
        num_chunks=num_chunks,
        chunk_sentences=chunk_sentences,
        num_facts=num_facts,
        num_questions=num_questions,
    )
    tools = memory_tools(memory)
    if tools is not None and not {"memory_write", "memory_read"} <= set(tools.offered):
        raise ValueError(
            f"memory.tools: long-qa needs memory_write and memory_read (to save facts and look them up), got {list(tools.offered)}"
        )
    if system_prompt is None:
        lookup = " or ".join(
            name for name in ("memory_read", "memory_search") if tools is not None and name in tools.offered
        )
        system_prompt = SYSTEM_PROMPT.format(lookup=lookup) if tools is not None else SYSTEM_PROMPT_NO_MEMORY
    return LongQAEnv(
        tasks,
        ToolRegistry([]),
        parser=get_parser(parser, max_calls_per_turn=max_calls_per_turn, max_argument_chars=max_argument_chars),
        max_turns=num_chunks + 3 if max_turns is None else max_turns,
        system_prompt=system_prompt,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=tools,
    )
